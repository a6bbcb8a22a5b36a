"""ROC statistics of a membership score: AUC with a bootstrap CI, TPR at low FPR, the curve.

A score is oriented once, before any data is seen: higher means "member". Positives are
members, negatives non-members. Everything here is numpy and scipy on 1-D arrays.

  auc         P(score of a member > score of a non-member) + ½ P(tie) (Mann–Whitney U)
  auc_ci      its stratified bootstrap CI (`scipy.stats.bootstrap`, members and
              non-members resampled separately, so every resample has both)
  auc_cluster_ci  its bootstrap CI over clusters (victims): each resample draws whole
              clusters with replacement and pools their images
  auc_per_cluster the AUC within each cluster (the spread over victims)
  mean_ci     the Student t interval of the mean of per-cluster AUCs (the interval over
              victims that the membership rule uses: it keeps its level with few clusters)
  tpr_at_fpr  the largest TPR of a threshold whose FPR is at most the given level (Carlini
              et al. 2022, "Membership inference attacks from first principles")
  tpr_p_value the p-value of that TPR against a score that knows nothing (Fisher's exact
              test of members and non-members above the threshold)
  roc_curve   (FPR, TPR) at every threshold
  precision_at_top  the members among the images a threshold selects, at thresholds
              that select the top k (the adversary's confidence in what it names)
  summary     all of these for one score
"""

import numpy as np
import scipy.stats


def _checked(scores, positive) -> tuple[np.ndarray, np.ndarray]:
  scores, positive = np.asarray(scores, np.float64), np.asarray(positive, bool)
  if scores.ndim != 1 or scores.shape != positive.shape:
    raise ValueError(f"scores {scores.shape} and positive {positive.shape} must be equal "
                     "1-D shapes")
  if not np.all(np.isfinite(scores)):
    raise ValueError("scores must be finite")
  return scores, positive


def auc(scores, positive) -> float:
  """ROC AUC = P(score of a positive > score of a negative) + ½ P(tie) (Mann–Whitney U).

  Args:
    scores: float[n], finite.
    positive: bool[n], the class of each score.
  Returns:
    The AUC in [0, 1]; NaN when either class is empty.
  Raises:
    ValueError: shapes differ, not 1-D, or a non-finite score.
  """
  scores, positive = _checked(scores, positive)
  n_pos, n_neg = int(positive.sum()), int((~positive).sum())
  if n_pos == 0 or n_neg == 0:
    return float("nan")
  u = scipy.stats.mannwhitneyu(scores[positive], scores[~positive]).statistic
  return float(u / (n_pos * n_neg))


def _auc_statistic(pos, neg, axis=-1):
  u = scipy.stats.mannwhitneyu(pos, neg, axis=axis).statistic
  return u / (pos.shape[axis] * neg.shape[axis])


def auc_ci(scores, positive, *, confidence: float = 0.95, n_resamples: int = 2000,
           seed: int = 0) -> tuple[float, float]:
  """The percentile bootstrap CI of `auc` over images, members and non-members resampled
  separately (their counts fixed).

  Args:
    scores, positive: as `auc`.
    confidence: the CI's level in (0, 1).
    n_resamples: bootstrap resamples.
    seed: the resampling's seed.
  Returns:
    (low, high) in [0, 1]; (NaN, NaN) when either class has fewer than 2 images. A score
    that ties everywhere has the degenerate CI (0.5, 0.5).
  Raises:
    ValueError: as `auc`, or confidence outside (0, 1).
  """
  if not 0.0 < confidence < 1.0:
    raise ValueError(f"confidence must be in (0, 1), got {confidence}")
  scores, positive = _checked(scores, positive)
  pos, neg = scores[positive], scores[~positive]
  if len(pos) < 2 or len(neg) < 2:
    return float("nan"), float("nan")
  if np.ptp(scores) == 0.0:
    return 0.5, 0.5
  result = scipy.stats.bootstrap((pos, neg), _auc_statistic, vectorized=True, paired=False,
                                 confidence_level=confidence, n_resamples=n_resamples,
                                 method="percentile", rng=np.random.default_rng(seed))
  return float(result.confidence_interval.low), float(result.confidence_interval.high)


