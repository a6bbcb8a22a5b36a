"""Verdicts: each paper artefact's claim, quoted, the rule that tests it, and a pure
function that applies the rule to the runs' numbers — and to the start images' numbers.

`trdr.report.claims.CLAIMS` holds, per artefact, the paper's sentence (quoted), where it stands
and the rule in words; `trdr.report.claims.RULES` the thresholds. The verdict functions
(`verdict_fig1` … `verdict_membership`) are pure: plain records, summaries and arrays in,
a verdict dict out:

  {"artefact": str, "claim": str, "source": str, "rule": str,
   "measured": {name: number}, "checks": {name: bool}, "verdict": one of `VERDICTS`}

A verdict is "reproduced" when every check passes, "partly" when some do and "not
reproduced" when none does, unless the function says otherwise; "not tested" where no
rule of trdr tests the paper's sentence yet (the reason is in the rule).

**Baseline.** Every run also evaluates its start images x0 as if they were the
reconstructions (`trdr.evaluation.evaluate.START`). `verdicts` applies every rule to those
numbers too (`baseline_evidence`: an attack that returns its start) and adds the result as
"baseline" (`with_baseline`). A check the reconstructions fail and the start images pass
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

from trdr.attacks import init as inits
from trdr.evaluation import realism
from trdr.evaluation.evaluate import START, own_start_fraction
from trdr.report.claims import RULES, claim

VICTIMS = ("affine", "one_hidden")
ATTACKS = ("bilevel", "decoreco")

# The verdicts a rule can give.
REPRODUCED, PARTLY, NOT_REPRODUCED, UNINFORMATIVE, UNDERPOWERED, NOT_TESTED = (
    "reproduced", "partly", "not reproduced", "uninformative", "underpowered", "not tested")
VERDICTS = (REPRODUCED, PARTLY, NOT_REPRODUCED, UNINFORMATIVE, UNDERPOWERED, NOT_TESTED)


def _all_any(checks: dict) -> str:
  passed = list(checks.values())
  return REPRODUCED if all(passed) else PARTLY if any(passed) else NOT_REPRODUCED


def verdict_of(name: str, measured: dict, checks: dict, verdict: str | None = None,
               rules: dict | None = None) -> dict:
  """Artefact ``name``'s verdict dict (`trdr.report.verdicts`): its claim, source and rule, the
  ``measured`` numbers, the ``checks`` {name: bool} and ``verdict`` (default: reproduced
  when every check passes, partly when some do, not reproduced when none does)."""
  quote, source, rule = claim(name, rules or RULES)
  return {"artefact": name, "claim": quote, "source": source, "rule": rule,
          "measured": measured, "checks": checks, "verdict": verdict or _all_any(checks)}


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
  return verdict_of("fig1", measured, checks, rules=rules)


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
  return verdict_of("fig2", measured, checks, rules=rules)


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
  return verdict_of(name, measured, checks, rules=rules)


def verdict_table1(table: dict, rules: dict = RULES) -> dict:
  """Table 1 from table1.json (`trdr.report.artefacts.table1`)."""
  measured, checks = {}, {}
  small = _small(rules)
  for v, row in table["rows"].items():
    for column, value in row["measured"].items():
      measured[f"{v} {column}"] = value
      checks[f"{v} {column} < {small:g}"] = bool(value < small)
  return verdict_of("table1", measured, checks, rules=rules)



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


def verdict_fig10(comparable: dict, rules: dict = RULES) -> dict:
  """Fig. 10 from {attack: records} of both landscapes on one scale (min-max,
  `trdr.report.evidence.comparable_records`), on the change Δ from each start: at the
  ground-truth start, bilevel's reconstructions are reconstructions of the training images
  (mean SSIM to the nearest ≥ ``rules["ssim_level"]``: "performs better in recovering"
  needs it to recover them) and move less away from (or more towards) them than
  DecoReco's; along λ1 = 1, towards noise, bilevel's L2 to train rises more beyond its
  starts' own rise than DecoReco's."""
  measured, delta, beyond, recovered = {}, {}, {}, {}
  for a in ATTACKS:
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
  checks = {f"bilevel recovers the training images from the ground-truth start (SSIM ≥ "
            f"{level:g})": bool(recovered["bilevel"] >= level),
            "bilevel's Δ L2 to train at the ground-truth start < DecoReco's": bool(
                delta["bilevel"] < delta["decoreco"]),
            "bilevel's rise towards noise beyond its starts' > DecoReco's": bool(
                beyond["bilevel"] > beyond["decoreco"])}
  return verdict_of("fig10", measured, checks, rules=rules)


def verdict_fig11(comparable: dict, rules: dict = RULES) -> dict:
  """Fig. 11 from both landscapes on one scale, along λ2 = 1 (λ1 = λ: partition → truth):
  for every λ1 below the limit, each attack's reconstructions stay nearer the partition
  than the training set (the crossover read from the curve); and bilevel's L2 to the
  partition there moves less away (or more towards it) than DecoReco's, Δ from the starts."""
  measured, checks, moved = {}, {}, {}
  limit = rules["partition_side_max_lambda"]
  for a in ATTACKS:
    line = _line(comparable[a], "lambda2", "lambda1")
    points = [r for r in line if r["lambda1"] < limit]
    moved[a] = float(np.mean([_delta(r, "l2_to_partition") for r in points])) if points else (
        float("nan"))
    measured |= {f"{a}: crossover λ1, reconstructions, starts": [
                     _crossover(line), _crossover(line, START)],
                 f"{a}, λ1 < {limit:g}: mean Δ L2 to partition": moved[a]}
    checks[f"{a}: L2 to partition < to train for λ1 < {limit:g}"] = bool(
        points and all(r["l2_to_partition"] < r["l2_to_train"] for r in points))
  checks[f"bilevel's Δ L2 to partition for λ1 < {limit:g} < DecoReco's"] = bool(
      moved["bilevel"] < moved["decoreco"])
  return verdict_of("fig11", measured, checks, rules=rules)


