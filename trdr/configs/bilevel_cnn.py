r"""Bilevel attack (Runkel et al. eq. 2 and 7) on a convolutional victim (`trdr.models.ConvNet`).

Command:
  python experiments/landscape.py --config=configs/bilevel_cnn.py:cpu     # 2-core CPU
  python experiments/landscape.py --config=configs/bilevel_cnn.py:smoke   # seconds, tests

Victim: `trdr.models.ConvNet`, 3 × 3 convolutions (padding 1), each followed by the
activation and 2 × 2 average pooling, then a linear head, a bias in every layer (as the
paper's eq. 8 and 9 victims have: the bilevel attack needs no positive homogeneity); the
first layer N(0, 1e-8), the later ones PyTorch's nn.Conv2d / nn.Linear default. Trained as
the one-hidden victim (configs/bilevel_one_hidden.py): full-batch L-BFGS on E = logistic
loss + (wd/2)||θ||², wd = 1e-2, to ||∇θE(θ*)|| < 1e-6, on the shipped CIFAR-10 sample,
vehicles vs animals. The activation is softplus, not ReLU: eq. 7 differentiates
∇θE(θ(x), x) = 0, which needs E twice differentiable, and with ReLU E is only piecewise
smooth (L-BFGS stalls at the kinks, as measured for the one-hidden victim in
configs/bilevel_one_hidden.py); ``victim.activation`` "relu" runs, but its lower level and
hypergradient are then not those of a stationary point.
Attack: eq. 2/7 from the pure eq. 10 starts (λ1, λ2 ∈ {0, 1}: noise, partition, ground
truth; (1, 0) is noise again), the lower level by L-BFGS warm-started from the previous
outer iterate (θ* at the first), the hypergradient by implicit differentiation with
conjugate gradient, Adam on the pixels in [0, 1]. E is not convex, so θ(x) follows one
local minimum; the weight decay keeps the Hessian invertible there. How far each solve
converges is in summary.json's "lower_level" (||∇θE|| at every solve, the fraction below
lower_level.tol); a solve that stops above it is warned about in the log.

Variants:
  "cpu"    channels (4, 8), 25 images per class (n = 50), 200 outer steps, CG capped at 100
           iterations, float32.
  "smoke"  channels (2, 4), 5 images per class (n = 10), 20 outer steps: seconds, for tests.
There is no paper size: Runkel et al. attack no convolutional victim.

Expected runtime: ":smoke" about a minute on a 2-core CPU; ":cpu" estimated at about 10
minutes there (not yet run to the end: 200 outer steps × 3 distinct starts, each an
L-BFGS solve, warm-started, and a CG solve on a CNN of 921 parameters over 50 images;
θ* alone trains in under a minute).
"""

import ml_collections

from trdr.configs import bilevel_affine, sizes

VARIANTS = sizes.CPU


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  variant = sizes.variant(arg, VARIANTS)
  smoke = variant == "smoke"
  config = bilevel_affine.get_config("smoke" if smoke else None)
  config.victim.arch = "cnn"
  config.victim.channels = (2, 4) if smoke else (4, 8)
  config.victim.pool = True
  config.victim.activation = "softplus"   # "relu" | "softplus" | "gelu" (see above)
  config.victim.all_biases = True
  config.victim.num_outputs = 1
  config.victim.later_init = "pytorch"
  # θ* ten times nearer stationarity than the lower level's tol (1e-5): at x_GT the lower
  # level, started at θ*, then takes no step however ||∇θE(θ*)|| rounds when recomputed
  # in the attack's program (float32, ~1e-6 relative), and x_GT stays a fixed point of
  # the attack. (At 1e-5 L-BFGS may stop just below it, a rounding away from a step.)
  config.victim.tol = 1e-6
  # Its E is not convex: Newton–CG (the affine main job's) is refused; L-BFGS.
  config.attack.lower_level.method = "lbfgs"
  # At the main job's 200 iterations some float32 solves of the CNN's E stop at the cap,
  # above tol (seen at :smoke, at ||∇θE|| ≈ 5e-3); 1000 leaves them room. A solve that
  # still hits the cap is counted in summary.json's lower_level and warned about.
  config.attack.lower_level.max_iter = 1000
  config.attack.hypergradient.cg_maxiter = 100
  config.init.lambda1 = (0.0, 1.0)
  config.init.lambda2 = (0.0, 1.0)
  if smoke:
    config.data.n_per_class = 5
    config.attack.steps = 20
  else:
    config.data.n_per_class = 25
    config.attack.steps = 200
  return config
