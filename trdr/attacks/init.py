"""Every start of a reconstruction attack (Runkel et al. 2024, Sec. 4.3, eq. 10).

All images are float[n, H, W, C] in the victim's input space. Uniform noise is drawn in
pixel space U(0, 1) and shifted by the task's per-pixel mean when the task is
mean-subtracted, so every initialisation lives in the same space as the victim's inputs.

  `INITS`        name -> start of one attack: "gaussian" N(0, σ²) (Haim et al.'s tuned
                 σ), "uniform" U(0, 1) noise, "ground_truth", "partition" (the distinct
                 partition), "mixture" (eq. 10 at given λ1, λ2), and for the
                 membership experiment "public" (test-split images an attacker may
                 hold) and "mixed" (each start a training image or a non-member at
                 random, `start_membership`); see `candidates`.
  `make_grid`    the (λ1, λ2) grid of eq. 10 mixtures, `grid_images` all its starts,
                 `mixture_weights` the weights of the three pure starts in each.
  `PURE_INITS`   the three pure grid points (noise, ground truth, partition);
                 `find_point` is the one way to locate one on a grid or in records.
"""

import itertools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


def uniform(key: jax.Array, shape, mean=None, dtype=jnp.float32) -> jax.Array:
  """x_rnd ~ U(0, 1) per pixel (minus ``mean`` if given), float[shape]."""
  x = jax.random.uniform(key, shape, dtype)
  return x if mean is None else x - jnp.asarray(mean, dtype)


def pixel_box(mean=None) -> tuple:
  """The pixel range [0, 1] in the victim's input space: (lower, upper), floats or
  float[H, W, C] when the task is mean-subtracted (``mean``)."""
  return (0.0, 1.0) if mean is None else (-mean, 1.0 - mean)


def gaussian(key: jax.Array, shape, sigma, dtype=jnp.float32) -> jax.Array:
  """x ~ N(0, σ²) per pixel (Haim et al.'s start, in the mean-subtracted space), float[shape].

  ``sigma`` may be traced (a vmapped sweep over σ).
  """
  return sigma * jax.random.normal(key, shape, dtype)


def mixture(x_gt: jax.Array, x_part: jax.Array, x_rnd: jax.Array, lambda1, lambda2) -> jax.Array:
  """Runkel eq. 10: x = λ2 (λ1 x_GT + (1 − λ1) x_part) + (1 − λ2) x_rnd.

  λ1 = λ2 = 1 is the ground truth, (λ1, λ2) = (0, 1) the distinct partition, λ2 = 0 noise.

  Args:
    x_gt, x_part, x_rnd: float[n, H, W, C] each.
    lambda1, lambda2: scalars in [0, 1] (traced values allowed, so the grid can be vmapped).
  """
  return lambda2 * (lambda1 * x_gt + (1.0 - lambda1) * x_part) + (1.0 - lambda2) * x_rnd


def mixture_weights(lambda1, lambda2) -> np.ndarray:
  """The weights of (x_GT, x_part, x_rnd) in `mixture`: float64[..., 3] = (λ2 λ1,
  λ2 (1 − λ1), 1 − λ2), summing to 1, so a start in pixels (the task mean added back) is
  the same mixture of the three sets in pixels (`trdr.evaluation.evaluate.reconstructions` searches
  a grid's starts this way).

  Args:
    lambda1, lambda2: float[...] coordinates in [0, 1] (a `Grid`'s).
  """
  l1, l2 = np.asarray(lambda1, np.float64), np.asarray(lambda2, np.float64)
  return np.stack([l2 * l1, l2 * (1.0 - l1), 1.0 - l2], axis=-1)


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
    return find_point(self.lambda1, self.lambda2, lambda1, lambda2)


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


def grid_images(grid: Grid, x_gt, x_part, x_rnd) -> np.ndarray:
  """All eq. 10 initialisations of the grid at once: np.ndarray float[G, n, H, W, C] in
  x_gt's dtype (x_part, x_rnd: the same shape and dtype).

  Elementwise numpy arithmetic in that dtype, each operation rounded once (no fused
  multiply-add), so the same bits on every machine: a landscape's saved results
  regenerate its start images with it (`trdr.experiment.results`).
  """
  x_gt, x_part, x_rnd = (np.asarray(x) for x in (x_gt, x_part, x_rnd))
  dtype = x_gt.dtype.type
  return np.stack([mixture(x_gt, x_part, x_rnd, dtype(l1), dtype(l2))
                   for l1, l2 in zip(grid.lambda1, grid.lambda2)])