def verdict_fig12(comparable: dict, rules: dict = RULES) -> dict:
  """Fig. 12 from both landscapes on one scale, along λ1 = 1 (λ2 = λ: noise → truth):
  "converging towards ground truth training images" as movement, each attack's
  reconstructions nearer the training set than their starts (Δ L2 to train < 0) at every
  λ2 < 1; and bilevel's L2 to train "much smaller" than DecoReco's as the larger move,
  the mean Δ along the line smaller for bilevel. Spearman ρ(λ2, L2) is reported, not
  tested: the starts have ρ = −1 by construction."""
  measured, checks, mean_delta = {}, {}, {}
  for a in ATTACKS:
    line = _line(comparable[a], "lambda1", "lambda2")
    deltas = [_delta(r, "l2_to_train") for r in line]
    mean_delta[a] = float(np.mean(deltas))
    measured |= {f"{a}, λ1 = 1: Δ L2 to train per λ2": [round(d, 3) for d in deltas],
                 f"{a}, λ1 = 1: ρ(λ2, L2 to train), reconstructions, starts": [
                     line_trend(comparable[a], "lambda1", "lambda2"),
                     line_trend(comparable[a], "lambda1", "lambda2", START)]}
    checks[f"{a}: nearer the training set than its start at every λ2 < 1"] = bool(
        all(d < 0 for r, d in zip(line, deltas) if r["lambda2"] < 1.0))
  checks["bilevel's mean Δ L2 to train along λ1 = 1 < DecoReco's"] = bool(
      mean_delta["bilevel"] < mean_delta["decoreco"])
  return verdict_of("fig12", measured, checks, rules=rules)


CAN_TELL, CANNOT_TELL = "can tell", "cannot tell"


