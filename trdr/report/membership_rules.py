"""The membership rules: Runkel et al.'s two sentences on membership, each tested as written.

  (i)  with certainty, Sec. 5 (the conclusion): "even when reconstructing natural images
       that could be part of the training dataset, an adversary yet cannot identify
       whether it is a valid or invalid training data sample with certainty"
       (`certainty`, `verdict_membership`);
  (ii) better than chance, Sec. 4.4 (and Fig. 8's discussion): "without having access to
       the training data, an adversary cannot identify whether a reconstructed natural
       image is part of the training dataset" (`chance_answer`,
       `verdict_membership_chance`).

Both read what `trdr.studies.membership.measure` measured: per attack × start kind ×
stage × score, the natural-looking images labelled member or non-member, under the first
label window (the rule's; the others are reported).

**(i) with certainty** asks whether an adversary can name members and be right: naming
the images a threshold on the score selects (the top k, k ≥ ``certainty_min_selected``),
its precision's Clopper–Pearson lower bound reaches ``certainty_precision`` at some k
("can tell with certainty"; the bound at level 1 − confidence, Bonferroni-divided over
the k's and the group's scores, for the k is chosen after seeing the scores), or the
upper bound at every k lies below it ("cannot tell with certainty": an intersection of
one-sided tests, each at the full level). Needing no non-member, it sees a total breach
(an oracle that returns training images only). The members needed to show certainty at
all — k images named without one non-member — are reported as the row's power.

**(ii) better than chance** takes the victims as the unit of replication (the images of
one victim are not independent): a score tells when the t-test of the victims' own AUCs
against 0.5 rejects at 1 − confidence; it cannot tell when their t interval lies inside
0.5 ± ``equivalence_margin`` (an equivalence test); otherwise it is underpowered. A
group's answer is one adversary's: the score it selects on its shadow victims (`select`:
victims of the same recipe that it attacked itself, ``measured["selection"]``), tested
once on the target victims; the other scores are described, and those that tell under
Holm's correction across the group are reported as what a stronger adversary could tell.
The pooled AUC over all images, its p-value and the bootstrap intervals describe; they do
not decide. Each row states the smallest |AUC − 0.5| its test detects with
``membership_power`` (`detectable_effect`, the noncentral t).

**Each reconstruction against its own start.** A "can tell" counts against the paper only
where the attack adds it to what the adversary's start images already give: for (ii) the
per-victim difference between the selected score's separation on the reconstructions and
the same score's on that victim's own start images (`paired_difference`; "no paired
baseline" where the starts have too few members: then the "can tell" counts) has its t
interval above 0; for (i) no score names the start images' members with certainty. A
"can tell" that the start already gives is reported as such ("the start already tells")
and is neither a pass nor a failure. A public-start group's "can tell" counts only where
its reconstructions that left their start image (`measure`'s "public, left start" rows)
tell as well (`LEFT_NOT` otherwise: the adversary may recognise the start).

**Controls** (`trdr.studies.membership`'s, on the mixed starts): positive (training vs
partition starts after the attack: (ii) must tell, else the attack's "cannot tell" is
underpowered), negative (random halves of non-members: a score that tells is a false
alarm, reported), oracle (training images only: (i) must say "can tell with certainty",
else the attack's "cannot tell with certainty" is underpowered).
"""

import functools
import math

import numpy as np
import scipy.optimize
import scipy.stats

from trdr.evaluation import roc
from trdr.report.verdicts import (NOT_REPRODUCED, NOT_TESTED, PARTLY, REPRODUCED, RULES,
                                  UNDERPOWERED, UNINFORMATIVE, equivalence, verdict_of)

CAN_TELL, CANNOT_TELL, TOO_FEW = "can tell", "cannot tell", "too few"
# A group whose "can tell" its start images already give (the attack adds nothing).
START_TELLS = "the start already tells"
# A public-start group that tells, but not on its reconstructions that left their start
# image: what the adversary recognises may be the start, not the training image.
LEFT_NOT = "not where the reconstructions left their start"
# A group whose shadows have no score with an AUC: the adversary has nothing to select.
NOT_SELECTED = "no score selected on the shadows"
STAGES = ("reconstruction", "start")


# ------------------------------------------------------ (ii) better than chance


