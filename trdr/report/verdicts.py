"""The rules: pure functions that apply each of the paper's claims to the runs' numbers —
and to the start images' numbers — and the thresholds they use (`RULES`).

Each claim of the paper that the report tests is one record of `trdr.report.claims.CLAIMS`
(its quotation, source, rule in words, the evidence it needs, its images) whose check is
a function here (`verdict_fig1` … `verdict_membership`). The checks are pure: plain
records, summaries and arrays in, an outcome dict out (`verdict_of`):

  {"artefact": str, "measured": {name: number}, "checks": {name: bool},
   "verdict": one of `VERDICTS`}

to which `trdr.report.claims.verdicts` adds the claim, source and rule. A verdict is
"reproduced" when every check passes, "partly" when some do and "not reproduced" when
none does, unless the function says otherwise; "not tested" where no rule of trdr tests
the paper's sentence yet (the reason is in the rule).

**Baseline.** Every run also evaluates its start images x0 as if they were the
reconstructions (`trdr.evaluation.evaluate.START`). Every rule is applied to those
numbers too (`baseline_evidence`: an attack that returns its start) and the result added
as "baseline" (`with_baseline`). A check the reconstructions fail and the start images pass
means the attack lost what its start had: the verdict is then "not reproduced", or
"partly" when another check passes that the start images fail, with that reason. A check
that the start images pass as well says nothing about the attack: when every check the
reconstructions pass is also passed by the start images, and none is lost, the verdict is
"uninformative" if the reconstructions pass every check, and "not reproduced" if they
fail some (only the failures are informative).

**Underpowered.** A rule that claims "cannot tell" (an AUC at 0.5, Fig. 7's quiz at 1/5)
needs an interval narrow enough to say so: the 95 % interval inside chance ±
``RULES["equivalence_margin"]`` (`equivalence`). An interval that contains chance but
reaches past the margin is "underpowered": the experiment could not tell, which is not
evidence that an adversary cannot.
"""

import numpy as np
import scipy.stats

from trdr.attacks import ATTACKS
from trdr.attacks import init as inits
from trdr.evaluation import realism
from trdr.evaluation.evaluate import START, own_start_fraction

# Thresholds of the verdict rules. SSIM is dm-pix's (11 × 11 window); L2 is the Euclidean
# distance over all pixel values in [0, 1] (3072 for CIFAR-10).
RULES = {
    "no_reconstruction_max_ssim": 0.3,  # mean SSIM to the nearest training image below
    "recovered_min_ssim": 0.9,          # "recovers the training data": mean SSIM above
    "recovered_max_l2": 1.0,            # and mean L2 below
    "small_param_distance": 1e-2,       # "small" ||θ*−θ||²: the paper's largest is 6.4e-3
    "ssim_level": 0.4,                  # a training image counts as reconstructed
    "fig5_max_untuned": 3,              # "at most the first three reconstructions"
    "fig6_top": realism.QUIZ_TOP,       # "four … among the top 10"
    # Figs. 6, 7 and 8 scale the ranks 10 and 50 from the published runs' 1,000 candidates
    # to a run's m (`realism.scaled_ranks`); Fig. 7's quiz is asked this many times.
    "paper_candidates": realism.PAPER_CANDIDATES,
    "quiz_draws": 1000,
    "majority": 0.5,                    # "the majority of the resulting images"
    "partition_side_max_lambda": 0.5,   # Fig. 11: "for λ < 0.5"
    # "Cannot tell" (an AUC at chance) needs its 95 % interval inside 0.5 ± this margin;
    # an interval that contains 0.5 but is wider is "underpowered" (fixed before running).
    "equivalence_margin": 0.1,
    # Membership, two claims (`trdr.report.membership_rules`), each at this confidence,
    # Bonferroni-divided over the tests of a group (an adversary tries every score).
    "membership_confidence": 0.95,
    # (ii) better than chance (Sec. 4.4): victims are the unit. A score tells when the
    # t-test of its victims' AUCs against 0.5 rejects; it cannot tell when their 95 % t
    # interval lies inside 0.5 ± equivalence_margin. The smallest |AUC − 0.5| the test
    # detects with this power is reported beside it.
    "membership_power": 0.8,
    # (i) with certainty (Sec. 5): an adversary who names the images a threshold selects
    # (the top k, k ≥ certainty_min_selected) as members is right with precision ≥
    # certainty_precision: the Clopper–Pearson lower bound of that precision at some k.
    # It cannot tell with certainty when the upper bound at every such k lies below it.
    "certainty_precision": 0.95,
    "certainty_min_selected": 10,
    # TPR at this FPR is reported beside both (Carlini et al. 2022's convention).
    "membership_fpr": 0.01,
}