def membership_answer(row: dict, rules: dict = RULES, scores: int = 1) -> str:
  """What one membership score answers (`CLAIMS["membership"]`'s rule): "can tell",
  "cannot tell" or "underpowered".

  "Can tell": the AUC's or the low-FPR TPR's p-value against a score that knows nothing
  (`trdr.evaluation.roc.summary`: Mann–Whitney, Fisher) is below α = 1 − confidence,
  Bonferroni-divided over the 2 · ``scores`` tests of its group (an adversary tries every
  score, so a group of random scores must not "tell" more often than α). "Cannot tell":
  the AUC's CI inside 0.5 ± the equivalence margin (an equivalence test: the CI need not
  contain 0.5, a difference is the p-value's to find), at least 10 / FPR
  non-members (with fewer the threshold's FPR is not resolved: "TPR at 1 % FPR" over 50
  non-members is the TPR at FPR 0), and the TPR's Clopper–Pearson upper bound over the
  members at most ``membership_max_tpr``. Anything else: "underpowered". A row measured
  over clusters (victims: ``row["clusters"]``, `trdr.evaluation.roc.summary`) has its CI
  over victims, and with fewer than two victims no CI that could say "cannot tell".

  Args:
    row: `trdr.evaluation.roc.summary` of the score (members, non_members, auc, ci, p_auc,
      tpr_at_fpr, p_tpr).
    scores: the number of scores tested in its group.
  """
  fpr = f"{rules['membership_fpr']:g}"
  alpha = (1.0 - rules["membership_confidence"]) / (2 * scores)
  if row["p_auc"] < alpha or row["p_tpr"][fpr] < alpha:
    return CAN_TELL
  members = row["members"]
  high = scipy.stats.binomtest(int(round(row["tpr_at_fpr"][fpr] * members)),
                               members).proportion_ci(rules["membership_confidence"]).high
  resolved = row["non_members"] >= 10 / rules["membership_fpr"]
  low_auc, high_auc, margin = *row["ci"], rules["equivalence_margin"]
  # Not tested as a difference; a NaN interval (fewer than two victims) is never inside.
  inside = 0.5 - margin <= low_auc and high_auc <= 0.5 + margin
  return CANNOT_TELL if (inside and resolved and high <= rules["membership_max_tpr"]
                         ) else UNDERPOWERED


def _rule_groups(measured: dict, stage: str) -> dict:
  """{(attack, start kind): rows on ``stage``} under the rule's labels, those of the first
  window (`configs/membership.py`'s label_windows); rows under another window are
  reported, not judged."""
  window = measured.get("labels", {}).get("windows", [None])[0]
  groups = {}
  for row in measured["rows"]:
    if row["stage"] == stage and row.get("window") == window:
      groups.setdefault((row["attack"], row["kind"]), []).append(row)
  return groups


def _membership_checks(measured: dict, stage: str, rules: dict) -> tuple[dict, dict, list]:
  """Per (attack, start kind) on ``stage``: the most separating informative score, each
  score's answer (`membership_answer`), and the check "cannot tell" (no score tells,
  every score cannot tell); a group with no score that tells but one underpowered gets
  no check and is listed as underpowered."""
  fpr = f"{rules['membership_fpr']:g}"
  numbers, checks, underpowered = {}, {}, []
  groups = {}
  for (attack, kind), rows in _rule_groups(measured, stage).items():
    if informative := [r for r in rows if r["informative"]]:
      groups[f"{attack}, {kind}"] = informative
  for name, rows in groups.items():
    answers = [membership_answer(r, rules, scores=len(rows)) for r in rows]
    best = max(rows, key=lambda r: r["auc"])
    numbers[f"{name}: max AUC ({best['score']})"] = best["auc"]
    numbers[f"{name}: its TPR at {fpr} FPR"] = best["tpr_at_fpr"][fpr]
    numbers[f"{name}: answers"] = {
        r["score"]: f"{a} (AUC {r['auc']:.3f}"
                    + (f", per victim {r['victim_mean']:.3f} over {r['clusters']} victims"
                       if "clusters" in r else "")
                    + f" [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}], half-width "
                    f"{(r['ci'][1] - r['ci'][0]) / 2:.3f}; {r['members']} members, "
                    f"{r['non_members']} non-members)" for r, a in zip(rows, answers)}
    if CAN_TELL in answers:
      checks[f"{name}: cannot tell"] = False
    elif all(a == CANNOT_TELL for a in answers):
      checks[f"{name}: cannot tell"] = True
    else:
      underpowered.append(name)
  return numbers, checks, underpowered


