r"""DecoReco on convolutional victims beside Haim et al.'s MLP (`trdr.studies.cnn`), at a
parameter count p below and above the training set's d·n pixel values.

Command:
  make cnn                            # ":cpu", into runs/cnn_cpu (cnn.md, cnn.json, cnn.png)
  make cnn-doc                        # docs/cnn.md and docs/cnn.png from runs/cnn_cpu
  python experiments/cnn.py --config=configs/cnn.py:smoke --workdir=DIR

Iurada et al. (ICLR 2026, "A Law of Data Reconstruction", arXiv 2509.22214) tie
reconstruction from θ* to p / (d·n), d = 32 · 32 · 3 = 3,072 pixel values per CIFAR-10
image: at p far below d·n the parameters cannot hold the training set, and a zero is
expected from the count alone. Two pairs (``pairs``), each of victims trained on the same
training images per seed (the seed draws the data, θ0 and the attack's starts):

  * "control": ``victims.cnn`` (configs/decoreco_cnn.py:cpu, channels (16, 32), 7,104
    parameters) and ``victims.mlp`` (configs/decoreco_cifar.py:cpu, Haim et al.'s MLP
    D-1000-1000-1) at n = 100: p / (d·n) = 0.023 for the CNN, so its count is
    uninformative by parameter count; the MLP beside it is the attack's positive control.
    Two seeds, Haim et al.'s published settings b9dfyspx only (these rows' configs are
    those of the study before the wide pair, so their finished runs are reused).
  * "wide": ``victims.cnn_wide`` (channels (64, 64), 42,752 parameters) and
    ``victims.mlp_small_n`` (the same MLP) at n = 4 (2 per class group): p / (d·n) = 3.5
    for the CNN, above the law's line (at n = 4 fewer channels fall near it: (32, 64) gives
    1.9). Three seeds, each victim attacked at b9dfyspx and at the settings tuned for it by
    trdr's sweep (`experiment` mode "sweep": 8 settings × 250 iterations ranked by the
    in-run score, b9dfyspx among them; per victim and seed, on the θ* of its b9dfyspx run),
    the tuned attack reading the sweep's best.json (attack.hparams_file). 2,000 attack
    iterations, not 5,000: with m = 8 candidates the loss flattens within a few hundred.

Every victim: a bias in the first layer only, the first layer N(0, 1e-8) and the later
ones at PyTorch's default, trained by full-batch gradient descent on BCE to train loss
1e-4; DecoReco with m = 2n candidates, float32 (as the report's DecoReco runs), the fused
kkt_mlp / kkt_cnn steps (the CNN's autodiff order set for attack.fused False); the in-run
score's k at most n (eval.score_k).

Variants: "cpu" as above; "smoke" (n = 10 for the control pair with CNN channels (4, 8),
MLP widths (32, 32); n = 2 for the wide pair with CNN channels (16, 32), p = 7,104 > d·n
= 6,144; 40 iterations, a 3-setting sweep of 20, float64, one seed): a few minutes, for
tests.

Expected runtime: ":cpu" about 30 minutes on a 2-core CPU (AVX2) where the control pair's
finished runs are reused, over an hour from scratch; ":smoke" a few minutes. The attack
steps dominate: the control CNN's 5,000 at m = 200 most of all, then the MLP's; the wide
pair's (64, 64) convolutions at 16 × 16 cost 9 · 64 · 64 multiply-adds per pixel but on
m = 8 images, 2,000 steps per attack and as many for its sweep. The truth diagnostic
(attack.truth_diagnostic, on by default: the λ fit, the truth-start run and its
evaluation) adds several times its attack's own time to each run; the control pair's runs,
finished before the diagnostic existed, are reused without it (`trdr.runtime.rundir`'s
ADDED_KEYS), which is the difference between the two figures. Each run's seconds are in
the generated page (WORKDIR/cnn.md, docs/cnn.md by `make cnn-doc`); `make benchmark-conv`
times the CNN's attack step. Rows are written as each run finishes and a rerun reuses them.
"""

import ml_collections

from trdr.configs import decoreco_cifar, decoreco_cnn, sizes
from trdr.configs.victim_recipe import B9DFYSPX

VARIANTS = sizes.CPU
# The attack settings a pair runs at: Haim et al.'s published b9dfyspx, or "tuned" (the
# sweep's best.json on that victim and seed).
SETTINGS = ("b9dfyspx", "tuned")


def _victim(module, variant: str, n_per_class: int | None = None, steps: int | None = None,
            **arch) -> ml_collections.ConfigDict:
  """The DecoReco experiment config of one victim: ``module``'s at ``variant``, at
  ``n_per_class`` training images per class group and ``steps`` attack iterations (None:
  the variant's; the sweep then runs steps // 8), the architecture fields ``arch`` set,
  the study's attack (b9dfyspx, float32 at ":cpu")."""
  c = module.get_config(variant)
  c.float64 = variant == "smoke"   # ":cpu" in float32, as the report's DecoReco runs
  if n_per_class is not None:
    c.data.n_per_class = n_per_class
  if steps is not None:
    c.attack.steps, c.attack.log_every = steps, min(c.attack.log_every, steps)
    c.sweep.steps = steps // 8   # the sweep's share of the iterations as at ":cpu"
  for key, value in arch.items():
    c.victim[key] = value
  c.attack.init_scale, c.attack.lr, c.attack.lambda_min, c.attack.alpha = B9DFYSPX
  # the CNN's autodiff order on both (read only with attack.fused False: the fused kkt_mlp
  # and kkt_cnn do not read it)
  c.attack.autodiff_order = "forward_over_reverse"
  # Haim et al.'s in-run score averages the k best-matched training images: k ≤ n
  c.eval.score_k = min(c.eval.score_k, 2 * c.data.n_per_class)
  return c


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  variant = sizes.variant(arg, VARIANTS)
  smoke = variant == "smoke"
  config = ml_collections.ConfigDict()
  config.variant = variant
  # the wide pair: n = 4 (n = 2 at ":smoke"), 2,000 iterations (":smoke" its own 40)
  wide = {"n_per_class": 1 if smoke else 2, "steps": None if smoke else 2000}
  config.victims = ml_collections.ConfigDict({
      "cnn": _victim(decoreco_cnn, variant), "mlp": _victim(decoreco_cifar, variant),
      "cnn_wide": _victim(decoreco_cnn, variant, **wide,
                          channels=(16, 32) if smoke else (64, 64)),
      "mlp_small_n": _victim(decoreco_cifar, variant, **wide)})
  config.pairs = ml_collections.ConfigDict({
      "control": {"victims": ("cnn", "mlp"), "seeds": (0,) if smoke else (0, 1),
                  "settings": ("b9dfyspx",)},
      "wide": {"victims": ("cnn_wide", "mlp_small_n"), "seeds": (0,) if smoke else (0, 1, 2),
               "settings": SETTINGS}})
  config.eval = ml_collections.ConfigDict()
  config.eval.ssim_level = 0.4
  config.eval.n_show = 8 if smoke else 16   # training images per victim in cnn.png
  return config