def detectable_effect(sd: float, victims: int, alpha: float, power: float) -> float:
  """The smallest |AUC − 0.5| that the two-sided one-sample t-test of ``victims`` AUCs
  (spread ``sd``) rejects at level ``alpha`` with probability ``power``: δ = λ·sd/√k, λ
  the noncentrality at which the noncentral t (scipy.stats.nct, k − 1 degrees of
  freedom) exceeds the critical value t₁₋α/₂ in absolute value with probability
  ``power`` (exact for normal AUCs; the central-t sum t₁₋α/₂ + t_power understates it:
  with 5 victims at α = 0.05 / 11, 2.99 against 3.23 sd/√k). Returns float ≥ 0; NaN with
  fewer than two victims."""
  if victims < 2:
    return float("nan")
  return float(_noncentrality(int(victims), float(alpha), float(power)) * sd
               / math.sqrt(victims))


@functools.lru_cache(maxsize=64)
def _noncentrality(victims: int, alpha: float, power: float) -> float:
  """λ of `detectable_effect` (it depends on the victims, level and power only)."""
  df = victims - 1
  crit = scipy.stats.t.ppf(1 - alpha / 2, df)
  nct = scipy.stats.nct
  # The lower tail as the upper tail at −λ: nct.cdf is NaN far in its tail.
  gap = lambda lam: nct.sf(crit, df, lam) + nct.sf(crit, df, -lam) - power
  high = crit + scipy.stats.norm.ppf(power) + 1.0
  while gap(high) < 0:
    high *= 2
  return float(scipy.optimize.brentq(gap, 0.0, high, xtol=1e-10))


def victims_test(row: dict, rules: dict = RULES, tests: int = 1) -> dict:
  """The test over victims of one score's row (`roc.summary` with the victims as
  clusters): {"victims": k, "p": the two-sided one-sample t-test of the victims' AUCs
  against 0.5, "detectable": the smallest |AUC − 0.5| it detects with
  ``rules["membership_power"]`` at level (1 − confidence) / ``tests``, from the victims'
  spread (`detectable_effect`: the noncentral t); above 0.5 no AUC can show it}; p and
  detectable NaN with fewer than two victims (an equal AUC on every victim: p 0 away
  from 0.5, 1 at it; detectable 0)."""
  values = np.asarray([v for v in row.get("per_cluster", ()) if v is not None], np.float64)
  values = values[np.isfinite(values)]
  k = len(values)
  if k < 2:
    return {"victims": k, "p": float("nan"), "detectable": float("nan")}
  sd = float(np.std(values, ddof=1))
  if sd == 0.0:
    return {"victims": k, "p": float(values[0] == 0.5), "detectable": 0.0}
  alpha = (1.0 - rules["membership_confidence"]) / tests
  return {"victims": k, "p": float(scipy.stats.ttest_1samp(values, 0.5).pvalue),
          "detectable": detectable_effect(sd, k, alpha, rules["membership_power"])}


def chance_answer(row: dict, rules: dict = RULES, tests: int = 1) -> str:
  """What one score answers to (ii): "can tell" (the victims' t-test rejects at (1 −
  confidence) / ``tests``), "cannot tell" (the victims' t interval, ``row["ci"]``,
  inside 0.5 ± the equivalence margin), "underpowered" (neither), or "too few" (fewer
  than min_per_class members or non-members: no AUC)."""
  if not row.get("informative"):
    return TOO_FEW
  alpha = (1.0 - rules["membership_confidence"]) / tests
  if victims_test(row, rules, tests)["p"] < alpha:
    return CAN_TELL
  low, high = row["ci"]
  if not (np.isfinite(low) and np.isfinite(high)):
    return UNDERPOWERED
  # An interval that excludes 0.5 without the test rejecting cannot occur at equal levels;
  # `equivalence` says "tells" for it, which the test has already not found: underpowered.
  return CANNOT_TELL if equivalence(low, high, rules) == "chance" else UNDERPOWERED


