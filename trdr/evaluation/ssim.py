"""Structural similarity (SSIM): dm_pix's SSIM and an exact, fast all-pairs engine.

* :func:`ssim` is the structural similarity index (SSIM) of Wang, Bovik, Sheikh &
  Simoncelli, "Image quality assessment: from error visibility to structural
  similarity", IEEE TIP 13(4), 2004, computed by ``dm_pix.ssim`` (its defaults: an
  11x11 Gaussian window with sigma 1.5, 'valid' padding, k1=0.01, k2=0.03, the SSIM
  map averaged over positions and channels), its window applied as two banded-matrix
  products (``filter_fn``: the same filter, several times faster than its
  ``jnp.convolve``).
* :func:`pairwise_ssim` computes the same quantity for every (query, candidate) pair
  through an exact algebraic reformulation (see below), an order of magnitude faster
  than ``dm_pix.ssim`` batched over pairs; it is tested against ``dm_pix.ssim`` evaluated
  in float64 on every pair, within a float32 rounding bound derived per pair from the
  images (tests/test_metrics.py, ``_ssim_bound``).

* :func:`pairwise_ssim_of_mixtures` is :func:`pairwise_ssim` of queries that are
  weighted sums of a few base images (below).
* :func:`nearest_neighbours` and :func:`nearest_neighbours_per_set` find each query's
  highest-SSIM candidate with the same engine, chunk by chunk, never storing the whole
  SSIM matrix, and report that pair's SSIM recomputed by ``dm_pix.ssim`` and its L2
  distance.

The public functions check their inputs; everything prefixed ``_`` is the engine.

Fast all-pairs SSIM
-------------------
With the normalised k x k Gaussian window ``g`` (k² taps ``g_k > 0``; k = 11 by
default) and ``G * z`` the 'valid' filtering of ``z`` with it (per channel), SSIM
needs, per position ``p`` and
channel ``c``, ``mu_x = G*x``, ``sigma_x^2 = G*(x^2) - mu_x^2`` (the same for ``y``)
and the covariance ``sigma_xy = G*(x y) - mu_x mu_y``. Everything except
``G*(x y)`` depends on one image only and is computed once per image. The pair term is
a weighted inner product of the two images' windows,

    G*(x y)[p, c] = sum_k (g_k x[p + k, c]) y[p + k, c],

so for a chunk of ``n`` queries against ``M`` candidates it is, for each position, a
``(C, n, k²) x (C, k², M)`` batched matrix product. The positions are visited in a
``lax.fori_loop`` that slices the windows straight out of the images (no k²-fold
patch tensor is stored), applies the SSIM-map formula of ``dm_pix.ssim`` (including
its clipping of variances and covariance) to the ``(C, n, M)`` product while it is
still in cache, and accumulates the map's sum. Each image channel is centred on its
mean first (covariances are shift invariant), which makes the covariance more
accurate than dm_pix's uncentred float32 form.

Queries that are mixtures of a few base images (a landscape's eq. 10 starts,
query (g, i) = Σ_k w_gk b_ki) need no product of their own: ``G*(x'y')`` is linear in x,
and so is the centring, so each query's pair term is the weighted sum of its K bases'
(`pairwise_ssim_of_mixtures`), and the products are those of the K·n bases instead of
the G·n queries; the SSIM map is still evaluated per query, from its own statistics
(``python experiments/benchmark.py --sections=evaluation`` times it against the search
of the same images).

Why every pair, not a pruned search
-----------------------------------
An exact pruned search would skip a pair whose cheap upper bound on SSIM is below the
query's best so far. The bound from per-image window statistics (Cauchy–Schwarz on the
covariance: S ≤ l · (2 σx σy + c2) / (σx² + σy² + c2) per window; proof in
``experiments/benchmarks/pruning.py``) is as costly per pair as the SSIM map (it is the map
with σxy replaced by σx σy), and it rules out a pair only where the contrast or luminance
differ by more than the best match's structure can make up. A landscape wants each query's
nearest image in every set, and in the sets a query did not come from its best SSIM is
near that of unrelated images: the bound then rules out almost nothing, so the search
would evaluate nearly every pair exactly and the bound besides. ``make benchmark-pruning``
measures the fraction it could rule out on the main job's starts and reconstructions
(docs/ssim_pruning.md).

"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, NamedTuple

import dm_pix
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from trdr.evaluation import metrics
from trdr.runtime import sharding

__all__ = ["NearestNeighbours", "nearest_neighbours", "nearest_neighbours_per_set",
           "pairwise_ssim", "pairwise_ssim_of_mixtures", "ssim"]

# dm_pix.ssim defaults; pairwise_ssim reproduces exactly these. The window side is
# selectable (`filter_size`): 11 is dm_pix's default, 3 the window of Haim et al.'s counts.
FILTER_SIZE = 11
_FILTER_SIGMA = 1.5
_K1 = 0.01
_K2 = 0.03

_DEFAULT_CHUNK = 512


# ----------------------------------------------------------------------------- checks


def _as_float_images(x: Any, name: str, filter_size: int = FILTER_SIZE) -> jax.Array:
  """Converts ``x`` to a float array of images [..., H, W, C] and checks its shape."""
  x = jnp.asarray(x)
  if not jnp.issubdtype(x.dtype, jnp.floating):
    raise TypeError(
        f"{name} must be a floating-point image array with values in [0, max_val], "
        f"got dtype {x.dtype}"
    )
  if x.ndim < 3:
    raise ValueError(f"{name} must have shape (..., H, W, C), got shape {x.shape}")
  h, w = x.shape[-3], x.shape[-2]
  if h < filter_size or w < filter_size:
    raise ValueError(
        f"{name} has images of size {h}x{w}, smaller than the {filter_size}x"
        f"{filter_size} SSIM filter; H and W must be >= {filter_size}"
    )
  return x


def _check_same_image_shape(a: jax.Array, b: jax.Array, na: str, nb: str) -> None:
  if a.shape[-3:] != b.shape[-3:]:
    raise ValueError(
        f"{na} and {nb} must have the same image shape (H, W, C), got "
        f"{a.shape[-3:]} and {b.shape[-3:]} (full shapes {a.shape} and {b.shape})"
    )


def _check_candidates(candidates: Any, filter_size: int = FILTER_SIZE) -> jax.Array:
  if jnp.ndim(candidates) != 4:
    raise ValueError(
        f"candidates must have shape (M, H, W, C), got shape {jnp.shape(candidates)}"
    )
  return _as_float_images(candidates, "candidates", filter_size)


# ------------------------------------------------------------------------------- SSIM


def _check_filter_size(filter_size: int) -> int:
  if not isinstance(filter_size, (int, np.integer)) or filter_size < 1 or filter_size % 2 == 0:
    raise ValueError(f"filter_size must be a positive odd int, got {filter_size!r}")
  return int(filter_size)


def ssim(a: Any, b: Any, *, max_val: float = 1.0, filter_size: int = FILTER_SIZE) -> jax.Array:
  """Structural similarity index of image pairs (thin wrapper of ``dm_pix.ssim``).

  SSIM as defined by Wang et al., "Image quality assessment: from error visibility
  to structural similarity", IEEE TIP 13(4), 2004, with ``dm_pix.ssim``'s defaults:
  a ``filter_size`` x ``filter_size`` Gaussian window (sigma 1.5; dm_pix's default 11)
  applied per channel with 'valid' padding, k1 = 0.01, k2 = 0.03; the SSIM map is
  averaged over positions and channels (no colour-space transform).

  Unlike ``dm_pix.ssim`` (which takes one image or one batch of equal shape), the
  leading batch dimensions of ``a`` and ``b`` are broadcast against each other
  (NumPy rules); the pairs are then passed to ``dm_pix.ssim`` as one batch, with its
  Gaussian window given as `_blur` (``filter_fn``): the same filter, its sums in another
  order (equal to dm_pix's own within the summation-order bound, 1.6e-11 in float64;
  tests/test_metrics.py).

  Args:
    a: float[..., H, W, C] images with values in [0, max_val]; H, W >= filter_size.
    b: float[..., H, W, C] images, same (H, W, C) as ``a``; batch dims broadcast.
    max_val: dynamic range of the pixel values (1.0 for images in [0, 1]).
    filter_size: side of the Gaussian window, odd (11: dm_pix's default; 3: the window
      of Haim et al. 2022's counts, kornia ``ssim(window_size=3)``, which pads 'same'
      where this is 'valid').

  Returns:
    float[broadcast(a.shape[:-3], b.shape[:-3])] SSIM of each pair, in [-1, 1]
    (1 for identical images). dtype follows ``dm_pix`` (float32 for float32 input).

  Raises:
    TypeError: if an input is not floating point.
    ValueError: if an input has fewer than 3 dims, the image shapes differ, images
      are smaller than the filter, the batch dims do not broadcast, or filter_size is
      not a positive odd int.
  """
  filter_size = _check_filter_size(filter_size)
  a = _as_float_images(a, "a", filter_size)
  b = _as_float_images(b, "b", filter_size)
  _check_same_image_shape(a, b, "a", "b")
  try:
    batch = jnp.broadcast_shapes(a.shape[:-3], b.shape[:-3])
  except ValueError as e:
    raise ValueError(
        f"batch dims of a {a.shape[:-3]} and b {b.shape[:-3]} do not broadcast"
    ) from e
  img = a.shape[-3:]
  if not batch:
    return _dm_pix_ssim(a, b, max_val=float(max_val), filter_size=filter_size)
  n = math.prod(batch)
  a4 = jnp.broadcast_to(a, batch + img).reshape((n,) + img)
  b4 = jnp.broadcast_to(b, batch + img).reshape((n,) + img)
  return _dm_pix_ssim(a4, b4, max_val=float(max_val), filter_size=filter_size).reshape(batch)


def _gaussian_filter_1d(filter_size: int, dtype=jnp.float32) -> jax.Array:
  """dm_pix.ssim's normalised 1D Gaussian, built with its ops; ``dtype`` None gives
  dm_pix's own dtype (float64 when jax_enable_x64 is on)."""
  hw = filter_size // 2
  shift = (2 * hw - filter_size + 1) / 2
  f_i = ((jnp.arange(filter_size) - hw + shift) / _FILTER_SIGMA) ** 2
  filt = jnp.exp(-0.5 * (f_i if dtype is None else f_i.astype(dtype)))
  return filt / jnp.sum(filt)


def _blur(z: jax.Array, filt: jax.Array) -> jax.Array:
  """'valid' filtering of z[..., H, W, C] with ``filt`` ⊗ ``filt``: along W, then H.

  dm_pix.ssim's own filter (`jnp.convolve` vmapped over rows, then columns) as two
  products with banded matrices B[l, v] = filt[k − 1 − (l − v)] for 0 ≤ l − v < k:
  the same sums of the same products (only their order differs, within rounding), as
  two matrix products instead of a convolution per row and column. The result has
  dtype ``result_type(z, filt)``, as `jnp.convolve`'s.
  """
  k = filt.shape[0]

  def banded(length):
    lag = jnp.arange(length)[:, None] - jnp.arange(length - k + 1)[None, :]
    inside = (lag >= 0) & (lag < k)
    return jnp.where(inside, filt[::-1][jnp.clip(lag, 0, k - 1)], 0)

  highest = lax.Precision.HIGHEST
  z = jnp.einsum("...hwc,wv->...hvc", z, banded(z.shape[-2]), precision=highest)
  return jnp.einsum("...hvc,hu->...uvc", z, banded(z.shape[-3]), precision=highest)


@functools.partial(jax.jit, static_argnames=("max_val", "filter_size"))
def _dm_pix_ssim(a: jax.Array, b: jax.Array, *, max_val: float, filter_size: int) -> jax.Array:
  """``dm_pix.ssim`` with its own Gaussian window, passed as `_blur` (``filter_fn``)."""
  filt = _gaussian_filter_1d(filter_size, dtype=None)
  return dm_pix.ssim(a, b, max_val=max_val, filter_size=filter_size,
                     filter_sigma=_FILTER_SIGMA, filter_fn=lambda z: _blur(z, filt))


class _Prepared(NamedTuple):
  """Per-image SSIM statistics, computed once per image set."""

  centred: jax.Array  # float32[C, H, W, N]: x - mean_HW(x), channel-major, batch-minor
  mu: jax.Array  # float32[P, C, N]: local means G*x at the P = H'W' positions
  mu_centred: jax.Array  # float32[P, C, N]: G*(x - mean_HW(x))
  var: jax.Array  # float32[P, C, N]: local variances (centred form), >= eps^2 as in dm_pix


@functools.partial(jax.jit, static_argnames=("filter_size",))
def _prepare(x: jax.Array, filter_size: int = FILTER_SIZE) -> _Prepared:
  x = x.astype(jnp.float32)
  filt = _gaussian_filter_1d(filter_size)
  mu = _blur(x, filt)
  # (Co)variances are shift invariant: sigma_xy = G*(x'y') - mu_x' mu_y' for
  # x' = x - a, y' = y - b. Centring each image channel on its mean keeps the two
  # terms small, so their difference loses less float32 precision than dm_pix's
  # uncentred form (on CIFAR-10 images: max error vs a float64 evaluation of SSIM
  # ~6e-7, against ~5e-6 for dm_pix.ssim in float32).
  mean = jnp.mean(x, axis=(1, 2), keepdims=True)
  xc = x - mean
  mu_c = _blur(xc, filt)
  eps = jnp.finfo(jnp.float32).eps ** 2
  var = jnp.maximum(eps, _blur(xc * xc, filt) - mu_c * mu_c)
  n, ho, wo, c = mu.shape

  def to_pcn(s):
    return jnp.transpose(s, (1, 2, 3, 0)).reshape(ho * wo, c, n)

  return _Prepared(
      jnp.transpose(xc, (3, 1, 2, 0)), to_pcn(mu), to_pcn(mu_c), to_pcn(var)
  )


def _ssim_map_sum(gxy, mu0, mu1, mc0, mc1, s00, s11, c1, c2, sd=None) -> jax.Array:
  """The SSIM map of dm_pix.ssim at one position, summed over the channels: float32[n, M]
  from the pair term ``gxy`` = G*(x'y') float32[C, n, M] of the centred images and the
  per-image local means ``mu``, centred means ``mc`` and variances ``s`` of the queries
  ([C, n, 1]) and candidates ([C, 1, M]); dm_pix's clipping of the covariance to
  ±sqrt(s00 s11), or, given the standard deviations ``sd`` = (sqrt s00, sqrt s11), to
  ±sd0 sd1 (the same within rounding, without a square root per pair)."""
  mu01 = mu0 * mu1
  s01 = gxy - mc0 * mc1
  if sd is None:
    s01 = jnp.sign(s01) * jnp.minimum(jnp.sqrt(s00 * s11), jnp.abs(s01))
  else:
    s01 = jnp.clip(s01, -(sd[0] * sd[1]), sd[0] * sd[1])
  numer = (2 * mu01 + c1) * (2 * s01 + c2)
  denom = (mu0 * mu0 + mu1 * mu1 + c1) * (s00 + s11 + c2)
  smap = numer / denom
  return functools.reduce(jnp.add, [smap[i] for i in range(smap.shape[0])])


@functools.partial(jax.jit, static_argnames=("max_val", "filter_size"))
def _ssim_block(q: _Prepared, c: _Prepared, *, max_val: float,
                filter_size: int = FILTER_SIZE) -> jax.Array:
  """float32[n, M] SSIM of every pair of n prepared queries and M prepared candidates."""
  ch, h, w, n = q.centred.shape
  m = c.centred.shape[-1]
  k = filter_size
  ho, wo = h - k + 1, w - k + 1
  n_pos = ho * wo
  filt = _gaussian_filter_1d(k)
  g = (filt[:, None] * filt[None, :])[None, :, :, None]  # (1, k, k, 1), > 0
  c1 = (_K1 * max_val) ** 2
  c2 = (_K2 * max_val) ** 2
  # Two positions per loop step where possible (slightly better pipelining).
  step = 2 if n_pos % 2 == 0 else 1

  def ssim_map_sum(p):
    hp, wp = p // wo, p % wo
    xs = lax.dynamic_slice(q.centred, (0, hp, wp, 0), (ch, k, k, n)) * g
    ys = lax.dynamic_slice(c.centred, (0, hp, wp, 0), (ch, k, k, m))
    # G*(x'y') at position p for all pairs of centred images x', y':
    # (C, n, k²) x (C, k², M) -> (C, n, M).
    gxy = lax.dot_general(
        xs.reshape(ch, k * k, n),
        ys.reshape(ch, k * k, m),
        (((1,), (1,)), ((0,), (0,))),
        precision=lax.Precision.HIGHEST,
    )

    def at(a):
      return lax.dynamic_index_in_dim(a, p, 0, keepdims=False)

    return _ssim_map_sum(gxy, at(q.mu)[:, :, None], at(c.mu)[:, None, :],
                         at(q.mu_centred)[:, :, None], at(c.mu_centred)[:, None, :],
                         at(q.var)[:, :, None], at(c.var)[:, None, :], c1, c2)

  def body(i, acc):
    for j in range(step):
      acc = acc + ssim_map_sum(i * step + j)
    return acc

  total = lax.fori_loop(0, n_pos // step, body, jnp.zeros((n, m), jnp.float32))
  return total / (n_pos * ch)


def _pad_rows(x: jax.Array, size: int) -> jax.Array:
  if x.shape[0] == size:
    return x
  return jnp.pad(x, ((0, size - x.shape[0]),) + ((0, 0),) * (x.ndim - 1))


def _chunks(n: int, chunk_size: int):
  """Yields (start, stop, size) for n >= 1 rows in equal chunks of <= chunk_size.

  All chunks get the same padded size (one compilation), chosen as small as
  possible: e.g. 12,500 rows with chunk_size 512 give 25 chunks of 500.
  """
  size = -(-n // -(-n // chunk_size))  # ceil(n / ceil(n / chunk_size))
  for start in range(0, n, size):
    yield start, min(start + size, n), size


def _check_chunk_size(chunk_size: int) -> None:
  if not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1:
    raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")


def _on_ready(progress, sizes) -> Callable[[int], None] | None:
  """`sharding.round_robin`'s ``on_ready`` for ``progress(done, total)``, counted in the
  queries of blocks of ``sizes``."""
  if progress is None:
    return None
  done = np.cumsum(sizes)
  return lambda i: progress(int(done[i]), int(done[-1]))


def pairwise_ssim(
    queries: Any,
    candidates: Any,
    *,
    max_val: float = 1.0,
    chunk_size: int = _DEFAULT_CHUNK,
    filter_size: int = FILTER_SIZE,
    progress: Callable[[int, int], None] | None = None,
) -> jax.Array:
  """SSIM of every (query, candidate) pair; equals ``dm_pix.ssim`` on each pair.

  ``out[..., j] == dm_pix.ssim(queries[...], candidates[j])`` up to float32
  rounding (module docstring): same Gaussian window, padding, constants, clipping and mean as
  :func:`ssim`, computed by the exact reformulation described in the module
  docstring (pair term as a batched matrix product). Queries are processed in
  chunks of ``chunk_size``; peak extra memory is O(chunk_size * M) floats plus the
  images themselves.

  Args:
    queries: float[..., H, W, C] images in [0, max_val]; H, W >= filter_size, any C.
    candidates: float[M, H, W, C] images in [0, max_val], same (H, W, C).
    max_val: dynamic range of the pixel values.
    chunk_size: maximum number of queries per jitted block; the queries are split
      into equal blocks (padded to one size, so one compilation); throughput hardly
      depends on it between a few hundred and a thousand.
    filter_size: side of the Gaussian window, odd (see :func:`ssim`).
    progress: called as ``progress(done, total)`` (queries) as each block finishes.

  Returns:
    float32[..., M] SSIM values in [-1, 1].

  Raises:
    TypeError: if an input is not floating point.
    ValueError: if the image shapes differ, images are smaller than the filter,
      candidates is not 4-D, chunk_size < 1 or filter_size is not a positive odd int.
  """
  _check_chunk_size(chunk_size)
  filter_size = _check_filter_size(filter_size)
  queries = _as_float_images(queries, "queries", filter_size)
  candidates = _check_candidates(candidates, filter_size)
  _check_same_image_shape(queries, candidates, "queries", "candidates")
  batch, img = queries.shape[:-3], queries.shape[-3:]
  m = candidates.shape[0]
  n = math.prod(batch)
  if n == 0 or m == 0:
    return jnp.zeros(batch + (m,), jnp.float32)
  flat = queries.reshape((n,) + img)
  chunks = list(_chunks(n, chunk_size))
  blocks = sharding.round_robin(  # block i on local device i mod k
      lambda cand, q: _ssim_block(_prepare(q, filter_size), cand, max_val=float(max_val),
                                  filter_size=filter_size),
      [(_pad_rows(flat[a:b], size),) for a, b, size in chunks],
      _prepare(candidates, filter_size),
      on_ready=_on_ready(progress, [b - a for a, b, _ in chunks]))
  return jnp.concatenate([x[: b - a] for (a, b, _), x in zip(chunks, blocks)],
                         axis=0).reshape(batch + (m,))


# ------------------------------------------------------ mixtures of base images


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
  position are small; the G SSIM maps set the time; ``python experiments/benchmark.py
  --sections=evaluation`` times it against the search of the same images)."""
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
      # The G maps set this block's time: the clip without a square root per pair (a root
      # per pair slowed a prototype of this block noticeably beside the search of the
      # images; it does not matter in `_ssim_block`).
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
    progress: Callable[[int, int], None] | None = None,
) -> jax.Array:
  """`trdr.evaluation.ssim.pairwise_ssim` of queries that are mixtures of base images.

  Args:
    queries: float[G, n, H, W, C] images in [0, max_val], query (g, i) = Σ_k weights[g, k]
      · bases[k, i] within float32 rounding (`_check_mixture`).
    candidates: float[M, H, W, C] images in [0, max_val], same (H, W, C).
    weights: float[G, K], e.g. `trdr.attacks.init.mixture_weights` (K = 3).
    bases: float[K, n, H, W, C] images in [0, max_val].
    max_val, filter_size, progress: as `trdr.evaluation.ssim.pairwise_ssim`.
    chunk_size: blocks hold ~4·chunk_size queries (`_mixture_chunks`).

  Returns:
    float32[G, n, M] SSIM values in [-1, 1].

  Raises:
    TypeError: if an input is not floating point.
    ValueError: as `trdr.evaluation.ssim.pairwise_ssim`, or a malformed mixture, or queries that are
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
      [(q, b) for _, _, q, b in chunks], (weights, _prepare(candidates, filter_size)),
      on_ready=_on_ready(progress, [(b - a) * len(weights) for a, b, _, _ in chunks]))
  return jnp.concatenate([x[:, : b - a] for (a, b, _, _), x in zip(chunks, blocks)], axis=1)


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
    out.append((index, sim, metrics.l2_rows(queries, matched)))
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
    progress: Callable[[int, int], None] | None = None,
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
    progress: as `pairwise_ssim`'s.

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
    flat, axis, per_index = queries.reshape((n,) + img), 0, 1
    chunks = [(a, b, (_pad_rows(flat[a:b], size),)) for a, b, size in _chunks(n, chunk_size)]
    block, shared = _nn_block, (candidates, prepared)
  else:
    weights, bases = _check_mixture(queries, mixture, filter_size)
    chunks = [(a, b, (q, bs)) for a, b, q, bs in _mixture_chunks(queries, bases, chunk_size)]
    block, shared, axis, per_index = _nn_mixture_block, (weights, candidates, prepared), 1, (
        len(weights))
  # Block i on device i mod k: the same program per block on every device, so the result
  # is bitwise the one-device result (python experiments/benchmark.py
  # --sections=evaluation times both).
  found = sharding.round_robin(lambda s, *xs: block(*xs, *s, **statics),
                               [c[2] for c in chunks], shared, devices,
                               on_ready=_on_ready(progress, [
                                   (b - a) * per_index for a, b, _ in chunks]))
  return {name: NearestNeighbours(*(jnp.concatenate([
      lax.slice_in_dim(out[s][f], 0, stop - start, axis=axis)
      for (start, stop, _), out in zip(chunks, found)], axis=axis).reshape(batch)
      for f in range(3))) for s, name in enumerate(sets)}
