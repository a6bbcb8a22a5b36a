"""Verdicts of Runkel et al. Sec. 4.4 (Figs. 5–9): the DecoReco attack's reconstructions,
from the tuned, untuned and partition runs' summaries and per-image arrays. Pure functions
in the form of `trdr.verdicts`, which applies them to the runs and to their start images.
"""

import numpy as np
import scipy.stats

from trdr import realism
from trdr.claims import NOT_TESTED, RULES, verdict_of
from trdr.evaluate import own_start_fraction


def _count(summary: dict, level: float) -> int:
  return int(summary["reconstructed"][f"ssim_ge_{level:g}"])


def verdict_fig5(untuned: dict, tuned: dict, rules: dict = RULES) -> dict:
  """Fig. 5 from the summary.json of the untuned (σ = 1) and the tuned DecoReco runs."""
  level, most = rules["ssim_level"], rules["fig5_max_untuned"]
  u, t = _count(untuned, level), _count(tuned, level)
  buddies = lambda summary: int(summary["reconstructed_best_buddies"][f"ssim_ge_{level:g}"])
  measured = {"untuned: reconstructed": u, "tuned: reconstructed": t,
              # Haim et al.'s matching, as context: best-buddy pairs (NCC) at the level.
              "untuned: best buddies": buddies(untuned), "tuned: best buddies": buddies(tuned),
              "n_train": tuned["n_train"]}
  checks = {f"untuned ≤ {most}": u <= most, "untuned < tuned": u < t}
  return verdict_of("fig5", measured, checks, rules=rules)


def _quiz(train_ssim, train_index, public_ssim, rules):
  """Fig. 6's quiz (`trdr.realism.quiz`) and its measured numbers; None when there are too
  few reconstructions for a rank below rules["low_rank"]."""
  if np.size(train_ssim) <= rules["low_rank"]:
    return None, {"reconstructions": int(np.size(train_ssim))}
  q = realism.quiz(train_ssim, train_index, public_ssim, top=rules["fig6_top"],
                   low_rank=rules["low_rank"])
  ssim, real = np.asarray(train_ssim)[q.index], np.asarray(public_ssim)[q.index]
  return q, {"quiz ranks": [int(r) for r in q.rank],
             "quiz nearest training images": [int(i) for i in np.asarray(train_index)[q.index]],
             "quiz SSIM to nearest training image": [round(float(x), 3) for x in ssim],
             "quiz realism (SSIM to nearest public image)": [round(float(x), 3) for x in real],
             "reconstructions": int(np.size(train_ssim))}


def _top_four_and_odd(q, train_ssim, rules) -> dict:
  """The quiz's checks: its top picks are four distinct training images reconstructed
  (each SSIM ≥ the level) and "among the top 10"; the odd one is not reconstructed."""
  ssim = np.asarray(train_ssim)[q.index]
  top, top_rank = np.delete(ssim, q.odd), np.delete(q.rank, q.odd)
  level, four = rules["ssim_level"], rules["fig6_top"]
  return {f"{four} distinct training images, each SSIM ≥ {level}": bool(
              top.size == four and np.all(top >= level)),
          f"the {four} among the top {rules['top_rank']}": bool(
              top.size == four and np.all(top_rank <= rules["top_rank"])),
          f"the low-ranked one SSIM < {level}": bool(ssim[q.odd] < level)}


def verdict_fig6(train_ssim, train_index, public_ssim, rules: dict = RULES) -> dict:
  """Fig. 6 from the tuned run's per-reconstruction SSIM to the nearest training image
  float[m], that image's index int[m], and the SSIM to the nearest public (test-split)
  image float[m]."""
  q, measured = _quiz(train_ssim, train_index, public_ssim, rules)
  if q is None:
    return verdict_of("fig6", measured, {}, NOT_TESTED, rules)
  return verdict_of("fig6", measured, _top_four_and_odd(q, train_ssim, rules), rules=rules)


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
  """Fig. 7 from the tuned run: the quiz's reveal (SSIM to the nearest training / public
  image float[m] each, the nearest training image's index int[m]) and, as context, Haim et
  al.'s SSIM-vs-|Φ| finding (best SSIM per training image float[n], the victim's output
  Φ(x_i) float[n])."""
  best = np.asarray(best_ssim_per_train, np.float64)
  rho = spearman(best, np.abs(np.asarray(phi_train, np.float64)))
  q, measured = _quiz(train_ssim, train_index, public_ssim, rules)
  measured["ρ(best SSIM, |Φ|) (Haim et al.)"] = rho
  if q is None:
    return verdict_of("fig7", measured, {}, NOT_TESTED, rules)
  real = np.asarray(public_ssim)[q.index]
  checks = {**_top_four_and_odd(q, train_ssim, rules),
            "the least realistic-looking of the five is not the low-ranked one": bool(
                np.argmin(real) != q.odd)}
  return verdict_of("fig7", measured, checks, rules=rules)


def verdict_fig8(train_ssim, public_ssim, rules: dict = RULES) -> dict:
  """Fig. 8 from the tuned run's per-reconstruction SSIM to the nearest training image and
  to the nearest public image, float[m] each: does the realism score tell top-ranked from
  low-ranked reconstructions (`trdr.realism.top_vs_low`)?"""
  ssim = np.asarray(train_ssim, np.float64)
  level, top_rank = rules["ssim_level"], rules["top_rank"]
  measured = {"reconstructions": int(ssim.size),
              f"reconstructions with SSIM ≥ {level}": int(np.sum(ssim >= level))}
  if ssim.size <= rules["low_rank"]:
    return verdict_of("fig8", measured, {}, NOT_TESTED, rules)
  t = realism.top_vs_low(ssim, public_ssim, top_rank=top_rank, low_rank=rules["low_rank"])
  measured.update({"realism AUC, top vs low-ranked": t["auc"],
                   "95% interval": [t["low"], t["high"]], "top": t["n_top"],
                   "low-ranked": t["n_low"]})
  top = ssim[realism.ranks(ssim) <= top_rank]
  checks = {f"the top {top_rank} each SSIM ≥ {level}": bool(np.all(top >= level)),
            "the realism AUC's interval reaches 0.5": bool(t["low"] <= 0.5)}
  return verdict_of("fig8", measured, checks, rules=rules)


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
  checks = {f"own start nearest for > {rules['majority']:g}": fraction > rules["majority"],
            "≥ 1 training image recovered (best buddies)": count >= 1}
  return verdict_of("fig9", measured, checks, rules=rules)
