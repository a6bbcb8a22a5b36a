"""ROC statistics of a membership score: AUC with a bootstrap CI, TPR at low FPR, the curve.

A score is oriented once, before any data is seen: higher means "member". Positives are
members, negatives non-members. Everything here is numpy and scipy on 1-D arrays.

  auc         P(score of a member > score of a non-member) + ½ P(tie) (Mann–Whitney U)
  auc_ci      its stratified bootstrap CI (`scipy.stats.bootstrap`, members and
              non-members resampled separately, so every resample has both)
  tpr_at_fpr  the largest TPR of a threshold whose FPR is at most the given level (Carlini
              et al. 2022, "Membership inference attacks from first principles")
  tpr_p_value the p-value of that TPR against a score that knows nothing (Fisher's exact
              test of members and non-members above the threshold)
  roc_curve   (FPR, TPR) at every threshold
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


def summary(scores, positive, *, fprs=(0.01, 0.1), confidence: float = 0.95,
            n_resamples: int = 2000, seed: int = 0) -> dict:
  """`auc`, `auc_ci`, `tpr_at_fpr` of one score, and the p-values of both against a score
  that knows nothing: the AUC's by the two-sided Mann–Whitney U test, the TPR's by
  `tpr_p_value`.

  Returns:
    {"members": int, "non_members": int, "auc": float, "ci": [low, high], "p_auc": float,
     "tpr_at_fpr": {str(fpr): float}, "p_tpr": {str(fpr): float}}.
  """
  scores, positive = _checked(scores, positive)
  both = positive.any() and not positive.all()
  return {"members": int(positive.sum()), "non_members": int((~positive).sum()),
          "auc": auc(scores, positive),
          "ci": list(auc_ci(scores, positive, confidence=confidence,
                            n_resamples=n_resamples, seed=seed)),
          "p_auc": float(scipy.stats.mannwhitneyu(scores[positive], scores[~positive]).pvalue)
          if both else float("nan"),
          "tpr_at_fpr": {f"{f:g}": tpr_at_fpr(scores, positive, f) for f in fprs},
          "p_tpr": {f"{f:g}": tpr_p_value(scores, positive, f) for f in fprs}}
