"""Victim classifiers Φ(x; θ) as Flax Linen modules, and a registry keyed by name.

Every model maps images float[N, H, W, C] to one logit per image, float[N]; the binary
label convention is y ∈ {−1, +1} (see `trdr.data`). Parameters θ are the module's
``params`` collection, a pytree of arrays.
"""

from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections


class Affine(nn.Module):
  """Affine classifier Φ(x; θ) = x θ_wᵀ + θ_b (Runkel et al. 2024, eq. 8).

  θ = {"dense": {"kernel": float[D, 1], "bias": float[1]}} with D = H·W·C.
  """

  @nn.compact
  def __call__(self, images: jax.Array) -> jax.Array:
    """Args: images float[N, H, W, C]. Returns: logits float[N]."""
    x = images.reshape((images.shape[0], -1))
    return nn.Dense(1, name="dense", param_dtype=images.dtype)(x)[:, 0]


MODELS: dict[str, Callable[[ml_collections.ConfigDict], nn.Module]] = {
    "affine": lambda cfg: Affine(),
}


def build_model(victim_config: ml_collections.ConfigDict) -> nn.Module:
  """The Flax module named by ``victim_config.arch``.

  Raises:
    ValueError: if the architecture is not in `MODELS`.
  """
  arch = victim_config.arch
  if arch not in MODELS:
    raise ValueError(f"unknown victim architecture {arch!r}; known: {sorted(MODELS)}")
  return MODELS[arch](victim_config)


def init_params(model: nn.Module, key: jax.Array, image_shape, dtype=jnp.float32):
  """Default Flax initialisation of θ for images of shape (H, W, C)."""
  dummy = jnp.zeros((1, *image_shape), dtype)
  return model.init(key, dummy)["params"]


def uniform_params(key: jax.Array, template):
  """θ with every entry drawn from U(0, 1), as the paper's random lower-level start.

  Args:
    key: PRNG key.
    template: pytree of arrays giving structure, shapes and dtypes.
  Returns:
    Pytree like ``template``.
  """
  leaves, treedef = jax.tree.flatten(template)
  keys = jax.random.split(key, len(leaves))
  return jax.tree.unflatten(
      treedef,
      [jax.random.uniform(k, leaf.shape, leaf.dtype) for k, leaf in zip(keys, leaves)],
  )