# The verdicts a rule can give.
REPRODUCED, PARTLY, NOT_REPRODUCED, UNINFORMATIVE, UNDERPOWERED, NOT_TESTED = (
    "reproduced", "partly", "not reproduced", "uninformative", "underpowered", "not tested")
VERDICTS = (REPRODUCED, PARTLY, NOT_REPRODUCED, UNINFORMATIVE, UNDERPOWERED, NOT_TESTED)


def _all_any(checks: dict) -> str:
  passed = list(checks.values())
  return REPRODUCED if all(passed) else PARTLY if any(passed) else NOT_REPRODUCED


def verdict_of(name: str, measured: dict, checks: dict, verdict: str | None = None) -> dict:
  """Artefact ``name``'s outcome (`trdr.report.verdicts`): the ``measured`` numbers, the
  ``checks`` {name: bool} and ``verdict`` (default: reproduced when every check passes,
  partly when some do, not reproduced when none does). The claim's quotation, source and
  rule in words are added by `trdr.report.claims.verdicts`."""
  return {"artefact": name, "measured": measured, "checks": checks,
          "verdict": verdict or _all_any(checks)}


def with_baseline(verdict: dict, baseline: dict) -> dict:
  """``verdict`` with the same rule's result on the start images (``baseline``) beside it.

  A check the reconstructions fail and the start images pass was lost by the attack: the
  verdict becomes "not reproduced", or "partly" when a check passes that the start images
  fail. Otherwise, when the start images pass every check the reconstructions pass, those
  passes say nothing about the attack: "reproduced" becomes "uninformative", and "partly"
  (some checks failed) "not reproduced", since only its failures are informative. The
  verdicts "underpowered" and "not tested" stand.

  Args:
    verdict, baseline: one verdict function's output on the runs' numbers and on
      `baseline_evidence`.
  Returns:
    A copy of ``verdict`` with "baseline": {"measured", "checks", "verdict"} and, where
    the baseline changed the verdict, "reason" (a sentence for the report).
  """
  checks, start = verdict["checks"], baseline["checks"]
  gained = [k for k, ok in checks.items() if ok and not start.get(k, False)]
  lost = [k for k, ok in checks.items() if not ok and start.get(k, False)]
  out = {**verdict, "baseline": {k: baseline[k] for k in ("measured", "checks", "verdict")}}
  if verdict["verdict"] in (UNDERPOWERED, NOT_TESTED):
    return out
  if lost:
    out["verdict"] = PARTLY if gained else NOT_REPRODUCED
    out["reason"] = "the attack lost what the start had: " + "; ".join(lost)
  elif verdict["verdict"] in (REPRODUCED, PARTLY) and not gained:
    failed = [k for k, ok in checks.items() if not ok]
    if failed:  # what carries information about the attack is what it fails
      out["verdict"] = NOT_REPRODUCED
      out["reason"] = ("the start images pass every check the reconstructions pass; they "
                       "fail: " + "; ".join(failed))
    else:
      out["verdict"] = UNINFORMATIVE
      out["reason"] = "the start images pass every check the reconstructions pass"
  return out


def equivalence(low: float, high: float, rules: dict, null: float = 0.5) -> str:
  """How an interval [low, high] of a rate at chance ``null`` (an AUC: 0.5; Fig. 7's quiz:
  1/5) answers "cannot tell": "chance" when it lies inside null ± ``rules[
  "equivalence_margin"]``, "underpowered" when it contains ``null`` but reaches past the
  margin, "tells" when it excludes ``null``."""
  margin = rules["equivalence_margin"]
  if not low <= null <= high:
    return "tells"
  return "chance" if null - margin <= low and high <= null + margin else "underpowered"


