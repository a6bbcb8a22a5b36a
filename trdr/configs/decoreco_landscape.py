r"""The DecoReco energy landscape: Fig. 10(b), 11(b), 12(b) of Runkel et al. 2024.

Command:
  python experiments/landscape.py --config=configs/decoreco_landscape.py:cpu \
      [--config.attack.hparams_file=runs/decoreco_cifar_cpu_sweep/best.json]
  make fig10 fig11 fig12          # both panels, bilevel (a) and DecoReco (b)

The victim and attack of configs/decoreco_cifar.py (same variant, so the same θ*), attacked
from the 25 eq. 10 initialisations x = λ2(λ1 x_GT + (1 − λ1) x_part) + (1 − λ2) x_rnd,
λ1, λ2 ∈ {0, .25, .5, .75, 1} (mean-subtracted, x_rnd = U(0, 1) − mean), one candidate per
training image with its label (m = n), as one vmapped computation.

Variants: "" (paper size, one GPU), "cpu" (n = 100, 500 iterations per grid point),
"smoke" (3×3 grid, n = 10, 20 iterations).

Expected runtime (victim reused): ":cpu" about 5 minutes on a 2-core CPU (the 21
distinct starts of the 25, the five λ2 = 0 points sharing one, as one computation);
":smoke" about 20 s.
"""

import ml_collections

from trdr.configs import decoreco_cifar


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  config = decoreco_cifar.get_config(arg)
  config.init = ml_collections.ConfigDict({   # the grid replaces the single-run init
      "kind": "mixture", "lambda1": (0.0, 0.25, 0.5, 0.75, 1.0),
      "lambda2": (0.0, 0.25, 0.5, 0.75, 1.0)})
  config.eval.public_set = False  # the realism score is Figs. 6–8's (the tuned run's)
  if arg == "cpu":
    config.attack.steps = 500     # within the report's ≤ 60 min budget
    config.attack.log_every = 125
  elif arg == "smoke":
    config.attack.steps = 20
    config.attack.log_every = 10
    config.init.lambda1 = (0.0, 0.5, 1.0)
    config.init.lambda2 = (0.0, 0.5, 1.0)
  return config
