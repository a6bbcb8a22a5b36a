r"""Privacy against what the adversary knows (`trdr.studies.knowledge`).

Command:
  make knowledge                                    # ":cpu", into runs/knowledge_cpu
  python experiments/knowledge.py --config=configs/knowledge.py:smoke --workdir=DIR

For each victim (``victims``, each a full experiment config: the affine victim of eq. 8
and the one-hidden network of eq. 9, both trained to stationarity of E in float64, and
Haim et al.'s MLP trained by gradient descent) and each seed (the data draw, the victim,
the unknown points and the starts), the informed adversary (`trdr.attacks.informed`)
knows θ*, the training recipe and all training images but k of them, for every k of
``ks`` (0 stands for n: the paper's adversary, who knows none). It reconstructs the k
from the stationarity residual: in closed form where one applies, else by Adam from
``restarts[victim]`` starts (U(0, 1) noise; DecoReco's N(0, σ²) for the gradient-descent
victim) of ``steps[victim]`` steps, keeping the start with the lowest loss; for the
gradient-descent victim at k ≤ ``fitted_max_k`` the known images' λ are fitted first and
DecoReco's step moves the unknown images only (`informed.kkt_search`), and on every seed
of ``truth_seeds`` the truth diagnostic (`trdr.studies.knowledge.kkt_row`) is run, for the
full objective and, at ``premise_ks``, for objectives weighted where the premise holds
(``premises``). A
training image counts as recovered when it and a reconstruction are best buddies at
SSIM ≥ ``eval.ssim_level`` (windows ``eval.windows``); the baseline is the same count
for the start images. Beside it, on ``bilevel.victims``, the bilevel attack (eq. 2, 7)
as the paper's adversary (k = n) with the victim's own θ0 known to the adversary (Loo et
al., ICLR 2024; SimuDy, ICLR 2025) and with a fresh U(0, 1) θ0 at every lower-level solve.

Variants: "cpu" (affine n = 100, one-hidden width 128 n = 50, Haim MLP n = 100, three
seeds), "smoke" (n = 40, 20, 10, seconds per row, for tests). Expected runtime: ":cpu"
over 40 minutes on a 2-core CPU (an estimate from before the truth diagnostic ran on every
seed and the fitted search took four starts); ":smoke" about three minutes. The six
bilevel runs dominate (each lower-level solve starts far from θ*, from θ0), then the Haim
MLP's k = 1 rows (4 starts and one truth start of k images a step, two such adversaries);
each row's seconds are in the study's knowledge.json.
"""

import ml_collections

from trdr.configs import bilevel_affine, bilevel_one_hidden, decoreco_cifar, sizes

VARIANTS = sizes.CPU


def _stationary(config: ml_collections.ConfigDict, tol: float) -> ml_collections.ConfigDict:
  """A victim trained by L-BFGS in float64 to ||∇θE|| < tol: the informed adversary's
  closed forms are exact up to that tolerance (`trdr.attacks.informed`)."""
  config.float64 = True
  config.victim.tol = tol
  config.victim.max_iter = 20_000
  return config


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  variant = sizes.variant(arg, VARIANTS)
  smoke = variant == "smoke"
  config = ml_collections.ConfigDict()
  config.variant = variant
  config.seeds = (0, 1) if smoke else (0, 1, 2)
  config.ks = (1, 2, 5, 0) if smoke else (1, 2, 5, 10, 50, 0)   # 0: k = n

  config.victims = ml_collections.ConfigDict()
  config.victims.affine = _stationary(bilevel_affine.get_config("smoke" if smoke else None),
                                      1e-10)
  # The bilevel row's lower level: L-BFGS, the solver its results were measured with.
  config.victims.affine.attack.lower_level.method = "lbfgs"
  if not smoke:   # n = 100 as the MLP's: the k = n search fits a k × k Gram matrix per step
    config.victims.affine.data.n_per_class = 50
  config.victims.one_hidden = _stationary(
      bilevel_one_hidden.get_config("smoke" if smoke else "cpu"), 1e-9)
  config.victims.haim_mlp = decoreco_cifar.get_config(variant)
  # Run only these victims (names of ``victims``; empty: all), e.g.
  # --config.only_victims='("haim_mlp",)' --config.ks='(1,)'.
  config.only_victims = ()

  config.attack = ml_collections.ConfigDict()
  config.attack.steps = 300         # replaced per victim by ``steps`` below
  config.attack.lr = 0.02            # Adam on the images (pixels), cosine to 1 %
  config.attack.span = True          # search a first layer's span (`informed.first_layer_span`)
  # The gradient-descent victim: DecoReco as it runs on that victim (trdr/configs/
  # decoreco_cifar.py: Haim et al.'s CIFAR settings, SGD with momentum, N(0, σ²) starts)
  # with the known images fixed; its α also serves the ReLU of stationary victims.
  config.attack.kkt = decoreco_cifar.get_config(variant).attack
  config.attack.alpha = config.attack.kkt.alpha
  # Per victim: starts per row (`informed.start_images`; the lowest final loss kept) and
  # steps (``kkt.steps`` for the gradient-descent victim, whose KKT loss runs over all n
  # points at every step: one start).
  config.restarts = ml_collections.ConfigDict({"affine": 4, "one_hidden": 4, "haim_mlp": 4})
  # The gradient-descent victim at k ≤ fitted_max_k (and k < n): the known images' λ fitted
  # first, then DecoReco's step on the k unknown images only (`informed.kkt_search`: k
  # images a step, so ``restarts`` starts are affordable); above it, DecoReco on all n
  # points from one start (a step costs all n images).
  config.fitted_max_k = 2
  # The informed adversaries whose objective keeps the tensors where the premise holds
  # (`informed.premise_weights`: "explained", each tensor weighted by its explained fraction
  # on the known images; "first_layer", the layer where the images enter and whose
  # fraction unexplained is the premise's headline), at these k, beside the full objective.
  config.premises = ("explained", "first_layer")
  config.premise_ks = (1,)
  # The diagnostic "the same steps from the true images" (`informed.reconstruct`'s truth;
  # for the fitted search the truth diagnostic of `trdr.studies.knowledge.kkt_row`) on
  # these seeds: every seed, so that each verdict is the seed's own.
  config.truth_seeds = config.seeds
  config.steps = ml_collections.ConfigDict(
      {"affine": 300 if smoke else 1000, "one_hidden": 300 if smoke else 1000,
       "haim_mlp": 300 if smoke else 1000})

  # The bilevel attack as the paper's adversary (k = n) on these victims, with the victim's
  # own θ0 known to the adversary and with θ0 unknown (`trdr.studies.knowledge.BILEVEL`).
  config.bilevel = ml_collections.ConfigDict()
  config.bilevel.victims = ("one_hidden",)
  config.bilevel.steps = 30 if smoke else 50

  config.eval = ml_collections.ConfigDict()
  config.eval.ssim_level = 0.4
  config.eval.windows = (11, 3)
  return config
