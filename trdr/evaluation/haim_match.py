"""Haim et al.'s match of reconstructions to training images, as their notebook computes it.

Haim et al. (2022), "Reconstructing Training Data from Trained Neural Networks", evaluate a
CIFAR reconstruction (their repository's ``evaluations.get_evaluation_score_dssim``, called
by the notebook with ``vote="min"``) by

  1. downsampling both image sets to ½ resolution, bicubic (PyTorch's
     ``F.interpolate(scale_factor=1/2, mode="bicubic")``: Keys' kernel with a = −0.75,
     half-pixel centres, no antialiasing, the border pixels repeated),
  2. standardising every image per channel, (x − mean) / std with Bessel's correction
     (``torch.std``'s default),
  3. the squared L2 distance of every pair, divided by the dimension D = C·(H/2)·(W/2)
     (their ``l2_dist(div_dim=True)``, from the expansion |q|² + |c|² − 2 q·c), and
  4. for every training image the nearest reconstruction ("min": the smallest distance;
     no one-to-one constraint, so one reconstruction may be the match of several
     training images, unlike the best buddies of `trdr.evaluation.metrics.best_buddies`).

`pairwise` is steps 1–3 (the registry's "haim" entry, `trdr.evaluation.registry`); `match`
adds step 4. It differs from `trdr.evaluation.metrics.ncc_distances` (JAX's antialiased
bicubic, std without Bessel's correction, no division by D), which ranks pairs alike only
approximately.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

# PyTorch's bicubic kernel (Keys 1981 with a = −0.75) at the offsets 1.5, 0.5, 0.5, 1.5 of a
# ½-resolution sample, which lies halfway between input pixels 2i and 2i + 1.
_TAPS = (-0.09375, 0.59375, 0.59375, -0.09375)


def downsample(images) -> jax.Array:
  """PyTorch's bicubic ½-resolution downsampling (no antialiasing, edge pixels repeated).

  Output pixel i of an axis of length L is Σ_k w_k x[clip(2i − 1 + k, 0, L − 1)] over the
  taps w = (−0.09375, 0.59375, 0.59375, −0.09375), for i < ⌊L/2⌋, along H, then along W.

  Args:
    images: float[N, H, W, C], H, W ≥ 2.
  Returns:
    float32[N, ⌊H/2⌋, ⌊W/2⌋, C].
  """
  x = jnp.asarray(images, jnp.float32)

  def along(x, axis):
    length = x.shape[axis]
    out = jnp.arange(length // 2)
    taps = [jnp.clip(2 * out - 1 + k, 0, length - 1) for k in range(4)]
    return sum(w * jnp.take(x, t, axis=axis) for w, t in zip(_TAPS, taps))
  return along(along(x, 1), 2)


def standardise(images) -> jax.Array:
  """Every image per channel: (x − mean) / std over its pixels, std with Bessel's correction.

  Args:
    images: float[N, H, W, C], H·W ≥ 2.
  Returns:
    float32[N, H, W, C] (a constant channel gives NaN, as in the reference).
  """
  x = jnp.asarray(images, jnp.float32)
  mean = jnp.mean(x, axis=(1, 2), keepdims=True)
  std = jnp.std(x, axis=(1, 2), keepdims=True, ddof=1)
  return (x - mean) / std


@jax.jit
def pairwise(queries, candidates) -> jax.Array:
  """Haim et al.'s match distance of every pair: the squared L2 distance of the ½-resolution,
  standardised images divided by their dimension D (steps 1–3 of the module docstring).

  Args:
    queries: float[Q, H, W, C]; candidates: float[M, H, W, C] (any value range: the
      standardisation removes offset and scale per channel).
  Returns:
    float32[Q, M], ≈ 2·(1 − the mean over channels of the normalised cross-correlation)·
    (P − 1)/P for P pixels per channel; 0 for identical images (up to rounding).
  """
  q = standardise(downsample(queries)).reshape(jnp.shape(queries)[0], -1)
  c = standardise(downsample(candidates)).reshape(jnp.shape(candidates)[0], -1)
  sq = (jnp.sum(q * q, axis=1)[:, None] + jnp.sum(c * c, axis=1)[None, :]
        - 2 * jnp.matmul(q, c.T, precision=lax.Precision.HIGHEST))
  return sq / q.shape[1]


def match(reconstructions, train_images) -> tuple[np.ndarray, np.ndarray]:
  """Each training image's match (step 4): the reconstruction at the smallest `pairwise`
  distance, the first on ties; several training images may share one.

  Args:
    reconstructions: float[m, H, W, C]; train_images: float[n, H, W, C].
  Returns:
    (index int32[n] into the reconstructions, distance float32[n]).
  """
  d = np.asarray(pairwise(train_images, reconstructions))
  index = np.argmin(d, axis=1)
  return index.astype(np.int32), d[np.arange(len(d)), index].astype(np.float32)
