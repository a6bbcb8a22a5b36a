"""Initialisations of the reconstruction x (Runkel et al. 2024, Sec. 4.3, eq. 10).

All images are float[n, H, W, C]. Uniform noise is drawn in pixel space U(0, 1) and
shifted by the task's per-pixel mean when the task is mean-subtracted, so every
initialisation lives in the same space as the victim's inputs.
"""

import itertools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


def uniform(key: jax.Array, shape, mean=None, dtype=jnp.float32) -> jax.Array:
  """x_rnd ~ U(0, 1) per pixel (minus ``mean`` if given), float[shape]."""
  x = jax.random.uniform(key, shape, dtype)
  return x if mean is None else x - jnp.asarray(mean, dtype)


def mixture(x_gt: jax.Array, x_part: jax.Array, x_rnd: jax.Array, lambda1, lambda2) -> jax.Array:
  """Eq. 10: x = λ2 (λ1 x_GT + (1 − λ1) x_part) + (1 − λ2) x_rnd.

  λ1 = λ2 = 1 is the ground truth, (λ1, λ2) = (0, 1) the distinct partition, λ2 = 0 noise.

  Args:
    x_gt, x_part, x_rnd: float[n, H, W, C] each.
    lambda1, lambda2: scalars in [0, 1] (traced values allowed, so the grid can be vmapped).
  """
  return lambda2 * (lambda1 * x_gt + (1.0 - lambda1) * x_part) + (1.0 - lambda2) * x_rnd


class Grid(NamedTuple):
  """The (λ1, λ2) grid of eq. 10, flattened row-major: λ1 outer, λ2 inner.

  Attributes:
    lambda1, lambda2: float64[G] coordinates of the G = len(l1) · len(l2) grid points.
    shape: (len(l1), len(l2)) to reshape per-point results into a heatmap.
  """
  lambda1: np.ndarray
  lambda2: np.ndarray
  shape: tuple[int, int]

  def index(self, lambda1: float, lambda2: float) -> int:
    """Flat index of the grid point (λ1, λ2). Raises ValueError if it is not on the grid."""
    hits = np.flatnonzero(np.isclose(self.lambda1, lambda1) & np.isclose(self.lambda2, lambda2))
    if hits.size == 0:
      raise ValueError(f"(λ1, λ2) = ({lambda1}, {lambda2}) is not on the grid")
    return int(hits[0])


def make_grid(lambda1s, lambda2s) -> Grid:
  """Grid of eq. 10 mixtures; default in the paper: λ1, λ2 ∈ {0, .25, .5, .75, 1}.

  Raises:
    ValueError: an empty axis or a value outside [0, 1].
  """
  l1, l2 = np.asarray(lambda1s, np.float64), np.asarray(lambda2s, np.float64)
  for name, values in (("lambda1", l1), ("lambda2", l2)):
    if values.ndim != 1 or values.size == 0 or np.any((values < 0) | (values > 1)):
      raise ValueError(f"{name} must be a non-empty list of values in [0, 1], got {values}")
  points = np.array(list(itertools.product(l1, l2)))
  return Grid(points[:, 0], points[:, 1], (l1.size, l2.size))


def grid_images(grid: Grid, x_gt, x_part, x_rnd) -> jax.Array:
  """All eq. 10 initialisations of the grid at once: float[G, n, H, W, C]."""
  dtype = x_gt.dtype
  return jax.vmap(mixture, in_axes=(None, None, None, 0, 0))(
      x_gt, x_part, x_rnd, jnp.asarray(grid.lambda1, dtype), jnp.asarray(grid.lambda2, dtype))
