"""Verdicts: each paper artefact's claim, quoted, the rule that tests it, and a pure
function that applies the rule to the runs' numbers — and to the start images' numbers.

`trdr.claims.CLAIMS` holds, per artefact, the paper's sentence (quoted), where it stands
and the rule in words; `trdr.claims.RULES` the thresholds. The verdict functions
(`verdict_fig1` … `verdict_membership`) are pure: plain records, summaries and arrays in,
a verdict dict out:

  {"artefact": str, "claim": str, "source": str, "rule": str,
   "measured": {name: number}, "checks": {name: bool}, "verdict": one of `VERDICTS`}

A verdict is "reproduced" when every check passes, "partly" when some do and "not
reproduced" when none does, unless the function says otherwise; "not tested" where no
rule of trdr tests the paper's sentence yet (the reason is in the rule).

**Baseline.** Every run also evaluates its start images x0 as if they were the
reconstructions (`trdr.evaluate.START`). `verdicts` applies every rule to those numbers
too (`baseline_evidence`: an attack that returns its start) and adds the result as
"baseline". A check that the start images pass as well says nothing about the attack:
when every check the reconstructions pass is also passed by the start images, the verdict
is "uninformative" (`with_baseline`).
"""

import numpy as np

from trdr.attacks import init as inits
from trdr.claims import (  # noqa: F401 (CLAIMS, VERDICTS: the rules and verdicts of this module)
    CLAIMS, NOT_REPRODUCED, NOT_TESTED, PARTLY, REPRODUCED, RULES, UNINFORMATIVE, VERDICTS,
    verdict_of, with_baseline)
from trdr.decoreco_verdicts import (spearman, verdict_fig5, verdict_fig6, verdict_fig7,
                                    verdict_fig8, verdict_fig9)
from trdr.evaluate import START, own_start_fraction

VICTIMS = ("affine", "one_hidden")
ATTACKS = ("bilevel", "decoreco")


def baseline_evidence(evidence):
  """`trdr.report.collect`'s evidence of an attack that returns its start: every number
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
  """Table 1 from table1.json (`trdr.paper.table1`)."""
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


def line_trend(records: list[dict], fixed_key: str, free_key: str) -> float:
  """Spearman ρ between λ and the mean L2 to train along the line ``fixed_key`` = 1
  (NaN if the line has fewer than two points)."""
  line = _line(records, fixed_key, free_key)
  return spearman([r[free_key] for r in line], [r["l2_to_train"] for r in line])


def _bilevel_nearer_at_ground_truth(comparable: dict) -> tuple[dict, dict]:
  """Mean L2 to train at the ground-truth start (λ1 = λ2 = 1) of both attacks on the shared
  scale, and the check that the bilevel attack's is smaller."""
  gt = {a: pure_record(comparable[a], "ground_truth")["l2_to_train"] for a in ATTACKS}
  measured = {f"{a}, ground-truth start: L2 to train (min-max)": gt[a] for a in ATTACKS}
  return measured, {"bilevel < DecoReco at the ground-truth start": bool(
      gt["bilevel"] < gt["decoreco"])}


def verdict_fig10(comparable: dict, rules: dict = RULES) -> dict:
  """Fig. 10 from {attack: records} of both landscapes on one scale (`trdr.report.
  comparable_records`): at the ground-truth start, and the rise of the L2 to train from
  there to the noise start along λ1 = 1."""
  measured, checks = _bilevel_nearer_at_ground_truth(comparable)
  rise = {}
  for a in ATTACKS:
    line = _line(comparable[a], "lambda1", "lambda2")
    rise[a] = line[0]["l2_to_train"] - line[-1]["l2_to_train"]   # λ2 = 0 minus λ2 = 1
    measured[f"{a}: rise of L2 to train, ground truth → noise (min-max)"] = rise[a]
  checks["bilevel rises more than DecoReco towards noise"] = bool(
      rise["bilevel"] > rise["decoreco"])
  return verdict_of("fig10", measured, checks, rules=rules)


def verdict_fig11(landscapes: dict, comparable: dict, rules: dict = RULES) -> dict:
  """Fig. 11 from {attack: landscape.json records} (each attack on its own scale) and the
  same on one scale: along λ2 = 1, for λ1 below the limit, and at the ground truth."""
  measured, checks = {}, {}
  limit = rules["partition_side_max_lambda"]
  for attack, records in landscapes.items():
    points = [r for r in _line(records, "lambda2", "lambda1") if r["lambda1"] < limit]
    for r in points:
      measured[f"{attack}, λ1 = {r['lambda1']:g}: L2 to partition, to train"] = [
          r["l2_to_partition"], r["l2_to_train"]]
    checks[f"{attack}: L2 to partition < to train for λ1 < {limit:g}"] = bool(
        points and all(r["l2_to_partition"] < r["l2_to_train"] for r in points))
  gt_measured, gt_checks = _bilevel_nearer_at_ground_truth(comparable)
  return verdict_of("fig11", measured | gt_measured, checks | gt_checks, rules=rules)


