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
adds step 4. `protocol` is their whole evaluation of a reconstruction: step 4's match, then

  5. the images scaled as their notebook shows and scores them (``analysis.scale``): each
     training image plus the training-set mean (pixels in [0, 1]), each matched
     reconstruction plus the mean and then min–max scaled to [0, 1] on its own
     (``evaluations.transform_vmin_vmax_batch``: over all its pixels and channels), and
  6. the SSIM of each training image with its match at full resolution (the match alone is
     made at ½ resolution), kornia's ``metrics.ssim(x, y, window_size=3)`` averaged over
     its map (``common_utils/image.py``, ``get_ssim_pairs_kornia``): `kornia_ssim`.

Where each step is in their repository (github.com/nivha/dataset_reconstruction, read at
commit 3076552): the notebook ``reconstruction_cifar10.ipynb`` calls
``analysis.find_nearest_neighbour(X, Xtrn, search="ncc2", vote="min", use_bb=False)`` (steps
1–4 on the mean-subtracted images; ``use_bb=False``: no one-to-one constraint; "min": the
nearest only, the ``nn_threshold`` then unused), ``analysis.scale(xx, Xtrn, ds_mean)`` (step
5; ``ds_mean`` is the per-pixel training-set mean, ``problems/cifar10_vehicles_animals.py``) and
``analysis.sort_by_metric(..., sort="ssim")`` (step 6); ``evaluations.get_evaluation_score_dssim``
(their in-run score) computes the same steps. Their code counts at no SSIM level: the
notebook sorts by SSIM and shows the pairs. The level 0.4 of `protocol`'s count is trdr's
(``eval.ssim_thresholds``), the one trdr's own counts use, so the two counts sit side by
side at one level. Their notebook runs in float64 (``torch.set_default_dtype``); this runs
in float32, whose effect on the SSIM is bounded in tests/test_haim_protocol.py.

