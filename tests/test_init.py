"""Initialisations of eq. 10 and their grid."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from trdr.attacks import init as inits


def test_mixture_endpoints_and_midpoint():
  keys = jax.random.split(jax.random.key(0), 3)
  gt, part, rnd = (jax.random.uniform(k, (2, 4, 4, 3)) for k in keys)
  np.testing.assert_allclose(inits.mixture(gt, part, rnd, 1.0, 1.0), gt)
  np.testing.assert_allclose(inits.mixture(gt, part, rnd, 0.0, 1.0), part)
  np.testing.assert_allclose(inits.mixture(gt, part, rnd, 0.3, 0.0), rnd)
  np.testing.assert_allclose(inits.mixture(gt, part, rnd, 0.5, 0.5),
                             0.25 * gt + 0.25 * part + 0.5 * rnd, rtol=1e-6)


def test_grid_order_and_batched_images():
  grid = inits.make_grid((0.0, 0.25, 0.5, 0.75, 1.0), (0.0, 0.25, 0.5, 0.75, 1.0))
  assert grid.shape == (5, 5) and grid.lambda1.size == 25
  assert grid.index(0.25, 1.0) == 1 * 5 + 4
  gt, part, rnd = jnp.ones((3, 2, 2, 1)), jnp.zeros((3, 2, 2, 1)), jnp.full((3, 2, 2, 1), 0.5)
  images = inits.grid_images(grid, gt, part, rnd)
  assert images.shape == (25, 3, 2, 2, 1)
  g = grid.index(0.75, 0.5)
  np.testing.assert_allclose(images[g], inits.mixture(gt, part, rnd, 0.75, 0.5))
  with pytest.raises(ValueError, match="not on the grid"):
    grid.index(0.3, 1.0)


def test_uniform_noise_range_and_mean_shift():
  x = inits.uniform(jax.random.key(0), (100, 4, 4, 3))
  assert 0.0 <= float(x.min()) and float(x.max()) <= 1.0 and abs(float(x.mean()) - 0.5) < 0.02
  mean = np.full((4, 4, 3), 0.4, np.float32)
  np.testing.assert_allclose(inits.uniform(jax.random.key(0), (100, 4, 4, 3), mean), x - 0.4,
                             atol=1e-6)


@pytest.mark.parametrize("l1, l2", [((), (0.0,)), ((0.0, 1.5), (1.0,)), ((0.5,), (-0.1,))])
def test_grid_rejects_bad_values(l1, l2):
  with pytest.raises(ValueError, match="must be a non-empty list of values in"):
    inits.make_grid(l1, l2)