def select(selection: list[dict]) -> dict | None:
  """The adversary's score, chosen on its shadow victims (docs/membership.md, "One
  adversary's answer"; the rule fixed before the rerun): among the rows of ``selection``
  (`trdr.studies.membership.measure`'s "selection": the same attack, start kind and score
  on the shadow victims' reconstructions, whose membership the adversary knows) that have
  an AUC on at least one shadow victim, the score with the largest |mean per-victim AUC −
  0.5|, the first in ``selection``'s order on a tie; oriented to its side of 0.5 (a score
  whose shadows' AUC is below 0.5 is used reversed). Why this rule: the shadows are drawn
  from the adversary's recipe as the victims are, so the mean AUC over them estimates what
  each score separates on a victim, and the adversary commits to one score before seeing
  the targets. Since the shadows are other victims than the targets, the selected score's
  test on the targets is one test at the full level: under no signal it is a single
  score's test, whatever the number of scores.

  Returns:
    {"score", "side": ±1.0, "shadow auc": the mean over shadow victims, "shadow victims":
    how many had both classes}, or None (no row with an AUC: no score selected).
  """
  best = None
  for row in selection:
    values = [v for v in row.get("per_cluster", ()) if v is not None and np.isfinite(v)]
    if not row.get("informative") or not values:
      continue
    mean = float(np.mean(values))
    if best is None or abs(mean - 0.5) > abs(best["shadow auc"] - 0.5):
      best = {"score": row["score"], "side": 1.0 if mean >= 0.5 else -1.0,
              "shadow auc": mean, "shadow victims": len(values)}
  return best


def start_score(score: str) -> str:
  """The score of the start images that ``score`` of the reconstructions is paired with: the
  same score (`best_of_k` is k at the start: the start's half of the maximum)."""
  return score.removeprefix("best_of_")


def paired_difference(row: dict, start: dict | None, side: float = 1.0,
                      rules: dict = RULES) -> dict:
  """What the attack adds to what its start images give, with one score: per victim the
  score's separation on the reconstructions minus the same score's on that victim's own
  start images, both oriented by ``side`` (the adversary's orientation, `select`):
  side·(AUC_rec − 0.5) − side·(AUC_start − 0.5); positive: the reconstructions tell more.

  Args:
    row: the reconstructions' row of the score (per_cluster, cluster_ids).
    start: the start images' row of the same score (`start_score`), or None.
  Returns:
    {"baseline": True, "difference": the mean over the victims that have an AUC at both
    stages, "ci": its t interval over them, "victims": k, "adds": the interval above 0}
    (NaN and "adds" False with fewer than two victims); or {"baseline": False, "why":
    "no paired baseline (…)"} where the start images have no such score or too few
    members or non-members for its AUC: no difference is made up (a start that tells
    nothing is not a start at chance).
  """
  if start is None:
    return {"baseline": False, "why": "no paired baseline (the start images have no such "
                                      "score)", "adds": False}
  if not start.get("informative"):
    return {"baseline": False, "adds": False,
            "why": f"no paired baseline (the start images have {start['members']} members "
                   f"and {start['non_members']} non-members, too few for an AUC)"}
  recon = dict(zip(row.get("cluster_ids", ()), row.get("per_cluster", ())))
  base = dict(zip(start.get("cluster_ids", ()), start.get("per_cluster", ())))
  finite = lambda a: a is not None and np.isfinite(a)
  diff = [side * (recon[c] - 0.5) - side * (base[c] - 0.5) for c in recon
          if c in base and finite(recon[c]) and finite(base[c])]
  low, high = roc.mean_ci(diff, rules["membership_confidence"]) if len(diff) > 1 else (
      float("nan"), float("nan"))
  return {"baseline": True, "difference": float(np.mean(diff)) if diff else float("nan"),
          "ci": [low, high], "victims": len(diff), "adds": bool(np.isfinite(low) and low > 0)}


def holm(p_values: dict, alpha: float) -> list:
  """The keys of ``p_values`` ({key: p}) that Holm's step-down procedure rejects at
  family-wise level ``alpha`` (the i-th smallest p against alpha / (m − i + 1), stopping
  at the first that is not below); NaN never rejects."""
  ordered = sorted((p, k) for k, p in p_values.items() if np.isfinite(p))
  m, out = len(p_values), []
  for i, (p, k) in enumerate(ordered):
    if p >= alpha / (m - i):
      break
    out.append(k)
  return out


# ------------------------------------------------------------ (i) with certainty