def baseline_evidence(evidence):
  """`trdr.report.evidence.collect`'s evidence of an attack that returns its start: every number
  with a `START` twin replaced by it (the twin kept), recursively through dicts and lists."""
  if isinstance(evidence, dict):
    out = {k: baseline_evidence(v) for k, v in evidence.items()}
    out.update({k[len(START):]: out[k] for k in evidence if k.startswith(START)})
    return out
  if isinstance(evidence, list):
    return [baseline_evidence(v) for v in evidence]
  return evidence


def pure_record(records: list[dict], init: str) -> dict:
  """The landscape.json record of a pure initialisation (a key of `inits.PURE_INITS`).

  Raises:
    ValueError: the grid lacks it.
  """
  return records[inits.pure_index(records, init)]


def _small(rules: dict) -> float:
  return rules["small_param_distance"]


def verdict_fig1(pure: dict, rules: dict = RULES) -> dict:
  """Fig. 1 from {victim: landscape.json records} of the pure-initialisation runs."""
  measured, checks = {}, {}
  limit, small = rules["no_reconstruction_max_ssim"], _small(rules)
  for v, records in pure.items():
    r = pure_record(records, "noise")
    measured |= {f"{v} SSIM to train": r["ssim_to_train"],
                 f"{v} SSIM to noise": r["ssim_to_noise"],
                 f"{v} ||θ*−θ||²": r["param_distance"]}
    checks[f"{v}: SSIM to train < {limit}"] = bool(r["ssim_to_train"] < limit)
    checks[f"{v}: SSIM to noise > to train"] = bool(r["ssim_to_noise"] > r["ssim_to_train"])
    checks[f"{v}: ||θ*−θ||² < {small:g}"] = bool(r["param_distance"] < small)
  return verdict_of("fig1", measured, checks)


def verdict_fig2(pure: dict, rules: dict = RULES) -> dict:
  """Fig. 2 from {victim: landscape.json records}."""
  measured, checks = {}, {}
  small = _small(rules)
  for v, records in pure.items():
    r = pure_record(records, "ground_truth")
    measured |= {f"{v} SSIM to train": r["ssim_to_train"], f"{v} L2 to train": r["l2_to_train"],
                 f"{v} ||θ*−θ||²": r["param_distance"]}
    checks[f"{v}: recovers the training images"] = bool(
        r["ssim_to_train"] > rules["recovered_min_ssim"]
        and r["l2_to_train"] < rules["recovered_max_l2"])
    checks[f"{v}: ||θ*−θ||² < {small:g}"] = bool(r["param_distance"] < small)
  return verdict_of("fig2", measured, checks)


def verdict_partition_init(name: str, records: list[dict], images: dict,
                           rules: dict = RULES) -> dict:
  """Fig. 3 (affine) or Fig. 4 (one-hidden) from that victim's landscape.json records and
  the per-reconstruction arrays of its partition start (`own_start_fraction`)."""
  r = pure_record(records, "partition")
  fraction, small = own_start_fraction(images), _small(rules)
  measured = {"own start nearest (fraction)": fraction, "L2 to train": r["l2_to_train"],
              "L2 to partition": r["l2_to_partition"], "SSIM to train": r["ssim_to_train"],
              "SSIM to partition": r["ssim_to_partition"], "||θ*−θ||²": r["param_distance"]}
  checks = {f"own start nearest for > {rules['majority']:g}": fraction > rules["majority"],
            f"||θ*−θ||² < {small:g}": bool(r["param_distance"] < small)}
  return verdict_of(name, measured, checks)


def verdict_table1(table: dict, rules: dict = RULES) -> dict:
  """Table 1 from table1.json (`trdr.report.artefacts.table1`)."""
  measured, checks = {}, {}
  small = _small(rules)
  for v, row in table["rows"].items():
    for column, value in row["measured"].items():
      measured[f"{v} {column}"] = value
      checks[f"{v} {column} < {small:g}"] = bool(value < small)
  return verdict_of("table1", measured, checks)



def _line(records: list[dict], fixed_key: str, free_key: str) -> list[dict]:
  """The records with ``fixed_key`` = 1, sorted by ``free_key``."""
  return sorted((r for r in records if np.isclose(r[fixed_key], 1.0)), key=lambda r: r[free_key])


