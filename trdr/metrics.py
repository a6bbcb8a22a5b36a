"""Image and parameter similarity metrics for evaluating reconstructions.

* :func:`ssim` and :func:`pairwise_ssim` (structural similarity of image pairs, and of
  every (query, candidate) pair by an exact fast reformulation) live in
  :mod:`trdr.ssim` and are re-exported here.
* :func:`nearest_neighbours` finds, for each reconstruction, the candidate image with
  the highest SSIM (the "structurally most similar" image), and reports that pair's
  SSIM recomputed with ``dm_pix.ssim`` and its Euclidean distance.
* :func:`pairwise_l2` is the Euclidean distance between images (the distance between
  parameter pytrees, Table 1's quantity, is `trdr.attacks.bilevel.param_distance`).
* :func:`ncc_distances`, :func:`matched_score`, :func:`best_per_candidate` and
  :func:`minmax_scale` score DecoReco reconstructions as Haim et al. (2022) do.
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from trdr import sharding

# Re-exported: callers use trdr.metrics.ssim / pairwise_ssim / pairwise_ssim_of_mixtures.
from trdr.ssim import FILTER_SIZE, pairwise_ssim, ssim
# The SSIM engines' internals that the chunked nearest-neighbour search runs.
from trdr.ssim import (_DEFAULT_CHUNK, _Prepared, _as_float_images, _check_candidates,
                       _check_chunk_size, _check_filter_size, _check_same_image_shape,
                       _chunks, _dm_pix_ssim, _pad_rows, _prepare, _ssim_block)
from trdr.ssim_mixtures import (_check_mixture, _mixture_chunks, _mixture_ssim_block,
                                pairwise_ssim_of_mixtures)

__all__ = [
    "NearestNeighbours",
    "best_buddies",
    "best_per_candidate",
    "matched_score",
    "minmax_scale",
    "ncc_distances",
    "nearest_neighbours",
    "nearest_neighbours_per_set",
    "pairwise_l2",
    "pairwise_ssim",
    "pairwise_ssim_of_mixtures",
    "ssim",
]


# --------------------------------------------------------------------------------- L2


def _l2_rows(a: jax.Array, b: jax.Array) -> jax.Array:
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
  return lax.map(lambda qi: _l2_rows(c, jnp.broadcast_to(qi, c.shape)), q)


def pairwise_l2(queries: Any, candidates: Any) -> jax.Array:
  """Euclidean distance ``||q - c||_2`` over all pixel values of every pair.

  Computed from the differences ``q - c`` themselves (in float32, one query at a time
  against all candidates), not with the matrix-product identity
  ``|q|^2 + |c|^2 - 2 q.c``, which cancels catastrophically for near-identical pairs
  (an absolute error ~sqrt(eps_f32) ||q||: 5e-3 instead of 0 for two identical
  32x32x3 images). Relative error of every distance <= (D + 4) * 2^-24 / 2 to first
  order for D = H*W*C values per image (9.2e-5 for 32x32x3; typically
  ~sqrt(D) * 2^-24), and identical images give exactly 0. Cost: N*M*D fused
  subtract-square-adds, ~0.4M pairs/s of 32x32x3 images on the project's 2-core CPU
  (the identity's matrix product: ~1.3M pairs/s).

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
  _check_same_image_shape(queries, candidates, "queries", "candidates")
  batch = queries.shape[:-3]
  m = candidates.shape[0]
  n = math.prod(batch)
  if n == 0 or m == 0:
    return jnp.zeros(batch + (m,), jnp.float32)
  return _pairwise_l2(queries.reshape((n,) + queries.shape[-3:]), candidates).reshape(
      batch + (m,)
  )


# -------------------------------------------------------------------- nearest neighbour


class NearestNeighbours(NamedTuple):
  """Structurally most similar candidate of each query.

  Attributes:
    index: int32[...] index into the candidates of the highest-SSIM candidate (the
      first one on exact ties).
    ssim: float32[...] SSIM of (query, candidates[index]), recomputed with
      ``dm_pix.ssim``; in [-1, 1].
    l2: float32[...] Euclidean distance ``||query - candidates[index]||_2`` over all
      pixel values, computed directly from the difference: relative error
      <= (D + 4) * 2^-24 / 2 to first order for D = H*W*C (9.2e-5 for 32x32x3),
      exactly 0 for identical images.
  """

  index: jax.Array
  ssim: jax.Array
  l2: jax.Array


@functools.partial(jax.jit, static_argnames=("bounds", "max_val", "filter_size"))
def _nn_block(
    queries: jax.Array, candidates: jax.Array, cand: _Prepared, *, bounds: tuple,
    max_val: float, filter_size: int,
) -> list[tuple[jax.Array, jax.Array, jax.Array]]:
  """For each set ``candidates[start:stop]`` of ``bounds``: (index in the set, dm_pix
  SSIM, L2) of the best candidate for each of n queries [n, H, W, C]."""
  sims = _ssim_block(_prepare(queries, filter_size), cand, max_val=max_val,
                     filter_size=filter_size)
  return _best_in_sets(sims, queries, candidates, bounds, max_val, filter_size)


@functools.partial(jax.jit, static_argnames=("bounds", "max_val", "filter_size"))
def _nn_mixture_block(
    queries: jax.Array, bases: jax.Array, weights: jax.Array, candidates: jax.Array,
    cand: _Prepared, *, bounds: tuple, max_val: float, filter_size: int,
) -> list[tuple[jax.Array, jax.Array, jax.Array]]:
  """`_nn_block` of the mixtures queries float[G, n, H, W, C] = weights · bases
  (`_mixture_ssim_block`); fields [G, n]."""
  sims = _mixture_ssim_block(queries, bases, weights, cand, max_val=max_val,
                             filter_size=filter_size)
  lead = queries.shape[:2]
  best = _best_in_sets(sims.reshape((-1, sims.shape[-1])),
                       queries.reshape((-1,) + queries.shape[2:]), candidates, bounds,
                       max_val, filter_size)
  return [tuple(x.reshape(lead) for x in fields) for fields in best]


def _best_in_sets(sims, queries, candidates, bounds, max_val, filter_size):
  """(index in the set, dm_pix SSIM, L2) of each query's best candidate in each set of
  ``bounds``, from the SSIM float32[n, M] of the n queries against all candidates."""
  out = []
  for start, stop in bounds:
    index = jnp.argmax(sims[:, start:stop], axis=1).astype(jnp.int32)
    matched = candidates[start + index]
    sim = _dm_pix_ssim(queries, matched, max_val=max_val,
                       filter_size=filter_size).astype(jnp.float32)
    out.append((index, sim, _l2_rows(queries, matched)))
  return out


def nearest_neighbours(
    queries: Any,
    candidates: Any,
    *,
    max_val: float = 1.0,
    chunk_size: int = _DEFAULT_CHUNK,
    filter_size: int = FILTER_SIZE,
) -> NearestNeighbours:
  """Finds each query's highest-SSIM candidate (argmax of :func:`pairwise_ssim`).

  The search uses the fast exact all-pairs SSIM (:func:`pairwise_ssim`); the SSIM
  reported for the matched pair is then recomputed with ``dm_pix.ssim``, and the L2
  distance directly as ``||q - c||_2`` (not via the matmul identity). The full
  (N, M) SSIM matrix is never materialised: each chunk of ``chunk_size`` queries
  keeps only its argmax. Ties (equal float32 SSIM) go to the lowest index.

  Args:
    queries: float[..., H, W, C] images in [0, max_val] with any leading batch dims,
      e.g. (25, 500, 32, 32, 3) for 25 grid points x 500 reconstructions.
    candidates: float[M, H, W, C] images in [0, max_val] with the same (H, W, C),
      M >= 1.
    max_val: dynamic range of the pixel values.
    chunk_size: maximum number of queries per jitted block (see
      :func:`pairwise_ssim`).
    filter_size: side of the SSIM window, odd (see :func:`ssim`).

  Returns:
    NearestNeighbours whose fields have the leading shape ``queries.shape[:-3]``.

  Raises:
    TypeError: if an input is not floating point.
    ValueError: if the image shapes differ, images are smaller than the filter,
      candidates is not 4-D or empty, chunk_size < 1 or filter_size is not a positive
      odd int.
  """
  return nearest_neighbours_per_set(queries, {"candidates": candidates}, max_val=max_val,
                                    chunk_size=chunk_size, filter_size=filter_size)[
                                        "candidates"]


def nearest_neighbours_per_set(
    queries: Any,
    sets: dict[str, Any],
    *,
    max_val: float = 1.0,
    chunk_size: int = _DEFAULT_CHUNK,
    filter_size: int = FILTER_SIZE,
    mixture: Any = None,
    devices=None,
) -> dict[str, NearestNeighbours]:
  """`nearest_neighbours` of the queries in each of several candidate sets, in one search.

  Equal to ``{name: nearest_neighbours(queries, c) for name, c in sets.items()}``, but
  each chunk's SSIM statistics are computed once and its matrix products run against
  all sets' candidates together (fewer, larger products; ``python
  experiments/benchmark.py --sections=evaluation`` times it against a search per set).

  Args:
    queries: as `nearest_neighbours`.
    sets: name -> float[M_s, H, W, C] candidates (as `nearest_neighbours`'s), M_s >= 1.
    max_val, chunk_size, filter_size: as `nearest_neighbours`.
    mixture: None, or (weights float[G, K], bases float[K, n, H, W, C]) when the queries
      float[G, n, H, W, C] are their weighted sums, e.g. the eq. 10 starts of a landscape:
      the search's pair products are then computed once per base
      (`pairwise_ssim_of_mixtures`).
    devices: the devices the chunks alternate over (`sharding.round_robin`; None: all local).

  Returns:
    name -> NearestNeighbours (index into that set).

  Raises:
    TypeError, ValueError: as `nearest_neighbours`, for any set (the message names it
      unless it is the only one, "candidates"); as `pairwise_ssim_of_mixtures` for a
      bad mixture.
  """
  _check_chunk_size(chunk_size)
  filter_size = _check_filter_size(filter_size)
  queries = _as_float_images(queries, "queries", filter_size)
  bounds, end = [], 0  # each set's rows [start, stop) in the concatenated candidates
  for name, candidates in sets.items():
    what = "candidates" if name == "candidates" else f"candidates {name!r}"
    candidates = _check_candidates(candidates, filter_size)
    _check_same_image_shape(queries, candidates, "queries", what)
    if candidates.shape[0] == 0:
      raise ValueError(f"{what} must contain at least one image")
    bounds.append((end, end + candidates.shape[0]))
    end = bounds[-1][1]
  batch, img = queries.shape[:-3], queries.shape[-3:]
  n = math.prod(batch)
  if n == 0:
    empty = jnp.zeros(batch, jnp.float32)
    return {name: NearestNeighbours(jnp.zeros(batch, jnp.int32), empty, empty)
            for name in sets}
  candidates = jnp.concatenate([jnp.asarray(c) for c in sets.values()])
  statics = dict(bounds=tuple(bounds), max_val=float(max_val), filter_size=filter_size)
  prepared = _prepare(candidates, filter_size)
  if mixture is None:
    flat, axis = queries.reshape((n,) + img), 0
    chunks = [(a, b, (_pad_rows(flat[a:b], size),)) for a, b, size in _chunks(n, chunk_size)]
    block, shared = _nn_block, (candidates, prepared)
  else:
    weights, bases = _check_mixture(queries, mixture, filter_size)
    chunks = [(a, b, (q, bs)) for a, b, q, bs in _mixture_chunks(queries, bases, chunk_size)]
    block, shared, axis = _nn_mixture_block, (weights, candidates, prepared), 1
  # On 2 CPU devices the start search took 14.18 s against 19.50 s on one, bitwise equal
  # (python experiments/benchmark.py --sections=evaluation, 2026-11-26).
  found = sharding.round_robin(lambda s, *xs: block(*xs, *s, **statics),
                               [c[2] for c in chunks], shared, devices)
  return {name: NearestNeighbours(*(jnp.concatenate([
      lax.slice_in_dim(out[s][f], 0, stop - start, axis=axis)
      for (start, stop, _), out in zip(chunks, found)], axis=axis).reshape(batch)
      for f in range(3))) for s, name in enumerate(sets)}


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
