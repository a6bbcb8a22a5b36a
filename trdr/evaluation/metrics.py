"""Distances between images, and Haim et al.'s matching of reconstructions.

* :func:`pairwise_l2` is the Euclidean distance between images, from the differences
  themselves (`l2_rows`); :func:`nearest_l2` each query's distance to its nearest
  candidate, computing only the pairs that can attain it. (The distance between parameter
  pytrees, Table 1's quantity, is `trdr.victim.param_distance`; SSIM and the
  SSIM-nearest neighbours are `trdr.evaluation.ssim`.)
* :func:`ncc_distances`, :func:`matched_score`, :func:`best_per_candidate`,
  :func:`best_buddies` and :func:`minmax_scale` score DecoReco reconstructions as Haim
  et al. (2022) do.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = [
    "best_buddies",
    "best_per_candidate",
    "l2_rows",
    "matched_score",
    "minmax_scale",
    "ncc_distances",
    "nearest_l2",
    "pairwise_l2",
]


# --------------------------------------------------------------------------------- L2


def l2_rows(a: jax.Array, b: jax.Array) -> jax.Array:
  """float32[n] ||a_i - b_i||_2 of rows a, b [n, ...], from the differences themselves.

  Error: with u = 2^-24 (float32 unit roundoff) and D entries per row, each squared
  difference carries <= 3u relative error (the subtraction, doubled by the square,
  and the square's rounding), their sum in any order adds <= (D - 1)u (all terms are
  >= 0; Higham, "Accuracy and Stability of Numerical Algorithms", 2002, sec. 4.2),
  and the square root halves that and adds u: (D + 4)u/2 to first order, 9.2e-5 for
  D = 32*32*3 (second-order terms, ~((D + 2)u)^2/2, are below u/2 for D < 4000);
  typically ~sqrt(D) u. No cancellation: identical rows give exactly 0.
  """
  d = a.astype(jnp.float32) - b.astype(jnp.float32)
  return jnp.sqrt(jnp.sum((d * d).reshape(d.shape[0], -1), axis=1))


@jax.jit
def _pairwise_l2(q: jax.Array, c: jax.Array) -> jax.Array:
  # One query at a time against all candidates: XLA fuses the difference, square and
  # row sum, so only the [N, M] result is stored (no [N, M, D] difference tensor).
  q, c = q.astype(jnp.float32), c.astype(jnp.float32)
  return lax.map(lambda qi: l2_rows(c, jnp.broadcast_to(qi, c.shape)), q)


def pairwise_l2(queries: Any, candidates: Any) -> jax.Array:
  """Euclidean distance ``||q - c||_2`` over all pixel values of every pair.

  Computed from the differences ``q - c`` themselves (in float32, one query at a time
  against all candidates), not with the matrix-product identity
  ``|q|^2 + |c|^2 - 2 q.c``, which cancels catastrophically for near-identical pairs
  (an absolute error ~sqrt(eps_f32) ||q||: 5e-3 instead of 0 for two identical
  32x32x3 images). Relative error of every distance <= (D + 4) * 2^-24 / 2 to first
  order for D = H*W*C values per image (9.2e-5 for 32x32x3; typically
  ~sqrt(D) * 2^-24), and identical images give exactly 0. Cost: N*M*D fused
  subtract-square-adds (a few times the identity's matrix product; `nearest_l2` uses
  the identity as a prefilter with a proven margin).

  Args:
    queries: float[..., H, W, C] images (any value range).
    candidates: float[M, H, W, C] images with the same (H, W, C).

  Returns:
    float32[..., M] distances, >= 0.

  Raises:
    TypeError: if an input is not floating point.
    ValueError: if the image shapes differ or candidates is not 4-D.
  """
  queries = jnp.asarray(queries)
  candidates = jnp.asarray(candidates)
  for x, name in ((queries, "queries"), (candidates, "candidates")):
    if not jnp.issubdtype(x.dtype, jnp.floating):
      raise TypeError(f"{name} must be floating point, got dtype {x.dtype}")
  if queries.ndim < 3:
    raise ValueError(f"queries must have shape (..., H, W, C), got {queries.shape}")
  if candidates.ndim != 4:
    raise ValueError(f"candidates must have shape (M, H, W, C), got {candidates.shape}")
  if queries.shape[-3:] != candidates.shape[-3:]:
    raise ValueError(f"queries and candidates must have the same image shape (H, W, C), got "
                     f"{queries.shape[-3:]} and {candidates.shape[-3:]}")
  batch = queries.shape[:-3]
  m = candidates.shape[0]
  n = math.prod(batch)
  if n == 0 or m == 0:
    return jnp.zeros(batch + (m,), jnp.float32)
  return _pairwise_l2(queries.reshape((n,) + queries.shape[-3:]), candidates).reshape(
      batch + (m,)
  )


# float32 unit roundoff, and float64's for the prefilter of `nearest_l2`.
_U32, _U64 = 2.0**-24, 2.0**-53
_l2_pairs = jax.jit(l2_rows)


def nearest_l2(queries, candidates) -> np.ndarray:
  """The distance of each query to its nearest candidate: ``pairwise_l2(queries,
  candidates).min(-1)``, computing only the pairs that can attain the minimum.

  The exact distances of `pairwise_l2` (from the differences) cost D operations
  per pair; the float64 identity |q|² + |c|² − 2 q·c, one matrix product, bounds them
  first. Its error is at most (D + 2) u64 (|q| + |c|)² (each of the three length-D sums
  within D·u64 of |q|², |c|², 2|q||c| in any order, Higham 2002 sec. 3.1, and two
  additions; doubled here for the second-order terms). A float32 distance is within
  δ = (D + 4) u32 / 2 of the true one (`l2_rows`; doubled too), so a candidate
  whose squared distance exceeds the smallest upper bound times ((1 + δ)/(1 − δ))² can
  beat no other in float32: only the rest is computed, by `pairwise_l2`'s own float32
  formula (`l2_rows`), as the Fig. 9 trace needs after every chunk.

  Args:
    queries: float[..., H, W, C]; candidates: float[M, H, W, C], M ≥ 1 (any range).
  Returns:
    float32[...], ≥ 0 (NaN for a query with a non-finite pixel).
  """
  lead, shape = np.shape(queries)[:-3], np.shape(candidates)[1:]
  q = np.asarray(queries, np.float32).reshape(-1, math.prod(shape))
  c = np.asarray(candidates, np.float32).reshape(len(candidates), -1)
  q64, c64 = q.astype(np.float64), c.astype(np.float64)
  qq, cc = np.einsum("ij,ij->i", q64, q64), np.einsum("ij,ij->i", c64, c64)
  approx = qq[:, None] + cc[None, :] - 2 * (q64 @ c64.T)
  err = 2 * (q.shape[1] + 2) * _U64 * (np.sqrt(qq)[:, None] + np.sqrt(cc)[None, :]) ** 2
  delta = (q.shape[1] + 4) * _U32
  bound = np.min(approx + err, axis=1, keepdims=True) * ((1 + delta) / (1 - delta)) ** 2
  rows, cols = np.nonzero(approx - err <= bound)
  size = 1 << max(len(rows) - 1, 0).bit_length()  # padded: one compilation per power of 2
  pick = lambda x, i: np.pad(x[i], ((0, size - len(i)), (0, 0)))
  d = np.asarray(_l2_pairs(pick(q, rows), pick(c, cols)))[:len(rows)]
  out = np.full(len(q), np.inf, np.float32)
  np.minimum.at(out, rows, d)
  out[~np.isfinite(approx).all(axis=1)] = np.nan  # a non-finite query, as pairwise_l2
  return out.reshape(lead)


# ------------------------------------------------------- DecoReco (Haim et al. 2022)


def minmax_scale(images: Any) -> jax.Array:
  """Each image scaled to span [0, 1]: (x − min x) / (max x − min x), per image.

  Haim et al. 2022 show and score reconstructions this way after adding the mean back.

  Args:
    images: float[..., H, W, C].
  Returns:
    float[..., H, W, C] in [0, 1] (a constant image maps to 0).
  """
  x = jnp.asarray(images)
  lo = jnp.min(x, axis=(-3, -2, -1), keepdims=True)
  hi = jnp.max(x, axis=(-3, -2, -1), keepdims=True)
  return (x - lo) / jnp.where(hi > lo, hi - lo, 1.0)


@functools.partial(jax.jit, static_argnames="downsample")
def ncc_distances(queries: Any, candidates: Any, downsample: int = 2) -> jax.Array:
  """Haim et al.'s CIFAR distance: squared L2 between per-image, per-channel
  standardised images after a bicubic downsample by ``downsample``.

  Equivalent to 2·P·(1 − normalised cross-correlation) for P = pixels per channel
  after downsampling, summed over channels.

  Args:
    queries: float[Q, H, W, C].
    candidates: float[M, H, W, C].
    downsample: integer factor (2 in the reference code: ½ resolution).
  Returns:
    float32[Q, M] ≥ 0.
  """
  def prepare(x):
    x = jnp.asarray(x, jnp.float32)
    n, h, w, c = x.shape
    x = jax.image.resize(x, (n, h // downsample, w // downsample, c), "bicubic")
    mean = jnp.mean(x, axis=(1, 2), keepdims=True)
    std = jnp.std(x, axis=(1, 2), keepdims=True)
    return ((x - mean) / jnp.where(std > 0, std, 1.0)).reshape(n, -1)

  q, c = prepare(queries), prepare(candidates)
  sq = (jnp.sum(q * q, axis=1)[:, None] + jnp.sum(c * c, axis=1)[None, :]
        - 2 * jnp.matmul(q, c.T, precision=lax.Precision.HIGHEST))
  return jnp.maximum(sq, 0.0)


def best_per_candidate(similarity: Any, larger_is_better: bool = True
                       ) -> tuple[jax.Array, jax.Array]:
  """For every candidate (column), its best query (row): at most one match per candidate.

  Args:
    similarity: float[..., Q, M], e.g. SSIM of Q reconstructions against M training
      images (leading batch dims allowed).
    larger_is_better: True for similarities (SSIM), False for distances.
  Returns:
    (value float[..., M], index int32[..., Q-axis argmax/argmin]).
  """
  s = jnp.asarray(similarity)
  if larger_is_better:
    return jnp.max(s, axis=-2), jnp.argmax(s, axis=-2).astype(jnp.int32)
  return jnp.min(s, axis=-2), jnp.argmin(s, axis=-2).astype(jnp.int32)


def best_buddies(distances: Any) -> tuple[jax.Array, jax.Array]:
  """Haim et al.'s "best buddies": a query (reconstruction) and a candidate (training
  image) that are each other's nearest neighbour.

  Args:
    distances: float[..., Q, M] (smaller = nearer; e.g. `ncc_distances`).
  Returns:
    (buddy bool[..., M]: candidate m's nearest query has m as its nearest candidate,
     index int32[..., M]: candidate m's nearest query).
  """
  d = jnp.asarray(distances)
  nearest_query = jnp.argmin(d, axis=-2).astype(jnp.int32)            # [..., M]
  nearest_candidate = jnp.argmin(d, axis=-1).astype(jnp.int32)        # [..., Q]
  back = jnp.take_along_axis(nearest_candidate, nearest_query, axis=-1)
  return back == jnp.arange(d.shape[-1], dtype=jnp.int32), nearest_query


def matched_score(distances: Any, k: int = 10) -> jax.Array:
  """Haim et al.'s in-run score: mean of the k smallest per-training-image distances.

  Each training image (column) is matched to its closest reconstruction (row), so a
  reconstruction counts at most once per training image; lower is better.

  Args:
    distances: float[..., Q, M] (e.g. `ncc_distances`), leading batch dims allowed.
    k: number of best-matched training images averaged (10 in the reference); at most M.
  Returns:
    float[...] score.
  Raises:
    ValueError: k < 1 or k > M.
  """
  d = jnp.asarray(distances)
  if not 1 <= k <= d.shape[-1]:
    raise ValueError(f"k must be in [1, {d.shape[-1]}] (training images), got {k}")
  best = jnp.min(d, axis=-2)
  return jnp.mean(jnp.sort(best, axis=-1)[..., :k], axis=-1)