def line_trend(records: list[dict], fixed_key: str, free_key: str, prefix: str = "") -> float:
  """Spearman ρ between λ and the mean L2 to train (of the start images with ``prefix``
  `START`) along the line ``fixed_key`` = 1 (NaN if the line has fewer than two points)."""
  line = _line(records, fixed_key, free_key)
  return spearman([r[free_key] for r in line], [r[prefix + "l2_to_train"] for r in line])


def _delta(r: dict, key: str) -> float:
  """Δ = mean L2 of the reconstructions − that of their start images (``key``, e.g.
  "l2_to_train"): how far the attack moved them (negative: nearer)."""
  return r[key] - r[START + key]


def _crossover(line: list[dict], prefix: str = "") -> float:
  """The λ where the mean L2 to the partition meets the one to train along ``line``
  (sorted by λ; linear between grid points): below it the partition is nearer. NaN when
  the two never meet on the line (the side that is nearer at λ = 0 stays nearer)."""
  lam = [r["lambda1"] for r in line]
  gap = [r[prefix + "l2_to_partition"] - r[prefix + "l2_to_train"] for r in line]
  for k in range(len(line) - 1):
    if gap[k] < 0 <= gap[k + 1]:
      return float(lam[k] + (lam[k + 1] - lam[k]) * -gap[k] / (gap[k + 1] - gap[k]))
  return float("nan")


def _pair(comparable: dict) -> tuple[str, str, str, str]:
  """The two attacks of Figs. 10–12 in ``comparable``'s order, the paper's attack first and
  the one it is compared with second (`trdr.report.artefacts.LANDSCAPE_ATTACKS`), and their
  titles (`trdr.attacks.protocol.AttackKind.title`).

  Raises:
    ValueError: ``comparable`` holds another number of attacks than two.
  """
  if len(comparable) != 2:
    raise ValueError(f"Figs. 10–12 compare two attacks' landscapes, got {list(comparable)}")
  ours, theirs = comparable
  title = lambda a: ATTACKS[a].title if a in ATTACKS else a
  return ours, theirs, title(ours), title(theirs)


def verdict_fig10(comparable: dict, rules: dict = RULES) -> dict:
  """Fig. 10 from {attack: records} of both landscapes on one scale (min-max,
  `trdr.report.evidence.comparable_records`), the paper's attack first and the one it is
  compared with second (`_pair`), on the change Δ from each start: at the ground-truth
  start, the first's reconstructions are reconstructions of the training images (mean SSIM
  to the nearest ≥ ``rules["ssim_level"]``: "performs better in recovering" needs it to
  recover them) and move less away from (or more towards) them than the second's; along
  λ1 = 1, towards noise, the first's L2 to train rises more beyond its starts' own rise
  than the second's."""
  ours, theirs, our_title, their_title = _pair(comparable)
  measured, delta, beyond, recovered = {}, {}, {}, {}
  for a in comparable:
    gt = pure_record(comparable[a], "ground_truth")
    delta[a] = _delta(gt, "l2_to_train")
    recovered[a] = gt["ssim_to_train"]
    line = _line(comparable[a], "lambda1", "lambda2")   # λ2 = 0 (noise) … 1 (truth)
    rise = line[0]["l2_to_train"] - line[-1]["l2_to_train"]
    start_rise = line[0][START + "l2_to_train"] - line[-1][START + "l2_to_train"]
    beyond[a] = rise - start_rise
    measured |= {f"{a}, ground-truth start: L2 to train, start → reconstruction": [
                     gt[START + "l2_to_train"], gt["l2_to_train"]],
                 f"{a}, ground-truth start: Δ L2 to train": delta[a],
                 f"{a}, ground-truth start: SSIM to train": recovered[a],
                 f"{a}: rise ground truth → noise, reconstructions, starts": [rise, start_rise]}
  level = rules["ssim_level"]
  checks = {f"{our_title} recovers the training images from the ground-truth start (SSIM ≥ "
            f"{level:g})": bool(recovered[ours] >= level),
            f"{our_title}'s Δ L2 to train at the ground-truth start < {their_title}'s": bool(
                delta[ours] < delta[theirs]),
            f"{our_title}'s rise towards noise beyond its starts' > {their_title}'s": bool(
                beyond[ours] > beyond[theirs])}
  return verdict_of("fig10", measured, checks)


