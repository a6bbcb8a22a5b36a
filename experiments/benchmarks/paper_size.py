"""The DecoReco iteration of Haim et al. (2022) at paper size, for section 3: its settings,
victim, inputs, loss-and-gradient methods, matmul FLOP counts and SGD-momentum step."""

import functools
import itertools

import jax
import numpy as np

from benchmarks import common
from trdr import models
from trdr.attacks import decoreco, kkt_mlp

M, SHAPE, WIDTHS, ALPHA = 1000, (32, 32, 3), (1000, 1000), 20.0
D = int(np.prod(SHAPE))
LR_IMAGES, LR_LAMBDAS, MOMENTUM = 0.4, 1e-4, 0.9
# Matmul products of the reference iteration per layer, with its unused parameter
# gradients: 6 of 2 m D w_0 in the first layer, 9 of 2 m w_{k−1} w_k in each later one
# (54.9 GFLOP at M = 1000).
TORCH_FIRST, TORCH_LATER = 6, 9


def model() -> models.HaimMLP:
  """MLP D-1000-1000-1, first-layer bias only, its ReLU's derivative sigmoid(α z)."""
  return models.HaimMLP(widths=WIDTHS, activation=decoreco.relu_sigmoid_backward(ALPHA))


def methods(mlp: models.HaimMLP) -> dict:
  """{"autodiff", "fused"} -> (θ, x, λ, y) -> (L, (∂L/∂x, ∂L/∂λ)) of the KKT loss."""
  apply_fn = lambda p, x: mlp.apply({"params": p}, x)
  return {"autodiff": jax.value_and_grad(functools.partial(
              decoreco.stationarity_loss, apply_fn=apply_fn), argnums=(1, 2)),
          "fused": functools.partial(kkt_mlp.value_and_grad, alpha=ALPHA)}


def inputs(mlp: models.HaimMLP, dtype, m: int = M) -> tuple:
  """(θ, x, λ, y) in ``dtype``: Haim et al.'s initialisation (first layer N(0, 1e-4²)) and
  m candidates x ~ N(0, 10⁻⁶) (`common.decoreco_candidates`)."""
  key_params, key_candidates = jax.random.split(jax.random.key(0))
  params = models.init_params(mlp, key_params, SHAPE, dtype)
  return (params, *common.decoreco_candidates(key_candidates, m, SHAPE, 1e-3, dtype))


def flops(m: int, d: int, widths) -> dict[str, float]:
  """Matmul FLOPs (2 × multiply-adds) of one loss + ∇(x, λ) evaluation.

  Autodiff: first layer X K_0, G_0 = Xᵀ Y_0, X R_0, Z̄_0 K_0ᵀ, Y_0 R_0ᵀ (5 × 2 m D w_0);
  each later layer 7 × 2 m w_{k−1} w_k. Fused (`trdr.attacks.kkt_mlp`, module docstring):
  per layer Z_k and (…) K_kᵀ, for k ≥ 1 also B_{k−1} and Ū_k, and either the direct
  form's three products with R_k or the Gram form's Γ_k, M_k (symmetric, in blocks), Γ_k Y_k
  and M_k H_{k−1}, as `kkt_mlp.gram_layers` picks. Products with the one-column output
  layer are O(m w) and left out.

  Returns:
    {"autodiff": FLOPs, "fused": FLOPs, "reference": FLOPs} (the reference:
    `TORCH_FIRST`, `TORCH_LATER`).
  """
  sizes = (d, *widths)
  later = sum(2 * m * a * b for a, b in itertools.pairwise(widths))
  fused = 0
  for k, ((a, b), use_gram) in enumerate(zip(itertools.pairwise(sizes),
                                             kkt_mlp.gram_layers(m, sizes))):
    fused += (2 if k == 0 else 4) * 2 * m * a * b
    fused += 2 * kkt_mlp.residual_multiply_adds(m, a, b, use_gram)
  return {"autodiff": 5 * 2 * m * d * widths[0] + 7 * later, "fused": fused,
          "reference": TORCH_FIRST * 2 * m * d * widths[0] + TORCH_LATER * later}


def momentum_step(value_and_grad, labels):
  """(θ, x, λ, v_x, v_λ) -> (loss, x', λ', v_x', v_λ'), jitted: SGD with momentum as
  torch.optim.SGD (v ← μ v + g, p ← p − lr v) on the gradients of ``value_and_grad``
  (θ, x, λ, labels) -> (L, (∂L/∂x, ∂L/∂λ))."""

  @jax.jit
  def step(params, images, lambdas, velocity_images, velocity_lambdas):
    loss, (grad_images, grad_lambdas) = value_and_grad(params, images, lambdas, labels)
    velocity_images = MOMENTUM * velocity_images + grad_images
    velocity_lambdas = MOMENTUM * velocity_lambdas + grad_lambdas
    return (loss, images - LR_IMAGES * velocity_images, lambdas - LR_LAMBDAS * velocity_lambdas,
            velocity_images, velocity_lambdas)

  return step
