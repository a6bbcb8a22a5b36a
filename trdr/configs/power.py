r"""DecoReco's power against the training-set size n (`trdr.studies.power`).

Command:
  make power                          # ":cpu", into runs/power_cpu (power.md, power.json, .png)
  make power-doc                      # docs/power.{md,png}, trdr/assets/power.json
  python experiments/power.py --config=configs/power.py:smoke --workdir=DIR

Haim et al.'s MLP D-1000-1000-1 under the adopted recipe (configs/decoreco_cifar.py at the
same size: the victim of the report's DecoReco runs) trained at each n of ``ns`` (balanced:
n / 2 images per class group, `data.n_per_class`) for each seed (the data draw, θ0 and the
attack's starts), so along p / (d·n) at fixed p. Each victim is attacked by DecoReco from
N(0, σ²) starts at each of ``settings`` (the published b9dfyspx (σ, lr, λ_min, α)) and,
with ``tuned``, at "tuned": the best of trdr's sweep (mode "sweep", ``decoreco.sweep``) on
the victim of seed ``sweep_seed`` at that n, ranked by the sweep's in-run score. That score
(Haim et al.'s matched NCC distance) compares with the training images, as their W&B sweep
did: the tuned column is the attack's power when its settings are chosen knowing one
victim's training set; the other seeds' victims use them unseen. Runs with a setting in
``truth_settings`` carry the truth diagnostic (`attack.truth_diagnostic`: the attack's loss
at the true training images and the attack run from them).

Variants: "cpu" (ns 10, 30, 100, so p / (d·n) from 133 down to 13; three seeds; 5,000
attack iterations on m = 2n, as configs/decoreco_cifar.py:cpu, float32 as the report's
DecoReco runs; the sweep that of decoreco_cifar.py:cpu, 8 settings × 500 iterations, a tenth
of the attack's, once per n on seed 0's victim; the truth diagnostic at b9dfyspx only),
"smoke" (ns 4 and 8, widths (32, 32), 40 iterations, one seed, float64: seconds, for
tests).

Expected runtime: ":cpu" about 50 minutes on 2 quiet cores (AVX2), an estimate; ":smoke"
about a minute. The DecoReco iterations dominate: one costs a + b·m (θ's residual plus the
m = 2n candidates), so the n = 100 runs most of all, and per seed the published run counts
twice (its truth diagnostic runs the attack again from the truth) plus the diagnostic's λ
fits (whose compilation folds θ* and the images in as constants), the tuned run once;
then the sweeps (8 settings at once), the victims, compilations and evaluations. The cuts
that keep it under an hour: three sizes, the truth diagnostic at the published settings
only, one sweep per n at a tenth of the attack's iterations, and a tuned setting equal to
the published one reusing that run. Each run's attack and truth-diagnostic seconds are in
the generated page (WORKDIR/power.md, docs/power.md by `make power-doc`); `make
benchmark-decoreco-cpu` times one iteration at m = 200. Cells are written as they finish
and reused by a rerun (``ns`` and ``seeds`` may grow).
"""

import ml_collections

from trdr.configs import decoreco_cifar, sizes
from trdr.configs.victim_recipe import B9DFYSPX

VARIANTS = sizes.CPU

# The setting name whose values come from the sweep at each n.
TUNED = "tuned"


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  variant = sizes.variant(arg, VARIANTS)
  smoke = variant == "smoke"
  config = ml_collections.ConfigDict()
  config.variant = variant
  config.seeds = (0,) if smoke else (0, 1, 2)
  config.ns = (4, 8) if smoke else (10, 30, 100)
  config.decoreco = decoreco_cifar.get_config(variant)
  config.decoreco.float64 = smoke   # ":cpu" in float32, as the report's DecoReco runs
  # The fixed settings (σ, lr, λ_min, α) by name; with ``tuned``, also TUNED: the sweep's
  # best at each n, swept on the victim of seed ``sweep_seed``.
  config.settings = ml_collections.ConfigDict({"b9dfyspx": B9DFYSPX})
  config.tuned = True
  config.sweep_seed = 0
  config.truth_settings = ("b9dfyspx",)
  config.eval = ml_collections.ConfigDict()
  config.eval.ssim_level = 0.4
  return config
