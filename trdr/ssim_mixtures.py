"""All-pairs SSIM of queries that are mixtures of a few base images, e.g. the eq. 10 starts
of a landscape (Runkel et al. 2024), query (g, i) = Σ_k w_gk b_ki: the SSIM of `trdr.ssim`
with the pair products of the K bases instead of the G mixtures.

The pair term G*(x'y') of `trdr.ssim`'s engine is linear in the query x, and so is the
centring x' = x − mean x, so a mixture's pair term is the weighted sum of its bases':
per position one (C, K·n, k²) x (C, k², M) product instead of (C, G·n, k²) x (C, k², M),
then G SSIM maps from the queries' own statistics. A landscape's start search (K = 3:
the training set, the partition and the noise set, G = 21 distinct points) takes 2.2-2.5x
less time than the search of the start images (`python experiments/benchmark.py
--sections=evaluation`); the results are the same up to float32 rounding
(tests/test_metrics.py derives the bound).

  `pairwise_ssim_of_mixtures`  float32[G, n, M] SSIM of every (mixture, candidate) pair
  `nearest_neighbours_per_set(..., mixture=)` in `trdr.metrics` runs the same blocks
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from trdr import sharding

from trdr.ssim import (_DEFAULT_CHUNK, FILTER_SIZE, _K1, _K2, _as_float_images,
                       _check_candidates, _check_chunk_size, _check_filter_size,
                       _check_same_image_shape, _chunks, _gaussian_filter_1d, _pad_rows,
                       _prepare, _Prepared, _ssim_map_sum)

__all__ = ["pairwise_ssim_of_mixtures"]


def _check_mixture(queries: jax.Array, mixture: Any, filter_size: int
                   ) -> tuple[jax.Array, jax.Array]:
  """(weights float32[G, K], bases float[K, n, H, W, C]) of ``mixture`` = (weights, bases),
  checked to give the queries float[G, n, H, W, C] as query (g, i) = Σ_k weights[g, k] ·
  bases[k, i].

  Tolerance: an eq. 10 start computed in float32 (`trdr.attacks.init.mixture`: ≤ 6
  roundings of values ≤ s = max|bases| · max_g Σ_k |weights[g, k]|, then the task mean
  added: one more, and the bases themselves shifted by it: one) is within ~8 u s of the
  exact mixture, u = 2^-24; this check's own float32 sum adds ≤ 2K u s. 64 u s (4e-6 for
  pixels in [0, 1]) allows that with a margin, while images that are not these mixtures
  (a pixel level of 1/255 apart) are rejected.

  Raises:
    ValueError: a malformed pair, shapes that do not fit, non-finite weights, or queries
      that are not the mixtures.
  """
  try:
    weights, bases = mixture
  except (TypeError, ValueError) as e:
    raise ValueError("mixture must be a pair (weights float[G, K], bases float[K, n, H, W, "
                     f"C]), got {type(mixture).__name__}") from e
  weights = np.asarray(weights, np.float64)
  if weights.ndim != 2 or not np.all(np.isfinite(weights)):
    raise ValueError(f"mixture weights must be a finite float[G, K], got shape "
                     f"{weights.shape}")
  bases = _as_float_images(bases, "mixture bases", filter_size)
  if bases.ndim != 5 or bases.shape[0] != weights.shape[1]:
    raise ValueError(f"mixture bases must have shape (K, n, H, W, C) with K = "
                     f"{weights.shape[1]} (the weights' columns), got {bases.shape}")
  expected = (weights.shape[0],) + bases.shape[1:]
  if queries.shape != expected:
    raise ValueError(f"queries of a mixture must have shape (G, n, H, W, C) = {expected} "
                     f"(weights {weights.shape}, bases {bases.shape}), got {queries.shape}")
  dtype = jnp.result_type(queries.dtype, bases.dtype)
  mixed = jnp.einsum("gk,k...->g...", jnp.asarray(weights, dtype), bases.astype(dtype),
                     precision=lax.Precision.HIGHEST)
  deviation = float(jnp.max(jnp.abs(queries.astype(dtype) - mixed)))
  scale = float(jnp.max(jnp.abs(bases))) * float(np.max(np.sum(np.abs(weights), axis=1)))
  allowed = 64 * 2.0**-24 * scale
  if not deviation <= allowed:
    raise ValueError(f"the queries are not the mixtures of the bases under the weights: they "
                     f"differ by up to {deviation:.3g} (float32 rounding allows {allowed:.3g})")
  return jnp.asarray(weights, jnp.float32), bases


def _mixture_chunks(queries: jax.Array, bases: jax.Array, chunk_size: int):
  """Yields (start, stop, queries float[G, size, ...], bases float[K, size, ...]) for
  blocks of the n image indices, padded to one size (as `_chunks`).

  A block holds ~4·chunk_size / G indices, i.e. 4·chunk_size queries (the K products per
  position are small; the G SSIM maps set the time): on our 2-core CPU, G = 21 mixtures
  of K = 3 bases x 500 against 1,500 candidates ran 2.16x, 2.51x and 2.34x faster than the
  search of the same images timed in the same process, with 50, 100 and 250 indices per
  block (a prototype of this block; one run each)."""
  n_mix, n = queries.shape[:2]
  by_index = jnp.swapaxes(queries, 0, 1), jnp.swapaxes(bases, 0, 1)  # [n, G or K, ...]
  for start, stop, size in _chunks(n, max(1, -(-4 * chunk_size // n_mix))):
    q, b = (jnp.swapaxes(_pad_rows(x[start:stop], size), 0, 1) for x in by_index)
    yield start, stop, q, b


@functools.partial(jax.jit, static_argnames=("max_val", "filter_size"))
def _mixture_ssim_block(queries: jax.Array, bases: jax.Array, weights: jax.Array,
                        c: _Prepared, *, max_val: float,
                        filter_size: int = FILTER_SIZE) -> jax.Array:
  """float32[G, n, M] SSIM of the queries float[G, n, H, W, C] against M prepared
  candidates, where query (g, i) = sum_k weights[g, k] · bases[k, i] (bases float[K, n, H,
  W, C], weights float32[G, K]): the pair term is linear in the query, and so is its
  centring, so G*(x'y') of query (g, i) is the weighted sum of its K bases' G*(b'y'),
  one product per position for the K·n bases instead of the G·n queries of `_ssim_block`.
  The per-image statistics are the queries' own; the SSIM map is evaluated for each."""
  n_mix, n = queries.shape[:2]
  k_bases = bases.shape[0]
  q = _prepare(queries.reshape((n_mix * n,) + queries.shape[2:]), filter_size)
  bases = _prepare(bases.reshape((k_bases * n,) + bases.shape[2:]), filter_size).centred
  ch, h, w, kn = bases.shape
  m = c.centred.shape[-1]
  k = filter_size
  wo = w - k + 1
  n_pos = (h - k + 1) * wo
  filt = _gaussian_filter_1d(k)
  g = (filt[:, None] * filt[None, :])[None, :, :, None]
  c1 = (_K1 * max_val) ** 2
  c2 = (_K2 * max_val) ** 2

  def at_position(p, acc):
    hp, wp = p // wo, p % wo
    xs = lax.dynamic_slice(bases, (0, hp, wp, 0), (ch, k, k, kn)) * g
    ys = lax.dynamic_slice(c.centred, (0, hp, wp, 0), (ch, k, k, m))
    per_base = lax.dot_general(
        xs.reshape(ch, k * k, kn), ys.reshape(ch, k * k, m),
        (((1,), (1,)), ((0,), (0,))), precision=lax.Precision.HIGHEST,
    ).reshape(ch, k_bases, n, m)

    def of_query(a):  # float32[P, C, G·n] -> [C, G, n] at this position
      return lax.dynamic_index_in_dim(a, p, 0, keepdims=False).reshape(ch, n_mix, n)

    mu0, mc0, s00 = of_query(q.mu), of_query(q.mu_centred), of_query(q.var)
    sd0 = jnp.sqrt(s00)

    def candidate(a):
      return lax.dynamic_index_in_dim(a, p, 0, keepdims=False)[:, None, :]

    mu1, mc1, s11 = candidate(c.mu), candidate(c.mu_centred), candidate(c.var)
    sd1 = jnp.sqrt(s11)

    def of_mixture(j, acc):
      gxy = functools.reduce(jnp.add, [weights[j, b] * per_base[:, b] for b in range(k_bases)])
      pick = lambda a: lax.dynamic_index_in_dim(a, j, 1, keepdims=False)[:, :, None]
      # The G maps set this block's time: the clip without a square root per pair (a
      # prototype ran 2.52x, against 2.23x with it, faster than the search of the images
      # timed in the same process; it does not matter in `_ssim_block`).
      smap = _ssim_map_sum(gxy, pick(mu0), mu1, pick(mc0), mc1, pick(s00), s11, c1, c2,
                           sd=(pick(sd0), sd1))
      return lax.dynamic_update_index_in_dim(
          acc, lax.dynamic_index_in_dim(acc, j, 0, keepdims=False) + smap, j, 0)

    return lax.fori_loop(0, n_mix, of_mixture, acc)

  total = lax.fori_loop(0, n_pos, at_position, jnp.zeros((n_mix, n, m), jnp.float32))
  return total / (n_pos * ch)


