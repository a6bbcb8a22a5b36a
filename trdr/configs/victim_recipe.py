r"""DecoReco's victim recipe, ablated (`trdr.studies.victim_recipe`).

Command:
  make victim-recipe                  # ":cpu", into runs/victim_recipe_cpu (victim_recipe.md)
  python experiments/victim_recipe.py --config=configs/victim_recipe.py:smoke --workdir=DIR

Haim et al.'s MLP (configs/decoreco_cifar.py at the same size: a bias in the first layer
only, BCE, full-batch gradient descent) trained under each initialisation of the later
layers (``inits``: PyTorch's ``nn.Linear`` default, Haim et al.'s; Flax's ``lecun_normal``,
trdr's before) for each training time (``times``: "loss" is the stop at train loss 1e-4, a
number is a gradient-flow time lr × epochs; Haim et al. train to 10⁴), for each seed (the
data draw, θ0 and the attack's starts). Training runs once per (init, seed), continued from
one time to the next (full-batch gradient descent has no state but θ, so a victim
continued to time T is the victim trained to T). Per cell: the KKT premise of θ*
(`trdr.victim.kkt`: the unexplained fraction per tensor on the true training images), and
DecoReco at each of ``settings`` (σ, lr, λ_min, α) from N(0, σ²) starts: training images
recovered (SSIM ≥ 0.4, windows 11 and 3, best buddies) beside the same count for the
start images, and the attack's final loss beside the residual floor at the true images.

Variants: "cpu" (n = 100, m = 200, 5,000 iterations, float32 as the report's DecoReco runs,
lr 0.5: the times 361 (the loss stop, 722 epochs), 3,600 and 10⁴ (20,000 epochs), three
seeds), "smoke" (n = 10, widths 32, 40 iterations; seconds, for tests). Expected runtime:
":cpu" about 1.5 hours on a 2-core CPU (six victims trained to 20,000 epochs, 18 attacks);
cells are written as they finish and reused by a rerun; ":smoke" about a minute.
"""

import ml_collections

from trdr.configs import decoreco_cifar, sizes

VARIANTS = sizes.CPU

# Haim et al.'s published tuned run for CIFAR-10 (../shared/paper/reference_settings.md):
# (σ, lr, λ_min, α).
B9DFYSPX = (8.857e-4, 0.5549, 0.4983, 19.14)


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  variant = sizes.variant(arg, VARIANTS)
  smoke = variant == "smoke"
  config = ml_collections.ConfigDict()
  config.variant = variant
  config.seeds = (0, 1) if smoke else (0, 1, 2)
  config.inits = ("pytorch", "flax")
  # "loss": stop at victim.loss_threshold (trdr's recipe before); numbers: gradient-flow
  # times, increasing. ":cpu": 10⁴ is Haim et al.'s (20,000 epochs at lr 0.5); 100 times
  # the loss stop (36,000, 72,000 epochs, several times the 10⁴ victims' training) is not
  # run.
  config.times = ("loss", 400.0, 1000.0) if smoke else ("loss", 3600.0, 10_000.0)
  config.decoreco = decoreco_cifar.get_config(variant)
  config.decoreco.float64 = smoke   # ":cpu" in float32, as the report's DecoReco runs
  config.decoreco.victim.loss_threshold = 1e-4
  config.decoreco.victim.flow_time = None
  config.settings = ml_collections.ConfigDict({"b9dfyspx": B9DFYSPX})
  config.eval = ml_collections.ConfigDict()
  config.eval.ssim_level = 0.4
  return config