def certainty(row: dict, min_members: int, rules: dict = RULES, scores: int = 1) -> dict:
  """What one score answers to (i), from its row's ``top`` (`roc.precision_at_top`: the
  members among the images that score at least the k-th largest).

  Args:
    row: a row of `trdr.studies.membership.measure` (members, top).
    min_members: fewer members: "too few" (no member to name: the question has no
      subject).
    scores: the scores tested in the group (the Bonferroni division, with the k's).
  Returns:
    {"answer": "can tell" (with certainty) | "cannot tell" | "underpowered" | "too
    few", "k", "selected", "named members": the threshold with the largest lower bound,
    "precision", "lower", its Clopper–Pearson lower bound, "upper": the largest upper
    bound over the k's, "needed": the members that, named without one non-member, would
    reach the certainty level (the smallest sample that can say "can tell")}.
  """
  c, k_min = rules["certainty_precision"], rules["certainty_min_selected"]
  level = 1.0 - rules["membership_confidence"]
  points = [p for p in row.get("top", ()) if p[1] >= k_min]
  out = {"answer": TOO_FEW, "k": None, "selected": None, "named members": None,
         "precision": float("nan"), "lower": float("nan"), "upper": float("nan"),
         "needed": None}
  if row["members"] < min_members or not points:
    return out
  alpha = level / (scores * len(points))
  beta = scipy.stats.beta
  lower = [float(beta.ppf(alpha, m, s - m + 1)) if m > 0 else 0.0 for _, s, m in points]
  upper = [float(beta.ppf(1 - level, m + 1, s - m)) if m < s else 1.0 for _, s, m in points]
  best = int(np.argmax(lower))
  k, selected, named = points[best]
  answer = (CAN_TELL if lower[best] >= c else CANNOT_TELL if max(upper) < c
            else UNDERPOWERED)
  return {"answer": answer, "k": int(k), "selected": int(selected), "named members": int(named),
          "precision": named / selected, "lower": lower[best], "upper": max(upper),
          "needed": int(math.ceil(math.log(alpha) / math.log(c)))}


# --------------------------------------------------------------- groups and verdicts


def _groups(measured: dict, stage: str) -> dict:
  """{(attack, start kind): rows on ``stage``} under the rule's label window (the first of
  configs/membership.py's label_windows); rows under another window are reported, not
  judged."""
  window = measured.get("labels", {}).get("windows", [None])[0]
  groups = {}
  for row in measured["rows"]:
    if row["stage"] == stage and row.get("window") == window:
      groups.setdefault((row["attack"], row["kind"]), []).append(row)
  return groups


def _fpr(rules: dict) -> str:
  return f"{rules['membership_fpr']:g}"


def tpr_text(row: dict, fpr: str) -> str:
  """A row's TPR at FPR ``fpr`` (a key of ``row["tpr_at_fpr"]``) as the tables and the
  sentences print it: three decimals, or "—, N too small (n < 1 / FPR)" where the row has
  fewer than 1 / FPR non-members (no threshold then has a false positive to spare: the
  number would be the TPR at FPR 0, not at ``fpr``), or "—" where the row has no AUC."""
  needed = 1.0 / float(fpr)
  if row["non_members"] < needed:
    return f"—, N too small ({row['non_members']} < {needed:.0f})"
  value = row.get("tpr_at_fpr", {}).get(fpr)
  return "—" if value is None or not np.isfinite(value) else f"{value:.3f}"


def _tpr(row: dict, rules: dict) -> str | None:
  """`tpr_text` at the rule's FPR; None for a row without an AUC."""
  return tpr_text(row, _fpr(rules)) if row.get("informative") else None


def detectable_text(effect: float) -> str:
  """A detectable |AUC − 0.5| in words: "detects |AUC − 0.5| ≥ x", or "no effect detectable
  at this size" where x > 0.5 (no AUC in [0, 1] is that far from chance) or undefined."""
  if not np.isfinite(effect) or effect > 0.5:
    return "no effect detectable at this size"
  return f"detects |AUC − 0.5| ≥ {effect:.3f}"


def _victims_text(row: dict) -> str:
  low, high = row["ci"]
  return (f"AUC per victim {row['victim_mean']:.3f} [{low:.3f}, {high:.3f}] over "
          f"{row['clusters']} victims" if "clusters" in row
          else f"AUC {row['auc']:.3f} [{low:.3f}, {high:.3f}]")


