"""Verdicts: each paper artefact's claim, the rule that tests it, and a pure function
that applies the rule to the runs' numbers.

`RULES` holds the thresholds, `CLAIMS` the paper's claim and the rule in words. The
verdict functions (`verdict_fig1` … `verdict_membership`) are pure: plain records,
summaries and arrays in, a verdict dict out:

  {"artefact": str, "claim": str, "rule": str, "measured": {name: number},
   "checks": {name: bool}, "verdict": one of `VERDICTS`}

A verdict is "reproduced" when every check passes, "partly" when some do and "not
reproduced" when none does, unless the function says otherwise (Figs. 6–8, membership).
`verdicts` applies them all to the evidence that `trdr.report.collect` reads.
"""

import numpy as np
import scipy.stats

from trdr.attacks import init as inits

REPRODUCED, PARTLY, NOT_REPRODUCED, UNINFORMATIVE = (
    "reproduced", "partly", "not reproduced", "uninformative")
VERDICTS = (REPRODUCED, PARTLY, NOT_REPRODUCED, UNINFORMATIVE)
VICTIMS = ("affine", "one_hidden")
ATTACKS = ("bilevel", "decoreco")

# Thresholds of the verdict rules. SSIM is dm-pix's; L2 is the Euclidean distance over all
# pixel values in [0, 1] (3072 for CIFAR-10), mean over the reconstructions of a run.
RULES = {
    "fig1_max_ssim_to_train": 0.3,     # random init: far from every training image
    "fig2_min_ssim_to_train": 0.9,     # ground-truth init: stays at the ground truth
    "fig2_max_l2_to_train": 1.0,
    "table1_max_param_distance": 1e-2,  # "small": the paper's largest entry is 6.4e-3
    "ssim_level": 0.4,                  # a training image counts as reconstructed
    "fig6_min_fraction": 0.1,           # of training images reconstructed with tuned σ
    "fig8_max_fraction": 0.5,           # of candidates that resemble a training image
    "landscape_max_spearman": -0.8,     # "L2 to train decreases": Spearman ρ ≤ this
    "membership_supports": 0.6,         # every informative AUC separability below this
    "membership_refutes": 0.75,         # some informative AUC separability at or above
}

# The paper's claims (Runkel et al. 2024, arXiv 2412.08544), paraphrased, and each
# verdict's rule in words. Figs. 6–8 re-plot Haim et al.'s DecoReco results on trdr's
# victim; their claims paraphrase what those figures show.
CLAIMS = {
    "fig1": ("Random U(0,1) initialisation (affine and one-hidden victim) yields "
             "reconstructions with a small ||θ*−θ||² that are not the training images.",
             "for each victim, mean SSIM of the random-init reconstructions to their nearest "
             "training image < {fig1_max_ssim_to_train}"),
    "fig2": ("Initialised at the ground truth, the attack stays at the training images.",
             "for each victim, mean SSIM to the nearest training image > "
             "{fig2_min_ssim_to_train} and mean L2 to it < {fig2_max_l2_to_train}"),
    "fig3": ("Affine victim, initialised from the distinct partition: the reconstructions "
             "resemble the partition, not the training set.",
             "mean L2 to the nearest partition image < to the nearest training image, and "
             "mean SSIM to the partition > to the training set"),
    "fig4": ("One-hidden victim, initialised from the distinct partition: the "
             "reconstructions resemble the partition, not the training set.",
             "as Fig. 3, for the one-hidden victim"),
    "table1": ("||θ*−θ||² is small for all three initialisations (random, ground truth, "
               "partition), on both victims: matching θ* does not single out the training "
               "set.",
               "all six ||θ*−θ||² < {table1_max_param_distance}"),
    "fig5": ("DecoReco from U(0,1) without variance tuning reconstructs fewer training "
             "images than from the tuned Gaussian N(0, σ²).",
             "count of training images whose best reconstruction has SSIM ≥ {ssim_level}: "
             "uniform < tuned"),
    "fig6": ("With a tuned σ, DecoReco reconstructs part of the training set.",
             "fraction of training images reconstructed with SSIM ≥ {ssim_level}: ≥ "
             "{fig6_min_fraction} reproduced, > 0 partly, 0 not reproduced"),
    "fig7": ("Per training image, the best reconstruction matches some training images "
             "well; the well-reconstructed ones lie near the decision boundary (small "
             "|Φ(x_i)|, Haim et al. Fig. 4).",
             "reproduced when ≥ 1 training image has best SSIM ≥ {ssim_level} and the "
             "Spearman ρ(best SSIM, |Φ(x_i)|) < 0; partly when only the first holds"),
    "fig8": ("An unselected overview: only a minority of DecoReco's candidates resemble a "
             "training image.",
             "fraction of candidates with SSIM ≥ {ssim_level} to their nearest training "
             "image in (0, {fig8_max_fraction}) reproduced, ≥ {fig8_max_fraction} partly, "
             "0 not reproduced"),
    "fig9": ("DecoReco initialised from the partition yields reconstructions closer to the "
             "partition than to the training set.",
             "mean L2 to the nearest partition image < to the nearest training image, and "
             "mean SSIM to the partition > to the training set"),
    "fig10": ("Energy landscape over (λ1, λ2), both attacks: the closer the initialisation "
              "is to the ground truth, the closer the reconstruction is to the training set.",
              "Spearman ρ(λ, L2 to train) ≤ {landscape_max_spearman} along λ2 = 1 (against "
              "λ1) and along λ1 = 1 (against λ2), for both attacks"),
    "fig11": ("Along λ2 = 1 the L2 to the training set decreases with λ1, for both attacks.",
              "Spearman ρ(λ1, L2 to train) ≤ {landscape_max_spearman}, for both attacks"),
    "fig12": ("Along λ1 = 1 the L2 to the training set decreases with λ2, for both attacks.",
              "Spearman ρ(λ2, L2 to train) ≤ {landscape_max_spearman}, for both attacks"),
    "membership": ("An adversary cannot tell whether a natural-looking reconstruction shows a "
                   "training image or a non-member (the paper's conclusion).",
                   "among informative AUCs (≥ min_per_class member and non-member matches), "
                   "every separability max(AUC, 1−AUC) < {membership_supports} reproduced; "
                   "any ≥ {membership_refutes} not reproduced; otherwise partly; no "
                   "informative AUC: uninformative"),
}
def _claim(name: str, rules: dict) -> tuple[str, str]:
  claim, rule = CLAIMS[name]
  return claim, rule.format(**rules)


