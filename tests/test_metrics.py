"""Tests of trdr.evaluation.metrics: SSIM (dm-pix), fast all-pairs SSIM, nearest neighbours, L2."""

import math
from pathlib import Path

import dm_pix
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import trdr
from trdr.evaluation import metrics, ssim

_ASSET = Path(trdr.__file__).parent / "assets" / "cifar10_sample.npz"


# float32 unit roundoff: the rounding error bound of one float32 operation.
_U32 = 2.0**-24
_U64 = 2.0**-53


def _blur64(z, k):
  """dm_pix's k x k Gaussian window (sigma 1.5, 'valid') applied in float64 to z[..., H, W, C]."""
  f = np.exp(-0.5 * ((np.arange(k) - k // 2) / 1.5) ** 2)
  f /= f.sum()
  z = np.lib.stride_tricks.sliding_window_view(z, k, axis=-2) @ f
  return np.lib.stride_tricks.sliding_window_view(z, k, axis=-3) @ f


def _ssim_bound(x, y, k=11, *, engine, max_val=1.0, u=_U32, mixture=None):
  """Bound on |computed - exact| SSIM of the pairs (x, y) (broadcast over the leading dims),
  for dm_pix's formula evaluated with unit roundoff u by `engine`: "pairwise" (trdr's fast
  all-pairs form: channel-centred images, the pair term one k²-term dot), "mixture" (the
  same with the pair term of x the weighted sum of its bases' dots: ``mixture`` = (weights
  float[K, ...], bases float[K, ..., H, W, C], both broadcasting with x's leading dims)) or
  "dm_pix" (the uncentred form of dm_pix.ssim and trdr.evaluation.ssim.ssim: every blur two passes
  of k terms).

  "mixture": the pair term is fl(Σ_k fl(w_k D_k)) with w_k rounded to float32 and each D_k
  a k²-term dot of a centred base b'_k with y', within the "pairwise" dot's count (k² +
  2 taps + 4) u sqrt(B_k B_y) (B_k as B_x, for the base); the rounded weight, the product
  and the K-term sum add (K + 1) u |w_k D_k|, |D_k| <= sqrt(B_k B_y) (Cauchy–Schwarz under
  the window). Σ_k w_k b'_k differs from the query's own centred x' by δ' = δ − mean δ
  (δ = Σ_k w_k b_k − x: the rounding of the mixture, |δ'| <= 2 max|δ|) and by the float32
  means' errors (<= d each, d = HW u max_val, the weights' sum times d for the bases):
  G*(δ' y') and a shift a times G*(y') are each <= their size times sqrt(B_y). The
  query's own means product keeps its count.

  First order in u, from the images' own float64 statistics. Counts of roundings, relative
  to the magnitudes they multiply: each float tap is within `taps` u of the exact Gaussian
  (its exponent f_i <= f_max rounded 3u, so exp moves by 1.5 f_max u; exp itself <= 2u; the
  normalising sum and division k u); a blur is two k-term dots with those taps, so a blurred
  value is within n_mu u of the exact blur of |values|. With B = blur(x²) (uncentred) or
  blur((|x - mean| + d)²) (centred, d bounding the float32 mean's own error HW u), the
  (co)variances s_xx, s_xy carry <= n_var u B_x and n_cov u sqrt(B_x B_y) (blur of the
  squares or of the k² products, minus the rounded product of two blurred means, minus: the
  counts below). SSIM = L C with |L|, |C| <= 1; L = (2 mu_x mu_y + c1) / (mu_x² + mu_y² + c1)
  moves by <= (4 n_mu + 6) u; C = (2 s_xy + c2) / (s_xx + s_yy + c2) by
  (2 e_xy + e_xx + e_yy) / (s_xx + s_yy + c2 - e_xx - e_yy), where e_xy also covers the clip
  of s_xy to +-sqrt(s_xx s_yy) (the excess of |s_xy| over the clip's lower bound); the map's
  own products, sums and division add 8u; the mean of n = H'W'C map values, summed in any
  order, adds n u mean|S| + u. x1.01 covers the second-order terms (< 1e-3 of the bound)."""
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  h, w, ch = x.shape[-3:]
  taps = 1.5 * (k // 2 / 1.5) ** 2 + k + 2
  n_mu = 2 * (k + taps)
  c1, c2 = (0.01 * max_val) ** 2, (0.03 * max_val) ** 2
  mu_x, mu_y = _blur64(x, k), _blur64(y, k)
  xc = x - x.mean(axis=(-3, -2), keepdims=True)
  yc = y - y.mean(axis=(-3, -2), keepdims=True)
  mxc, myc = _blur64(xc, k), _blur64(yc, k)
  s_xx, s_yy = _blur64(xc * xc, k) - mxc**2, _blur64(yc * yc, k) - myc**2
  s_xy = _blur64(xc * yc, k) - mxc * myc
  if engine in ("pairwise", "mixture"):
    d = h * w * u * max_val
    b_x, b_y = _blur64((np.abs(xc) + d) ** 2, k), _blur64((np.abs(yc) + d) ** 2, k)
    # var: blur(xc²) 3u + n_mu, mean² 2 n_mu + 3, minus 1; cov: the k²-term dot of taps²
    # x centred values (k² + 2 taps + 4), the product of the centred means (2 n_mu + 3), minus 1.
    n_var, n_cov = 3 * n_mu + 7, k * k + 2 * taps + 2 * n_mu + 8
  else:
    b_x, b_y = _blur64(x * x, k), _blur64(y * y, k)
    # blur of a rounded product (n_mu + 1), a rounded product of blurs (2 n_mu + 1), minus 1.
    n_var = n_cov = 3 * n_mu + 3
  eps2 = float(np.finfo(np.float32).eps) ** 2  # dm_pix's floor on the variances
  e_xx, e_yy = n_var * u * b_x + eps2, n_var * u * b_y + eps2
  r_lo = np.sqrt(np.maximum(s_xx - e_xx, 0) * np.maximum(s_yy - e_yy, 0))
  e_xy = n_cov * u * np.sqrt(b_x * b_y) + np.maximum(np.abs(s_xy) - r_lo, 0)
  if engine == "mixture":
    weights, bases = (np.asarray(a, np.float64) for a in mixture)
    w_abs = np.abs(weights)[..., None, None, None]
    dot = k * k + 2 * taps + 4
    bc = bases - bases.mean(axis=(-3, -2), keepdims=True)
    b_k = _blur64((np.abs(bc) + d) ** 2, k)
    delta = np.abs(np.sum(weights[..., None, None, None] * bases, axis=0) - x).max(
        axis=(-3, -2, -1), keepdims=True)
    e_xy = (e_xy - dot * u * np.sqrt(b_x * b_y)
            + np.sum(w_abs * (dot + len(weights) + 1) * u * np.sqrt(b_k * b_y), axis=0)
            + (2 * delta + d * (1 + np.sum(w_abs, axis=0))) * np.sqrt(b_y))
  e_c = (2 * e_xy + e_xx + e_yy) / (s_xx + s_yy + c2 - e_xx - e_yy)
  e_l = (4 * n_mu + 6) * u
  per = e_l + (1 + e_l) * e_c + 8 * u
  s = ((2 * mu_x * mu_y + c1) / (mu_x**2 + mu_y**2 + c1)
       * (2 * s_xy + c2) / (s_xx + s_yy + c2))
  n = s.shape[-3] * s.shape[-2] * ch
  axes = (-3, -2, -1)
  return 1.01 * (per.mean(axes) + n * u * (np.abs(s) + per).mean(axes) + u)


def _all_pairs_bound(q, c, k=11, **kw):
  """`_ssim_bound` of every (query, candidate) pair: float[..., M]."""
  return _ssim_bound(np.asarray(q)[..., None, :, :, :], c, k, **kw)


def _against_float64_bound(q, c, k=11, max_val=1.0):
  """The float32 engine's `_ssim_bound` on every pair plus that of a float64 `dm_pix.ssim`
  reference (u = 2^-53): how far apart the two may be, float[N, M]."""
  return (_all_pairs_bound(q, c, k, engine="pairwise", max_val=max_val)
          + _all_pairs_bound(q, c, k, engine="dm_pix", max_val=max_val, u=_U64))


def _assert_clear_leader(vals, margin):
  """Each row's (last axis) largest value leads every other by more than the two values'
  margins: then every evaluation within `margin` of these values has the same argmax."""
  vals = np.asarray(vals, np.float64)
  margin = np.broadcast_to(margin, vals.shape)
  top = np.argmax(vals, -1)[..., None]
  lead = (np.take_along_axis(vals, top, -1) - vals
          - np.take_along_axis(margin, top, -1) - margin)
  np.put_along_axis(lead, top, np.inf, -1)
  assert np.all(lead > 0), f"smallest lead beyond the margins: {lead.min():.3g}"


def _assert_within(actual, desired, bound):
  """|actual - desired| <= bound elementwise (bound: an array of per-pair error bounds)."""
  err = np.abs(np.asarray(actual, np.float64) - np.asarray(desired, np.float64))
  assert np.all(err <= bound), (
      f"max error {err.max():.3g}, max error/bound {np.max(err / bound):.3g} at "
      f"{np.unravel_index(np.argmax(err / bound), err.shape)}")


def _l2_rtol(d):
  """Relative error bound of a float32 L2 distance over d values taken from the
  differences (trdr.evaluation.metrics.l2_rows): (d + 4)u/2 to first order (the subtraction and
  square, 3u per term; the sum of d terms >= 0 in any order, (d - 1)u; halved by the
  square root, which adds u), plus u/2 for the second-order terms, ~((d + 2)u)^2/2,
  which are below u/2 for d < 4000. 9.2e-5 for d = 32*32*3."""
  return (d + 5) * _U32 / 2


def _l2_float64(a, b):
  """Reference ||a - b||_2 over the last three axes, in float64 (float32 inputs are
  exact in float64; its own error, ~d * 1.1e-16 relative, is negligible here)."""
  diff = np.asarray(a, np.float64) - np.asarray(b, np.float64)
  return np.sqrt(np.sum(diff * diff, axis=(-3, -2, -1)))


def _rand(rng, shape):
  return rng.random(shape, dtype=np.float32)


def _smooth(rng, n, h=32, w=32, c=3):
  """Natural-ish images: smooth random fields + edges, in [0, 1]."""
  yy, xx = np.meshgrid(np.linspace(0, 1, h), np.linspace(0, 1, w), indexing="ij")
  out = np.empty((n, h, w, c), np.float32)
  for i in range(n):
    for ch in range(c):
      a, b, ph = rng.uniform(1, 4, 3)
      img = 0.5 + 0.25 * np.sin(2 * np.pi * (a * xx + b * yy) + ph)
      img += 0.2 * (xx > rng.uniform(0.2, 0.8))  # an edge
      out[i, :, :, ch] = img
  return np.clip(out + 0.02 * rng.standard_normal(out.shape), 0, 1).astype(np.float32)


def _real_images(n, rng):
  if _ASSET.exists():
    with np.load(_ASSET) as d:
      imgs = d["train_images"][:n].astype(np.float32) / 255.0
    return imgs
  return _smooth(rng, n)


@jax.jit
def _dm_pix_all_pairs_jit(q, c):
  return jax.vmap(jax.vmap(dm_pix.ssim, (None, 0)), (0, None))(q, c)


def _dm_pix_all_pairs(q, c, dtype=None):
  """Reference: dm_pix.ssim(q[i], c[j]) for every pair, as float[N, M] (in ``dtype``, e.g.
  jnp.float64 under the x64 fixture)."""
  return np.asarray(_dm_pix_all_pairs_jit(jnp.asarray(q, dtype), jnp.asarray(c, dtype)))


# ----------------------------------------------------------------------------- ssim


def test_ssim_identity_is_one():
  rng = np.random.default_rng(0)
  # With a is b, dm_pix's mu_x = mu_y and s_xx = s_yy = s_xy bitwise (the same float32 ops on
  # the same values; sqrt(s * s) = s exactly), so numer / denom is 1 up to an FMA that the
  # compiler may fuse into mu_x² + mu_y² only: <= 3u. Their mean over n = H'W'C values,
  # summed in any order, adds <= n u: (n + 3)u, 8.7e-5 for 32x32x3 (n = 22² · 3).
  for x in (_rand(rng, (4, 32, 32, 3)), _smooth(rng, 4), _real_images(4, rng)):
    np.testing.assert_allclose(ssim.ssim(x, x), np.ones(4), rtol=0,
                               atol=(22 * 22 * 3 + 3) * _U32)
  x1 = _rand(rng, (28, 28, 1))
  np.testing.assert_allclose(ssim.ssim(x1, x1), 1.0, rtol=0, atol=(18 * 18 + 3) * _U32)


def test_ssim_symmetric_and_matches_dm_pix():
  rng = np.random.default_rng(1)
  a, b = _smooth(rng, 5), _rand(rng, (5, 32, 32, 3))
  s_ab, s_ba = ssim.ssim(a, b), ssim.ssim(b, a)
  # Two float32 evaluations of dm_pix's formula (blurs summed in other orders), each within
  # `_ssim_bound` (~2e-4 here) of the exact SSIM: they differ by at most twice that. A wrong
  # window or padding moves SSIM by ~1e-1; the float64 test below checks the window tightly.
  bound = 2 * _ssim_bound(a, b, engine="dm_pix")
  _assert_within(s_ab, s_ba, bound)
  _assert_within(s_ab, dm_pix.ssim(jnp.asarray(a), jnp.asarray(b)), bound)
  assert s_ab.shape == (5,)
  assert np.all(np.asarray(s_ab) < 1.0) and np.all(np.asarray(s_ab) > -1.0)


@pytest.mark.parametrize("filter_size", [3, 11])
def test_ssim_filter_is_dm_pixs_own_in_float64(x64, filter_size):
  """trdr's `ssim` passes dm_pix its Gaussian window as banded-matrix products
  (`filter_fn`); in float64 it equals `dm_pix.ssim` with its own `jnp.convolve` filter to
  twice `_ssim_bound` with u = 2^-53 (each within it of the exact SSIM; ~1e-11): the same
  window, padding and weights, not merely a close one (another window moves SSIM by ~1e-1)."""
  rng = np.random.default_rng(14)
  for shape in ((32, 32, 3), (13, 17, 2)):
    a = rng.random((4,) + shape)
    b = np.clip(a + 0.1 * rng.standard_normal(a.shape), 0, 1)
    ours = np.asarray(ssim.ssim(a, b, filter_size=filter_size))
    assert ours.dtype == np.float64
    ref = np.asarray(jax.jit(dm_pix.ssim, static_argnames="filter_size")(
        jnp.asarray(a), jnp.asarray(b), filter_size=filter_size))
    _assert_within(ours, ref, 2 * _ssim_bound(a, b, filter_size, engine="dm_pix", u=_U64))


def test_ssim_broadcasts_batch_dims():
  rng = np.random.default_rng(2)
  a = _rand(rng, (2, 3, 16, 16, 1))
  b = _rand(rng, (3, 16, 16, 1))
  out = ssim.ssim(a, b)
  assert out.shape == (2, 3)
  # Two float32 evaluations, each within `_ssim_bound` of the exact SSIM.
  bound = 2 * _ssim_bound(a, b, engine="dm_pix")
  for i in range(2):
    for j in range(3):
      _assert_within(out[i, j], dm_pix.ssim(a[i, j], b[j]), bound[i, j])
  assert ssim.ssim(a[0, 0], b[0]).shape == ()


def test_ssim_max_val():
  rng = np.random.default_rng(3)
  a, b = _smooth(rng, 2), _smooth(rng, 2)
  # Exact: scaling the images by 2^8 scales every float32 value of the computation (means
  # by 2^8, (co)variances and c1 = (k1 max_val)², c2 by 2^16) and every rounding with it,
  # so the ratios are bitwise equal (the variances here, > 1e-4, never meet dm_pix's 1.4e-14
  # floor). Ignoring max_val, or scaling c1, c2 otherwise than by max_val², changes SSIM.
  np.testing.assert_array_equal(
      ssim.ssim(256 * a, 256 * b, max_val=256.0), ssim.ssim(a, b)
  )


# -------------------------------------------------------------------- pairwise_ssim


@pytest.mark.parametrize("shape", [(32, 32, 3), (28, 28, 1), (11, 11, 2), (13, 17, 3)])
def test_pairwise_ssim_equals_dm_pix_on_every_pair(x64, shape):
  rng = np.random.default_rng(4)
  q = _rand(rng, (7,) + shape)
  c = _rand(rng, (9,) + shape)
  c[4] = q[2]  # an identical pair
  # chunk_size=3 exercises the padded last chunk (7 = 3 + 3 + 1).
  out = ssim.pairwise_ssim(q, c, chunk_size=3)
  assert out.shape == (7, 9) and out.dtype == jnp.float32
  # Against dm_pix in float64: the float32 engine's `_ssim_bound` (~1e-4 here) plus the
  # reference's own (u = 2^-53). A wrong window, padding or constant moves SSIM by >~1e-2.
  bound = _against_float64_bound(q, c)
  _assert_within(out, _dm_pix_all_pairs(q, c, jnp.float64), bound)
  _assert_within(out[2, 4], 1.0, bound[2, 4])  # the exact SSIM of an identical pair is 1


def test_pairwise_ssim_real_images_and_chunking(x64):
  rng = np.random.default_rng(5)
  imgs = _real_images(24, rng)
  q = np.clip(imgs[:10] + 0.05 * rng.standard_normal(imgs[:10].shape), 0, 1)
  q = q.astype(np.float32)
  c = imgs[8:]
  # Against dm_pix in float64 (float32 dm_pix is itself off by up to ~1e-3 by its worst-case
  # bound on real images: its uncentred G*(xy) - mu_x mu_y cancels): every chunking's
  # float32 result within the engine's `_ssim_bound` (<~5e-4 here) plus the reference's.
  ref = _dm_pix_all_pairs(q, c, jnp.float64)
  bound = _against_float64_bound(q, c)
  for chunk in (1, 4, 256):
    out = ssim.pairwise_ssim(q, c, chunk_size=chunk)
    _assert_within(out, ref, bound)
  # Leading batch dims of the queries.
  out = ssim.pairwise_ssim(q.reshape(2, 5, 32, 32, 3), c)
  assert out.shape == (2, 5, 16)
  _assert_within(out.reshape(10, 16), ref, bound)


@pytest.mark.parametrize("filter_size", [3, 11])
def test_pairwise_ssim_window_equals_dm_pix_float64(x64, filter_size):
  """The selectable window (3: Haim et al.'s counts; 11: dm_pix's default) against
  dm_pix.ssim with the same filter_size evaluated in float64 on every pair.

  Error argument for the tolerance: `_ssim_bound` of the float32 engine (its rounding
  counts: the covariance's k²-term dot, two k-term blur passes, the float32 taps; the
  sensitivity 1/(s_xx + s_yy + c2) of the map; the mean's summation), from these images'
  statistics: <~5e-4 here; plus the float64 reference's own bound (u = 2^-53). (A flat
  4u per (co)variance, as once written here, ignores that a k²-term float32 sum can round
  k² times.) A wrong window or padding changes these SSIMs by ~1e-1.
  """
  rng = np.random.default_rng(13)
  imgs = _real_images(12, rng)
  q = np.clip(imgs[:5] + 0.05 * rng.standard_normal(imgs[:5].shape), 0, 1).astype(np.float32)
  c = imgs[4:]
  out = np.asarray(ssim.pairwise_ssim(q, c, filter_size=filter_size, chunk_size=2))
  ref = np.asarray(jax.jit(jax.vmap(jax.vmap(
      lambda x, y: dm_pix.ssim(x, y, filter_size=filter_size), (None, 0)), (0, None)))(
          jnp.asarray(q, jnp.float64), jnp.asarray(c, jnp.float64)))
  bound = _against_float64_bound(q, c, filter_size)
  _assert_within(out, ref, bound)
  nn = ssim.nearest_neighbours(q, c, filter_size=filter_size)
  # The same float32 SSIMs from a program of another chunk size: each within its bound of
  # the exact value, so the argmax is the same where the exact leader's margin is larger
  # than the two bounds (checked).
  _assert_clear_leader(ref, bound)
  np.testing.assert_array_equal(nn.index, np.argmax(out, axis=1))
  # The two windows are different scales: a window size that is ignored fails here.
  other = np.asarray(ssim.pairwise_ssim(q, c, filter_size=14 - filter_size))
  assert np.max(np.abs(other - out)) > 1e-2


def _eq10_starts(rng, n=5, lambdas=(0.0, 0.3, 1.0)):
  """Eq. 10 starts as a landscape makes them (`trdr.experiment.starts`): the three sets shifted by a
  task mean, mixed in float32 by `init.grid_images`, shifted back. Returns (starts
  float32[G, n, 32, 32, 3] in pixels, weights float64[G, 3], sets: train, partition and
  noise, float32[n, 32, 32, 3] each, in pixels as `evaluate.comparison_sets` gives them)."""
  from trdr.attacks import init as inits
  imgs = _real_images(2 * n, rng)
  raw = (imgs[:n], imgs[n:], _rand(rng, imgs[:n].shape))
  mean = imgs[:n].mean(axis=0)
  shifted = [jnp.asarray(x - mean) for x in raw]
  grid = inits.make_grid(lambdas, lambdas)
  starts = np.asarray(inits.grid_images(grid, *shifted)) + mean
  sets = dict(zip(("train", "partition", "noise"), (np.asarray(x) + mean for x in shifted)))
  return starts, inits.mixture_weights(grid.lambda1, grid.lambda2), sets


def _mixture_bound(q, weights, bases, c, k=11):
  """`_ssim_bound` of the "mixture" engine on every (query, candidate) pair: float[G, n, M]
  for queries [G, n, ...], weights [G, K], bases [K, n, ...], candidates [M, ...]."""
  return _ssim_bound(np.asarray(q)[..., None, :, :, :], c, k, engine="mixture",
                     mixture=(np.asarray(weights).T[:, :, None, None],
                              np.asarray(bases)[:, None, :, None]))


def test_pairwise_ssim_of_mixtures_equals_dm_pix_float64(x64):
  """Queries that are mixtures (eq. 10 starts): the pair term summed from the bases' equals
  dm_pix's SSIM of the queries themselves, evaluated in float64 on every pair. Error
  argument: the "mixture" engine's `_ssim_bound` (the bases' dots, the weighted sum, the
  start's own rounding δ, measured here) plus the float64 reference's own; a wrong weight
  or base moves these SSIMs by >~1e-2. chunk_size 4 gives blocks of ceil(16 / 9) = 2 of
  the 5 image indices (2 + 2 + a padded 1)."""
  rng = np.random.default_rng(21)
  starts, weights, sets = _eq10_starts(rng)
  bases = np.stack(list(sets.values()))
  c = np.concatenate([_real_images(14, rng)[10:], sets["noise"][:2]])
  out = np.asarray(ssim.pairwise_ssim_of_mixtures(starts, c, weights, bases, chunk_size=4))
  assert out.shape == (9, 5, 6) and out.dtype == np.float32
  ref = _dm_pix_all_pairs(starts.reshape(-1, 32, 32, 3), c, jnp.float64).reshape(out.shape)
  bound = (_mixture_bound(starts, weights, bases, c)
           + _all_pairs_bound(starts, c, engine="dm_pix", u=_U64))
  _assert_within(out, ref, bound)
  _assert_within(out[0, [0, 1], [4, 5]], 1.0, bound[0, [0, 1], [4, 5]])  # noise: itself


@pytest.mark.slow  # searches of several shapes; fast tier: test_nearest_neighbours_planted
def test_nearest_neighbours_of_mixtures_equal_the_search_of_the_images():
  """The search of eq. 10 starts as mixtures finds what the search of the images finds.
  Error argument: the two SSIM evaluations of each pair are within the "mixture" and the
  "pairwise" `_ssim_bound` of the exact value (margin: their sum). Where a query's best
  candidate leads the others by more than both margins, the indices are equal. Elsewhere
  (noise-dominated starts against real images: SSIMs near 0 and close) either may be the
  exact best: the mixture's pick is within the margins of the best, measured by the plain
  engine. L2 and the reported SSIM of equal picks are computed on the same matched pair in
  programs of other shapes: within twice their bounds (as
  test_nearest_neighbours_per_set_equals_one_search_per_set)."""
  rng = np.random.default_rng(22)
  starts, weights, sets = _eq10_starts(rng)
  bases = np.stack(list(sets.values()))
  found = ssim.nearest_neighbours_per_set(starts, sets, mixture=(weights, bases),
                                          chunk_size=4)
  plain = ssim.nearest_neighbours_per_set(starts, sets)
  clear_queries = 0
  for name, candidates in sets.items():
    margin = (_mixture_bound(starts, weights, bases, candidates)
              + _all_pairs_bound(starts, candidates, engine="pairwise"))
    sims = np.asarray(ssim.pairwise_ssim(starts, candidates), np.float64)
    mine, theirs = np.asarray(found[name].index), np.asarray(plain[name].index)
    assert mine.shape == (9, 5)
    top2 = np.sort(sims - margin, axis=-1)[..., -2]
    clear = np.take_along_axis(sims - margin, theirs[..., None], -1)[..., 0] > (
        top2 + 2 * margin.max(-1))
    clear_queries += clear.sum()
    np.testing.assert_array_equal(mine[clear], theirs[clear])
    at = lambda a, i: np.take_along_axis(a, i[..., None], -1)[..., 0]
    assert np.all(at(sims, theirs) - at(sims, mine) <= at(margin, mine) + margin.max(-1))
    same = mine == theirs
    np.testing.assert_allclose(np.asarray(found[name].l2)[same],
                               np.asarray(plain[name].l2)[same], rtol=2 * _l2_rtol(3072))
    _assert_within(np.asarray(found[name].ssim)[same], np.asarray(plain[name].ssim)[same],
                   2 * _ssim_bound(starts, candidates[theirs], engine="dm_pix")[same])
  assert clear_queries >= 3 * 45 // 2  # most of the 3 x 45 searches test the indices


def test_a_mixture_that_does_not_give_the_queries_is_refused():
  rng = np.random.default_rng(23)
  starts, weights, sets = _eq10_starts(rng)
  bases = np.stack(list(sets.values()))
  c = sets["train"]
  with pytest.raises(ValueError, match="not the mixtures of the bases"):
    ssim.pairwise_ssim_of_mixtures(starts, c, weights[::-1], bases)
  bad = starts.copy()
  bad[3, 1, 0, 0, 0] += 1 / 255  # one pixel one level off
  with pytest.raises(ValueError, match="not the mixtures of the bases"):
    ssim.nearest_neighbours_per_set(bad, sets, mixture=(weights, bases))
  with pytest.raises(ValueError, match=r"queries of a mixture must have shape \(G, n"):
    ssim.pairwise_ssim_of_mixtures(starts[:, :4], c, weights, bases)
  with pytest.raises(ValueError, match="bases must have shape"):
    ssim.pairwise_ssim_of_mixtures(starts, c, weights, bases[:2])
  with pytest.raises(ValueError, match="weights must be a finite"):
    ssim.pairwise_ssim_of_mixtures(starts, c, weights * np.nan, bases)
  with pytest.raises(ValueError, match="mixture must be a pair"):
    ssim.nearest_neighbours_per_set(starts, {"train": c}, mixture=weights)


def test_pairwise_ssim_max_val(x64):
  rng = np.random.default_rng(6)
  q, c = 255 * _smooth(rng, 3), 255 * _smooth(rng, 4)
  out = ssim.pairwise_ssim(q, c, max_val=255.0)
  f = jax.jit(jax.vmap(jax.vmap(lambda x, y: dm_pix.ssim(x, y, max_val=255.0), (None, 0)),
                       (0, None)))
  # Against dm_pix in float64 on the same (rounded) float32 inputs: `_ssim_bound` scales
  # with max_val (relative errors, c1 and c2 ∝ max_val²). c1, c2 not scaled by max_val²
  # would change these SSIMs by far more.
  bound = _against_float64_bound(q, c, max_val=255.0)
  _assert_within(out, f(jnp.asarray(q, jnp.float64), jnp.asarray(c, jnp.float64)), bound)


def test_pairwise_ssim_empty():
  rng = np.random.default_rng(7)
  c = _rand(rng, (4, 16, 16, 1))
  assert ssim.pairwise_ssim(np.zeros((0, 16, 16, 1), np.float32), c).shape == (0, 4)


# --------------------------------------------------------------------- pairwise_l2


def test_pairwise_l2_equals_direct_norm():
  rng = np.random.default_rng(8)
  q, c = _smooth(rng, 6), _rand(rng, (5, 32, 32, 3))
  c[1] = q[3]
  out = metrics.pairwise_l2(q, c)
  assert out.shape == (6, 5) and out.dtype == jnp.float32
  # Computed from the differences: relative error <= _l2_rtol(D) on every pair. (The
  # matmul identity |q|^2 + |c|^2 - 2 q.c cancels: its absolute error is up to
  # ~eps_f32 * |q|^2 in the square, i.e. ~1e-2 in the distance of these images.)
  np.testing.assert_allclose(out, _l2_float64(q[:, None], c[None]),
                             rtol=_l2_rtol(32 * 32 * 3), atol=0)
  assert float(out[3, 1]) == 0.0  # identical images: no cancellation, exactly 0
  assert metrics.pairwise_l2(q.reshape(2, 3, 32, 32, 3), c).shape == (2, 3, 5)


def test_l2_of_identical_images_is_zero_and_matched_l2_is_accurate():
  """The L2 reported for each nearest neighbour (and by pairwise_l2) is ||q - c|| from
  the differences: exactly 0 for an identical pair, otherwise within the float32
  rounding bound of the float64 norm, also for bright images with large norms (where
  the matmul identity cancels worst) and for 28x28x1 images."""
  rng = np.random.default_rng(13)
  for shape in ((32, 32, 3), (28, 28, 1)):
    d = math.prod(shape)
    c = (0.9 + 0.1 * _rand(rng, (8,) + shape)).astype(np.float32)  # bright: large |c|
    c[:4] = _smooth(rng, 4, *shape)
    noisy = np.clip(c[[5, 2, 7]] + 0.01 * rng.standard_normal((3,) + shape), 0, 1)
    q = np.concatenate([c[[6, 1]], noisy.astype(np.float32)])  # 2 identical, 3 noisy
    nn = ssim.nearest_neighbours(q, c, chunk_size=2)
    np.testing.assert_array_equal(nn.index, [6, 1, 5, 2, 7])
    assert nn.l2.dtype == jnp.float32
    assert np.all(np.asarray(nn.l2[:2]) == 0.0)  # exactly, not merely small
    ref = _l2_float64(q, c[np.asarray(nn.index)])
    assert np.all(ref[2:] > 0.1)  # the noisy pairs are not 0
    np.testing.assert_allclose(nn.l2, ref, rtol=_l2_rtol(d), atol=0)
    pairwise = metrics.pairwise_l2(q, c)
    assert np.all(np.asarray(pairwise)[[0, 1], [6, 1]] == 0.0)
    np.testing.assert_allclose(pairwise, _l2_float64(q[:, None], c[None]),
                               rtol=_l2_rtol(d), atol=0)


def test_nearest_l2_is_the_min_of_pairwise_l2():
  """`metrics.nearest_l2` (the Fig. 9 trace's distance to the nearest training image)
  computes only the pairs its float64 prefilter cannot rule out; its result is still
  ``pairwise_l2(q, c).min(-1)``: the same float32 formula on the pair that attains it.
  Planted: identical images (0), near-ties q ± e (equal in exact arithmetic, so both
  must survive the prefilter), bright images (large |q|, where the identity's error
  bound is widest), a NaN query, and leading batch dims."""
  rng = np.random.default_rng(21)
  c = np.concatenate([_smooth(rng, 30), (0.9 + 0.1 * _rand(rng, (10, 32, 32, 3)))])
  e = 0.004 * rng.standard_normal((5, 32, 32, 3)).astype(np.float32)
  base = c[[3, 7, 31, 12, 35]] * 0.5 + 0.25
  c = np.concatenate([c, base + e, base - e]).astype(np.float32)
  q = np.concatenate([c[[4, 33]], base, _smooth(rng, 13),
                      (0.9 + 0.1 * _rand(rng, (4, 32, 32, 3)))]).astype(np.float32)
  q[-1, 5, 5, 1] = np.nan
  full = np.asarray(metrics.pairwise_l2(q, c)).min(axis=-1)
  got = metrics.nearest_l2(q.reshape(4, 6, 32, 32, 3), c)
  assert got.shape == (4, 6) and got.dtype == np.float32
  got = got.reshape(-1)
  assert np.isnan(got[-1]) and np.isnan(full[-1])
  assert np.all(got[:2] == 0.0)
  np.testing.assert_array_equal(got[:-1], full[:-1])
  # And each is the float64 nearest distance within the float32 bound (`_l2_rtol`).
  exact = _l2_float64(q[:-1, None], c[None]).min(axis=-1)
  np.testing.assert_allclose(got[:-1], exact, rtol=_l2_rtol(32 * 32 * 3), atol=0)


# -------------------------------------------------------------- nearest_neighbours


def test_nearest_neighbours_planted():
  rng = np.random.default_rng(9)
  c = _smooth(rng, 40)
  perm = rng.permutation(40)[:12]
  q = np.clip(c[perm] + 0.03 * rng.standard_normal((12, 32, 32, 3)), 0, 1)
  q = q.astype(np.float32)
  nn = ssim.nearest_neighbours(q, c, chunk_size=5)
  np.testing.assert_array_equal(nn.index, perm)
  assert nn.index.dtype == jnp.int32
  assert nn.ssim.dtype == jnp.float32 and nn.l2.dtype == jnp.float32
  direct = dm_pix.ssim(jnp.asarray(q), jnp.asarray(c[perm]))
  # Two float32 evaluations of dm_pix's formula, each within `_ssim_bound` of the exact.
  _assert_within(nn.ssim, direct, 2 * _ssim_bound(q, c[perm], engine="dm_pix"))
  np.testing.assert_allclose(nn.l2, _l2_float64(q, c[perm]), rtol=_l2_rtol(32 * 32 * 3),
                             atol=0)
  # The index is the argmax of the dm_pix SSIM row: float32 dm_pix and the float32 engine
  # are each within their bounds of the exact SSIM, and each row's leader clears both.
  ref = _dm_pix_all_pairs(q, c)
  _assert_clear_leader(ref, _all_pairs_bound(q, c, engine="dm_pix")
                       + _all_pairs_bound(q, c, engine="pairwise"))
  np.testing.assert_array_equal(nn.index, np.argmax(ref, axis=1))


def test_nearest_neighbours_ranks_by_ssim_not_l2():
  rng = np.random.default_rng(10)
  x = 0.3 + 0.2 * _rand(rng, (32, 32, 3))  # a textured query in [0.3, 0.5]
  # Candidate 0: the same texture 0.3 brighter (far in L2, high SSIM: only the
  # luminance term drops); candidate 1: a flat image at the query's mean plus faint
  # noise (near in L2, no shared structure, low SSIM); candidate 2: uniform noise.
  brighter = x + 0.3
  flat = x.mean() + 0.002 * rng.standard_normal(x.shape)
  c = np.stack([brighter, flat, _rand(rng, x.shape)]).astype(np.float32)
  q = x[None].astype(np.float32)
  l2 = np.asarray(metrics.pairwise_l2(q, c))[0]
  s = np.asarray(ssim.pairwise_ssim(q, c))[0]
  assert np.argmin(l2) == 1 and np.argmax(s) == 0  # the two criteria disagree
  nn = ssim.nearest_neighbours(q, c)
  assert int(nn.index[0]) == 0
  _assert_within(nn.ssim[0], dm_pix.ssim(q[0], c[0]),  # two float32 evaluations
                 2 * _ssim_bound(q[0], c[0], engine="dm_pix"))
  np.testing.assert_allclose(nn.l2[0], _l2_float64(q[0], c[0]), rtol=_l2_rtol(32 * 32 * 3),
                             atol=0)


@pytest.mark.slow  # searches of several shapes
def test_nearest_neighbours_leading_batch_dims():
  rng = np.random.default_rng(11)
  c = _rand(rng, (10, 28, 28, 1))
  idx = rng.integers(0, 10, size=(2, 3, 4))
  q = np.clip(c[idx] + 0.05 * rng.standard_normal(idx.shape + (28, 28, 1)), 0, 1)
  q = q.astype(np.float32)
  nn = ssim.nearest_neighbours(q, c, chunk_size=7)
  assert nn.index.shape == nn.ssim.shape == nn.l2.shape == (2, 3, 4)
  np.testing.assert_array_equal(nn.index, idx)
  flat = ssim.nearest_neighbours(q.reshape(24, 28, 28, 1), c)
  # Programs of other shapes: each SSIM within its bound of the exact value, so the argmax
  # agrees where the leader clears twice the bounds (checked on this float32 evaluation).
  q24 = q.reshape(24, 28, 28, 1)
  _assert_clear_leader(ssim.pairwise_ssim(q24, c),
                       2 * _all_pairs_bound(q24, c, engine="pairwise"))
  np.testing.assert_array_equal(nn.index.reshape(-1), flat.index)
  _assert_within(nn.ssim.reshape(-1), flat.ssim,
                 2 * _ssim_bound(q24, c[idx.reshape(-1)], engine="dm_pix"))
  single = ssim.nearest_neighbours(q[1, 2, 3], c)
  assert single.index.shape == () and int(single.index) == idx[1, 2, 3]


@pytest.mark.slow  # searches of several shapes
def test_nearest_neighbours_per_set_equals_one_search_per_set():
  """One search against several sets (`nearest_neighbours_per_set`, the evaluation's) finds
  what a search per set finds. Error argument: the same pairs' SSIM enter the argmax,
  computed in a program of another shape, so they may differ in float32 rounding, each
  within the engine's `_ssim_bound` of the exact value; every query's best candidate leads
  the others by more than twice the bounds (checked below), so the indices are equal. L2
  and the reported SSIM are recomputed on the same matched pair: two evaluations, each
  within its bound of the exact value, differ by at most twice the bound (`_l2_rtol`;
  `_ssim_bound` of dm_pix's float32 form)."""
  rng = np.random.default_rng(13)
  sets = {"train": _smooth(rng, 9), "partition": _smooth(rng, 6),
          "noise": _rand(rng, (4, 32, 32, 3))}
  planted = rng.integers(0, 9, size=(2, 5))
  q = np.clip(sets["train"][planted] + 0.05 * rng.standard_normal((2, 5, 32, 32, 3)), 0, 1)
  q = q.astype(np.float32)
  found = ssim.nearest_neighbours_per_set(q, sets, chunk_size=4)
  assert list(found) == list(sets)
  np.testing.assert_array_equal(found["train"].index, planted)
  for name, candidates in sets.items():
    _assert_clear_leader(ssim.pairwise_ssim(q, candidates),  # the premise
                         2 * _all_pairs_bound(q, candidates, engine="pairwise"))
    alone = ssim.nearest_neighbours(q, candidates, chunk_size=4)
    np.testing.assert_array_equal(found[name].index, alone.index)
    np.testing.assert_allclose(found[name].l2, alone.l2, rtol=2 * _l2_rtol(32 * 32 * 3))
    _assert_within(found[name].ssim, alone.ssim, 2 * _ssim_bound(
        q, candidates[np.asarray(alone.index)], engine="dm_pix"))
  with pytest.raises(ValueError, match="candidates 'noise' must contain at least one"):
    ssim.nearest_neighbours_per_set(q, {**sets, "noise": sets["noise"][:0]})


# ------------------------------------------------------------------------- errors


def test_errors():
  rng = np.random.default_rng(12)
  x32 = _rand(rng, (2, 32, 32, 3))
  x28 = _rand(rng, (2, 28, 28, 3))
  tiny = _rand(rng, (2, 10, 32, 3))
  all_fns = (ssim.ssim, ssim.pairwise_ssim, ssim.nearest_neighbours, metrics.pairwise_l2)
  for fn in all_fns:
    with pytest.raises(ValueError, match="same image shape"):
      fn(x32, x28)
  for fn in (ssim.ssim, ssim.pairwise_ssim, ssim.nearest_neighbours):
    with pytest.raises(ValueError, match="smaller than the 11x11"):
      fn(tiny, tiny)
  with pytest.raises(ValueError, match="do not broadcast"):
    ssim.ssim(_rand(rng, (2, 16, 16, 1)), _rand(rng, (3, 16, 16, 1)))
  with pytest.raises(ValueError, match=r"\(M, H, W, C\)"):
    ssim.pairwise_ssim(x32, x32[0])
  with pytest.raises(ValueError, match="at least one"):
    ssim.nearest_neighbours(x32, x32[:0])
  with pytest.raises(ValueError, match="chunk_size"):
    ssim.pairwise_ssim(x32, x32, chunk_size=0)
  with pytest.raises(ValueError, match="smaller than the 3x3"):
    ssim.pairwise_ssim(_rand(rng, (2, 2, 8, 1)), _rand(rng, (2, 2, 8, 1)), filter_size=3)
  for bad in (0, 4, 2.5):
    with pytest.raises(ValueError, match="filter_size"):
      ssim.nearest_neighbours(x32, x32, filter_size=bad)
  with pytest.raises(TypeError, match="floating-point"):
    ssim.ssim(np.zeros((16, 16, 1), np.uint8), np.zeros((16, 16, 1), np.uint8))


def test_best_buddies_are_mutual_nearest_neighbours():
  # Rows: queries (reconstructions); columns: candidates (training images).
  d = np.array([[0.0, 5.0, 5.0],
                [5.0, 0.1, 0.5],    # query 1: nearest candidate 1
                [5.0, 0.2, 5.0]])   # query 2 is nobody's nearest
  buddy, index = metrics.best_buddies(d)
  np.testing.assert_array_equal(index, [0, 1, 1])
  # Candidate 2's nearest query is 1, whose nearest candidate is 1: not buddies.
  np.testing.assert_array_equal(buddy, [True, True, False])
  batched, _ = metrics.best_buddies(np.stack([d, d.T]))   # leading batch dims
  np.testing.assert_array_equal(batched[0], buddy)
  np.testing.assert_array_equal(batched[1], metrics.best_buddies(d.T)[0])