def _chance_group(rows: list[dict], starts: dict, selection: list[dict], rules: dict,
                  left: dict | None = None) -> dict:
  """One attack × start kind under (ii): one adversary's answer, the score it selects on its
  shadows (`select`) tested on the target victims at the full level (`chance_answer`, one
  test), and what the attack adds to it (`paired_difference` with the same score on the
  start images). The group's status: that answer; "the start already tells" where the
  paired difference is not above 0; `LEFT_NOT` where ``left`` (the same group on the
  reconstructions that left their start, judged alike) does not tell; `NOT_SELECTED`
  without a selected score (no shadow row with an AUC); "too few" where the selected
  score has no AUC on the targets. Every score's own test is described ("scores"), and
  the scores whose test rejects under Holm's correction across the group are listed as
  what a stronger adversary (one that picks the score after seeing the targets' answers)
  could tell ("stronger")."""
  informative = [r for r in rows if r.get("informative")]
  if not informative:
    return {"status": TOO_FEW, "rows": rows, "scores": {}}
  alpha = 1.0 - rules["membership_confidence"]
  chosen = select(selection)
  scores = {}
  for r in informative:
    test = victims_test(r, rules)
    scores[r["score"]] = {
        "answer": chance_answer(r, rules), "auc": r["auc"], "ci": r["ci"],
        "p victims": test["p"], "victims": test["victims"],
        "detectable |AUC − 0.5|": test["detectable"],
        f"TPR at {_fpr(rules)} FPR": _tpr(r, rules), "selected": False}
  stronger = holm({s: e["p victims"] for s, e in scores.items()}, alpha)
  out = {"rows": informative, "scores": scores, "selection": chosen, "stronger": stronger}
  if left is not None:
    out["left start"] = left
  if chosen is None:
    return {**out, "status": NOT_SELECTED}
  entry = scores.get(chosen["score"])
  if entry is None:
    return {**out, "status": TOO_FEW, "selected": chosen["score"]}
  entry["selected"] = True
  status = entry["answer"]
  if status == CAN_TELL:
    row = next(r for r in informative if r["score"] == chosen["score"])
    paired = paired_difference(row, starts.get(start_score(chosen["score"])), chosen["side"],
                               rules)
    entry["paired difference (reconstruction − start)"] = paired
    if paired["baseline"] and not paired["adds"]:
      status = START_TELLS
    elif left is not None and left["status"] != CAN_TELL:
      status = LEFT_NOT
  entry["status"] = status
  return {**out, "status": status, "selected": chosen["score"],
          "detectable": entry["detectable |AUC − 0.5|"]}


def _certainty_group(rows: list[dict], starts: dict, min_members: int, rules: dict) -> dict:
  """One attack × start kind under (i): each score's `certainty` and the group's status,
  as `_chance_group` (a "can tell with certainty" that the start images of the same
  score also give: the start already tells)."""
  scored = [r for r in rows if r["members"] >= min_members and r.get("top")]
  if not scored:
    return {"status": TOO_FEW, "rows": rows, "scores": {}}
  scores, statuses = {}, []
  for r in scored:
    entry = certainty(r, min_members, rules, scores=len(scored))
    entry[f"TPR at {_fpr(rules)} FPR"] = _tpr(r, rules)
    status = entry["answer"]
    if status == CAN_TELL:
      given = any(certainty(s, min_members, rules, scores=len(starts))["answer"] == CAN_TELL
                  for s in starts.values())
      status = START_TELLS if given else CAN_TELL
    entry["status"] = status
    scores[r["score"]] = entry
    statuses.append(status)
  if CAN_TELL in statuses:
    status = CAN_TELL
  elif all(s in (CANNOT_TELL, TOO_FEW) for s in statuses) and CANNOT_TELL in statuses:
    status = CANNOT_TELL
  elif UNDERPOWERED in statuses:
    status = UNDERPOWERED
  elif START_TELLS in statuses:
    status = START_TELLS
  else:
    status = TOO_FEW
  needed = [e["needed"] for e in scores.values() if e["needed"] is not None]
  return {"status": status, "rows": scored, "scores": scores,
          "needed": max(needed) if needed else None,
          "members": max(r["members"] for r in scored)}


def _starts(measured: dict, attack: str, kind: str) -> dict:
  """{score: the start stage's row} of one attack × start kind (the rule's window)."""
  return {r["score"]: r for r in _groups(measured, "start").get((attack, kind), [])}