def verdict_fig11(comparable: dict, rules: dict = RULES) -> dict:
  """Fig. 11 from both landscapes on one scale, along λ2 = 1 (λ1 = λ: partition → truth):
  for every λ1 below the limit, each attack's reconstructions stay nearer the partition
  than the training set (the crossover read from the curve); and the paper's attack's
  (the first, `_pair`) L2 to the partition there moves less away (or more towards it) than
  the second's, Δ from the starts."""
  ours, theirs, our_title, their_title = _pair(comparable)
  measured, checks, moved = {}, {}, {}
  limit = rules["partition_side_max_lambda"]
  for a in comparable:
    line = _line(comparable[a], "lambda2", "lambda1")
    points = [r for r in line if r["lambda1"] < limit]
    moved[a] = float(np.mean([_delta(r, "l2_to_partition") for r in points])) if points else (
        float("nan"))
    measured |= {f"{a}: crossover λ1, reconstructions, starts": [
                     _crossover(line), _crossover(line, START)],
                 f"{a}, λ1 < {limit:g}: mean Δ L2 to partition": moved[a]}
    checks[f"{a}: L2 to partition < to train for λ1 < {limit:g}"] = bool(
        points and all(r["l2_to_partition"] < r["l2_to_train"] for r in points))
  checks[f"{our_title}'s Δ L2 to partition for λ1 < {limit:g} < {their_title}'s"] = bool(
      moved[ours] < moved[theirs])
  return verdict_of("fig11", measured, checks)


def verdict_fig12(comparable: dict, rules: dict = RULES) -> dict:
  """Fig. 12 from both landscapes on one scale, along λ1 = 1 (λ2 = λ: noise → truth):
  "converging towards ground truth training images" as movement, each attack's
  reconstructions nearer the training set than their starts (Δ L2 to train < 0) at every
  λ2 < 1; and the paper's attack's (the first, `_pair`) L2 to train "much smaller" than
  the second's as the larger move, the mean Δ along the line smaller for the first.
  Spearman ρ(λ2, L2) is reported, not tested: the starts have ρ = −1 by construction."""
  ours, theirs, our_title, their_title = _pair(comparable)
  measured, checks, mean_delta = {}, {}, {}
  for a in comparable:
    line = _line(comparable[a], "lambda1", "lambda2")
    deltas = [_delta(r, "l2_to_train") for r in line]
    mean_delta[a] = float(np.mean(deltas))
    measured |= {f"{a}, λ1 = 1: Δ L2 to train per λ2": [round(d, 3) for d in deltas],
                 f"{a}, λ1 = 1: ρ(λ2, L2 to train), reconstructions, starts": [
                     line_trend(comparable[a], "lambda1", "lambda2"),
                     line_trend(comparable[a], "lambda1", "lambda2", START)]}
    checks[f"{a}: nearer the training set than its start at every λ2 < 1"] = bool(
        all(d < 0 for r, d in zip(line, deltas) if r["lambda2"] < 1.0))
  checks[f"{our_title}'s mean Δ L2 to train along λ1 = 1 < {their_title}'s"] = bool(
      mean_delta[ours] < mean_delta[theirs])
  return verdict_of("fig12", measured, checks)


# ------------------------------------------------ DecoReco: Sec. 4.4, Figs. 5–9


def _count(summary: dict, level: float) -> int:
  return int(summary["reconstructed"][f"ssim_ge_{level:g}"])


