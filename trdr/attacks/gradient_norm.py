"""Runkel et al.'s eq. 3 as an attack objective: min_x ||∇θE(x, y; θ*)||².

Where DecoReco (`trdr.attacks.decoreco`) fits multipliers λ so that θ* is a combination of
the candidates' gradients, eq. 3 asks directly that θ* be a stationary point of the
victim's training objective E on the candidates. `loss_and_grad` has DecoReco's signature,
so the same attack loop runs it (``attack.form = "gradient_norm"``).
"""

import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax.tree

from trdr import victim

Params = Any
ApplyFn = Callable[[Params, jax.Array], jax.Array]


def loss(params: Params, images: jax.Array, labels: jax.Array, *,
                       apply_fn: ApplyFn, weight_decay: float) -> jax.Array:
  """||∇θE(x, y; θ*)||² (Runkel eq. 3), E = `trdr.victim.energy`.

  Equals `stationarity_residual` of the "weight_decay" form at λ_i = σ(−y_i Φ_i), m = n.

  Args:
    params: θ*, pytree of float arrays.
    images: float[n, H, W, C].
    labels: float[n] in {−1, +1}.
    apply_fn: (params, images) -> logits float[n].
    weight_decay: wd ≥ 0 of the victim's objective.
  Returns:
    float[] scalar.
  """
  grad = jax.grad(functools.partial(victim.energy, apply_fn=apply_fn,
                                    weight_decay=weight_decay))(params, images, labels)
  return optax.tree.norm(grad, squared=True)


def loss_and_grad(model, params: Params, labels: jax.Array, *, weight_decay: float,
                  activation: Callable, x_min: float = -1.0, x_max: float = 1.0) -> Callable:
  """Eq. 3 as an attack: (images, lambdas, alpha, lambda_min) -> (||∇θE(x, y; θ*)||² +
  pixel prior, (∂/∂x, zeros for λ)), DecoReco's signature (`trdr.attacks.decoreco`).

  Args:
    model: the victim's Flax module (``model.clone(activation=...)`` must be valid).
    params: θ*.
    labels: float[n] in {−1, +1}.
    weight_decay: wd of the victim's objective E (`trdr.victim.energy`).
    activation: α -> the elementwise activation used during the attack (DecoReco's
      sigmoid-backward ReLU).
    x_min, x_max: the pixel box of the prior Σ relu(x − x_max)² + Σ relu(x_min − x)².
  Returns:
    The function; λ and λ_min are ignored.
  """
  def objective(images, alpha):
    attack_model = model.clone(activation=activation(alpha))
    apply_fn = lambda p, x: attack_model.apply({"params": p}, x)
    pixels = (jnp.sum(jax.nn.relu(images - x_max) ** 2)
              + jnp.sum(jax.nn.relu(x_min - images) ** 2))
    return loss(params, images, labels, apply_fn=apply_fn, weight_decay=weight_decay) + pixels

  def value_and_grad(images, lambdas, alpha, lambda_min):
    del lambda_min
    value, grad = jax.value_and_grad(objective)(images, alpha)
    return value, (grad, jnp.zeros_like(lambdas))

  return value_and_grad