def judge(measured: dict, claim: str, stage: str = "reconstruction",
          rules: dict = RULES) -> dict:
  """Every attack × start kind of ``stage`` under ``claim`` ("certainty": (i), "chance":
  (ii)): {(attack, kind): the group (`_certainty_group` / `_chance_group`)}. On the start
  stage nothing is paired (the start images are the baseline) and the score is the one
  selected on the shadows' reconstructions, at the start (`start_score`). The rows
  restricted to reconstructions that left their start ("restricted_from") are judged as
  part of their group ("left start"), not as a group of their own."""
  min_members = int(measured.get("min_per_class", 10))
  window = measured.get("labels", {}).get("windows", [None])[0]
  selection = {}
  for row in measured.get("selection", ()):
    if row.get("window") == window:
      key = (row["attack"], row["kind"])
      selection.setdefault(key, []).append(
          row if stage == "reconstruction" else {**row, "score": start_score(row["score"])})
  groups = _groups(measured, stage)
  out = {}
  for (attack, kind), rows in groups.items():
    if any("restricted_from" in r for r in rows):
      continue
    if claim == "certainty":
      starts = _starts(measured, attack, kind) if stage == "reconstruction" else {}
      out[(attack, kind)] = _certainty_group(rows, starts, min_members, rules)
      continue
    starts = _starts(measured, attack, kind) if stage == "reconstruction" else {}
    chosen = selection.get((attack, kind), [])
    left = None
    for (a, k), restricted in groups.items():
      if a == attack and any(r.get("restricted_from") == kind for r in restricted):
        left = _chance_group(restricted, starts, selection.get((a, k), []), rules)
    out[(attack, kind)] = _chance_group(rows, starts, chosen, rules, left)
  return out


def membership_controls(measured: dict, rules: dict = RULES) -> dict:
  """Per attack, what its controls (`trdr.studies.membership.measure`'s "controls") say:
  {"positive": True when a score tells training-image from partition-image starts after
  the attack under (ii) (the experiment can detect membership), False when none does,
  None when no score had enough images; "negative": True when a score tells two random
  halves of non-members apart (a false alarm), False, or None; "oracle": True when (i)
  names an attack that returns training images only as telling with certainty, False, or
  None (no oracle rows: a membership.json written before the oracle control)}."""
  rows = {}
  for row in measured.get("controls", []):
    rows.setdefault(row["attack"], {}).setdefault(row["control"], []).append(row)
  min_members = int(measured.get("min_per_class", 10))
  answers = {}
  for attack, controls in rows.items():
    answers[attack] = {}
    for control in ("positive", "negative"):
      told = [r for r in controls.get(control, []) if r["informative"]]
      answers[attack][control] = (None if not told else any(
          chance_answer(r, rules, tests=len(told)) == CAN_TELL for r in told))
    oracle = [r for r in controls.get("oracle", []) if r["members"] >= min_members]
    answers[attack]["oracle"] = (None if not oracle else any(
        certainty(r, min_members, rules, scores=len(oracle))["answer"] == CAN_TELL
        for r in oracle))
  return answers


_CHECK = {"certainty": "cannot tell with certainty", "chance": "cannot tell"}
_GATE = {"certainty": ("oracle", "the oracle control is not told with certainty"),
         "chance": ("positive", "the positive control detects nothing")}