def verdict_fig5(untuned: dict, tuned: dict, rules: dict = RULES,
                 untuned_images: dict | None = None) -> dict:
  """Fig. 5 from the summary.json of the untuned (σ = 1) and the tuned DecoReco runs and,
  where given, the untuned run's per-reconstruction SSIMs (``untuned_images``:
  "train_ssim" and "public_ssim", float[m], to the nearest training and public image):
  the caption's "resemble natural images" counted as SSIM ≥ the level to either."""
  level, most = rules["ssim_level"], rules["fig5_max_untuned"]
  u, t = _count(untuned, level), _count(tuned, level)
  buddies = lambda summary: int(summary["reconstructed_best_buddies"][f"ssim_ge_{level:g}"])
  measured = {"untuned: reconstructed": u, "tuned: reconstructed": t,
              # Haim et al.'s matching, as context: best-buddy pairs (NCC) at the level.
              "untuned: best buddies": buddies(untuned), "tuned: best buddies": buddies(tuned),
              "n_train": tuned["n_train"]}
  checks = {f"untuned ≤ {most}": u <= most, "untuned < tuned": u < t}
  if untuned_images is not None:
    nearest = np.maximum(untuned_images["train_ssim"], untuned_images["public_ssim"])
    natural = int(np.sum(nearest >= level))
    measured["untuned: resembling natural images"] = natural
    checks[f"untuned natural ≤ {most}"] = natural <= most
  return verdict_of("fig5", measured, checks)


def quiz_frame(train_ssim, train_index, rules) -> tuple[int, int, dict, bool]:
  """Figs. 6 and 7's common ground (their verdicts and figures): the paper's "top 10" and
  "top 50" scaled from its candidates to this run's m (`trdr.evaluation.realism.scaled_ranks`),
  the numbers both verdicts report, and whether any distinct training image ranks below
  the scaled 50 (the quiz is testable).

  Returns:
    (top rank, low rank, measured dict, testable).
  """
  top_rank, low_rank = realism.scaled_ranks(int(np.size(train_ssim)), rules["paper_candidates"])
  distinct = realism.distinct_order(train_ssim, train_index).size
  measured = {"reconstructions": int(np.size(train_ssim)),
              "distinct nearest training images": int(distinct),
              "the paper's top 10 and top 50, scaled to these candidates": [top_rank, low_rank]}
  return top_rank, low_rank, measured, distinct > max(low_rank, rules["fig6_top"])


def _quiz(train_ssim, train_index, public_ssim, rules):
  """Fig. 6's quiz (`trdr.evaluation.realism.quiz`, ranks over distinct training images),
  its measured numbers and the scaled top 10; the quiz is None when too few distinct
  training images rank below the scaled "top 50"."""
  top_rank, low_rank, measured, testable = quiz_frame(train_ssim, train_index, rules)
  if not testable:
    return None, measured, top_rank
  q = realism.quiz(train_ssim, train_index, public_ssim, top=rules["fig6_top"],
                   low_rank=low_rank)
  ssim, real = np.asarray(train_ssim)[q.index], np.asarray(public_ssim)[q.index]
  return q, measured | {
      "quiz ranks (over distinct training images)": [int(r) for r in q.rank],
      "quiz nearest training images": [int(i) for i in np.asarray(train_index)[q.index]],
      "quiz SSIM to nearest training image": [round(float(x), 3) for x in ssim],
      "quiz realism (SSIM to nearest public image)": [round(float(x), 3) for x in real]}, top_rank


def verdict_fig6(train_ssim, train_index, public_ssim, rules: dict = RULES) -> dict:
  """Fig. 6 from the tuned run's per-reconstruction SSIM to the nearest training image
  float[m], that image's index int[m], and the SSIM to the nearest public (test-split)
  image float[m]: the caption's "four of these reconstructions are among the top 10
  nearest neighbours to actual training images" as four distinct training images, each
  reconstructed (SSIM ≥ the level), in the scaled top 10; "one is not even in the top 50"
  is the quiz's construction (not tested when no reconstruction ranks that low)."""
  q, measured, top_rank = _quiz(train_ssim, train_index, public_ssim, rules)
  if q is None:
    return verdict_of("fig6", measured, {}, NOT_TESTED)
  ssim = np.delete(np.asarray(train_ssim)[q.index], q.odd)
  ranked = np.delete(q.rank, q.odd)
  four, level = rules["fig6_top"], rules["ssim_level"]
  checks = {f"{four} distinct training images in the top {top_rank}, each SSIM ≥ {level}":
            bool(ssim.size == four and np.all(ranked <= top_rank) and np.all(ssim >= level))}
  return verdict_of("fig6", measured, checks)