def _all_any(checks: dict) -> str:
  passed = list(checks.values())
  return REPRODUCED if all(passed) else PARTLY if any(passed) else NOT_REPRODUCED


def _result(name, measured, checks, verdict=None, rules=None) -> dict:
  claim, rule = _claim(name, rules or RULES)
  return {"artefact": name, "claim": claim, "rule": rule, "measured": measured,
          "checks": checks, "verdict": verdict or _all_any(checks)}


def pure_record(records: list[dict], init: str) -> dict:
  """The landscape.json record of a pure initialisation (a key of `inits.PURE_INITS`).

  Raises:
    ValueError: the grid lacks it.
  """
  return records[inits.pure_index(records, init)]


def verdict_fig1(pure: dict, rules: dict = RULES) -> dict:
  """Fig. 1 from {victim: landscape.json records} of the pure-initialisation runs."""
  measured, checks = {}, {}
  for v, records in pure.items():
    r = pure_record(records, "noise")
    measured |= {f"{v} SSIM to train": r["ssim_to_train"],
                 f"{v} SSIM to own noise": r["ssim_to_noise"],
                 f"{v} ||θ*−θ||²": r["param_distance"]}
    checks[f"{v} SSIM to train < {rules['fig1_max_ssim_to_train']}"] = (
        r["ssim_to_train"] < rules["fig1_max_ssim_to_train"])
  return _result("fig1", measured, checks, rules=rules)


def verdict_fig2(pure: dict, rules: dict = RULES) -> dict:
  """Fig. 2 from {victim: landscape.json records}."""
  measured, checks = {}, {}
  for v, records in pure.items():
    r = pure_record(records, "ground_truth")
    measured |= {f"{v} SSIM to train": r["ssim_to_train"], f"{v} L2 to train": r["l2_to_train"]}
    checks[f"{v} stays at the ground truth"] = bool(
        r["ssim_to_train"] > rules["fig2_min_ssim_to_train"]
        and r["l2_to_train"] < rules["fig2_max_l2_to_train"])
  return _result("fig2", measured, checks, rules=rules)