def _outcome(measured: dict, claim: str, stage: str, rules: dict) -> tuple[dict, dict]:
  """(the outcome dict of ``claim`` on ``stage``, its groups)."""
  groups = judge(measured, claim, stage, rules)
  controls = membership_controls(measured, rules)
  gate, why = _GATE[claim]
  numbers, checks, underpowered, start_tells = {}, {}, [], []
  for (attack, kind), g in groups.items():
    name = f"{attack}, {kind}"
    numbers[f"{name}: answers"] = {s: _entry_text(e, claim, rules) for s, e in g["scores"].items()}
    if claim == "chance":
      numbers[f"{name}: the adversary's score (selected on the shadows)"] = _selection_text(
          g)
      if "detectable" in g:
        numbers[f"{name}: detectable |AUC − 0.5|"] = detectable_text(g["detectable"])
      if g.get("stronger"):
        numbers[f"{name}: a stronger adversary can tell with (Holm across scores)"] = g[
            "stronger"]
      if "left start" in g:
        numbers[f"{name}: on the reconstructions that left their start"] = _group_text(
            g["left start"], rules)
    if claim == "certainty" and g.get("needed") is not None:
      numbers[f"{name}: members needed to show certainty, members"] = [g["needed"],
                                                                       g["members"]]
    status = g["status"]
    if status == CANNOT_TELL and controls.get(attack, {}).get(gate) is not True:
      underpowered.append(f"{name} ({why})")
    elif status == CAN_TELL:
      checks[f"{name}: {_CHECK[claim]}"] = False
    elif status == CANNOT_TELL:
      checks[f"{name}: {_CHECK[claim]}"] = True
    elif status == UNDERPOWERED:
      underpowered.append(name)
    elif status == NOT_SELECTED:
      underpowered.append(f"{name} ({NOT_SELECTED})")
    elif status == START_TELLS:
      start_tells.append(name)
    elif status == LEFT_NOT:
      start_tells.append(f"{name} (it tells, but {LEFT_NOT})")
  for attack, c in controls.items():
    numbers[f"{attack}: controls (positive detects, negative false alarm, oracle certain)"] = [
        c["positive"], c["negative"], c["oracle"]]
  if underpowered:
    numbers["underpowered (neither tells nor cannot tell)"] = underpowered
  if start_tells:
    numbers["the start already tells (the attack adds nothing; not counted)"] = start_tells
  verdict = None
  if False in checks.values():
    verdict = PARTLY if True in checks.values() else NOT_REPRODUCED
  elif underpowered:
    verdict = UNDERPOWERED
  elif not checks:
    verdict = UNINFORMATIVE
  return verdict_of("membership" if claim == "certainty" else "membership_chance",
                    numbers, checks, verdict or REPRODUCED), groups


def _entry_text(e: dict, claim: str, rules: dict) -> str:
  fpr = f"TPR at {_fpr(rules)} FPR"
  tpr = "" if e.get(fpr) is None else f"; {fpr} {e[fpr]}"
  if claim == "certainty":
    if e["answer"] == TOO_FEW:
      return TOO_FEW
    return (f"{e['status']} (top {e['k']}: {e['named members']} of {e['selected']} members, "
            f"precision {e['precision']:.3f} ≥ {e['lower']:.3f}; largest upper bound "
            f"{e['upper']:.3f}; certainty needs ≥ {e['needed']} members named without a "
            f"non-member{tpr})")
  text = (f"{e.get('status', e['answer'])} (AUC {e['auc']:.3f}, per victim "
          f"[{e['ci'][0]:.3f}, {e['ci'][1]:.3f}], p over {e['victims']} victims "
          f"{e['p victims']:.1e}; {detectable_text(e['detectable |AUC − 0.5|'])}{tpr}")
  paired = e.get("paired difference (reconstruction − start)")
  if paired and paired["baseline"]:
    text += (f"; reconstruction − start {paired['difference']:+.3f} "
             f"[{paired['ci'][0]:+.3f}, {paired['ci'][1]:+.3f}] over {paired['victims']} "
             "victims")
  elif paired:
    text += f"; {paired['why']}"
  return text + ")"


def _selection_text(g: dict) -> str:
  chosen = g.get("selection")
  if chosen is None:
    return NOT_SELECTED if g["status"] != TOO_FEW else "—"
  return (f"{chosen['score']}{' (reversed)' if chosen['side'] < 0 else ''}, AUC "
          f"{chosen['shadow auc']:.3f} over {chosen['shadow victims']} shadow victims")


def _group_text(g: dict, rules: dict) -> str:
  """One group's (ii) answer with its deciding numbers: the selected score's entry."""
  if g["status"] in (TOO_FEW, NOT_SELECTED) or g.get("selected") not in g["scores"]:
    most = max(g["rows"], key=lambda r: min(r["members"], r["non_members"]), default=None)
    return f"{g['status']}" + (f" ({most['members']} members, {most['non_members']} "
                               "non-members)" if most else "")
  return f"{g['selected']}: {_entry_text(g['scores'][g['selected']], 'chance', rules)}"


