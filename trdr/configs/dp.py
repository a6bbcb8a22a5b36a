r"""Privacy due to noise: the attacks on DP-SGD victims beside the ReRo bound
(`trdr.studies.dp`).

Command:
  make dp                                          # ":cpu", into runs/dp_cpu (dp.md)
  python experiments/dp.py --config=configs/dp.py:smoke --workdir=DIR

For each victim (``victims``: the affine victim of eq. 8, trained to stationarity of E in
float64, and Haim et al.'s MLP trained by gradient descent, as configs/knowledge.py has
them) and each seed, the victim at each privacy level: DP-SGD (`trdr.victim.dp_sgd`: full
batch, per-example gradients by `jax.vmap`, clipped to ``dp[victim].clip_norm``, Gaussian
noise) for ``dp[victim].steps`` steps at the noise multiplier σ that gives each ε of
``epsilons`` at δ = ``delta`` (`trdr.victim.accounting.noise_multiplier`; the victim's
report holds the PLD accountant's ε); the same recipe at σ = 0 (ε = ∞: the clipping and
the short training without noise); and the non-private victim (ε = ∞: the victim of
configs/knowledge.py). On each: the informed adversary (`trdr.attacks.informed`: all
training images but k known, each k of ``ks``), DecoReco on ``decoreco.victims`` and the
bilevel attack (eq. 2, 7; one U(0, 1) start per training image) on ``bilevel.victims``.
A training image counts as recovered when it and a reconstruction are best buddies at
SSIM ≥ ``eval.ssim_level`` (window ``eval.windows[0]``). Beside each, the ReRo bound
Φ(Φ⁻¹(κ_m) + μ), μ = √T/σ, κ estimated from the test split (`trdr.evaluation.rero`).
And on every victim and level the prior-aware attack of Hayes et al. 2023
(`trdr.attacks.prior_aware`, ``prior_aware``): the released trajectory θ_0 … θ_T, priors
of K = 2 and K = ``prior_aware.k_max`` candidates, κ = 1/K exactly, enough trials that
every Clopper–Pearson interval is within ± ``prior_aware.halfwidth``. Every victim's
inputs are the pixels minus the test split's mean (``data.mean_from``), which depends on
no training image.

Variants: "cpu" (affine n = 100 in float64, MLP n = 100 of widths (256, 256) in float32;
ε ∈ {1, 10, 100}; k ∈ {1, 2, 5}; DecoReco 1,000 steps; three seeds: 30 victims), "smoke"
(affine n = 40, MLP n = 10 of widths (32, 32), both float64; ε ∈ {1, 100}; k ∈ {1, 2}; two
seeds; for tests). The prior-aware trials: 402 per victim and level at ":cpu" (134 per
seed; the MLP's at n = 20, widths (32, 32): ``prior_aware.resize``), 18 at ":smoke".
Expected runtime: ":cpu" about 20 minutes on 2 cores (the MLP's DecoReco rows, each with
its truth diagnostic, dominate; each row's seconds are in dp.json). Rows are written as
they finish and reused by a rerun.
"""

import ml_collections

from trdr.configs import knowledge, sizes

