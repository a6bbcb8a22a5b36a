"""The victim's training objective E(x, y; θ) and the losses of its training.

E(x, y; θ) = (1/n) Σ_i log(1 + exp(−y_i Φ(x_i; θ))) + (wd/2) ||θ||²     (Runkel et al., Sec. 3)

with labels y ∈ {−1, +1} and wd > 0, so that for the affine model (eq. 8) E is strongly
convex in θ and its minimiser θ(x) is unique. The same minimiser is the lower level of the
bilevel attack. `GD_LOSSES` are the losses of Haim et al.'s and Buzaglo et al.'s
gradient-descent victims.
"""

from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
import optax.tree

Params = Any


def logistic_loss(logits: jax.Array, labels: jax.Array) -> jax.Array:
  """Mean logistic loss (1/n) Σ log(1 + exp(−y_i f_i)); logits, labels float[n], y ∈ {±1}."""
  return jnp.mean(jax.nn.softplus(-labels * logits))


def energy(params: Params, images: jax.Array, labels: jax.Array, *, apply_fn,
           weight_decay: float) -> jax.Array:
  """Training objective E(x, y; θ): mean logistic loss + (wd/2)||θ||².

  Args:
    params: θ, a pytree of float arrays.
    images: float[n, H, W, C].
    labels: float[n] in {−1, +1}.
    apply_fn: (params, images) -> logits float[n].
    weight_decay: wd ≥ 0.
  Returns:
    float[] scalar.
  """
  logits = apply_fn(params, images)
  return logistic_loss(logits, labels) + 0.5 * weight_decay * optax.tree.norm(
      params, squared=True)


def accuracy(logits, labels) -> jax.Array:
  """Fraction of sign(Φ) = y: float[] (jittable)."""
  return jnp.mean(jnp.where(logits >= 0, 1.0, -1.0) == labels)


def class_index(labels: jax.Array, num_classes: int) -> jax.Array:
  """int32[n] class indices: (y + 1)/2 of ±1 labels for C = 2, else the labels 0 … C−1."""
  return ((labels + 1) / 2 if num_classes == 2 else labels).astype(jnp.int32)


# Losses of the gradient-descent victims (Haim et al. 2022; Buzaglo et al. 2023), each
# (logits, labels float[n]: ±1, or 0 … C−1 for C > 2) -> float[] mean over the training set.
GD_LOSSES: dict[str, Callable[[jax.Array, jax.Array], jax.Array]] = {
    # Binary cross-entropy on {0, 1} labels, i.e. the logistic loss on y ∈ {−1, +1}.
    "bce": logistic_loss,
    # Squared error to the ±1 target, (1/n) Σ (Φ_i − y_i)².
    "mse": lambda logits, labels: jnp.mean((logits - labels) ** 2),
    # Cross-entropy over C output logits (Buzaglo et al.'s multiclass victim; C = 2 on
    # the binary task).
    "ce": lambda logits, labels: jnp.mean(optax.softmax_cross_entropy_with_integer_labels(
        logits, class_index(labels, logits.shape[1]))),
}


def signed_outputs(logits: jax.Array, labels: jax.Array) -> jax.Array:
  """s_i = y_i Φ(x_i), the binary margin: logits float[n], labels float[n] in {−1, +1} ->
  float[n]."""
  return labels * logits


def margins(logits: jax.Array, labels: jax.Array) -> jax.Array:
  """s_i = Φ_{y_i}(x_i) − max_{k≠y_i} Φ_k(x_i), the multiclass margin (Buzaglo et al.
  2023): logits float[n, C], labels int[n] in {0, …, C−1} -> float[n]."""
  true = jnp.take_along_axis(logits, labels[:, None], axis=1)[:, 0]
  others = jnp.where(jax.nn.one_hot(labels, logits.shape[1], dtype=bool), -jnp.inf, logits)
  return true - jnp.max(others, axis=1)


def predictions(logits: jax.Array) -> jax.Array:
  """Predicted labels as the task's: ±1 from logits float[n] (sign) or float[n, 2]
  (argmax), the class 0 … C−1 from float[n, C > 2]."""
  if logits.ndim == 2 and logits.shape[1] > 2:
    return jnp.argmax(logits, axis=1).astype(logits.dtype)
  if logits.ndim == 2:
    return jnp.where(jnp.argmax(logits, axis=1) == 1, 1.0, -1.0)
  return jnp.where(logits >= 0, 1.0, -1.0)


def param_distance(theta_a: Params, theta_b: Params) -> jax.Array:
  """The upper-level loss l = ||θ_a − θ_b||² (Runkel eq. 2), summed over every entry of
  every parameter tensor; Table 1 reports it between θ* and θ(x).

  Args:
    theta_a, theta_b: pytrees of arrays with the same structure and leaf shapes.
  Returns:
    float[] ≥ 0, in the promoted leaf dtype (at least float32).
  Raises:
    ValueError: the tree structures differ, or a pair of leaves differs in shape (the
      message names the leaf path).
  """
  flat_a, tree_a = jax.tree_util.tree_flatten_with_path(theta_a)
  flat_b, tree_b = jax.tree_util.tree_flatten_with_path(theta_b)
  if tree_a != tree_b:
    raise ValueError(f"param_distance: pytree structures differ:\n  theta_a: {tree_a}\n"
                     f"  theta_b: {tree_b}")
  total = jnp.zeros((), jnp.float32)
  for (path, a), (_, b) in zip(flat_a, flat_b):
    a, b = jnp.asarray(a), jnp.asarray(b)
    if a.shape != b.shape:
      raise ValueError(f"param_distance: leaf {jax.tree_util.keystr(path)} has shape "
                       f"{a.shape} in theta_a but {b.shape} in theta_b")
    dtype = jnp.promote_types(jnp.result_type(a, b), jnp.float32)
    d = a.astype(dtype) - b.astype(dtype)
    total = total + jnp.sum(d * d)
  return total