def _verdict(measured: dict, claim: str, rules: dict) -> dict:
  after, groups = _outcome(measured, claim, "reconstruction", rules)
  start, _ = _outcome(measured, claim, "start", rules)
  out = {**after, "baseline": {k: start[k] for k in ("measured", "checks", "verdict")}}
  tells = after["measured"].get("the start already tells (the attack adds nothing; not "
                                "counted)")
  if tells:
    out["reason"] = ("what the start images already tell is not counted against the paper: "
                     + "; ".join(tells))
  return {**out, "sentences": sentences(groups, claim, rules)}


def verdict_membership(measured: dict, rules: dict = RULES) -> dict:
  """(i), Sec. 5: can an adversary name members with certainty? Per attack × start kind
  one check, "cannot tell with certainty" (`certainty` of every score; one that tells
  fails it, unless the start images of that score already tell); the same rule on the
  start images as the baseline. A failed check: not reproduced (partly when another
  passes); none failed but one underpowered: underpowered; all pass: reproduced; none:
  uninformative."""
  return _verdict(measured, "certainty", rules)


def verdict_membership_chance(measured: dict, rules: dict = RULES) -> dict:
  """(ii), Sec. 4.4: can an adversary tell members better than chance? As
  `verdict_membership`, with `chance_answer` per score (victims the unit) and the paired
  difference from the start images deciding whether a "can tell" is the attack's."""
  return _verdict(measured, "chance", rules)


def membership_not_run() -> dict:
  """The membership outcome of a report whose work directory holds no membership.json:
  "not tested", with the reason (the experiment is `make membership`'s, not the report's)."""
  return {**verdict_of("membership", {}, {}, NOT_TESTED),
          "reason": "not run: `make membership` (experiments/membership.py, about an hour at "
                    ":cpu) has not written membership/membership.json in this work "
                    "directory; `make figures` after it includes its verdict"}


def sentences(groups: dict, claim: str, rules: dict = RULES) -> list[str]:
  """One plain sentence per attack × start kind: the group's answer under ``claim`` with
  the deciding numbers, each read from the group's own record (the one the tables print):
  under (ii) the score the adversary selected on its shadows, what a stronger adversary
  could tell, and for the public starts the reconstructions that left their start."""
  out = []
  for (attack, kind), g in groups.items():
    status = g["status"]
    if status == TOO_FEW and not g.get("selected"):
      most = max(g["rows"], key=lambda r: min(r["members"], r["non_members"]), default=None)
      text = "too few natural-looking members" + ("" if claim == "certainty" else
                                                    " or non-members") + " to measure" + (
          f" ({most['members']} members, {most['non_members']} non-members)" if most else "")
    elif claim == "chance":
      text = {CAN_TELL: "an adversary can tell better than chance",
              CANNOT_TELL: "an adversary cannot tell (at chance)",
              UNDERPOWERED: "underpowered",
              START_TELLS: "the start images already tell as much (the attack adds nothing)",
              LEFT_NOT: f"an adversary can tell, but {LEFT_NOT} (not counted)",
              NOT_SELECTED: NOT_SELECTED,
              TOO_FEW: "too few natural-looking members or non-members for the selected "
                       "score"}[status]
      text += f" ({_group_text(g, rules)}; selected on the shadows: {_selection_text(g)})"
      stronger = [s for s in g.get("stronger", ()) if s != g.get("selected")]
      if stronger:
        text += (f"; a stronger adversary, choosing after the answers, can tell with "
                 f"{', '.join(stronger)} (Holm across {len(g['scores'])} scores)")
      if "left start" in g:
        text += ("; on the reconstructions that left their start: "
                 + _group_text(g["left start"], rules))
    else:
      deciding = _deciding(g, status)
      text = {CAN_TELL: "an adversary can tell", CANNOT_TELL: "an adversary cannot tell",
              UNDERPOWERED: "underpowered", START_TELLS: "the start images already tell "
              "as much (the attack adds nothing)"}[status]
      if status in (CAN_TELL, CANNOT_TELL):
        text += " with certainty"
      text += f" ({deciding[0]}: {_entry_text(deciding[1], claim, rules)})"
    out.append(f"{attack}, {kind} starts: {text}.")
  return out


def _deciding(group: dict, status: str) -> tuple[str, dict]:
  """The score that decides ``status`` under (i): the one with that status with the
  largest lower bound, else the one farthest from deciding."""
  items = list(group["scores"].items())
  same = [(s, e) for s, e in items if e["status"] == status] or items
  return max(same, key=lambda se: np.nan_to_num(se[1]["lower"], nan=-1.0))