def _in_words(row: dict, answer: str, rules: dict) -> str:
  """One score's row (`trdr.evaluation.roc.summary` fields) as the clause of a sentence."""
  fpr = f"{rules['membership_fpr']:g}"
  low, high = row["ci"]
  over = (f"per victim {row['victim_mean']:.3f} [{low:.3f}, {high:.3f}] over "
          f"{row['clusters']} victims" if "clusters" in row else f"[{low:.3f}, {high:.3f}]")
  text = (f"{row['score']}: AUC {row['auc']:.3f}, {over}; {row['members']} members, "
          f"{row['non_members']} non-members")
  if answer == CAN_TELL:
    text += f"; p {min(row['p_auc'], row['p_tpr'][fpr]):.1e}"
  return text


def membership_sentences(measured: dict, rules: dict = RULES) -> list[str]:
  """One plain sentence per attack × start kind: what an adversary's best score answers
  on the natural-looking reconstructions (`membership_answer`, the rule's label window),
  with the deciding number, and the same on their start images (the baseline).

  "Can tell": the score with the smallest p-value. "Cannot tell": the score farthest from
  chance. "Underpowered": what stands in the way, the widest interval's half-width against
  the equivalence margin and the non-members against the 10 / FPR that TPR at that FPR
  needs. A group without enough natural-looking members or non-members says so."""
  fpr = rules["membership_fpr"]
  after, start = _rule_groups(measured, "reconstruction"), _rule_groups(measured, "start")

  def clause(rows: list[dict]) -> str:
    if not any(r["informative"] for r in rows):
      most = max(rows, key=lambda r: min(r["members"], r["non_members"]), default=None)
      return ("too few natural-looking members or non-members to measure" + (
          f" ({most['members']} members, {most['non_members']} non-members; "
          f"{measured.get('min_per_class', '?')} of each needed)" if most else ""))
    rows = [r for r in rows if r["informative"]]
    answers = [membership_answer(r, rules, scores=len(rows)) for r in rows]
    if CAN_TELL in answers:
      told = [r for r, a in zip(rows, answers) if a == CAN_TELL]
      best = min(told, key=lambda r: min(r["p_auc"], r["p_tpr"][f"{fpr:g}"]))
      return f"an adversary can tell ({_in_words(best, CAN_TELL, rules)})"
    if all(a == CANNOT_TELL for a in answers):
      far = max(rows, key=lambda r: abs(r["auc"] - 0.5))
      return ("an adversary cannot tell (the score farthest from chance: "
              f"{_in_words(far, CANNOT_TELL, rules)})")
    wide = max(rows, key=lambda r: r["ci"][1] - r["ci"][0])
    return (f"underpowered: no score tells, but the widest interval's half-width is "
            f"{(wide['ci'][1] - wide['ci'][0]) / 2:.3f} against the margin "
            f"{rules['equivalence_margin']:g}, with {max(r['non_members'] for r in rows)} "
            f"non-members where TPR at {fpr:.0%} FPR needs {10 / fpr:.0f} "
            f"({_in_words(wide, UNDERPOWERED, rules)})")

  return [f"{attack}, {kind} starts: after the attack, {clause(after.get((attack, kind), []))}"
          f"; on the start images, {clause(start.get((attack, kind), []))}."
          for attack, kind in dict.fromkeys([*after, *start])]


def membership_controls(measured: dict, rules: dict = RULES) -> dict:
  """Per attack, what its controls (`trdr.report.membership.measure`'s "controls") say:
  {"positive": True when a score tells training-image starts from partition-image starts
  after the attack (the experiment can detect membership), False when none does, None when
  no score had enough images; "negative": True when a score tells two random halves of
  non-members apart (a false alarm), False, or None}."""
  out = {}
  for row in measured.get("controls", []):
    out.setdefault(row["attack"], {}).setdefault(row["control"], []).append(row)
  answers = {}
  for attack, controls in out.items():
    answers[attack] = {}
    for control in ("positive", "negative"):
      rows = [r for r in controls.get(control, []) if r["informative"]]
      answers[attack][control] = (None if not rows else any(
          membership_answer(r, rules, scores=len(rows)) == CAN_TELL for r in rows))
  return answers


