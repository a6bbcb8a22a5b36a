"""Runkel et al. Figs. 6–8: can an adversary tell the reconstructions that are training images
from those that are not, without the training set?

The paper ranks DecoReco reconstructions by their similarity to the nearest training image,
shows four from the top 10 and one "not even in the top 50" and asks "Can you guess which
one?" (Fig. 6); the training images reveal it (Fig. 7); "without having access to the
training data, an adversary cannot identify whether a reconstructed natural image is part
of the training dataset" (Sec. 4.4). This module makes that a number:

  `ranks`         rank 1 = the reconstruction most similar to its nearest training image
  `quiz`          Fig. 6's five: the best-ranked reconstructions of the four best-
                  reconstructed training images and, fourth, the most realistic-looking
                  reconstruction ranked below ``low_rank``
  `top_vs_low`    the AUC of a realism score — one the adversary can compute without the
                  training set — for the top-ranked against the low-ranked reconstructions

The realism score trdr uses is each reconstruction's SSIM to its nearest image of a public
set disjoint from the training set (the test split: `trdr.evaluation.evaluate.comparison_sets` with
``public=True``, the ``public_ssim`` of a run's results). An AUC whose interval contains 0.5
means the score does not tell top-ranked from low-ranked reconstructions.
"""

from typing import NamedTuple

import numpy as np

from trdr.evaluation import roc

# The paper's ranks: Fig. 6 shows four "among the top 10" and one "not even in the top 50".
QUIZ_TOP = 4
TOP_RANK = 10
LOW_RANK = 50


def ranks(similarity) -> np.ndarray:
  """int[m] rank of every reconstruction by ``similarity`` float[m] to its nearest training
  image (rank 1 = most similar; ties by index)."""
  similarity = np.asarray(similarity, np.float64)
  order = np.argsort(-similarity, kind="stable")
  out = np.empty(order.size, np.int64)
  out[order] = np.arange(1, order.size + 1)
  return out


def _pair(similarity, realism) -> tuple[np.ndarray, np.ndarray]:
  """The two per-reconstruction scores as float64 arrays; ValueError unless equal 1-D."""
  similarity, realism = np.asarray(similarity, np.float64), np.asarray(realism, np.float64)
  if similarity.shape != realism.shape or similarity.ndim != 1:
    raise ValueError(f"similarity {similarity.shape} and realism {realism.shape} must be "
                     "equal 1-D shapes")
  return similarity, realism


class Quiz(NamedTuple):
  """Fig. 6's reconstructions: ``index`` int[≤ 5] into the candidates, ``rank`` int[≤ 5] by
  similarity to the nearest training image, ``odd`` the position (0-based) of the one ranked
  below ``low_rank``."""
  index: np.ndarray
  rank: np.ndarray
  odd: int


def quiz(similarity, nearest, realism, *, top: int = QUIZ_TOP,
         low_rank: int = LOW_RANK) -> Quiz:
  """Runkel et al. Fig. 6: the best-ranked reconstructions of the ``top`` best-reconstructed
  training images and, at position 4 as in the paper, the reconstruction ranked below
  ``low_rank`` that looks most realistic.

  A run reconstructs some training images many times (the tuned `:cpu` run's top 10 held 3
  distinct training images, one of them 7 times), so the top picks are the best-ranked
  reconstruction of each distinct nearest training image, in rank order, as Haim et al.
  count a training image once; their ranks (over all reconstructions) may exceed ``top``.

  Args:
    similarity: float[m] each reconstruction's SSIM to its nearest training image.
    nearest: int[m] the index of that training image.
    realism: float[m] a score without access to the training set (higher = more
      realistic-looking); picks the odd one among the low-ranked.
    top: how many top picks (fewer when fewer training images are nearest to any).
    low_rank: the odd one's rank is > low_rank.
  Returns:
    A `Quiz`.
  Raises:
    ValueError: shapes differ, or m ≤ max(low_rank, top) (no reconstruction ranked that low).
  """
  similarity, realism = _pair(similarity, realism)
  nearest = np.asarray(nearest)
  if nearest.shape != similarity.shape:
    raise ValueError(f"nearest {nearest.shape} must have similarity's shape "
                     f"{similarity.shape}")
  if similarity.size <= max(low_rank, top):
    raise ValueError(f"the quiz needs more than {max(low_rank, top)} reconstructions, "
                     f"got {similarity.size}")
  rank = ranks(similarity)
  order = np.argsort(rank)
  _, first = np.unique(nearest[order], return_index=True)  # each image's best-ranked one
  picks = order[np.sort(first)[:top]]
  low = order[low_rank:]
  odd = int(low[np.argmax(realism[low])])
  odd_at = min(3, picks.size)
  index = np.insert(picks, odd_at, odd)
  return Quiz(index, rank[index], odd_at)


def top_vs_low(similarity, realism, *, top_rank: int = TOP_RANK, low_rank: int = LOW_RANK,
               confidence: float = 0.95) -> dict:
  """Does the realism score tell the top-ranked reconstructions (rank ≤ ``top_rank``) from
  the low-ranked ones (rank > ``low_rank``)? (Runkel et al. Sec. 4.4.)

  Args:
    similarity: float[m] SSIM of each reconstruction to its nearest training image.
    realism: float[m] the adversary's score (higher = more realistic-looking).
  Returns:
    {"auc", "low", "high" (its ``confidence`` interval), "n_top", "n_low"}; AUC > 0.5
    means the top-ranked look more realistic by the score.
  Raises:
    ValueError: shapes differ or a non-finite realism score.
  """
  similarity, realism = _pair(similarity, realism)
  rank = ranks(similarity)
  keep = (rank <= top_rank) | (rank > low_rank)
  positive = rank[keep] <= top_rank
  auc = roc.auc(realism[keep], positive)
  low, high = roc.auc_ci(realism[keep], positive, confidence=confidence)
  return {"auc": auc, "low": low, "high": high, "n_top": int(np.sum(rank <= top_rank)),
          "n_low": int(np.sum(rank > low_rank))}
