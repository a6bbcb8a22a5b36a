"""The paper's claims that the report tests: one record each, the table the report iterates.

`CLAIMS` holds, per artefact, one `Claim`: the paper's sentence (Runkel et al. 2024, arXiv
2412.08544; the text in ../shared/paper/runkel2024_text.txt, captions in
runkel2024_with_equations.txt), where it stands, the rule that tests it in words (the
thresholds of `trdr.report.verdicts.RULES` in braces), the evidence it reads (keys of
`trdr.report.evidence.collect`'s output, "membership" for membership.json), its check (a
pure function of `trdr.report.verdicts`) and its images. Square brackets in a quotation
stand for symbols or words the quotation leaves implicit. `verdicts` applies every claim
whose evidence is there, each beside its baseline; report.md (`trdr.report.markdown`)
draws one section per claim in this order. Adding a claim is one record here and its
check in `trdr.report.verdicts`.
"""

from typing import Callable, NamedTuple

from trdr.report import membership_rules
from trdr.report import verdicts as verdict_rules
from trdr.report.verdicts import RULES

class Claim(NamedTuple):
  """One claim of the paper and how the report tests it.

  Attributes:
    title: its section's heading in report.md ("Fig. 1", "Table 1", …).
    quote: the paper's sentence, quoted.
    source: where it stands in the paper.
    rule: the rule in words, `RULES`' thresholds in braces.
    needs: the evidence it reads, as paths into the evidence dict ("pure/affine",
      "results/tuned", "table1", "membership"): the claim is judged only where all are
      present (a seed's repeats hold some runs only).
    check: (evidence, rules) -> outcome (`trdr.report.verdicts.verdict_of`'s dict).
    images: image files relative to the report's work directory, shown in its section.
    own_baseline: the check sets its baseline itself (membership: the same rule on the
      start images, from its own measurements); otherwise `verdicts` applies the check to
      `trdr.report.verdicts.baseline_evidence` and `with_baseline`.
  """
  title: str
  quote: str
  source: str
  rule: str
  needs: tuple
  check: Callable[[dict, dict], dict]
  images: tuple = ()
  own_baseline: bool = False


def _repeats(evidence: dict, run: str) -> list[dict]:
  """Run ``run``'s arrays in the repeats on other seeds (evidence["seeds"]: each seed's
  `trdr.report.evidence.collect` results; none in a seed's own evidence)."""
  return [s[run] for s in evidence.get("seeds", ()) if run in s]


def _quiz_arrays(evidence: dict) -> tuple:
  """Figs. 6 and 7's arrays of the tuned run: SSIM to the nearest training image, its
  index, SSIM to the nearest public image."""
  tuned = evidence["results"]["tuned"]
  return tuned["train_ssim"], tuned["train_index"], tuned["public_ssim"]