`pairwise` differs from `trdr.evaluation.metrics.ncc_distances` (JAX's antialiased
bicubic, std without Bessel's correction, no division by D), which ranks pairs alike only
approximately.
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from trdr.evaluation import metrics, ssim

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


# kornia.metrics.ssim's defaults, as Haim et al. call it: window 3, max_val 1.0, eps 1e-12.
KORNIA_WINDOW = 3
KORNIA_EPS = 1e-12
# The SSIM level `protocol` counts at: trdr's (eval.ssim_thresholds), not Haim et al.'s, whose
# code counts at none (module docstring).
LEVEL = 0.4


def kornia_ssim(a, b, *, window: int = KORNIA_WINDOW, max_val: float = 1.0) -> jax.Array:
  """SSIM of image pairs under kornia's convention (``kornia.metrics.ssim``, map averaged), the
  SSIM of Haim et al.'s evaluation (step 6 of the module docstring), from dm-pix's.

  kornia (0.6.8, their environment, to 0.9) filters with the same normalised sampled Gaussian
  (σ = 1.5) as dm-pix, the same k1 = 0.01, k2 = 0.03, but pads 'same': every image's borders
  reflected (torch's "reflect", the edge pixel not repeated; ``filter2d_separable``'s default
  border), so the map keeps H × W positions, where dm-pix's 'valid' filtering keeps (H − w +
  1) × (W − w + 1). Padding the images by reflection and filtering 'valid' gives kornia's
  map (a blur of the padded x², x·y is the padded blur of x², x·y): this is
  `trdr.evaluation.ssim.ssim` (dm-pix) of the reflect-padded images. Two differences remain,
  both bounded: kornia adds eps = 1e-12 to the map's denominator, which is ≥ c1·c2 =
  (0.01·0.03)²·max_val⁴, so each map value (|S| ≤ 1) moves by at most eps / (c1·c2) (1.1e-5
  at max_val 1); dm-pix clips the variances at 0 and the covariance to ±σxσy, which changes
  nothing in exact arithmetic (only the rounding; tests/test_haim_protocol.py).

  Args:
    a, b: float[..., H, W, C] images in [0, max_val] (batch dims broadcast), H, W > window
      // 2 (reflection needs a pixel beyond the edge).
    window: odd side of the Gaussian window (Haim et al.: 3).
    max_val: the images' dynamic range (kornia's default and Haim et al.'s: 1.0).
  Returns:
    float[broadcast batch] SSIM of each pair, in [−1, 1]; float32 for float32 input.
  Raises:
    TypeError, ValueError: as `trdr.evaluation.ssim.ssim`; ValueError for images no larger
      than window // 2.
  """
  half = int(window) // 2
  a, b = jnp.asarray(a), jnp.asarray(b)
  for name, x in (("a", a), ("b", b)):
    if x.ndim >= 3 and min(x.shape[-3:-1]) <= half:
      raise ValueError(f"{name} has images of {x.shape[-3:-1]} pixels: kornia's reflected "
                       f"border needs H, W > window // 2 = {half}")

  def pad(x):
    if x.ndim < 3:
      return x  # ssim.ssim names the bad shape
    widths = [(0, 0)] * (x.ndim - 3) + [(half, half), (half, half), (0, 0)]
    return jnp.pad(x, widths, mode="reflect")
  return ssim.ssim(pad(a), pad(b), max_val=max_val, filter_size=window)


class Protocol(NamedTuple):
  """Haim et al.'s evaluation of one set of reconstructions (`protocol`).

  Attributes:
    index: int32[n] each training image's match (index into the reconstructions; several
      training images may share one).
    distance: float32[n] its match distance (`pairwise`).
    ssim: float32[n] the SSIM of the training image with its match, as their notebook scores
      it (`kornia_ssim`, window 3, after step 5's scaling), in [−1, 1].
    count: int, training images with ssim ≥ level.
    level: the SSIM level counted at.
  """
  index: np.ndarray
  distance: np.ndarray
  ssim: np.ndarray
  count: int
  level: float


def _images(x: Any, name: str) -> np.ndarray:
  x = np.asarray(x)
  if x.ndim != 4 or not np.issubdtype(x.dtype, np.floating):
    raise ValueError(f"{name} must be float images [N, H, W, C], got {x.dtype}{x.shape}")
  if not len(x):
    raise ValueError(f"{name} holds no image")
  return x


def protocol(final_images, train_images, mean, *, level: float = LEVEL) -> Protocol:
  """Haim et al.'s evaluation (steps 1–6 of the module docstring) of reconstructions against
  the training images: each training image's match by `match`, then its SSIM with that match
  under their scaling and kornia's window-3 SSIM, and the count at ``level``.

  Callable on a run's results.npz as saved: ``protocol(r["final_images"], r["train_images"],
  r["mean"])`` (a grid run's final_images float[G, m, ...]: one grid point at a time).

  Args:
    final_images: float[m, H, W, C] reconstructions in the victim's input space (the mean
      subtracted, as the attack returns them; any range: step 5 min–max scales them).
    train_images: float[n, H, W, C] training images in the victim's input space (mean
      subtracted; plus ``mean`` they are pixels in [0, 1]).
    mean: float[H, W, C] the training-set mean subtracted, or None / an empty array (none).
    level: the SSIM level counted at (default 0.4, trdr's).

  A constant reconstruction min–max scales to 0 here (`trdr.evaluation.metrics.minmax_scale`)
  where their ``transform_vmin_vmax_batch`` divides by 0 (NaN).
  Returns:
    `Protocol`.
  Raises:
    ValueError: images not float[N, H, W, C], an empty set, differing image shapes, a mean
      of another shape, a non-finite reconstruction or training image (a diverged attack:
      NCC and min–max scaling have no value there), or images no larger than 2 × 2.
  """
  recon = _images(final_images, "final_images")
  train = _images(train_images, "train_images")
  if recon.shape[1:] != train.shape[1:]:
    raise ValueError(f"final_images {recon.shape} and train_images {train.shape} differ in "
                     "their image shape")
  mean = None if mean is None or not np.size(mean) else np.asarray(mean)
  if mean is not None and mean.shape != train.shape[1:]:
    raise ValueError(f"mean must have the image shape {train.shape[1:]}, got {mean.shape}")
  for name, x in (("final_images", recon), ("train_images", train)):
    if not np.all(np.isfinite(x)):
      raise ValueError(f"{name} has non-finite pixels (a diverged attack?): Haim et al.'s "
                       "match and scaling are undefined there")
  if min(train.shape[1:3]) < 2 * KORNIA_WINDOW:
    raise ValueError(f"images of {train.shape[1:3]} pixels are too small for the ½-resolution "
                     "match and the window-3 SSIM")
  index, distance = match(recon, train)
  offset = 0.0 if mean is None else mean
  scaled = metrics.minmax_scale(jnp.asarray(recon[index] + offset, jnp.float32))
  sims = np.asarray(kornia_ssim(scaled, jnp.asarray(train + offset, jnp.float32)), np.float32)
  return Protocol(index, distance, sims, int(np.sum(sims >= level)), float(level))