def _closer_to_partition(prefix: str, l2_train, l2_part, ssim_train, ssim_part) -> tuple:
  measured = {f"{prefix}L2 to train": l2_train, f"{prefix}L2 to partition": l2_part,
              f"{prefix}SSIM to train": ssim_train, f"{prefix}SSIM to partition": ssim_part}
  checks = {f"{prefix}L2: partition < train": bool(l2_part < l2_train),
            f"{prefix}SSIM: partition > train": bool(ssim_part > ssim_train)}
  return measured, checks


def verdict_partition_init(name: str, records: list[dict], rules: dict = RULES) -> dict:
  """Fig. 3 (affine) or Fig. 4 (one-hidden) from that victim's landscape.json records."""
  r = pure_record(records, "partition")
  measured, checks = _closer_to_partition("", r["l2_to_train"], r["l2_to_partition"],
                                          r["ssim_to_train"], r["ssim_to_partition"])
  return _result(name, measured, checks, rules=rules)


def verdict_table1(table: dict, rules: dict = RULES) -> dict:
  """Table 1 from table1.json (`trdr.paper.table1`)."""
  measured, checks = {}, {}
  limit = rules["table1_max_param_distance"]
  for v, row in table["rows"].items():
    for column, value in row["measured"].items():
      measured[f"{v} {column}"] = value
      checks[f"{v} {column} < {limit:g}"] = bool(value < limit)
  return _result("table1", measured, checks, rules=rules)


def _count(summary: dict, level: float) -> int:
  return int(summary["reconstructed"][f"ssim_ge_{level:g}"])


def verdict_fig5(uniform: dict, tuned: dict, rules: dict = RULES) -> dict:
  """Fig. 5 from the summary.json of the uniform and the tuned DecoReco runs."""
  level = rules["ssim_level"]
  measured = {"uniform: reconstructed": _count(uniform, level),
              "tuned: reconstructed": _count(tuned, level), "n_train": tuned["n_train"]}
  checks = {"uniform < tuned": measured["uniform: reconstructed"]
            < measured["tuned: reconstructed"]}
  return _result("fig5", measured, checks, rules=rules)


def verdict_fig6(tuned: dict, rules: dict = RULES) -> dict:
  """Fig. 6 from the tuned run's summary.json."""
  count, n = _count(tuned, rules["ssim_level"]), tuned["n_train"]
  fraction = count / n
  checks = {f"fraction ≥ {rules['fig6_min_fraction']}": fraction >= rules["fig6_min_fraction"],
            "count > 0": count > 0}
  verdict = (REPRODUCED if checks[f"fraction ≥ {rules['fig6_min_fraction']}"]
             else PARTLY if count > 0 else NOT_REPRODUCED)
  return _result("fig6", {"reconstructed": count, "n_train": n, "fraction": fraction}, checks,
                 verdict, rules)


def spearman(x, y) -> float:
  """Spearman rank correlation of float[n] x and y (average ranks for ties); NaN when
  either is constant or n < 2."""
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  if x.size < 2:
    return float("nan")
  if np.all(x == x[0]) or np.all(y == y[0]):  # undefined (scipy would warn and give NaN)
    return float("nan")
  return float(scipy.stats.spearmanr(x, y).statistic)


def verdict_fig7(best_ssim_per_train, phi_train, rules: dict = RULES) -> dict:
  """Fig. 7 from the tuned run's results: best SSIM per training image float[n] and the
  victim's output Φ(x_i) float[n]."""
  best = np.asarray(best_ssim_per_train, np.float64)
  count = int(np.sum(best >= rules["ssim_level"]))
  rho = spearman(best, np.abs(np.asarray(phi_train, np.float64)))
  checks = {"count > 0": count > 0, "ρ(best SSIM, |Φ|) < 0": bool(rho < 0)}
  verdict = (REPRODUCED if all(checks.values()) else PARTLY if count > 0 else NOT_REPRODUCED)
  return _result("fig7", {"reconstructed": count, "n_train": int(best.size),
                          "mean best SSIM": float(best.mean()), "ρ(best SSIM, |Φ|)": rho},
                 checks, verdict, rules)


def verdict_fig8(train_ssim, rules: dict = RULES) -> dict:
  """Fig. 8 from the tuned run's per-candidate SSIM to the nearest training image float[m]."""
  ssim = np.asarray(train_ssim, np.float64)
  count = int(np.sum(ssim >= rules["ssim_level"]))
  fraction = count / ssim.size
  checks = {"some candidates resemble a training image": count > 0,
            f"fraction < {rules['fig8_max_fraction']}": fraction < rules["fig8_max_fraction"]}
  verdict = (NOT_REPRODUCED if count == 0 else REPRODUCED if all(checks.values()) else PARTLY)
  return _result("fig8", {"candidates ≥ level": count, "candidates": int(ssim.size),
                          "fraction": fraction}, checks, verdict, rules)


