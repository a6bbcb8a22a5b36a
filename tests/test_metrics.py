"""Tests of trdr.metrics: SSIM (dm-pix), fast all-pairs SSIM, nearest neighbours, L2."""

import math
from pathlib import Path

import dm_pix
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import trdr
from trdr import metrics

_ASSET = Path(trdr.__file__).parent / "assets" / "cifar10_sample.npz"


# float32 unit roundoff: the rounding error bound of one float32 operation.
_U32 = 2.0**-24


def _l2_rtol(d):
  """Relative error bound of a float32 L2 distance over d values taken from the
  differences (trdr.metrics._l2_rows): (d + 4)u/2 to first order (the subtraction and
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


def _dm_pix_all_pairs(q, c):
  """Reference: dm_pix.ssim(q[i], c[j]) for every pair, as float[N, M]."""
  return np.asarray(_dm_pix_all_pairs_jit(jnp.asarray(q), jnp.asarray(c)))


# ----------------------------------------------------------------------------- ssim


def test_ssim_identity_is_one():
  rng = np.random.default_rng(0)
  for x in (_rand(rng, (4, 32, 32, 3)), _smooth(rng, 4), _real_images(4, rng)):
    np.testing.assert_allclose(metrics.ssim(x, x), np.ones(4), atol=1e-6)
  x1 = _rand(rng, (28, 28, 1))
  np.testing.assert_allclose(metrics.ssim(x1, x1), 1.0, atol=1e-6)


# Two float32 evaluations of dm_pix's SSIM formula whose blurs sum the same products in
# another order (trdr's banded-matrix filter, dm_pix's `jnp.convolve`). Each blurred
# moment (a convex combination of k² products of values in [0, 1]) is then off by at most
# 2k u (two passes of k-term sums, u = 2^-24); an SSIM map value moves by at most
# 2/c2 per unit of error in the covariance and by the same order through the two
# variances, hence <= 3 · 2 · 2k u / c2 per position and for the mean over them
# (c2 = 0.03²). With k = 11: 8.7e-3. A wrong window or padding moves SSIM by ~1e-1.
def _ssim_orders_atol(k=11, u=2.0**-24):
  return 3 * 2 * 2 * k * u / 0.03**2


def test_ssim_symmetric_and_matches_dm_pix():
  rng = np.random.default_rng(1)
  a, b = _smooth(rng, 5), _rand(rng, (5, 32, 32, 3))
  s_ab, s_ba = metrics.ssim(a, b), metrics.ssim(b, a)
  np.testing.assert_allclose(s_ab, s_ba, atol=_ssim_orders_atol())
  np.testing.assert_allclose(s_ab, dm_pix.ssim(jnp.asarray(a), jnp.asarray(b)),
                             atol=_ssim_orders_atol())
  assert s_ab.shape == (5,)
  assert np.all(np.asarray(s_ab) < 1.0) and np.all(np.asarray(s_ab) > -1.0)


@pytest.mark.parametrize("filter_size", [3, 11])
def test_ssim_filter_is_dm_pixs_own_in_float64(x64, filter_size):
  """trdr's `ssim` passes dm_pix its Gaussian window as banded-matrix products
  (`filter_fn`); in float64 it equals `dm_pix.ssim` with its own `jnp.convolve` filter to
  the summation-order bound above with u = 2^-53 (1.6e-11 for k = 11): the same window,
  padding and weights, not merely a close one."""
  rng = np.random.default_rng(14)
  for shape in ((32, 32, 3), (13, 17, 2)):
    a = rng.random((4,) + shape)
    b = np.clip(a + 0.1 * rng.standard_normal(a.shape), 0, 1)
    ours = np.asarray(metrics.ssim(a, b, filter_size=filter_size))
    assert ours.dtype == np.float64
    ref = np.asarray(jax.jit(dm_pix.ssim, static_argnames="filter_size")(
        jnp.asarray(a), jnp.asarray(b), filter_size=filter_size))
    np.testing.assert_allclose(ours, ref, rtol=0,
                               atol=_ssim_orders_atol(filter_size, 2.0**-53))


def test_ssim_broadcasts_batch_dims():
  rng = np.random.default_rng(2)
  a = _rand(rng, (2, 3, 16, 16, 1))
  b = _rand(rng, (3, 16, 16, 1))
  out = metrics.ssim(a, b)
  assert out.shape == (2, 3)
  for i in range(2):
    for j in range(3):
      np.testing.assert_allclose(out[i, j], dm_pix.ssim(a[i, j], b[j]),
                                 atol=_ssim_orders_atol())
  assert metrics.ssim(a[0, 0], b[0]).shape == ()


def test_ssim_max_val():
  rng = np.random.default_rng(3)
  a, b = _smooth(rng, 2), _smooth(rng, 2)
  np.testing.assert_allclose(
      metrics.ssim(255 * a, 255 * b, max_val=255.0), metrics.ssim(a, b), atol=1e-5
  )


# -------------------------------------------------------------------- pairwise_ssim


@pytest.mark.parametrize("shape", [(32, 32, 3), (28, 28, 1), (11, 11, 2), (13, 17, 3)])
def test_pairwise_ssim_equals_dm_pix_on_every_pair(shape):
  rng = np.random.default_rng(4)
  q = _rand(rng, (7,) + shape)
  c = _rand(rng, (9,) + shape)
  c[4] = q[2]  # an identical pair
  # chunk_size=3 exercises the padded last chunk (7 = 3 + 3 + 1).
  out = metrics.pairwise_ssim(q, c, chunk_size=3)
  assert out.shape == (7, 9) and out.dtype == jnp.float32
  np.testing.assert_allclose(out, _dm_pix_all_pairs(q, c), atol=1e-5, rtol=0)
  np.testing.assert_allclose(out[2, 4], 1.0, atol=1e-6)


def test_pairwise_ssim_real_images_and_chunking():
  rng = np.random.default_rng(5)
  imgs = _real_images(24, rng)
  q = np.clip(imgs[:10] + 0.05 * rng.standard_normal(imgs[:10].shape), 0, 1)
  q = q.astype(np.float32)
  c = imgs[8:]
  ref = _dm_pix_all_pairs(q, c)
  # dm_pix itself is only accurate to ~5e-6 on real images (float32 cancellation
  # in G*(xy) - mu_x mu_y); the fast form is more accurate, so they agree to ~1e-5.
  for chunk in (1, 4, 256):
    out = metrics.pairwise_ssim(q, c, chunk_size=chunk)
    np.testing.assert_allclose(out, ref, atol=2e-5, rtol=0)
  # Leading batch dims of the queries.
  out = metrics.pairwise_ssim(q.reshape(2, 5, 32, 32, 3), c)
  assert out.shape == (2, 5, 16)
  np.testing.assert_allclose(out.reshape(10, 16), ref, atol=2e-5, rtol=0)


@pytest.mark.parametrize("filter_size", [3, 11])
def test_pairwise_ssim_window_equals_dm_pix_float64(x64, filter_size):
  """The selectable window (3: Haim et al.'s counts; 11: dm_pix's default) against
  dm_pix.ssim with the same filter_size evaluated in float64 on every pair.

  Error argument for the tolerance: pairwise_ssim works in float32 on images in [0, 1]
  centred per channel, so every blurred (co)variance term (a convex combination of
  products of values in [-1, 1], then one subtraction) carries an absolute error
  <= 4u = 2.4e-7 (u = 2^-24). An SSIM map value numer/denom moves by at most
  2δ/(s_xx + s_yy + c2) per error δ in s_xy and by the same order through the variances
  in the denominator, so per position <= 3 · 2 · 4u / c2 with c2 = (0.03)² = 9e-4:
  1.6e-3. The mean over positions and channels is bounded by the same. A wrong window or
  padding changes these SSIMs by ~1e-1.
  """
  rng = np.random.default_rng(13)
  imgs = _real_images(12, rng)
  q = np.clip(imgs[:5] + 0.05 * rng.standard_normal(imgs[:5].shape), 0, 1).astype(np.float32)
  c = imgs[4:]
  out = np.asarray(metrics.pairwise_ssim(q, c, filter_size=filter_size, chunk_size=2))
  ref = np.asarray(jax.jit(jax.vmap(jax.vmap(
      lambda x, y: dm_pix.ssim(x, y, filter_size=filter_size), (None, 0)), (0, None)))(
          jnp.asarray(q, jnp.float64), jnp.asarray(c, jnp.float64)))
  np.testing.assert_allclose(out, ref, atol=3 * 2 * 4 * 2.0**-24 / 0.03**2, rtol=0)
  nn = metrics.nearest_neighbours(q, c, filter_size=filter_size)
  np.testing.assert_array_equal(nn.index, np.argmax(out, axis=1))
  # The two windows are different scales: a window size that is ignored fails here.
  other = np.asarray(metrics.pairwise_ssim(q, c, filter_size=14 - filter_size))
  assert np.max(np.abs(other - out)) > 1e-2


def test_pairwise_ssim_max_val():
  rng = np.random.default_rng(6)
  q, c = 255 * _smooth(rng, 3), 255 * _smooth(rng, 4)
  out = metrics.pairwise_ssim(q, c, max_val=255.0)
  f = jax.jit(jax.vmap(jax.vmap(lambda x, y: dm_pix.ssim(x, y, max_val=255.0), (None, 0)),
                       (0, None)))
  np.testing.assert_allclose(out, f(jnp.asarray(q), jnp.asarray(c)), atol=1e-5)


def test_pairwise_ssim_empty():
  rng = np.random.default_rng(7)
  c = _rand(rng, (4, 16, 16, 1))
  assert metrics.pairwise_ssim(np.zeros((0, 16, 16, 1), np.float32), c).shape == (0, 4)


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
    nn = metrics.nearest_neighbours(q, c, chunk_size=2)
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


# -------------------------------------------------------------- nearest_neighbours


def test_nearest_neighbours_planted():
  rng = np.random.default_rng(9)
  c = _smooth(rng, 40)
  perm = rng.permutation(40)[:12]
  q = np.clip(c[perm] + 0.03 * rng.standard_normal((12, 32, 32, 3)), 0, 1)
  q = q.astype(np.float32)
  nn = metrics.nearest_neighbours(q, c, chunk_size=5)
  np.testing.assert_array_equal(nn.index, perm)
  assert nn.index.dtype == jnp.int32
  assert nn.ssim.dtype == jnp.float32 and nn.l2.dtype == jnp.float32
  direct = dm_pix.ssim(jnp.asarray(q), jnp.asarray(c[perm]))
  np.testing.assert_allclose(nn.ssim, direct, atol=1e-6)
  np.testing.assert_allclose(nn.l2, _l2_float64(q, c[perm]), rtol=_l2_rtol(32 * 32 * 3),
                             atol=0)
  # The index is the argmax of the dm_pix SSIM row.
  np.testing.assert_array_equal(nn.index, np.argmax(_dm_pix_all_pairs(q, c), axis=1))


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
  s = np.asarray(metrics.pairwise_ssim(q, c))[0]
  assert np.argmin(l2) == 1 and np.argmax(s) == 0  # the two criteria disagree
  nn = metrics.nearest_neighbours(q, c)
  assert int(nn.index[0]) == 0
  np.testing.assert_allclose(nn.ssim[0], dm_pix.ssim(q[0], c[0]), atol=1e-6)
  np.testing.assert_allclose(nn.l2[0], _l2_float64(q[0], c[0]), rtol=_l2_rtol(32 * 32 * 3),
                             atol=0)


def test_nearest_neighbours_leading_batch_dims():
  rng = np.random.default_rng(11)
  c = _rand(rng, (10, 28, 28, 1))
  idx = rng.integers(0, 10, size=(2, 3, 4))
  q = np.clip(c[idx] + 0.05 * rng.standard_normal(idx.shape + (28, 28, 1)), 0, 1)
  q = q.astype(np.float32)
  nn = metrics.nearest_neighbours(q, c, chunk_size=7)
  assert nn.index.shape == nn.ssim.shape == nn.l2.shape == (2, 3, 4)
  np.testing.assert_array_equal(nn.index, idx)
  flat = metrics.nearest_neighbours(q.reshape(24, 28, 28, 1), c)
  np.testing.assert_array_equal(nn.index.reshape(-1), flat.index)
  np.testing.assert_allclose(nn.ssim.reshape(-1), flat.ssim, atol=1e-6)
  single = metrics.nearest_neighbours(q[1, 2, 3], c)
  assert single.index.shape == () and int(single.index) == idx[1, 2, 3]


def test_nearest_neighbours_per_set_equals_one_search_per_set():
  """One search against several sets (`nearest_neighbours_per_set`, the evaluation's) finds
  what a search per set finds. Error argument: the same pairs' SSIM enter the argmax,
  computed in a program of another shape, so they may differ in float32 rounding (the
  engine's error is <= ~5e-6, trdr.ssim's docstring); every query's best candidate leads
  the second by more than twice that (checked below), so the indices are equal. L2 and the
  reported SSIM are recomputed on the same matched pair: two evaluations, each within its
  bound of the exact value, differ by at most twice the bound (`_l2_rtol`; dm_pix's ~5e-6
  in float32, hence 1e-5)."""
  rng = np.random.default_rng(13)
  sets = {"train": _smooth(rng, 9), "partition": _smooth(rng, 6),
          "noise": _rand(rng, (4, 32, 32, 3))}
  planted = rng.integers(0, 9, size=(2, 5))
  q = np.clip(sets["train"][planted] + 0.05 * rng.standard_normal((2, 5, 32, 32, 3)), 0, 1)
  q = q.astype(np.float32)
  found = metrics.nearest_neighbours_per_set(q, sets, chunk_size=4)
  assert list(found) == list(sets)
  np.testing.assert_array_equal(found["train"].index, planted)
  for name, candidates in sets.items():
    top2 = np.sort(np.asarray(metrics.pairwise_ssim(q, candidates)), axis=-1)[..., -2:]
    assert np.min(top2[..., 1] - top2[..., 0]) > 1e-5  # the premise of equal indices
    alone = metrics.nearest_neighbours(q, candidates, chunk_size=4)
    np.testing.assert_array_equal(found[name].index, alone.index)
    np.testing.assert_allclose(found[name].l2, alone.l2, rtol=2 * _l2_rtol(32 * 32 * 3))
    np.testing.assert_allclose(found[name].ssim, alone.ssim, rtol=0, atol=1e-5)
  with pytest.raises(ValueError, match="candidates 'noise' must contain at least one"):
    metrics.nearest_neighbours_per_set(q, {**sets, "noise": sets["noise"][:0]})


# ------------------------------------------------------------------------- errors


def test_errors():
  rng = np.random.default_rng(12)
  x32 = _rand(rng, (2, 32, 32, 3))
  x28 = _rand(rng, (2, 28, 28, 3))
  tiny = _rand(rng, (2, 10, 32, 3))
  all_fns = (metrics.ssim, metrics.pairwise_ssim, metrics.nearest_neighbours, metrics.pairwise_l2)
  for fn in all_fns:
    with pytest.raises(ValueError, match="same image shape"):
      fn(x32, x28)
  for fn in (metrics.ssim, metrics.pairwise_ssim, metrics.nearest_neighbours):
    with pytest.raises(ValueError, match="smaller than the 11x11"):
      fn(tiny, tiny)
  with pytest.raises(ValueError, match="do not broadcast"):
    metrics.ssim(_rand(rng, (2, 16, 16, 1)), _rand(rng, (3, 16, 16, 1)))
  with pytest.raises(ValueError, match=r"\(M, H, W, C\)"):
    metrics.pairwise_ssim(x32, x32[0])
  with pytest.raises(ValueError, match="at least one"):
    metrics.nearest_neighbours(x32, x32[:0])
  with pytest.raises(ValueError, match="chunk_size"):
    metrics.pairwise_ssim(x32, x32, chunk_size=0)
  with pytest.raises(ValueError, match="smaller than the 3x3"):
    metrics.pairwise_ssim(_rand(rng, (2, 2, 8, 1)), _rand(rng, (2, 2, 8, 1)), filter_size=3)
  for bad in (0, 4, 2.5):
    with pytest.raises(ValueError, match="filter_size"):
      metrics.nearest_neighbours(x32, x32, filter_size=bad)
  with pytest.raises(TypeError, match="floating-point"):
    metrics.ssim(np.zeros((16, 16, 1), np.uint8), np.zeros((16, 16, 1), np.uint8))


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