# artefact -> its claim, in the order of report.md.
CLAIMS = {
    "fig1": Claim(
        "Fig. 1",
        "“For a random initialisation of [x], both the affine and one-hidden layer "
        "classifier cannot reconstruct any training images … The resulting images look "
        "like random noise. … this distance [||θ*−θ||²] is small … the optimisation "
        "problem converged even though the visual results [for x] do not resemble any "
        "training data.”",
        "Sec. 4.3 (a), Fig. 1, Table 1",
        "noise start (λ1 = λ2 = 0), each victim: mean SSIM to the nearest training image "
        "< {no_reconstruction_max_ssim}; mean SSIM to the nearest noise image > to the "
        "nearest training image; ||θ*−θ||² < {small_param_distance}",
        needs=("pure/affine", "pure/one_hidden"),
        check=lambda e, r: verdict_rules.verdict_fig1(e["pure"], r),
        images=("paper_figures/fig1.png",)),
    "fig2": Claim(
        "Fig. 2",
        "“when initialising with ground truth training images, the affine classifier "
        "recovers the training data perfectly. For the same initialisation, even the "
        "one-hidden layer classifier recovers images resembling the training data … In "
        "both cases, the distance between [θ*] and [θ] remains small.”",
        "Sec. 4.3 (b), Fig. 2",
        "ground-truth start, each victim: mean SSIM to the nearest training image > "
        "{recovered_min_ssim} and mean L2 to it < {recovered_max_l2}; ||θ*−θ||² < "
        "{small_param_distance}",
        needs=("pure/affine", "pure/one_hidden"),
        check=lambda e, r: verdict_rules.verdict_fig2(e["pure"], r),
        images=("paper_figures/fig2.png",)),
    "fig3": Claim(
        "Fig. 3",
        "“it is clear that the approach is not reconstructing the true training data but "
        "rather the same images that were used for the intialisation … the distance "
        "between [θ*] and [θ] remains small”",
        "Sec. 4.3 (c), Fig. 3 (affine classifier)",
        "partition start: a majority (> {majority}) of the reconstructions have their own "
        "start image as SSIM-nearest image of training set ∪ partition; ||θ*−θ||² < "
        "{small_param_distance}",
        needs=("pure/affine", "pure/one_hidden"),
        check=lambda e, r: verdict_rules.verdict_partition_init(
            "fig3", e["pure"]["affine"], e["partition_images"]["affine"], r),
        images=("paper_figures/fig3.png",)),
    "fig4": Claim(
        "Fig. 4",
        "“it is clear that the approach is not reconstructing the true training data but "
        "rather the same images that were used for the intialisation … the distance "
        "between [θ*] and [θ] remains small”",
        "Sec. 4.3 (c), Fig. 4 (one-hidden layer classifier)",
        "as Fig. 3, for the one-hidden victim",
        needs=("pure/affine", "pure/one_hidden"),
        check=lambda e, r: verdict_rules.verdict_partition_init(
            "fig4", e["pure"]["one_hidden"], e["partition_images"]["one_hidden"], r),
        images=("paper_figures/fig4.png",)),
    "table1": Claim(
        "Table 1",
        "“For a random initialisation of [θ], as highlighted in table 1 this distance is "
        "small for both the affine and one-hidden layer classifier.”",
        "Sec. 4.3 (a), Table 1",
        "all six ||θ*−θ||² (random, ground-truth and partition start; both victims) < "
        "{small_param_distance}",
        needs=("table1",),
        check=lambda e, r: verdict_rules.verdict_table1(e["table1"], r),
        images=()),
    "fig5": Claim(
        "Fig. 5",
        "“Initialising the DecoReco approach randomly with [x ~ N(0, 1)], i.e., without "
        "finetuning the variance of the distribution, fig. 5 shows that at most the first "
        "three reconstructions resemble natural images while still being very noisy.”",
        "Sec. 4.4, Fig. 5",
        "from N(0, 1) (σ = 1, Fig. 6's other settings): reconstructions resembling "
        "natural images (SSIM ≥ {ssim_level} to the nearest training or public image) "
        "≤ {fig5_max_untuned}; training images reconstructed (best SSIM ≥ {ssim_level}) "
        "≤ {fig5_max_untuned}, and fewer than with the tuned σ (the paper's next "
        "sentence: “In the following, we use the very specific scale factor”)",
        needs=("summaries/untuned", "summaries/tuned"),
        check=lambda e, r: verdict_rules.verdict_fig5(
            e["summaries"]["untuned"], e["summaries"]["tuned"], r, e["results"].get("untuned")),
        images=("decoreco_figures/fig5.png",)),
    "fig6": Claim(
        "Fig. 6",
        "“Four of these reconstructions are among the top 10 nearest neighbours to "
        "actual training images while one is not even in the top 50. Can you guess "
        "which one?”",
        "Fig. 6 caption; Sec. 4.4",
        "rank the tuned run's reconstructions by SSIM to their nearest training image, "
        "each training image once (its best reconstruction), and scale the paper's "
        "ranks 10 and 50 from its {paper_candidates} candidates to the run's m (at "
        "least {fig6_top}); the quiz shows the {fig6_top} best and, fourth, the most "
        "realistic-looking one (realism: SSIM to its nearest public test-split image, "
        "no training set needed) ranked below the scaled 50. Check: the {fig6_top} "
        "are distinct training images in the scaled top 10, each SSIM ≥ {ssim_level} "
        "(reconstructed). Not tested when no reconstruction ranks below the scaled 50",
        needs=("results/tuned",),
        check=lambda e, r: verdict_rules.verdict_fig6(*_quiz_arrays(e), r),
        images=("decoreco_figures/fig6.png",)),
    "fig7": Claim(
        "Fig. 7",
        "“Solution: Clearly, the 4th reconstruction (top row) is not within the top 50 "
        "nearest neighbours to actual training images (bottom row).” — “Only when "
        "looking at the reconstructions in combination with the training images, one is "
        "able to distinguish the four high ranked images from the low-ranked”",
        "Fig. 7 caption; Sec. 4.4",
        "Fig. 6's quiz asked {quiz_draws} times (four drawn from the scaled top 10, one "
        "from below the scaled 50) of an adversary without the training set, who names "
        "the least realistic-looking of the five (lowest SSIM to the public test split) "
        "as the low-ranked one: its success rate's 95% bootstrap interval (over the two "
        "pools) lies inside the chance rate 1/5 ± {equivalence_margin}; an interval that "
        "contains 1/5 but is wider is underpowered. Measured beside, named as theirs: "
        "Haim et al.'s finding (their Fig. 4) that well-reconstructed images have small "
        "|Φ(x_i)|",
        needs=("results/tuned",),
        check=lambda e, r: verdict_rules.verdict_fig7(e["results"]["tuned"], r,
                                                      _repeats(e, "tuned")),
        images=("decoreco_figures/fig7.png", "decoreco_figures/fig7_ssim_vs_output.png")),
    "fig8": Claim(
        "Fig. 8",
        "“Lower ranked images without any resemblance to their nearest neighbour in "
        "some cases do resemble valid training set candidates.” — “without having access "
        "to the training data, an adversary cannot identify whether a reconstructed "
        "natural image is part of the training dataset”",
        "Fig. 8 caption; Sec. 4.4",
        "with the paper's ranks 10 and 50 scaled from its {paper_candidates} candidates "
        "to the run's m as in Fig. 6: the tuned run's reconstructions in the scaled top "
        "10 (by SSIM to the nearest training image) each have SSIM ≥ {ssim_level}, and "
        "a realism score without the training set (SSIM to the nearest public "
        "test-split image) does not tell them from the reconstructions ranked below the "
        "scaled 50: its AUC's 95% bootstrap interval lies inside 0.5 ± "
        "{equivalence_margin}; an interval that contains 0.5 but is wider is "
        "underpowered (the experiment could not tell). Not tested with no "
        "reconstruction below the scaled 50",
        needs=("results/tuned",),
        check=lambda e, r: verdict_rules.verdict_fig8(
            e["results"]["tuned"]["train_ssim"], e["results"]["tuned"]["public_ssim"], r),
        images=("decoreco_figures/fig8.png",)),
    "fig9": Claim(
        "Fig. 9",
        "“the majority of the resulting images reflects the initialisation rather than "
        "the real training samples. Interestingly, a single training image can be "
        "reconstructed”",
        "Sec. 4.4, Fig. 9",
        "partition start: a majority (> {majority}) of the reconstructions have their own "
        "start image as SSIM-nearest image of training set ∪ partition, as a test: the "
        "fraction's one-sided 95% bound (binomial standard error) above {majority}, "
        "underpowered when the two bounds straddle it; at least one training image "
        "recovered: a best-buddy pair (Haim et al.'s matching) with SSIM ≥ {ssim_level} "
        "(the count is reported beside the caption's one)",
        needs=("results/partition",),
        check=lambda e, r: verdict_rules.verdict_fig9(e["results"]["partition"], r,
                                                      _repeats(e, "partition")),
        images=("decoreco_figures/fig9.png", "decoreco_figures/trajectories.png")),
    "fig10": Claim(
        "Fig. 10",
        "“While the bilevel formulation on average performs better in recovering ground "
        "truth images if [x_init] is close enough to the ground truth (see fig. 10(a)), "
        "the average [L2] distance increases quicker for a higher proportion of "
        "[x_rnd] than in the DecoReco formulation (see fig. 10(b)).”",
        "Sec. 4.5, Fig. 10",
        "both attacks on one scale (min-max scaled images, Haim et al.'s view; trdr "
        "scores bilevel images raw elsewhere), on the change Δ = mean L2 to the nearest "
        "training image of the reconstructions − of their starts: at the ground-truth "
        "start (λ1 = λ2 = 1) bilevel's reconstructions recover the training images "
        "(mean SSIM to the nearest ≥ {ssim_level}: an attack that performs better in "
        "recovering must recover) and its Δ is smaller than DecoReco's; along λ1 = 1, "
        "the rise "
        "of L2 to train from the ground-truth start to the noise start (λ2 = 0) beyond "
        "the starts' own rise larger for bilevel",
        needs=("comparable",),
        check=lambda e, r: verdict_rules.verdict_fig10(e["comparable"], r),
        images=("decoreco_figures/fig10.png",)),
    "fig11": Claim(
        "Fig. 11",
        "“For [λ < 0.5], the average [L2] distance between the reconstructions and "
        "images of the distinct CIFAR partition (green) is smaller than the distance to "
        "the ground truth training images for both approaches. … In case of the bilevel "
        "formulation, the average [L2] distance becomes much smaller than for the "
        "DecoReco approach.”",
        "Sec. 4.5, Fig. 11 (a), (b): λ2 = 1, λ1 = λ",
        "both attacks on one scale (min-max), every grid point with λ2 = 1 and λ1 < "
        "{partition_side_max_lambda}: mean L2 to the nearest partition image < to the "
        "nearest training image (the crossover λ1 of the two curves is reported, of the "
        "reconstructions and of the starts); there bilevel's change Δ of the L2 to the "
        "partition from its starts smaller than DecoReco's (“much” is not quantified: "
        "both values are reported)",
        needs=("comparable",),
        check=lambda e, r: verdict_rules.verdict_fig11(e["comparable"], r),
        images=("decoreco_figures/fig11.png",)),
    "fig12": Claim(
        "Fig. 12",
        "“Increasing [λ] increases the influence of ground truth training images on the "
        "initialisation, which for both formulations of the optimisation problem, "
        "results in reconstructions converging towards ground truth training images. In "
        "case of the bilevel formulation, the average [L2] distance becomes much smaller "
        "than for the DecoReco approach.”",
        "Sec. 4.5, Fig. 12 (the paper's text says Fig. 11 (c), (d)): λ1 = 1, λ2 = λ",
        "both attacks on one scale (min-max), along λ1 = 1: “converging towards” as "
        "movement, the reconstructions nearer the training set than their starts (Δ L2 "
        "to train < 0) at every λ2 < 1; bilevel's mean Δ along the line smaller than "
        "DecoReco's (Spearman ρ(λ2, L2) is reported, not tested: the starts have ρ = −1 "
        "by construction)",
        needs=("comparable",),
        check=lambda e, r: verdict_rules.verdict_fig12(e["comparable"], r),
        images=("decoreco_figures/fig12.png",)),
    "membership": Claim(
        "Membership: with certainty",
        "“even when reconstructing natural images that could be part of the "
        "training dataset, an adversary yet cannot identify whether it is a valid "
        "or invalid training data sample with certainty”",
        "Sec. 5 (conclusion)",
        "per attack and start kind (`trdr.studies.membership`, configs/membership.py; "
        "`trdr.report.membership_rules`), among natural-looking reconstructions, each "
        "per-image score the adversary can compute without the training set: naming the "
        "images a threshold selects (the top k, k ≥ {certainty_min_selected}) as members, "
        "it can tell with certainty when the Clopper–Pearson lower bound of its precision "
        "reaches {certainty_precision} at some k (level 1 − {membership_confidence}, "
        "Bonferroni-divided over the k's and the group's scores); it cannot when the upper "
        "bound at every k lies below {certainty_precision}; otherwise underpowered (each "
        "row gives the members that, named without a non-member, could show certainty). "
        "A score that tells counts against the paper only where the start images of the "
        "same score do not tell with certainty too (the attack adds it). Controls on the "
        "mixed starts: the oracle (training images only) must be told with certainty, "
        "else the attack's passes count as underpowered. A check per attack and start "
        "kind (no score tells; every score cannot tell): a failed check: partly or not "
        "reproduced; none failed but one underpowered: underpowered; all pass: "
        "reproduced; none: uninformative. Baseline: the same rule on the start images. "
        "TPR at {membership_fpr:.0%} FPR is reported beside",
        needs=("membership",),
        check=lambda e, r: membership_rules.verdict_membership(e["membership"], r),
        images=("membership.png",),
        own_baseline=True),
    "membership_chance": Claim(
        "Membership: better than chance",
        "“without having access to the training data, an adversary cannot identify "
        "whether a reconstructed natural image is part of the training dataset”",
        "Sec. 4.4 (DecoReco; Fig. 8's discussion)",
        "per attack and start kind, among natural-looking reconstructions, one "
        "adversary's answer: the score it selects on its shadow victims (victims of the "
        "same recipe it attacked itself: the largest |mean AUC − 0.5| over them), tested "
        "once on the target victims, the victims the unit (each its own data draw of one "
        "recipe): it can tell when the t-test of the victims' own AUCs against 0.5 "
        "rejects at 1 − {membership_confidence}; it cannot tell when their 95 % t "
        "interval lies inside 0.5 ± {equivalence_margin}; otherwise underpowered (each "
        "row gives the smallest |AUC − 0.5| its test detects with power "
        "{membership_power}, from the noncentral t). The other scores describe; any that "
        "tells under Holm's correction is reported as what a stronger adversary could "
        "tell. The pooled AUC describes, it does not decide. A score that tells counts "
        "against the paper only where the attack adds it: the paired per-victim "
        "difference of the same score on the reconstructions and on that victim's own "
        "start images has its t interval above 0 (no paired baseline where the starts "
        "have too few members); on public starts, only where the reconstructions that "
        "left their start image (SSIM to it < the non-member bound) tell as well. "
        "Controls on the mixed starts: positive "
        "(training vs partition starts after the attack: must tell, else the attack's "
        "passes count as underpowered) and negative (random halves of non-members: a "
        "false alarm is reported). Checks and verdict as for the sentence of Sec. 5",
        needs=("membership",),
        check=lambda e, r: membership_rules.verdict_membership_chance(e["membership"], r),
        own_baseline=True),
}

