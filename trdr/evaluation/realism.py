"""Runkel et al. Figs. 6–8: can an adversary tell the reconstructions that are training images
from those that are not, without the training set?

The paper ranks DecoReco reconstructions by their similarity to the nearest training image,
shows four from the top 10 and one "not even in the top 50" and asks "Can you guess which
one?" (Fig. 6); the training images reveal it (Fig. 7); "without having access to the
training data, an adversary cannot identify whether a reconstructed natural image is part
of the training dataset" (Sec. 4.4). This module makes that a number:

  `ranks`         rank 1 = the reconstruction most similar to its nearest training image
  `distinct_order` each training image once: its best reconstruction, most similar first
                  (the ranks of Figs. 6 and 7, as Haim et al. count a training image once)
  `scaled_ranks`  the paper's "top 10" and "top 50" of its 1,000 candidates, for m of ours
  `quiz`          Fig. 6's five: the best reconstructions of the four best-reconstructed
                  training images and, fourth, the most realistic-looking reconstruction
                  ranked below ``low_rank``
  `repeated_quiz` Fig. 7's question asked many times of an adversary without the training
                  set, who names the least realistic-looking of five: its success rate
                  against the chance rate 1/5; `pooled_quiz` the same over the pools
                  (`quiz_pools`) of several runs, and with any score of the adversary's
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
# The candidates those ranks are out of: the published DecoReco runs reconstruct m = 2n =
# 1,000 candidates (../shared/paper/reference_settings.md).
PAPER_CANDIDATES = 1000


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
  """Fig. 6's reconstructions: ``index`` int[≤ 5] into the candidates, ``rank`` int[≤ 5]
  over distinct training images (`distinct_order`), ``odd`` the position (0-based) of the
  one ranked below ``low_rank``."""
  index: np.ndarray
  rank: np.ndarray
  odd: int


def scaled_ranks(m: int, candidates: int = PAPER_CANDIDATES) -> tuple[int, int]:
  """The paper's "top 10" and "not even in the top 50" (of its 1,000 candidates) scaled to
  ``m`` candidates: (round(10 m / 1000) but at least `QUIZ_TOP`, so that four can be in
  it; round(50 m / 1000) but at least the first). E.g. m = 200: (4, 10).

  Raises:
    ValueError: m or candidates < 1.
  """
  if m < 1 or candidates < 1:
    raise ValueError(f"m ({m}) and candidates ({candidates}) must be positive")
  top = max(QUIZ_TOP, round(TOP_RANK * m / candidates))
  return top, max(top, round(LOW_RANK * m / candidates))


def distinct_order(similarity, nearest) -> np.ndarray:
  """int[k] the best reconstruction (highest ``similarity``, ties by index) of each of the
  k distinct training images in ``nearest``, most similar first: position r − 1 holds the
  reconstruction of rank r. A run reconstructs some training images many times (the tuned
  `:cpu` run's top 10 held 3 distinct training images, one of them 7 times); Haim et al.
  count a training image once, and so do the quiz's ranks.

  Args:
    similarity: float[m] each reconstruction's SSIM to its nearest training image.
    nearest: int[m] the index of that training image.
  Raises:
    ValueError: shapes differ or are not 1-D.
  """
  similarity, nearest = np.asarray(similarity, np.float64), np.asarray(nearest)
  if similarity.ndim != 1 or nearest.shape != similarity.shape:
    raise ValueError(f"nearest {nearest.shape} must have similarity's 1-D shape "
                     f"{similarity.shape}")
  order = np.argsort(-similarity, kind="stable")
  _, first = np.unique(nearest[order], return_index=True)  # each image's best-ranked one
  return order[np.sort(first)]


def quiz(similarity, nearest, realism, *, top: int = QUIZ_TOP, low_rank: int = LOW_RANK
         ) -> Quiz:
  """Runkel et al. Fig. 6: the best reconstructions of the ``top`` best-reconstructed
  training images and, at position 4 as in the paper, the most realistic-looking
  reconstruction ranked below ``low_rank``, ranks over distinct training images
  (`distinct_order`).

  Args:
    similarity: float[m] each reconstruction's SSIM to its nearest training image.
    nearest: int[m] the index of that training image.
    realism: float[m] a score without access to the training set (higher = more
      realistic-looking); picks the odd one among the low-ranked.
    top: how many top picks (fewer when fewer training images are nearest to any).
    low_rank: the odd one's rank is > low_rank (`scaled_ranks` gives the paper's 50 for m).
  Returns:
    A `Quiz`.
  Raises:
    ValueError: shapes differ, or at most max(low_rank, top) distinct training images are
      nearest to a reconstruction (none ranked that low).
  """
  similarity, realism = _pair(similarity, realism)
  order = distinct_order(similarity, nearest)
  if order.size <= max(low_rank, top):
    raise ValueError(f"the quiz needs more than {max(low_rank, top)} distinct nearest "
                     f"training images, got {order.size}")
  picks = np.arange(min(top, order.size))
  low = np.arange(low_rank, order.size)
  odd = int(low[np.argmax(realism[order[low]])])
  odd_at = min(3, picks.size)
  positions = np.insert(picks, odd_at, odd)
  return Quiz(order[positions], positions + 1, odd_at)


def quiz_pools(similarity, nearest, score, *, top_rank: int, low_rank: int,
               top: int = QUIZ_TOP) -> tuple[np.ndarray, np.ndarray]:
  """Fig. 7's two pools of one run: the adversary's ``score`` of the reconstructions ranked
  ≤ ``top_rank`` and of those ranked > ``low_rank`` (ranks over distinct training images,
  `distinct_order`).

  Args:
    similarity, nearest: float[m], int[m] as in `quiz`.
    score: float[m], the adversary's score (higher = looks more like a training image).
    top_rank, low_rank: the ranks (`scaled_ranks`); top_rank ≥ top.
  Returns:
    (float[top pool], float[low pool]).
  Raises:
    ValueError: shapes differ, top_rank < top, or no distinct training image ranks below
      low_rank.
  """
  similarity, score = _pair(similarity, score)
  order = distinct_order(similarity, nearest)
  if top_rank < top:
    raise ValueError(f"top_rank ({top_rank}) must be at least top ({top})")
  pool_top, pool_low = score[order[:top_rank]], score[order[low_rank:]]
  if pool_top.size < top or pool_low.size == 0:
    raise ValueError(f"the quiz needs {top} distinct training images in the top {top_rank} "
                     f"and one ranked below {low_rank}; got {order.size} in all")
  return pool_top, pool_low


def repeated_quiz(similarity, nearest, realism, *, top_rank: int, low_rank: int,
                  top: int = QUIZ_TOP, draws: int = 1000, resamples: int = 500,
                  confidence: float = 0.95, seed: int = 0) -> dict:
  """Runkel et al. Fig. 7's question, "Can you guess which one?", asked ``draws`` times of an
  adversary without the training set: each draw shows ``top`` of the reconstructions
  ranked ≤ ``top_rank`` and one ranked > ``low_rank`` (`quiz_pools`), and the adversary
  names the least realistic-looking (lowest ``realism``; a tie counts as a miss) as the
  low-ranked one (`pooled_quiz` of the one run's pools).

  Args:
    similarity, nearest, realism: float[m], int[m], float[m] as in `quiz`.
    top_rank, low_rank: the ranks (`scaled_ranks`); top_rank ≥ top.
  Returns and Raises: as `pooled_quiz` and `quiz_pools`.
  """
  return pooled_quiz([quiz_pools(similarity, nearest, realism, top_rank=top_rank,
                                 low_rank=low_rank, top=top)],
                     top=top, draws=draws, resamples=resamples, confidence=confidence,
                     seed=seed)


def pooled_quiz(pools, *, top: int = QUIZ_TOP, draws: int = 1000, resamples: int = 500,
                confidence: float = 0.95, seed: int = 0) -> dict:
  """Fig. 7's quiz over the pools of one or several runs (`quiz_pools` of each: the same
  recipe on other data draws, its ranks each run's own), pooled: each draw shows ``top``
  images of the joint top pool and one of the joint low pool, and the adversary names the
  lowest-scoring one (a tie counts as a miss).

  The success rate's interval is a percentile bootstrap over the two pools (each resampled
  with replacement, ``draws`` draws per resample): the pools are the sample, the draws only
  read them. Chance is 1 / (top + 1).

  Args:
    pools: [(float[top pool], float[low pool]), ...].
  Returns:
    {"success", "low", "high" (its ``confidence`` interval), "chance", "n_top", "n_low",
    "draws"}.
  Raises:
    ValueError: no pools, or the joint top pool holds fewer than ``top``.
  """
  if not pools:
    raise ValueError("the quiz needs the pools of at least one run")
  pool_top = np.concatenate([np.asarray(p[0], np.float64) for p in pools])
  pool_low = np.concatenate([np.asarray(p[1], np.float64) for p in pools])
  if pool_top.size < top or pool_low.size == 0:
    raise ValueError(f"the quiz needs {top} top-ranked images and one low-ranked; got "
                     f"{pool_top.size} and {pool_low.size}")
  rng = np.random.default_rng(seed)

  def rate(tops, lows):
    shown = np.take_along_axis(
        np.broadcast_to(tops, (draws, tops.size)),
        np.argsort(rng.random((draws, tops.size)), axis=1)[:, :top], axis=1)
    odd = lows[rng.integers(lows.size, size=draws)]
    return float(np.mean(odd < shown.min(axis=1)))

  success = rate(pool_top, pool_low)
  boot = [rate(rng.choice(pool_top, pool_top.size), rng.choice(pool_low, pool_low.size))
          for _ in range(resamples)]
  tail = 50 * (1 - confidence)
  low, high = np.percentile(boot, [tail, 100 - tail])
  return {"success": success, "low": float(low), "high": float(high),
          "chance": 1 / (top + 1), "n_top": int(pool_top.size), "n_low": int(pool_low.size),
          "draws": draws}


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