def _pair_counts(scores, positive, inverse, k):
  """U[i, j]: the Mann–Whitney U of cluster i's positives against cluster j's negatives
  (pairs ordered correctly, ties counted ½); float[k, k]."""
  u = np.zeros((k, k))
  for i in range(k):
    pos = scores[positive & (inverse == i)]
    for j in range(k):
      neg = scores[~positive & (inverse == j)]
      if len(pos) and len(neg):
        u[i, j] = scipy.stats.mannwhitneyu(pos, neg).statistic
  return u


def auc_cluster_ci(scores, positive, clusters, *, confidence: float = 0.95,
                   n_resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
  """The percentile bootstrap CI of `auc` over clusters (e.g. victims): each resample draws
  the clusters with replacement and pools their images, so the interval carries the
  spread between clusters that an i.i.d. bootstrap over images leaves out when the images
  of one cluster share a victim.

  The AUC of a resample is exact and needs no re-ranking: with w the number of draws of
  each cluster, P and N its positives and negatives and U the clusters' pairwise
  Mann–Whitney counts (`_pair_counts`), AUC = wᵀUw / ((wᵀP)(wᵀN)). A resample without
  a positive or a negative has no AUC; such resamples are dropped (the bootstrap
  conditional on both classes, the same condition `auc_ci`'s stratification imposes).
  With few clusters the percentile interval is too narrow: with three clusters there are
  ten distinct resamples, and a random score's interval can miss 0.5
  (tests/test_membership.py). `mean_ci` is the interval over victims that keeps its level.

  Args:
    scores, positive: as `auc`.
    clusters: int or str[n], the cluster of each score.
  Returns:
    (low, high) in [0, 1]; (NaN, NaN) with fewer than 2 clusters, fewer than 2 positives or
    negatives, or fewer than half the resamples holding both classes.
  Raises:
    ValueError: as `auc`, clusters of another shape, or confidence outside (0, 1).
  """
  if not 0.0 < confidence < 1.0:
    raise ValueError(f"confidence must be in (0, 1), got {confidence}")
  scores, positive = _checked(scores, positive)
  clusters = np.asarray(clusters)
  if clusters.shape != scores.shape:
    raise ValueError(f"clusters {clusters.shape} must have the scores' shape {scores.shape}")
  ids, inverse = np.unique(clusters, return_inverse=True)
  k = len(ids)
  if k < 2 or positive.sum() < 2 or (~positive).sum() < 2:
    return float("nan"), float("nan")
  n_pos = np.bincount(inverse[positive], minlength=k).astype(np.float64)
  n_neg = np.bincount(inverse[~positive], minlength=k).astype(np.float64)
  u = _pair_counts(scores, positive, inverse, k)
  draws = np.random.default_rng(seed).integers(0, k, size=(n_resamples, k))
  w = np.stack([np.bincount(d, minlength=k) for d in draws]).astype(np.float64)
  pairs = (w @ n_pos) * (w @ n_neg)
  both = pairs > 0
  if both.sum() < n_resamples / 2:
    return float("nan"), float("nan")
  aucs = np.einsum("ri,ij,rj->r", w[both], u, w[both]) / pairs[both]
  tail = 50 * (1 - confidence)
  low, high = np.percentile(aucs, [tail, 100 - tail])
  return float(low), float(high)


def mean_ci(values, confidence: float = 0.95) -> tuple[float, float]:
  """The Student t interval of the mean of ``values`` (e.g. the AUC of each victim: each
  victim one replicate of the experiment, its AUC's spread the between-victim and the
  within-victim sampling variation together), `scipy.stats.t`.

  Returns:
    (low, high); (NaN, NaN) with fewer than two finite values; (mean, mean) when they are
    all equal.
  Raises:
    ValueError: confidence outside (0, 1).
  """
  if not 0.0 < confidence < 1.0:
    raise ValueError(f"confidence must be in (0, 1), got {confidence}")
  values = np.asarray(values, np.float64)
  values = values[np.isfinite(values)]
  if len(values) < 2:
    return float("nan"), float("nan")
  mean, sem = float(np.mean(values)), float(scipy.stats.sem(values))
  if sem == 0.0:
    return mean, mean
  low, high = scipy.stats.t.interval(confidence, len(values) - 1, loc=mean, scale=sem)
  return float(low), float(high)


def auc_per_cluster(scores, positive, clusters) -> dict:
  """{cluster: `auc` of its own images} (NaN where a class is empty), clusters sorted."""
  scores, positive = _checked(scores, positive)
  clusters = np.asarray(clusters)
  return {c.item(): auc(scores[clusters == c], positive[clusters == c])
          for c in np.unique(clusters)}


def tpr_at_fpr(scores, positive, fpr: float) -> float:
  """The largest TPR over thresholds ("member" when score > threshold) whose FPR ≤ ``fpr``.

  With N non-members, at most floor(fpr · N) of them may score above the threshold, so the
  threshold is the (floor(fpr · N) + 1)-th largest non-member score and a member counts
  when its score is strictly above it: ties never buy a true positive.

  Args:
    scores, positive: as `auc`.
    fpr: the false-positive rate in [0, 1].
  Returns:
    TPR in [0, 1]; NaN when either class is empty.
  Raises:
    ValueError: as `auc`, or fpr outside [0, 1].
  """
  pos, neg, threshold = _low_fpr_threshold(scores, positive, fpr)
  if threshold is None:
    return float("nan") if len(pos) == 0 or len(neg) == 0 else 1.0
  return float(np.mean(pos > threshold))


def _low_fpr_threshold(scores, positive, fpr: float):
  """(member scores, non-member scores, the threshold of `tpr_at_fpr`: the
  (floor(fpr · N) + 1)-th largest of the N non-member scores; None when a class is empty
  or every non-member may score above it)."""
  if not 0.0 <= fpr <= 1.0:
    raise ValueError(f"fpr must be in [0, 1], got {fpr}")
  scores, positive = _checked(scores, positive)
  pos, neg = scores[positive], np.sort(scores[~positive])[::-1]
  allowed = int(np.floor(fpr * len(neg) + 1e-9))
  if len(pos) == 0 or allowed >= len(neg):
    return pos, neg, None
  return pos, neg, neg[allowed]


def tpr_p_value(scores, positive, fpr: float) -> float:
  """One-sided p-value of `tpr_at_fpr`'s TPR against a score that knows nothing: Fisher's
  exact test that members lie above its threshold more often than non-members do (the
  2 × 2 table of members and non-members above and not above it). Under that null the
  threshold is as random as the members' side of it, which a binomial test of the TPR
  against ``fpr`` ignores (and with few non-members the threshold's FPR is not ``fpr``).

  Returns:
    p in [0, 1]; NaN when either class is empty.
  Raises:
    ValueError: as `tpr_at_fpr`.
  """
  pos, neg, threshold = _low_fpr_threshold(scores, positive, fpr)
  if threshold is None:
    return float("nan") if len(pos) == 0 or len(neg) == 0 else 1.0
  pos_above, neg_above = int(np.sum(pos > threshold)), int(np.sum(neg > threshold))
  table = [[pos_above, len(pos) - pos_above], [neg_above, len(neg) - neg_above]]
  return float(scipy.stats.fisher_exact(table, alternative="greater").pvalue)


def roc_curve(scores, positive) -> tuple[np.ndarray, np.ndarray]:
  """(FPR float[k], TPR float[k]) of "member when score ≥ t" at every distinct score t, from
  (0, 0) to (1, 1).

  Raises:
    ValueError: as `auc`, or either class empty.
  """
  scores, positive = _checked(scores, positive)
  if positive.all() or not positive.any():
    raise ValueError("the ROC curve needs members and non-members")
  thresholds = np.unique(scores)[::-1]
  at_least = scores[None, :] >= thresholds[:, None]
  tpr = (at_least & positive).sum(1) / positive.sum()
  fpr = (at_least & ~positive).sum(1) / (~positive).sum()
  return np.concatenate([[0.0], fpr]), np.concatenate([[0.0], tpr])


def precision_at_top(scores, positive, sizes) -> list[list[int]]:
  """The members among the images that score at least the k-th largest score, for each k
  of ``sizes`` that is at most n and for k = n (every image): what an adversary who names
  the top k as members gets right. Ties at the threshold are all selected (a threshold on
  the score cannot split them), so ``selected`` ≥ k.

  Args:
    scores, positive: as `auc`; either class may be empty.
    sizes: positive ints, the k's.
  Returns:
    [[k, selected, members among them], ...], k ascending and distinct; [] for n = 0.
  Raises:
    ValueError: as `auc`, or a size < 1.
  """
  scores, positive = _checked(scores, positive)
  if any(int(k) < 1 for k in sizes):
    raise ValueError(f"sizes must be positive, got {list(sizes)}")
  n = len(scores)
  order = np.sort(scores)[::-1]
  out = []
  for k in sorted({int(k) for k in sizes if int(k) <= n} | ({n} if n else set())):
    chosen = scores >= order[k - 1]
    out.append([k, int(chosen.sum()), int(np.sum(positive & chosen))])
  return out


def summary(scores, positive, *, fprs=(0.01, 0.1), confidence: float = 0.95,
            n_resamples: int = 2000, seed: int = 0, clusters=None) -> dict:
  """`auc`, its CI, `tpr_at_fpr` of one score, and the p-values of both against a score
  that knows nothing: the AUC's by the two-sided Mann–Whitney U test, the TPR's by
  `tpr_p_value`.

  Args:
    scores, positive: as `auc`.
    fprs, confidence, n_resamples, seed: the low-FPR levels and the bootstrap's settings.
    clusters: None (the images are the unit: "ci" is `auc_ci`), or the cluster (victim) of
      each score: "ci" is then `mean_ci` of the per-cluster AUCs, clipped to [0, 1] (NaN
      with fewer than two clusters with both classes); the image-level interval is kept
      as "ci_images", the cluster bootstrap's as "ci_bootstrap" (`auc_cluster_ci`).
  Returns:
    {"members": int, "non_members": int, "auc": float, "ci": [low, high], "p_auc": float,
     "tpr_at_fpr": {str(fpr): float}, "p_tpr": {str(fpr): float}}; with ``clusters`` also
    "ci_images", "ci_bootstrap": [low, high], "clusters": int (how many), "cluster_ids":
    [...] and "per_cluster": [AUC within each, NaN where a class is empty] in that order.
    The p-values treat the images as independent (with clusters they are
    anti-conservative: a "can tell" from them errs towards telling).
  """
  scores, positive = _checked(scores, positive)
  both = positive.any() and not positive.all()
  ci = list(auc_ci(scores, positive, confidence=confidence, n_resamples=n_resamples,
                   seed=seed))
  out = {"members": int(positive.sum()), "non_members": int((~positive).sum()),
         "auc": auc(scores, positive), "ci": ci,
         "p_auc": float(scipy.stats.mannwhitneyu(scores[positive], scores[~positive]).pvalue)
         if both else float("nan"),
         "tpr_at_fpr": {f"{f:g}": tpr_at_fpr(scores, positive, f) for f in fprs},
         "p_tpr": {f"{f:g}": tpr_p_value(scores, positive, f) for f in fprs}}
  if clusters is not None:
    per = auc_per_cluster(scores, positive, clusters)
    out.update(ci=[float(x) for x in np.clip(mean_ci(list(per.values()), confidence), 0, 1)],
               ci_images=ci,
               ci_bootstrap=list(auc_cluster_ci(scores, positive, clusters,
                                                confidence=confidence,
                                                n_resamples=n_resamples, seed=seed)),
               clusters=len(per), cluster_ids=list(per), per_cluster=list(per.values()))
  return out