# The claims judged on the membership experiment's measurements (membership.json), which
# `make membership` writes and the report reads where it has run.
MEMBERSHIP = tuple(name for name, record in CLAIMS.items() if "membership" in record.needs)


def claim(name: str, rules: dict = RULES) -> tuple[str, str, str]:
  """(quotation, source, rule in words with ``rules``' thresholds) of artefact ``name``."""
  record = CLAIMS[name]
  return record.quote, record.source, record.rule.format(**rules)


def with_texts(name: str, outcome: dict, rules: dict = RULES) -> dict:
  """``outcome`` (a check's dict) with artefact ``name``'s claim, source and rule, in the
  order report.json keeps: artefact, claim, source, rule, then the outcome's keys."""
  quote, source, rule = claim(name, rules)
  out = {"artefact": name, "claim": quote, "source": source, "rule": rule, **outcome}
  out["artefact"] = name
  return out


def _present(evidence: dict, path: str) -> bool:
  node = evidence
  for key in path.split("/"):
    if not isinstance(node, dict) or node.get(key) is None:
      return False
    node = node[key]
  return True


def verdicts(evidence: dict, rules: dict = RULES) -> dict:
  """Every claim's verdict whose evidence is in ``evidence`` (`trdr.report.evidence.collect`
  output, or the part of it a seed's repeats give; "membership": `trdr.studies.membership`
  output), keyed by artefact in `CLAIMS` order, each beside its baseline (the same rule on
  the start images: `trdr.report.verdicts.with_baseline`, or the check's own)."""
  baseline = verdict_rules.baseline_evidence(evidence)
  out = {}
  for name, record in CLAIMS.items():
    if not all(_present(evidence, path) for path in record.needs):
      continue
    outcome = record.check(evidence, rules)
    if not record.own_baseline:
      outcome = verdict_rules.with_baseline(outcome, record.check(baseline, rules))
    out[name] = with_texts(name, outcome, rules)
  return out