def spearman(x, y) -> float:
  """Spearman rank correlation of float[n] x and y (average ranks for ties); NaN when
  either is constant or n < 2."""
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  if x.size < 2:
    return float("nan")
  if np.all(x == x[0]) or np.all(y == y[0]):  # undefined (scipy would warn and give NaN)
    return float("nan")
  return float(scipy.stats.spearmanr(x, y).statistic)


# Fig. 7's adversaries: name -> (the results key of its score, in words). Each names the
# lowest-scoring of the five as the low-ranked one.
QUIZ_ADVERSARIES = {
    "realism": ("public_ssim", "the least realistic-looking (SSIM to the nearest public "
                               "image)"),
    "λ_i": ("final_lambdas", "the smallest KKT multiplier λ_i (DecoReco's own membership "
                             "score, the strongest of the membership experiment)"),
}


def verdict_fig7(tuned: dict, rules: dict = RULES, seeds=()) -> dict:
  """Fig. 7 from the tuned run: "Only when looking at the reconstructions in combination
  with the training images, one is able to distinguish the four high ranked images from
  the low-ranked": an adversary without the training set, shown four reconstructions from
  the scaled top 10 and one below the scaled top 50 (`realism.pooled_quiz`, many draws),
  names the lowest-scoring of the five as the low-ranked one, under each score of
  `QUIZ_ADVERSARIES` it has (realism; DecoReco's λ_i where the run saved them), and
  succeeds at the chance rate 1/5: each success rate's 95 % interval inside 1/5 ± the
  equivalence margin; "underpowered" when one contains 1/5 but is wider and none tells.
  The quiz pools the tuned run's pools with those of its repeats on other seeds
  (``seeds``: at m = 200 one run's top pool is four fixed images, which no interval over
  its pools can decide).

  Args:
    tuned: the tuned run's arrays: train_ssim float[m] (SSIM to the nearest training
      image), train_index int[m], public_ssim float[m], final_lambdas float[m] (optional;
      NaN: no λ adversary, as for the start images), best_ssim_per_train float[n],
      phi_train float[n] (Haim et al.'s SSIM-vs-|Φ| finding, measured beside).
    seeds: the same arrays of the tuned run's repeats.
  """
  best = np.asarray(tuned["best_ssim_per_train"], np.float64)
  rho = spearman(best, np.abs(np.asarray(tuned["phi_train"], np.float64)))
  top_rank, low_rank, measured, testable = quiz_frame(tuned["train_ssim"],
                                                      tuned["train_index"], rules)
  measured["ρ(best SSIM, |Φ|) (Haim et al.)"] = rho
  if not testable:
    return verdict_of("fig7", measured, {}, NOT_TESTED)
  runs = [tuned] + [s for s in seeds if quiz_frame(s["train_ssim"], s["train_index"], rules)[3]]
  measured["runs pooled"] = len(runs)
  checks, answers = {}, []
  margin = rules["equivalence_margin"]
  for name, (key, _) in QUIZ_ADVERSARIES.items():
    if any(key not in r or not np.all(np.isfinite(np.asarray(r[key], np.float64)))
           for r in runs):
      continue
    pools = [realism.quiz_pools(r["train_ssim"], r["train_index"], r[key], top_rank=top_rank,
                                low_rank=low_rank, top=rules["fig6_top"]) for r in runs]
    t = realism.pooled_quiz(pools, top=rules["fig6_top"], draws=rules["quiz_draws"])
    answer = equivalence(t["low"], t["high"], rules, null=t["chance"])
    answers.append(answer)
    measured |= {f"{name} adversary's success rate": t["success"],
                 f"{name}: 95% interval": [t["low"], t["high"]],
                 f"{name}: pools, top and low-ranked": [t["n_top"], t["n_low"]]}
    if answer != "underpowered":
      checks[f"{name}: success rate's interval inside {t['chance']:g} ± {margin:g}"] = (
          answer == "chance")
  measured |= {"chance": 1 / (rules["fig6_top"] + 1), "draws": rules["quiz_draws"]}
  underpowered = "underpowered" in answers and "tells" not in answers
  return verdict_of("fig7", measured, checks, UNDERPOWERED if underpowered else None)