# The three pure initialisations of eq. 10, as (λ1, λ2).
PURE_INITS = {"noise": (0.0, 0.0), "ground_truth": (1.0, 1.0), "partition": (0.0, 1.0)}


def find_point(lambda1s, lambda2s, lambda1: float, lambda2: float) -> int:
  """Index of the first point (λ1, λ2) among the coordinates float[G] ``lambda1s``,
  ``lambda2s`` (a `Grid`'s, or those of landscape.json records).

  Raises:
    ValueError: the point is not among them.
  """
  hits = np.flatnonzero(np.isclose(np.asarray(lambda1s, np.float64), lambda1)
                        & np.isclose(np.asarray(lambda2s, np.float64), lambda2))
  if hits.size == 0:
    raise ValueError(f"(λ1, λ2) = ({lambda1}, {lambda2}) is not on the grid")
  return int(hits[0])


def pure_index(records: list[dict], name: str) -> int:
  """Index of the pure initialisation ``name`` (a `PURE_INITS` key) in landscape records.

  Raises:
    ValueError: the run's grid lacks that point.
  """
  return find_point([r["lambda1"] for r in records], [r["lambda2"] for r in records],
                    *PURE_INITS[name])


# ----------------------------------------------------------- the start of one attack


def class_labels(m: int, dtype=jnp.float32) -> jax.Array:
  """Labels of m noise candidates, half per class: float[m], −1 then +1 (Haim et al.).

  Raises:
    ValueError: m not a positive even number.
  """
  if m <= 0 or m % 2:
    raise ValueError(f"m must be a positive even number of candidates, got {m}")
  return jnp.repeat(jnp.asarray([-1.0, 1.0], dtype), m // 2)


def _noise(kind):
  def start(key, task, dtype, *, init_scale, m_per_image, lambda1, lambda2):
    del lambda1, lambda2
    if m_per_image < 1:
      raise ValueError(f"candidates_per_image must be >= 1, got {m_per_image}")
    n, shape = task.train_images.shape[0], task.train_images.shape[1:]
    m = m_per_image * n
    # m_per_image candidates per training image, with its label: per class, m_per_image
    # times its training images (binary: −1 then +1, as `class_labels(m)`).
    labels = jnp.repeat(jnp.asarray(task.train_labels, dtype), m_per_image)
    if kind == "gaussian":
      return gaussian(key, (m, *shape), init_scale, dtype), labels
    return uniform(key, (m, *shape), task.mean, dtype), labels
  return start


def _images(kind):
  def start(key, task, dtype, *, init_scale, m_per_image, lambda1, lambda2):
    del init_scale, m_per_image
    x_gt = jnp.asarray(task.train_images, dtype)
    x_part = jnp.asarray(task.partition_images, dtype)
    labels = jnp.asarray(task.train_labels, dtype)
    if kind == "ground_truth":
      return x_gt, labels
    if kind == "partition":
      return x_part, labels
    x_rnd = uniform(key, x_gt.shape, task.mean, dtype)
    return mixture(x_gt, x_part, x_rnd, lambda1, lambda2), labels
  return start


# Test-split images an attacker may start from ("public"); the others, test[1::2], are the
# membership experiment's public reference for "natural-looking" (`trdr.studies.membership`).
PUBLIC_STARTS = slice(0, None, 2)
PUBLIC_REFERENCE = slice(1, None, 2)


def public_images(key: jax.Array, task, dtype) -> jax.Array:
  """For each training image, a different test-split image of its class from
  ``test[PUBLIC_STARTS]``, drawn without replacement: float[n, H, W, C].

  Raises:
    ValueError: a class has fewer such test images than training images.
  """
  pool_images = np.asarray(task.test_images)[PUBLIC_STARTS]
  pool_labels = np.asarray(task.test_labels)[PUBLIC_STARTS]
  labels = np.asarray(task.train_labels)
  index = np.zeros(len(labels), np.int64)
  for c, label in enumerate(np.unique(labels)):
    where, pool = np.flatnonzero(labels == label), np.flatnonzero(pool_labels == label)
    if len(pool) < len(where):
      raise ValueError(f"init.kind 'public' needs {len(where)} test images of class {label} "
                       f"in test[::2], the split has {len(pool)}: use fewer training images "
                       "(data.n_per_class)")
    pick = np.asarray(jax.random.permutation(jax.random.fold_in(key, c), len(pool)))
    index[where] = pool[pick[:len(where)]]
  return jnp.asarray(pool_images[index], dtype)


def member_coin(key: jax.Array, n: int) -> jax.Array:
  """bool[n]: which starts of "mixed" are training images (each independently, P = ½)."""
  return jax.random.bernoulli(key, 0.5, (n,))


def start_membership(kind: str, key: jax.Array, n: int) -> np.ndarray:
  """int8[n] of the starts `candidates` (kind, key) draws with one start per training
  image: 1 a training image, 0 a real image the victim did not train on (partition, public
  test image), −1 no real image (noise, eq. 10 mixtures).

  Raises:
    ValueError: unknown kind.
  """
  if kind not in INITS:
    raise ValueError(f"unknown init.kind {kind!r}; known: {sorted(INITS)}")
  fixed = {"ground_truth": 1, "partition": 0, "public": 0}
  if kind == "mixed":
    return np.asarray(member_coin(key, n), np.int8)
  return np.full(n, fixed.get(kind, -1), np.int8)


def _real(kind):
  def start(key, task, dtype, *, init_scale, m_per_image, lambda1, lambda2):
    del init_scale, m_per_image, lambda1, lambda2
    labels = jnp.asarray(task.train_labels, dtype)
    if kind == "public":
      return public_images(key, task, dtype), labels
    coin = member_coin(key, len(labels)).reshape((-1, 1, 1, 1))
    return jnp.where(coin, jnp.asarray(task.train_images, dtype),
                     jnp.asarray(task.partition_images, dtype)), labels
  return start


# name -> start(key, task, dtype, *, init_scale, m_per_image, lambda1, lambda2)
#   -> (images float[m, H, W, C], labels float[m] in {−1, +1}, or 0 … C−1 for C > 2).
INITS: dict[str, Callable] = {
    "gaussian": _noise("gaussian"), "uniform": _noise("uniform"),
    "ground_truth": _images("ground_truth"), "partition": _images("partition"),
    "mixture": _images("mixture"), "public": _real("public"), "mixed": _real("mixed"),
}


def candidates(kind: str, key: jax.Array, task, dtype, *, init_scale=None,
               m_per_image: int = 2, lambda1: float = 1.0, lambda2: float = 1.0
               ) -> tuple[jax.Array, jax.Array]:
  """The starting images of one attack and their labels (the victim's input space).

  Args:
    kind: a key of `INITS`: "gaussian" (N(0, σ²), σ = ``init_scale``, Haim et al.),
      "uniform" (U(0, 1) pixels minus the mean, no variance tuning: Runkel et al. Fig. 5),
      "ground_truth", "partition", "mixture" (eq. 10 with ``lambda1``, ``lambda2``),
      "public" (`public_images`) or "mixed" (training image i or partition image i, by
      `member_coin`).
    key: PRNG key.
    task: `trdr.data.Task` (mean-subtracted when ``task.mean`` is set).
    dtype: float dtype.
    init_scale: σ, for "gaussian"; may be traced.
    m_per_image: candidates per training image for "gaussian" / "uniform" (m = 2n in
      Haim et al.); the image starts have one candidate per training image (m = n), with
      its label.
  Returns:
    (images float[m, H, W, C], labels float[m] as the task's: binary {−1, +1} (for the
    noise starts −1 for the first half), C > 2 classes 0 … C−1).
  Raises:
    ValueError: unknown kind, m_per_image < 1, or too few public images.
  """
  if kind not in INITS:
    raise ValueError(f"unknown init.kind {kind!r}; known: {sorted(INITS)}")
  return INITS[kind](key, task, dtype, init_scale=init_scale, m_per_image=m_per_image,
                     lambda1=lambda1, lambda2=lambda2)