VARIANTS = sizes.CPU


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  variant = sizes.variant(arg, VARIANTS)
  smoke = variant == "smoke"
  base = knowledge.get_config(variant)
  config = ml_collections.ConfigDict()
  config.variant = variant
  config.seeds = (0, 1) if smoke else (0, 1, 2)
  config.ks = (1, 2) if smoke else (1, 2, 5)

  # The non-private victims (ε = ∞), as the knowledge study has them; the DP victims are
  # these with victim.dp set (`trdr.studies.dp.victim_config`).
  config.victims = ml_collections.ConfigDict()
  config.victims.affine = base.victims.affine
  # Every DP victim's inputs are the images minus the test split's per-pixel mean, which
  # depends on no training image (the knowledge study's MLP subtracts the training set's
  # own mean: one image's presence would move every other input, beyond the accountant's
  # clip C). The affine victim subtracts it too: centred images of one class are far less
  # alike than raw ones, so their clipped gradients differ more (what the prior-aware
  # attack tells apart).
  config.victims.affine.data.subtract_mean = True
  config.victims.affine.data.mean_from = "test"
  # The bilevel attack's lower level on the affine victim: Newton–CG, the main job's
  # (E is strongly convex there; knowledge.py keeps L-BFGS for its own comparison).
  config.victims.affine.attack.lower_level.method = "newton_cg"
  config.victims.haim_mlp = base.victims.haim_mlp
  config.victims.haim_mlp.data.mean_from = "test"
  if not smoke:
    # Per-example gradients of Haim et al.'s (1000, 1000) MLP are 4·10⁶ floats per image:
    # (256, 256) in float32 (as the report's DecoReco runs at ":cpu") keeps DP-SGD's step
    # near 350 MB for n = 100, and the 15 MLPs' attacks within the budget.
    config.victims.haim_mlp.victim.widths = (256, 256)
    config.victims.haim_mlp.float64 = False

  # The DP-SGD recipe per victim (`trdr.victim.accounting.DPSettings`, all but σ and δ):
  # full batch. lr and C were picked from a handful of pairs by the test accuracy of
  # seed 0's victims at n = 100 (ε ≈ 10 well above chance), before any attack ran; the
  # pick itself is not accounted for (it looked at the training data).
  config.dp = ml_collections.ConfigDict({
      "affine": {"clip_norm": 1.0, "steps": 100, "lr": 0.05, "sampling_rate": 1.0},
      "haim_mlp": {"clip_norm": 1.0, "steps": 100, "lr": 0.5, "sampling_rate": 1.0}})
  config.delta = 1e-5                  # δ of every ε (below 1/n)
  config.epsilons = (1.0, 100.0) if smoke else (1.0, 10.0, 100.0)
  config.noiseless = True              # the recipe at σ = 0 too (ε = ∞)

  # The informed adversary, as configs/knowledge.py runs it.
  config.attack = base.attack
  config.restarts = ml_collections.ConfigDict({"affine": 4, "haim_mlp": 1})
  config.steps = ml_collections.ConfigDict({"affine": 300 if smoke else 500,
                                            "haim_mlp": 100 if smoke else 300})
  config.truth_seeds = ()              # no "from the truth" diagnostic here

  # DecoReco (its config's settings: Haim et al.'s CIFAR values), m = 2n candidates.
  config.decoreco = ml_collections.ConfigDict()
  config.decoreco.victims = ("haim_mlp",)
  config.decoreco.steps = 40 if smoke else 1000
  config.decoreco.log_every = 20 if smoke else 500
  # A diverged run (large weights of a noisy θ*) is run again at a tenth of its lr, this
  # many times (`trdr.studies.dp.decoreco_row`).
  config.decoreco.retries = 2

  # The bilevel attack from U(0, 1), one start per training image, lower level restarted
  # from its previous solution (E is strongly convex: one minimiser whatever the start).
  config.bilevel = ml_collections.ConfigDict()
  config.bilevel.victims = ("affine",)
  config.bilevel.steps = 10 if smoke else 30
  config.bilevel.start = "previous"

  # The prior-aware attack of Hayes et al. 2023 (`trdr.attacks.prior_aware`) on the
  # released trajectory of full-batch DP-SGD, on every victim at every level: priors of
  # K = k_max and K = 2 candidates of the target's class; enough trials per (victim,
  # level) over the seeds that every Clopper–Pearson interval is within ± halfwidth
  # (`trdr.studies.dp.trials_needed`); batch trials vmapped at once.
  config.prior_aware = ml_collections.ConfigDict()
  config.prior_aware.victims = ("affine", "haim_mlp")
  config.prior_aware.k_max = 10
  config.prior_aware.halfwidth = 0.25 if smoke else 0.05
  config.prior_aware.batch = 9 if smoke else 45
  # Each trial replays the T steps with n − 1 + K per-example gradients, which at the
  # :cpu MLP (n = 100, widths (256, 256)) and 2,010 trials is hours on a CPU. Its
  # prior-aware rows use a smaller MLP of the same recipe (T, C, lr; σ, hence ε and μ, do
  # not depend on n); the page says so beside the rows.
  config.prior_aware.resize = ml_collections.ConfigDict(
      {"haim_mlp": {"n_per_class": 10}} if smoke else
      {"haim_mlp": {"n_per_class": 10, "widths": (32, 32)}})

  config.eval = ml_collections.ConfigDict()
  config.eval.ssim_level = 0.4
  config.eval.windows = (11,)
  config.eval.confidence = 0.95        # of κ's upper limit and of the "above the bound" test
  return config