def verdict_fig12(landscapes: dict, comparable: dict, rules: dict = RULES) -> dict:
  """Fig. 12 from {attack: landscape.json records} and the same on one scale: the trend
  along λ1 = 1, and the ground truth."""
  measured, checks = {}, {}
  limit = rules["landscape_max_spearman"]
  for attack, records in landscapes.items():
    rho = line_trend(records, "lambda1", "lambda2")
    measured[f"{attack}, λ1 = 1: ρ(λ2, L2 to train)"] = rho
    measured[f"{attack}, λ1 = 1: L2 to train"] = [
        round(r["l2_to_train"], 3) for r in _line(records, "lambda1", "lambda2")]
    checks[f"{attack}: ρ ≤ {limit}"] = bool(rho <= limit)
  gt_measured, gt_checks = _bilevel_nearer_at_ground_truth(comparable)
  return verdict_of("fig12", measured | gt_measured, checks | gt_checks, rules=rules)


def _membership_checks(measured: dict, stage: str, rules: dict) -> tuple[dict, dict]:
  """Per (attack, start kind): the most separating informative score and whether the
  adversary cannot tell with any score (`CLAIMS["membership"]`'s rule) on ``stage``."""
  fpr = f"{rules['membership_fpr']:g}"
  numbers, checks = {}, {}
  groups = {}
  for row in measured["rows"]:
    if row["stage"] == stage and row["informative"]:
      groups.setdefault(f"{row['attack']}, {row['kind']}", []).append(row)
  for name, rows in groups.items():
    tells = [r for r in rows if not (r["ci"][0] <= 0.5 <= r["ci"][1]
                                     or r["tpr_at_fpr"][fpr] <= rules["membership_max_tpr"])]
    best = max(rows, key=lambda r: r["auc"])
    numbers[f"{name}: max AUC ({best['score']})"] = best["auc"]
    numbers[f"{name}: its TPR at {fpr} FPR"] = best["tpr_at_fpr"][fpr]
    checks[f"{name}: cannot tell"] = not tells
  return numbers, checks


def verdict_membership(measured: dict, rules: dict = RULES) -> dict:
  """The membership verdict from `trdr.membership.measure` output, beside its baseline (the
  same rule on the start images), `with_baseline`."""
  results = []
  for stage in ("reconstruction", "start"):
    numbers, checks = _membership_checks(measured, stage, rules)
    results.append(verdict_of("membership", numbers, checks,
                           None if checks else UNINFORMATIVE, rules))
  return with_baseline(*results)


def _verdicts_of(evidence: dict, rules: dict) -> dict:
  """Every verdict whose runs are in ``evidence`` (a seed's repeats hold only some)."""
  pure, images = evidence.get("pure", {}), evidence.get("partition_images", {})
  s, res = evidence.get("summaries", {}), evidence.get("results", {})
  tuned, land, same = res.get("tuned"), evidence.get("landscapes"), evidence.get("comparable")
  out = {}
  if set(VICTIMS) <= set(pure):
    out.update(fig1=verdict_fig1(pure, rules), fig2=verdict_fig2(pure, rules),
               fig3=verdict_partition_init("fig3", pure["affine"], images["affine"], rules),
               fig4=verdict_partition_init("fig4", pure["one_hidden"], images["one_hidden"],
                                           rules))
  if "table1" in evidence:
    out["table1"] = verdict_table1(evidence["table1"], rules)
  if {"untuned", "tuned"} <= set(s):
    out["fig5"] = verdict_fig5(s["untuned"], s["tuned"], rules)
  if tuned is not None:
    quiz = (tuned["train_ssim"], tuned["train_index"], tuned["public_ssim"])
    out.update(fig6=verdict_fig6(*quiz, rules),
               fig7=verdict_fig7(*quiz, tuned["best_ssim_per_train"], tuned["phi_train"],
                                 rules),
               fig8=verdict_fig8(tuned["train_ssim"], tuned["public_ssim"], rules))
  if "partition" in res:
    out["fig9"] = verdict_fig9(res["partition"], rules)
  if land is not None:
    out.update(fig10=verdict_fig10(same, rules), fig11=verdict_fig11(land, same, rules),
               fig12=verdict_fig12(land, same, rules))
  return out


def verdicts(evidence: dict, rules: dict = RULES) -> dict:
  """Every figure's and Table 1's verdict from `trdr.report.collect` output (or the part of
  it a seed's repeats give), keyed by artefact, each beside its baseline (`with_baseline`:
  the same rule on the start images)."""
  measured = _verdicts_of(evidence, rules)
  baseline = _verdicts_of(baseline_evidence(evidence), rules)
  return {name: with_baseline(v, baseline[name]) for name, v in measured.items()}
