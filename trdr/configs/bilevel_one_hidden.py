r"""Bilevel attack on the one-hidden-layer ReLU network: Fig. 1(b), 2(b), 4 and Table 1.

Command:
  python experiments/landscape.py --config=configs/bilevel_one_hidden.py      # paper size, GPU
  python experiments/landscape.py --config=configs/bilevel_one_hidden.py:cpu  # 2-core CPU
  python experiments/landscape.py --config=configs/bilevel_one_hidden.py:smoke
  make fig1 fig2 fig3 fig4 table1 [SIZE=paper]   # via configs/paper_figures.py

Victim: Φ(x; θ) = σ(x θ_w1ᵀ + θ_b1) θ_w2ᵀ + θ_b2 (eq. 9), σ = ReLU, trained full batch with
the affine victim's objective (logistic loss + (wd/2)||θ||², wd = 1e-2) on the shipped
CIFAR-10 sample, vehicles vs animals. Paper size (""): width 6144, 250 images per class
(n = 500), float32 — meant for one GPU.
Attack: eq. 2/7 from the three pure eq. 10 initialisations — noise (λ1, λ2) = (0, 0),
partition (0, 1), ground truth (1, 1), plus (1, 0), which is noise again: the grid
λ1, λ2 ∈ {0, 1}. The lower level is warm-started from the previous outer iterate (which
starts at θ*), so θ(x) follows one local minimum of the non-convex E; the weight decay
keeps its Hessian invertible there (damping μ = 0).

Variants:
  ""       paper size: width 6144, n = 500, 300 outer steps.
  "cpu"    width 128, softplus, 25 images per class (n = 50), 200 outer steps, CG capped
           at 100 iterations: minutes on a 2-core CPU.
  "smoke"  width 16, softplus, 10 images per class, 30 outer steps: seconds, for tests.
The CPU and smoke variants use softplus: with ReLU, E is only piecewise smooth and
L-BFGS stalls at the kinks — measured at width 64, n = 40: the ReLU victim ends 5000
L-BFGS iterations at ||∇θE|| = 1.3e-3 (float32; 1.5e-3 after 3000 in float64), the
softplus victim reaches 1e-5 in 303 — so with ReLU no lower-level solve would converge
and the implicit hypergradient would not be that of a stationary point.

Expected runtime: ":cpu" about 3 minutes on a 2-core CPU (warm-started lower level);
":smoke" about 30 s; paper size about 30 minutes on one GPU (not yet run to the end).
"""

import ml_collections

from trdr.configs import bilevel_affine, sizes


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  variant = sizes.variant(arg)
  config = bilevel_affine.get_config("smoke" if variant == "smoke" else None)
  config.victim.arch = "one_hidden"
  config.victim.width = 6144
  config.victim.activation = "relu"  # "relu" | "softplus" | "gelu"
  # Its E is not convex: Newton–CG (the affine main job's) is refused; L-BFGS.
  config.attack.lower_level.method = "lbfgs"
  config.init.lambda1 = (0.0, 1.0)
  config.init.lambda2 = (0.0, 1.0)

  if variant == "cpu":
    config.victim.activation = "softplus"
    config.victim.width = 128
    config.data.n_per_class = 25
    config.attack.steps = 200
    config.attack.hypergradient.cg_maxiter = 100
  elif variant == "smoke":
    config.victim.activation = "softplus"
    config.victim.width = 16
    config.data.n_per_class = 10
    config.attack.hypergradient.cg_maxiter = 100
  return config