def verdict_membership(measured: dict, rules: dict = RULES) -> dict:
  """The membership verdict from `trdr.report.membership.measure` output, beside its
  baseline (the same rule on the start images), `with_baseline`: a failed check (some
  score tells) decides; without one, an underpowered group makes it "underpowered". An
  attack whose positive control detects nothing (`membership_controls`) cannot support
  "cannot tell": its passing checks count as underpowered."""
  results = []
  controls = membership_controls(measured, rules)
  for stage in ("reconstruction", "start"):
    numbers, checks, underpowered = _membership_checks(measured, stage, rules)
    for attack, c in controls.items():
      numbers[f"{attack}: positive control detects (training vs partition starts)"] = c[
          "positive"]
      numbers[f"{attack}: negative control false alarm (random halves of non-members)"] = c[
          "negative"]
      if c["positive"] is not True:
        for name in [k for k, ok in checks.items() if ok and k.startswith(f"{attack}, ")]:
          del checks[name]
          underpowered.append(f"{name.removesuffix(': cannot tell')} (positive control "
                              "detects nothing)")
    verdict = None
    if not checks and not underpowered:
      verdict = UNINFORMATIVE
    elif underpowered and all(checks.values()):
      verdict = UNDERPOWERED
    if underpowered:
      numbers["underpowered (no score tells; not every score can say it cannot)"] = underpowered
    results.append(verdict_of("membership", numbers, checks, verdict, rules))
  return {**with_baseline(*results), "sentences": membership_sentences(measured, rules)}


def membership_not_run(rules: dict = RULES) -> dict:
  """The membership verdict of a report whose work directory holds no membership.json:
  "not tested", with the reason (the experiment is `make membership`'s, not the report's)."""
  return {**verdict_of("membership", {}, {}, NOT_TESTED, rules),
          "reason": "not run: `make membership` (experiments/membership.py, about an hour at "
                    ":cpu) has not written membership/membership.json in this work "
                    "directory; `make figures` after it includes its verdict"}


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
  return verdict_of("fig5", measured, checks, rules=rules)


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
    return verdict_of("fig6", measured, {}, NOT_TESTED, rules)
  ssim = np.delete(np.asarray(train_ssim)[q.index], q.odd)
  ranked = np.delete(q.rank, q.odd)
  four, level = rules["fig6_top"], rules["ssim_level"]
  checks = {f"{four} distinct training images in the top {top_rank}, each SSIM ≥ {level}":
            bool(ssim.size == four and np.all(ranked <= top_rank) and np.all(ssim >= level))}
  return verdict_of("fig6", measured, checks, rules=rules)


def spearman(x, y) -> float:
  """Spearman rank correlation of float[n] x and y (average ranks for ties); NaN when
  either is constant or n < 2."""
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  if x.size < 2:
    return float("nan")
  if np.all(x == x[0]) or np.all(y == y[0]):  # undefined (scipy would warn and give NaN)
    return float("nan")
  return float(scipy.stats.spearmanr(x, y).statistic)


def verdict_fig7(train_ssim, train_index, public_ssim, best_ssim_per_train, phi_train,
                 rules: dict = RULES) -> dict:
  """Fig. 7 from the tuned run: "Only when looking at the reconstructions in combination
  with the training images, one is able to distinguish the four high ranked images from
  the low-ranked": an adversary without the training set, shown four reconstructions from
  the scaled top 10 and one below the scaled top 50 (`realism.repeated_quiz`, many draws),
  who names the least realistic-looking (SSIM to the nearest public image) as the
  low-ranked one, succeeds at the chance rate 1/5: the success rate's 95 % interval inside
  1/5 ± the equivalence margin; "underpowered" when it contains 1/5 but is wider. Measured
  beside: the arrays SSIM to the nearest training / public image float[m], the nearest
  training image's index int[m]; as context, Haim et al.'s SSIM-vs-|Φ| finding (best SSIM
  per training image float[n], the victim's output Φ(x_i) float[n])."""
  best = np.asarray(best_ssim_per_train, np.float64)
  rho = spearman(best, np.abs(np.asarray(phi_train, np.float64)))
  top_rank, low_rank, measured, testable = quiz_frame(train_ssim, train_index, rules)
  measured["ρ(best SSIM, |Φ|) (Haim et al.)"] = rho
  if not testable:
    return verdict_of("fig7", measured, {}, NOT_TESTED, rules)
  t = realism.repeated_quiz(train_ssim, train_index, public_ssim, top_rank=top_rank,
                            low_rank=low_rank, top=rules["fig6_top"],
                            draws=rules["quiz_draws"])
  answer = equivalence(t["low"], t["high"], rules, null=t["chance"])
  measured |= {"adversary's success rate (least realistic = low-ranked)": t["success"],
               "95% interval": [t["low"], t["high"]], "chance": t["chance"],
               "pools: top, low-ranked": [t["n_top"], t["n_low"]], "draws": t["draws"]}
  margin = rules["equivalence_margin"]
  checks = {f"success rate's interval inside {t['chance']:g} ± {margin:g}": answer == "chance"}
  return verdict_of("fig7", measured, checks, UNDERPOWERED if answer == "underpowered" else None,
                    rules=rules)


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
    return verdict_of("fig8", measured, {}, NOT_TESTED, rules)
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
  return verdict_of("fig8", measured, checks, UNDERPOWERED if answer == "underpowered" else None,
                    rules=rules)


