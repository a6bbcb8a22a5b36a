r"""Membership ambiguity measured as an adversary faces it (Runkel et al. 2024, Sec. 5).

Command:
  make membership                                   # ":cpu", into runs/report_cpu/membership
  python experiments/membership.py --config=configs/membership.py:smoke --workdir=DIR

Per attack (``attacks``, each a full experiment config: the bilevel attack, eq. 2/7, on
the affine victim, eq. 8, and on the one-hidden victim, eq. 9, and DecoReco on Haim et al.'s
MLP) and per victim of ``victims``, one run
of `trdr.experiment` in mode "membership". A victim v is the attack's recipe on its own
data draw: ``data.seed`` = ``victim.seed`` = v (another training subset and partition of
the shipped sample, another initialisation), its starts drawn with ``init.seeds`` = (v,).
The victims are the unit of replication: the rule's interval is the Student t interval of
the victims' own AUCs (the bootstrap over victims and over images beside it), and each AUC is
also reported per victim. Each run attacks one start per training image
of each kind of its ``init.kinds``, with the same budget and stopping rule
(``attack.steps``):
  "uniform"   U(0, 1) noise (bilevel, as Runkel et al. start it); "gaussian": N(0, σ²) at
              Haim et al.'s CIFAR σ (DecoReco). An attacker can have either.
  "public"    test-split images of the same classes (an attacker can have them)
  "mixed"     each start, at random and recorded, training image i or partition image i
              (a non-member of the same distribution): the controlled comparison.
Every attack computes in float32: the bilevel attacks as their own configurations, DecoReco
as the DecoReco figures and Haim et al.'s PyTorch reference.
Each attack at its own configuration's budget (``attack.steps`` as tuned, never cut for
wall-clock time: a test holds every variant to it). The bilevel attacks' lower level is the
main job's warm start ("previous": θ(x) re-solved from the previous outer step's, the first
from θ*), the reading under which the training images minimise the upper level (report.md's
"Table 1 under each reading"); under Runkel et al.'s per-step U(0, 1) draw they do not, and a
reconstruction could then say nothing about membership.
Rules, fixed before any run (`trdr.report.verdicts.RULES`, `trdr.report.membership_rules`):
the paper's two sentences, each its own claim. With certainty (Sec. 5): the adversary names
the top k of a score as members; it can tell when the precision's Clopper–Pearson lower
bound reaches 0.95 at some k. Better than chance (Sec. 4.4): victims are the unit; a score
tells when the t-test of the victims' AUCs against 0.5 rejects (Bonferroni over the
scores), cannot tell when their interval lies inside 0.5 ± the equivalence margin. Each
"can tell" counts against the paper only where the attack adds it to what the start images
give (the paired per-victim difference); anything undecided is "underpowered".
"Natural-looking": SSIM ≥ ``natural_threshold`` to the nearest image of test[1::2] (the
public images not used as starts); 0.15 is below the 5th percentile (0.177) of that SSIM
for real CIFAR-10 training-distribution images and three times its median for U(0, 1)
noise (0.046), measured on the shipped sample before any membership run.

Variants: "" (paper-size attacks: 50,000 DecoReco iterations; one GPU), "cpu" (n = 100, 300
affine and 200 one-hidden bilevel steps, 5,000 DecoReco iterations), "smoke" (n = 40,
seconds per attack, for tests: enough images for every attack's positive control to show
membership by the pooled test; two victims cannot decide the tests over victims);
five victims per attack, two at ":smoke", and two selection victims (the adversary's,
one at ":smoke"); eight shadow victims per victim (offline LiRA),
two at ":smoke".
Expected runtime: ":cpu" about 65 minutes on a 2-core CPU and ":smoke" about 1.5 minutes,
measured before the selection victims, which add the runs, shadows and scores of two more
victims per attack (one at ":smoke"): not yet measured.
"""

import ml_collections

from trdr.configs import bilevel_affine, bilevel_one_hidden, decoreco_cifar, sizes

VARIANTS = sizes.PAPER


def _bilevel(variant: str, n_per_class: int) -> ml_collections.ConfigDict:
  config = bilevel_affine.get_config("smoke" if variant == "smoke" else None)
  config.data.n_per_class = n_per_class
  config.init = ml_collections.ConfigDict()
  return config


def _bilevel_one_hidden(variant: str, n_per_class: int) -> ml_collections.ConfigDict:
  config = bilevel_one_hidden.get_config(variant)
  config.data.n_per_class = n_per_class
  config.init = ml_collections.ConfigDict()
  return config