def pairwise_ssim_of_mixtures(
    queries: Any,
    candidates: Any,
    weights: Any,
    bases: Any,
    *,
    max_val: float = 1.0,
    chunk_size: int = _DEFAULT_CHUNK,
    filter_size: int = FILTER_SIZE,
) -> jax.Array:
  """`trdr.ssim.pairwise_ssim` of queries that are mixtures of base images.

  Args:
    queries: float[G, n, H, W, C] images in [0, max_val], query (g, i) = Σ_k weights[g, k]
      · bases[k, i] within float32 rounding (`_check_mixture`).
    candidates: float[M, H, W, C] images in [0, max_val], same (H, W, C).
    weights: float[G, K], e.g. `trdr.attacks.init.mixture_weights` (K = 3).
    bases: float[K, n, H, W, C] images in [0, max_val].
    max_val, filter_size: as `trdr.ssim.pairwise_ssim`.
    chunk_size: blocks hold ~4·chunk_size queries (`_mixture_chunks`).

  Returns:
    float32[G, n, M] SSIM values in [-1, 1].

  Raises:
    TypeError: if an input is not floating point.
    ValueError: as `trdr.ssim.pairwise_ssim`, or a malformed mixture, or queries that are
      not its weighted sums.
  """
  _check_chunk_size(chunk_size)
  filter_size = _check_filter_size(filter_size)
  queries = _as_float_images(queries, "queries", filter_size)
  candidates = _check_candidates(candidates, filter_size)
  _check_same_image_shape(queries, candidates, "queries", "candidates")
  weights, bases = _check_mixture(queries, (weights, bases), filter_size)
  if queries.shape[1] == 0 or candidates.shape[0] == 0:
    return jnp.zeros(queries.shape[:2] + candidates.shape[:1], jnp.float32)
  chunks = list(_mixture_chunks(queries, bases, chunk_size))
  blocks = sharding.round_robin(  # block i on local device i mod k
      lambda s, q, b: _mixture_ssim_block(q, b, *s, max_val=float(max_val),
                                          filter_size=filter_size),
      [(q, b) for _, _, q, b in chunks], (weights, _prepare(candidates, filter_size)))
  return jnp.concatenate([x[:, : b - a] for (a, b, _, _), x in zip(chunks, blocks)], axis=1)
