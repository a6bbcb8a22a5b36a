"""Every start of an attack: eq. 10 mixtures and their grid, noise, the INITS registry."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from trdr import data
from trdr.attacks import init as inits


def test_mixture_endpoints_and_midpoint():
  keys = jax.random.split(jax.random.key(0), 3)
  gt, part, rnd = (jax.random.uniform(k, (2, 4, 4, 3)) for k in keys)
  # Exact: products with 1 and 0 and sums with 0 round nothing (with or without an FMA).
  np.testing.assert_array_equal(inits.mixture(gt, part, rnd, 1.0, 1.0), gt)
  np.testing.assert_array_equal(inits.mixture(gt, part, rnd, 0.0, 1.0), part)
  np.testing.assert_array_equal(inits.mixture(gt, part, rnd, 0.3, 0.0), rnd)
  # Scalings by 0.5 and 0.25 are exact; each side rounds two sums of values >= 0, <= 2u
  # relative (u = 2^-24). A wrong weight moves the result by >~1e-2 relative.
  np.testing.assert_allclose(inits.mixture(gt, part, rnd, 0.5, 0.5),
                             0.25 * gt + 0.25 * part + 0.5 * rnd, rtol=4 * 2.0**-24)


def test_grid_order_and_batched_images():
  grid = inits.make_grid((0.0, 0.25, 0.5, 0.75, 1.0), (0.0, 0.25, 0.5, 0.75, 1.0))
  assert grid.shape == (5, 5) and grid.lambda1.size == 25
  assert grid.index(0.25, 1.0) == 1 * 5 + 4
  gt, part, rnd = jnp.ones((3, 2, 2, 1)), jnp.zeros((3, 2, 2, 1)), jnp.full((3, 2, 2, 1), 0.5)
  images = inits.grid_images(grid, gt, part, rnd)
  assert images.shape == (25, 3, 2, 2, 1)
  g = grid.index(0.75, 0.5)
  # Exact: every operand and result (1, 0, 0.5 scaled by 0.75, 0.25, 0.5) is a multiple of 2^-4.
  np.testing.assert_array_equal(images[g], inits.mixture(gt, part, rnd, 0.75, 0.5))
  with pytest.raises(ValueError, match="not on the grid"):
    grid.index(0.3, 1.0)


def test_uniform_noise_range_and_mean_shift():
  x = inits.uniform(jax.random.key(0), (100, 4, 4, 3))
  assert 0.0 <= float(x.min()) and float(x.max()) <= 1.0 and abs(float(x.mean()) - 0.5) < 0.02
  mean = np.full((4, 4, 3), 0.4, np.float32)
  # Both sides round x - float32(0.4) in (-0.4, 0.6) once: <= 2^-25 each, so 2^-24 between
  # them; not subtracting the mean is off by 0.4.
  np.testing.assert_allclose(inits.uniform(jax.random.key(0), (100, 4, 4, 3), mean), x - 0.4,
                             rtol=0, atol=2.0**-24)


@pytest.mark.parametrize("l1, l2", [((), (0.0,)), ((0.0, 1.5), (1.0,)), ((0.5,), (-0.1,))])
def test_grid_rejects_bad_values(l1, l2):
  with pytest.raises(ValueError, match="must be a non-empty list of values in"):
    inits.make_grid(l1, l2)


def test_gaussian_candidates_half_per_class():
  """Haim et al.'s start: m = 2n candidates x ~ N(0, σ²), labels −1 then +1."""
  config = data.default_data_config()
  config.n_per_class = 100
  task = data.make_task(config)
  images, labels = inits.candidates("gaussian", jax.random.key(0), task, jnp.float32,
                                    init_scale=0.1, m_per_image=2)
  assert images.shape == (400, 32, 32, 3) and labels.shape == (400,)
  # Sampling: the std of n = 400 · 3072 normal draws has relative s.e. 1/sqrt(2n) = 6.4e-4;
  # 5e-3 is ~8 s.e. (taken in float64: a float32 sum of 1.2M terms may round by ~n u).
  assert float(np.std(np.asarray(images, np.float64))) == pytest.approx(0.1, rel=5e-3)
  np.testing.assert_array_equal(labels, np.repeat([-1.0, 1.0], 200))
  with pytest.raises(ValueError, match="even"):
    inits.class_labels(3)
  with pytest.raises(ValueError, match="unknown init.kind 'blur'"):
    inits.candidates("blur", jax.random.key(0), task, jnp.float32)


def test_image_starts_are_the_task_images_with_their_labels():
  config = data.default_data_config()
  config.n_per_class = 4
  task = data.make_task(config)
  key = jax.random.key(1)
  for kind, expected in (("ground_truth", task.train_images),
                         ("partition", task.partition_images)):
    images, labels = inits.candidates(kind, key, task, jnp.float32)
    np.testing.assert_array_equal(images, expected)
    np.testing.assert_array_equal(labels, task.train_labels)
  mixed, _ = inits.candidates("mixture", key, task, jnp.float32, lambda1=0.5, lambda2=0.5)
  noise = inits.uniform(key, task.train_images.shape, task.mean)
  # The same noise (same key) and the same eq. 10 on both sides; the 0.5 scalings are exact,
  # so each side is fl(fl(0.25 gt + 0.25 part) + 0.5 noise) with or without an FMA: equal.
  np.testing.assert_array_equal(mixed, inits.mixture(task.train_images, task.partition_images,
                                                     noise, 0.5, 0.5))


def test_pure_index_finds_each_pure_start_in_records():
  grid = inits.make_grid((0.0, 1.0), (0.0, 1.0))
  records = [{"lambda1": a, "lambda2": b} for a, b in zip(grid.lambda1, grid.lambda2)]
  for name, point in inits.PURE_INITS.items():
    assert (records[inits.pure_index(records, name)]["lambda1"],
            records[inits.pure_index(records, name)]["lambda2"]) == point
  with pytest.raises(ValueError, match="not on the grid"):
    inits.pure_index(records[:1], "partition")