def _decoreco(variant: str, n_per_class: int) -> ml_collections.ConfigDict:
  config = decoreco_cifar.get_config(variant)
  config.data.n_per_class = n_per_class
  config.attack.candidates_per_image = 1   # one start per training image, its label
  config.eval.public_set = False           # the reference set is test[1::2] (membership)
  config.eval.count_windows = ()
  # Haim et al.'s reference runs the victim and the attack in PyTorch's float32; so do this
  # experiment and the DecoReco figures (float64 costs more per iteration on a CPU, and
  # DecoReco's iterations are much of the ":cpu" run: `make benchmark-decoreco-cpu`
  # measures both precisions side by side).
  config.float64 = False
  return config


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  variant = sizes.variant(arg, VARIANTS)
  # ":smoke" has the images its positive controls need to pass (tests/test_membership.py):
  # the mixed starts give ~40 natural-looking training-image and ~40 partition-image starts
  # over its two victims; with 10 per victim no control can reach the Bonferroni level
  # 0.05 / (2 · scores) unless its AUC is near 1.
  n_per_class = {"": 100, "cpu": 50, "smoke": 20}[variant]
  config = ml_collections.ConfigDict()
  config.variant = variant
  config.attacks = ml_collections.ConfigDict({
      "bilevel_affine": _bilevel(variant, n_per_class),
      "bilevel_one_hidden": _bilevel_one_hidden(variant, n_per_class),
      "decoreco_mlp": _decoreco(variant, n_per_class)})
  # The noise start of each attack as its paper draws it: U(0, 1) pixels for the bilevel
  # attack (Runkel et al.), N(0, σ²) at the tuned σ for DecoReco (Haim et al.).
  noise = {"bilevel_affine": "uniform", "bilevel_one_hidden": "uniform",
           "decoreco_mlp": "gaussian"}
  for name, attack in config.attacks.items():
    attack.init.kinds = (noise[name], "public", "mixed")
    attack.init.seeds = (0,)   # replaced by (v,) in victim v's run (`victim_config`)
    attack.eval.ssim_thresholds = ()
  # The victims: independent data draws of the same recipe (`victim_config`).
  config.victims = (0, 1) if variant == "smoke" else (0, 1, 2, 3, 4)
  # The adversary's own victims of the same recipe (its shadows: it trains them, attacks
  # them and knows their training sets), on which it selects its score
  # (`trdr.report.membership_rules.select`, docs/membership.md "One adversary's answer");
  # never tested. Their data draws are apart from the victims' seeds.
  config.selection_victims = (2,) if variant == "smoke" else (5, 6)
  # "Left its start": a reconstruction whose SSIM to its own start image is below the
  # labels' non-member bound (non_member_max_ssim): as unlike its start as a non-member is
  # unlike every training image, so the start is not what the adversary recognises in it
  # (the public-start confound, `trdr.report.membership_rules`).
  config.left_start_max_ssim = 0.3
  # Offline LiRA's shadow victims per victim (the attack's recipe on public data that never
  # contains a scored image: `trdr.studies.membership.shadow_victims`); the issue asks ≥ 8.
  config.shadows = 2 if variant == "smoke" else 8
  config.natural_threshold = 0.15
  # The labels (fixed before any run): member when the image and a training image are
  # best buddies by SSIM at ≥ member_min_ssim (Haim et al.'s "reconstructed" level, the
  # report's RULES["ssim_level"]); non-member when its SSIM to every training image is
  # < non_member_max_ssim; between: excluded, and counted. How the two treat genuine
  # non-members (the partition images) is measured by `membership.label_calibration` and
  # printed beside the tables.
  config.member_min_ssim = 0.4
  config.non_member_max_ssim = 0.3
  # The SSIM windows of the labels: the first (dm_pix's 11, the report's) is the rule's;
  # the AUCs are also reported under Haim et al.'s window 3.
  config.label_windows = (11, 3)
  config.natural_thresholds = (0.1, 0.15, 0.2, 0.25)   # the member-fraction table
  # TPR at these FPRs (Carlini et al. 2022 report 0.1 % and 1 %); the rule's is 1 %
  # (verdicts.RULES). A table shows one only with ≥ 1 / FPR non-members (with fewer it is
  # the TPR at FPR 0).
  config.fprs = (0.001, 0.01, 0.1)
  config.confidence = 0.95
  config.n_resamples = 2000
  # Fewer natural-looking members or non-members: no AUC.
  config.min_per_class = 10
  # The rule "with certainty" (`trdr.report.membership_rules`): the members among the top
  # k images of each score, at these k and at k = every image (`roc.precision_at_top`).
  config.precision_sizes = (10, 20, 50, 100, 200, 500, 1000, 2000)
  config.chunk_size = 500         # SSIM queries per block
  # Images per grid point with the bilevel leave-one-out score (one lower-level solve each),
  # drawn among the natural-looking reconstructions (`membership.per_image`)
  config.loo_per_start = {"": 100, "cpu": 30, "smoke": 4}[variant]
  return config


def victim_config(attack: ml_collections.ConfigDict, victim: int) -> ml_collections.ConfigDict:
  """The attack's config for victim ``victim``: its own data draw, initialisation and
  start draw (``data.seed`` = ``victim.seed`` = ``init.seeds[0]`` = victim)."""
  config = attack.copy_and_resolve_references()
  config.data.seed = int(victim)
  config.victim.seed = int(victim)
  config.init.seeds = (int(victim),)
  return config