def verdict_fig8(train_ssim, public_ssim, rules: dict = RULES) -> dict:
  """Fig. 8 from the tuned run's per-reconstruction SSIM to the nearest training image and
  to the nearest public image, float[m] each: does the realism score tell top-ranked from
  low-ranked reconstructions (`trdr.evaluation.realism.top_vs_low`)? The ranks are the
  paper's 10 and 50 scaled to the run's m, as for Figs. 6 and 7."""
  ssim = np.asarray(train_ssim, np.float64)
  top_rank, low_rank = realism.scaled_ranks(int(ssim.size), rules["paper_candidates"])
  level = rules["ssim_level"]
  measured = {"reconstructions": int(ssim.size),
              "the paper's top 10 and top 50, scaled to these candidates": [top_rank, low_rank],
              f"reconstructions with SSIM ≥ {level}": int(np.sum(ssim >= level))}
  if ssim.size <= low_rank:
    return verdict_of("fig8", measured, {}, NOT_TESTED)
  t = realism.top_vs_low(ssim, public_ssim, top_rank=top_rank, low_rank=low_rank)
  answer = equivalence(t["low"], t["high"], rules)
  measured.update({"realism AUC, top vs low-ranked": t["auc"],
                   "95% interval": [t["low"], t["high"]],
                   "interval half-width": (t["high"] - t["low"]) / 2, "top": t["n_top"],
                   "low-ranked": t["n_low"]})
  top = ssim[realism.ranks(ssim) <= top_rank]
  margin = rules["equivalence_margin"]
  checks = {f"the scaled top {top_rank} each SSIM ≥ {level}": bool(np.all(top >= level)),
            f"the realism AUC's interval inside 0.5 ± {margin:g}": answer == "chance"}
  return verdict_of("fig8", measured, checks,
                    UNDERPOWERED if answer == "underpowered" else None)


def _pooled(runs: list[dict]) -> dict:
  """Several runs' arrays (the same keys) concatenated: each run's reconstructions and
  training images in turn."""
  return {k: np.concatenate([np.ravel(np.asarray(r[k])) for r in runs]) for k in runs[0]
          if all(k in r for r in runs)}


def verdict_fig9(results: dict, rules: dict = RULES, seeds=()) -> dict:
  """Fig. 9 from the partition run's results (per reconstruction: train_l2, partition_l2,
  train_ssim, partition_ssim, partition_index, start_partition_index, float/int[m]; per
  training image best_ssim_per_train and best_buddy_ssim_per_train float[n]), pooled
  with its repeats on other seeds (``seeds``, the same arrays: each reconstruction
  compared with its own run's sets, the training images recovered summed), so that the
  majority can be decided (one :cpu run's 100 reconstructions leave ± 0.08)."""
  if seeds:
    results = _pooled([results, *seeds])
  fraction = own_start_fraction(results)
  level = rules["ssim_level"]
  buddies = np.nan_to_num(np.asarray(results["best_buddy_ssim_per_train"], np.float64),
                          nan=-np.inf)
  count = int(np.sum(buddies >= level))
  measured = {"runs pooled": 1 + len(seeds), "own start nearest (fraction)": fraction,
              "training images recovered (best buddies)": count,
              "training images with a reconstruction ≥ level": int(np.sum(
                  np.asarray(results["best_ssim_per_train"]) >= level)),
              **{k: float(np.mean(results[k]))
                 for k in ("train_l2", "partition_l2", "train_ssim", "partition_ssim")}}
  # The majority as a test: the fraction's one-sided 95 % bound (normal approximation,
  # binomial standard error over the m reconstructions) on the side of 0.5 it lies.
  m = int(np.size(results["partition_index"]))
  se = float(np.sqrt(fraction * (1 - fraction) / m)) if m else float("nan")
  low, high = fraction - 1.645 * se, fraction + 1.645 * se
  measured |= {"own start nearest: standard error": se,
               "own start nearest: one-sided 95% bounds": [low, high],
               "training images recovered, the caption's": 1}
  majority = rules["majority"]
  checks = {f"own start nearest for > {majority:g} (95% lower bound)": bool(low > majority),
            "≥ 1 training image recovered (best buddies)": count >= 1}
  underpowered = low <= majority <= high
  return verdict_of("fig9", measured, checks, UNDERPOWERED if underpowered else None)