def verdict_fig9(results: dict, rules: dict = RULES) -> dict:
  """Fig. 9 from the partition run's results (per reconstruction: train_l2, partition_l2,
  train_ssim, partition_ssim, partition_index, start_partition_index, float/int[m]; per
  training image best_ssim_per_train and best_buddy_ssim_per_train float[n])."""
  fraction = own_start_fraction(results)
  level = rules["ssim_level"]
  buddies = np.nan_to_num(np.asarray(results["best_buddy_ssim_per_train"], np.float64),
                          nan=-np.inf)
  count = int(np.sum(buddies >= level))
  measured = {"own start nearest (fraction)": fraction,
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
  return verdict_of("fig9", measured, checks, UNDERPOWERED if underpowered else None,
                    rules=rules)


def _verdicts_of(evidence: dict, rules: dict) -> dict:
  """Every verdict whose runs are in ``evidence`` (a seed's repeats hold only some)."""
  pure, images = evidence.get("pure", {}), evidence.get("partition_images", {})
  s, res = evidence.get("summaries", {}), evidence.get("results", {})
  tuned, same = res.get("tuned"), evidence.get("comparable")
  out = {}
  if set(VICTIMS) <= set(pure):
    out.update(fig1=verdict_fig1(pure, rules), fig2=verdict_fig2(pure, rules),
               fig3=verdict_partition_init("fig3", pure["affine"], images["affine"], rules),
               fig4=verdict_partition_init("fig4", pure["one_hidden"], images["one_hidden"],
                                           rules))
  if "table1" in evidence:
    out["table1"] = verdict_table1(evidence["table1"], rules)
  if {"untuned", "tuned"} <= set(s):
    out["fig5"] = verdict_fig5(s["untuned"], s["tuned"], rules, res.get("untuned"))
  if tuned is not None:
    quiz = (tuned["train_ssim"], tuned["train_index"], tuned["public_ssim"])
    out.update(fig6=verdict_fig6(*quiz, rules),
               fig7=verdict_fig7(*quiz, tuned["best_ssim_per_train"], tuned["phi_train"],
                                 rules),
               fig8=verdict_fig8(tuned["train_ssim"], tuned["public_ssim"], rules))
  if "partition" in res:
    out["fig9"] = verdict_fig9(res["partition"], rules)
  if same is not None:
    out.update(fig10=verdict_fig10(same, rules), fig11=verdict_fig11(same, rules),
               fig12=verdict_fig12(same, rules))
  return out


def verdicts(evidence: dict, rules: dict = RULES) -> dict:
  """Every figure's and Table 1's verdict from `trdr.report.evidence.collect` output (or the part of
  it a seed's repeats give), keyed by artefact, each beside its baseline (`with_baseline`:
  the same rule on the start images)."""
  measured = _verdicts_of(evidence, rules)
  baseline = _verdicts_of(baseline_evidence(evidence), rules)
  return {name: with_baseline(v, baseline[name]) for name, v in measured.items()}