def verdict_fig9(results: dict, rules: dict = RULES) -> dict:
  """Fig. 9 from the partition run's results (train_l2, partition_l2, train_ssim,
  partition_ssim: float[m] each)."""
  means = {k: float(np.mean(results[k]))
           for k in ("train_l2", "partition_l2", "train_ssim", "partition_ssim")}
  measured, checks = _closer_to_partition("", means["train_l2"], means["partition_l2"],
                                          means["train_ssim"], means["partition_ssim"])
  return _result("fig9", measured, checks, rules=rules)


def line_trend(records: list[dict], fixed_key: str, free_key: str) -> float:
  """Spearman ρ between λ and the mean L2 to train along the line ``fixed_key`` = 1
  (NaN if the line has fewer than two points)."""
  line = sorted((r for r in records if np.isclose(r[fixed_key], 1.0)), key=lambda r: r[free_key])
  return spearman([r[free_key] for r in line], [r["l2_to_train"] for r in line])


_LINES = {"fig11": ("lambda2", "lambda1"), "fig12": ("lambda1", "lambda2")}


def verdict_landscape(name: str, landscapes: dict, rules: dict = RULES) -> dict:
  """Fig. 10, 11 or 12 from {attack: landscape.json records} of both landscapes."""
  lines = [name] if name in _LINES else list(_LINES)
  measured, checks = {}, {}
  limit = rules["landscape_max_spearman"]
  for attack, records in landscapes.items():
    for line in lines:
      fixed, free = _LINES[line]
      rho = line_trend(records, fixed, free)
      label = f"{attack}, {fixed.replace('lambda', 'λ')} = 1: ρ({free.replace('lambda', 'λ')}"
      measured[f"{label}, L2 to train)"] = rho
      measured[f"{attack}, {fixed.replace('lambda', 'λ')} = 1: L2 to train"] = [
          round(r["l2_to_train"], 3) for r in sorted(
              (r for r in records if np.isclose(r[fixed], 1.0)), key=lambda r: r[free])]
      checks[f"{label}) ≤ {limit}"] = bool(rho <= limit)
  return _result(name, measured, checks, rules=rules)


def verdict_membership(measured: dict, rules: dict = RULES) -> dict:
  """The membership verdict from `trdr.membership.measure` output."""
  rows = [(name, row) for name, run in measured["runs"].items() for row in run["auc"]]
  informative = [(n, r) for n, r in rows if r["informative"] and np.isfinite(r["auc"])]
  numbers = {f"{n}: {r['score']}": r["separability"] for n, r in informative}
  checks = {f"{k} < {rules['membership_supports']}": v < rules["membership_supports"]
            for k, v in numbers.items()}
  if not informative:
    verdict = UNINFORMATIVE
  elif all(checks.values()):
    verdict = REPRODUCED
  elif any(v >= rules["membership_refutes"] for v in numbers.values()):
    verdict = NOT_REPRODUCED
  else:
    verdict = PARTLY
  return _result("membership", {"informative AUCs": len(informative), **numbers}, checks,
                 verdict, rules)


def verdicts(evidence: dict, rules: dict = RULES) -> dict:
  """Every figure's and Table 1's verdict from `collect` output, keyed by artefact."""
  pure, s, res = evidence["pure"], evidence["summaries"], evidence["results"]
  out = {"fig1": verdict_fig1(pure, rules), "fig2": verdict_fig2(pure, rules),
         "fig3": verdict_partition_init("fig3", pure["affine"], rules),
         "fig4": verdict_partition_init("fig4", pure["one_hidden"], rules),
         "table1": verdict_table1(evidence["table1"], rules),
         "fig5": verdict_fig5(s["uniform"], s["tuned"], rules),
         "fig6": verdict_fig6(s["tuned"], rules),
         "fig7": verdict_fig7(res["tuned"]["best_ssim_per_train"], res["tuned"]["phi_train"],
                              rules),
         "fig8": verdict_fig8(res["tuned"]["train_ssim"], rules),
         "fig9": verdict_fig9(res["partition"], rules)}
  for name in ("fig10", "fig11", "fig12"):
    out[name] = verdict_landscape(name, evidence["landscapes"], rules)
  return out
