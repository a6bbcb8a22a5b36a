"""Structural similarity (SSIM): dm_pix's SSIM and an exact, fast all-pairs engine.

* :func:`ssim` is the structural similarity index (SSIM) of Wang, Bovik, Sheikh &
  Simoncelli, "Image quality assessment: from error visibility to structural
  similarity", IEEE TIP 13(4), 2004, computed by ``dm_pix.ssim`` (its defaults: an
  11x11 Gaussian window with sigma 1.5, 'valid' padding, k1=0.01, k2=0.03, the SSIM
  map averaged over positions and channels), its window applied as two banded-matrix
  products (``filter_fn``: the same filter, 6x faster than its ``jnp.convolve``).
* :func:`pairwise_ssim` computes the same quantity for every (query, candidate) pair
  through an exact algebraic reformulation (see below) that is 10-35x faster than
  ``dm_pix.ssim`` batched over pairs; it is tested against ``dm_pix.ssim`` evaluated in
  float64 on every pair, within a float32 rounding bound derived per pair from the images
  (tests/test_metrics.py, ``_ssim_bound``: 1e-4 to 5e-4 on CIFAR-10 images; measured 3e-7).

Both are re-exported by :mod:`trdr.metrics`, whose ``nearest_neighbours`` runs the
engine below (``_prepare``, ``_ssim_block``, ``_chunks``) chunk by chunk.

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
(`trdr.ssim_mixtures`), and the products are those of the K·n bases instead of the
G·n queries; the SSIM map is still evaluated per query, from its own statistics. The
default landscape's 21 distinct starts (K = 3) take 2.2-2.5x less time this way.

Measured on the project's 2-core AVX-512 CPU (2026-11-23, quiet), 500 x 1500 pairs of
32x32x3 images: 1.66 s per block, ~0.45M pairs/s (its matrix products at ~160 GFLOP/s,
near the float32 peak; the SSIM-map arithmetic is hidden behind them), ~0.38M pairs/s
for the main job's whole search with the per-image statistics and the matched pairs'
`dm_pix.ssim` (80 s for 20,500 x 1,500), peak RSS 0.8 GB; ``jit(vmap(dm_pix.ssim))``
over the pairs runs at 8-16k pairs/s.
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import dm_pix
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from trdr import sharding

__all__ = ["pairwise_ssim", "ssim"]

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
  the same sums of the same products (only their order differs, within rounding). On
  our 2-core CPU `dm_pix.ssim` of 500 pairs of 32x32x3 images takes 31 ms with it and
  189 ms with its `jnp.convolve` form. The result has dtype ``result_type(z, filt)``,
  as `jnp.convolve`'s.
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


def pairwise_ssim(
    queries: Any,
    candidates: Any,
    *,
    max_val: float = 1.0,
    chunk_size: int = _DEFAULT_CHUNK,
    filter_size: int = FILTER_SIZE,
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
      into equal blocks (padded to one size, so one compilation). Throughput is
      flat for 256-1000 on a 2-core CPU with M = 1500 candidates of 32x32x3.
    filter_size: side of the Gaussian window, odd (see :func:`ssim`).

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
      _prepare(candidates, filter_size))
  return jnp.concatenate([x[: b - a] for (a, b, _), x in zip(chunks, blocks)],
                         axis=0).reshape(batch + (m,))
