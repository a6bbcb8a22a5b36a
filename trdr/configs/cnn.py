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
    for the CNN, above the law's line. Three seeds, each victim attacked at b9dfyspx and
    at the settings tuned for it by trdr's sweep (`experiment` mode "sweep": 8 settings ×
    500 iterations ranked by the in-run score, b9dfyspx among them; per victim and seed,
    on that run's θ*), the tuned attack reading the sweep's best.json (attack.hparams_file).

Every victim: a bias in the first layer only, the first layer N(0, 1e-8) and the later
ones at PyTorch's default, trained by full-batch gradient descent on BCE to train loss
1e-4; DecoReco with m = 2n candidates and 5,000 iterations, float32 (as the report's
DecoReco runs), the CNN's autodiff order on all (the MLP's fused kkt_mlp does not read it);
the in-run score's k at most n (eval.score_k).

Variants: "cpu" as above; "smoke" (n = 10 for the control pair with CNN channels (4, 8),
MLP widths (32, 32); n = 2 for the wide pair with CNN channels (16, 32), p = 7,104 > d·n
= 6,144; 40 iterations, a 3-setting sweep of 20, float64, one seed): a minute or two, for
tests.

Expected runtime of ":cpu" on a 2-core CPU (AVX2): the control pair as before, about 11
minutes per seed (the CNN's 5,000 attack steps about 470 s on quiet cores, the MLP's about
140 s). The wide pair: one wide-CNN attack step at m = 8 cost about as much as one of the
control CNN at m = 200 when the two ran side by side (the (64, 64) convolutions at 16 × 16
dominate: 9 · 64 · 64 multiply-adds per pixel against 9 · 16 · 32), about 0.09 s per step
measured on a machine shared with a dozen other processes (an upper bound): so per seed
about 450 s per CNN attack (×2: b9dfyspx and tuned), about 0.8 of that for its sweep (8 ×
500 steps), and under a minute for each MLP run at n = 4. The whole ":cpu" study is about
20 (control) + 3 × 20 (wide) = 80 minutes at that pace, more with the truth diagnostic's
truth-start run (a second DecoReco run per attack); rows are written as each run finishes
and a rerun reuses them. ":smoke" a minute or two.
"""

import ml_collections

from trdr.configs import decoreco_cifar, decoreco_cnn, sizes
from trdr.configs.victim_recipe import B9DFYSPX

VARIANTS = sizes.CPU
# The attack settings a pair runs at: Haim et al.'s published b9dfyspx, or "tuned" (the
# sweep's best.json on that victim and seed).
SETTINGS = ("b9dfyspx", "tuned")


def _victim(module, variant: str, n_per_class: int | None = None, **arch
            ) -> ml_collections.ConfigDict:
  """The DecoReco experiment config of one victim: ``module``'s at ``variant``, at
  ``n_per_class`` training images per class group (None: the variant's), the architecture
  fields ``arch`` set, the study's attack (b9dfyspx, float32 at ":cpu")."""
  c = module.get_config(variant)
  c.float64 = variant == "smoke"   # ":cpu" in float32, as the report's DecoReco runs
  if n_per_class is not None:
    c.data.n_per_class = n_per_class
  for key, value in arch.items():
    c.victim[key] = value
  c.attack.init_scale, c.attack.lr, c.attack.lambda_min, c.attack.alpha = B9DFYSPX
  # the CNN's autodiff order on both (the MLP's fused kkt_mlp does not read it)
  c.attack.autodiff_order = "forward_over_reverse"
  # Haim et al.'s in-run score averages the k best-matched training images: k ≤ n
  c.eval.score_k = min(c.eval.score_k, 2 * c.data.n_per_class)
  return c


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  variant = sizes.variant(arg, VARIANTS)
  smoke = variant == "smoke"
  config = ml_collections.ConfigDict()
  config.variant = variant
  wide_n_per_class = 1 if smoke else 2
  wide_channels = (16, 32) if smoke else (64, 64)
  config.victims = ml_collections.ConfigDict({
      "cnn": _victim(decoreco_cnn, variant), "mlp": _victim(decoreco_cifar, variant),
      "cnn_wide": _victim(decoreco_cnn, variant, wide_n_per_class, channels=wide_channels),
      "mlp_small_n": _victim(decoreco_cifar, variant, wide_n_per_class)})
  config.pairs = ml_collections.ConfigDict({
      "control": {"victims": ("cnn", "mlp"), "seeds": (0,) if smoke else (0, 1),
                  "settings": ("b9dfyspx",)},
      "wide": {"victims": ("cnn_wide", "mlp_small_n"), "seeds": (0,) if smoke else (0, 1, 2),
               "settings": SETTINGS}})
  config.eval = ml_collections.ConfigDict()
  config.eval.ssim_level = 0.4
  config.eval.n_show = 8 if smoke else 16   # training images per victim in cnn.png
  return config
