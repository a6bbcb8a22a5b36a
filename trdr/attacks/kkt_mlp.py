r"""Hand-derived, fused value and gradient of the DecoReco loss for the Haim MLP.

`trdr.attacks.decoreco.stationarity_loss` differentiated by `jax.value_and_grad` with
`relu_sigmoid_backward(α)` is the reference; this module computes the same numbers (to
float rounding) with less work, for the Haim et al. (NeurIPS 2022) victim
Φ(x) = k_outᵀ σ(K_{H−1}ᵀ … σ(K_0ᵀ x + b_0)) (`trdr.models.HaimMLP`, one output, biases
optional per layer), σ = ReLU forward with every derivative s(z) = sigmoid(α z) and second
derivative s'(z) = α s(z)(1 − s(z)).

Loss (c = 1 for the "binary" form, c = wd for "weight_decay"; a_i = λ_i y_i / m):

  L(x, λ) = Σ_tensors ||R||² + Σ relu(x − x_max)² + Σ relu(x_min − x)²
            + w_λ Σ_i relu(λ_min − λ_i)²,    R = c θ − G,   G = Σ_i a_i ∇θΦ(x_i).

Derivation. Rows are samples: X float[m, D], Z_k = H_{k−1} K_k + b_k, H_k = relu(Z_k),
H_{−1} = X, S_k = s(Z_k). The per-sample backprop vectors Δ_k = ∂Φ/∂Z_k are
Δ_{H−1} = S_{H−1} ∘ k_outᵀ, Δ_k = S_k ∘ B_k with B_k = Δ_{k+1} K_{k+1}ᵀ; with Y_k = diag(a) Δ_k

  G_k = H_{k−1}ᵀ Y_k,   Gb_k = 1ᵀ Y_k,   G_out = H_{H−1}ᵀ a,   Gb_out = 1ᵀ a.

Since θ is constant, dL = −2 <R, dG>, and G is linear in each sample's ∇θΦ(x_i), so with R
held fixed

  ∂L/∂λ_i = −2 (y_i/m) f_i + prior,   ∂L/∂x_i = −2 ∇_{x_i} F + prior,   F = Σ_i a_i f_i,
  f_i = <R, ∇θΦ(x_i)> = Σ_k P_{k,i}·Δ_{k,i} + h_{H−1,i}·r_out + Rb_out,
  P_k = H_{k−1} R_k + Rb_k                     (the "forward pass of R", m × w_k).

One hand-written reverse pass of F (U_k = diag(a) P_k = ∂F/∂Δ_k):

  Ū_0 = U_0,  Ū_k = U_k + (Ū_{k−1} ∘ S_{k−1}) K_k                 (adjoint of Δ_k)
  H̄_{H−1} = a r_outᵀ,  Z̄_k = H̄_k ∘ S_k + Ū_k ∘ B_k ∘ α S_k (1 − S_k)
  H̄_{k−1} = Y_k R_kᵀ + Z̄_k K_kᵀ                                  (k ≥ 1)
  X̄ = Z̄_0 K_0ᵀ + Y_0 R_0ᵀ.

Gram trick for the first layer, where D is large: G_0 = Xᵀ Y_0 (D × w_0) is never formed.
With the Gram matrix Γ = X Xᵀ (m × m) and M = Y_0 Y_0ᵀ,

  P_0 = X R_0 + Rb_0 = c (Z_0 − b_0) − Γ Y_0 + Rb_0,
  X̄ = (Z̄_0 + c Y_0) K_0ᵀ − M X,
  ||R_0||² = c² ||K_0||² − 2c Σ_i a_i Δ_{0,i}·(z_{0,i} − b_0) + Σ_ij Γ_ij M_ij,

so X enters four products (X K_0, Γ, (…) K_0ᵀ, M X) instead of autodiff's five (X K_0,
Xᵀ Y_0, X R_0, Z̄_0 K_0ᵀ, Y_0 R_0ᵀ), and the symmetric Γ and M are computed as blocks
with 3/4 of the multiply-adds (`_gram`). (The value ||R_0||² is a difference of large
terms: its relative accuracy degrades where R_0 ≪ c K_0, i.e. near an exact KKT point; the
gradients do not use it.)

Work (2 × multiply-adds), m candidates, D inputs, hidden widths w_0 … w_{H−1}:

  first layer  2 m D w_0 [X K_0] + (3/4)·2 m² D [Γ] + 2 m² w_0 [Γ Y_0] + (3/4)·2 m² w_0 [M]
               + 2 m w_0 D + 2 m² D [X̄]
  layer k ≥ 1  7 × 2 m w_{k−1} w_k: Z_k, B_{k−1}, G_k, P_k, Ū_k and the two products of
               H̄_{k−1} (the same as autodiff).

At paper size (m = 1000, D = 3072, widths (1000, 1000)) that is 26.5 + 14.0 = 40.5 GFLOP
per iteration against 44.7 GFLOP for autodiff's ∇(x, λ) (30.7 + 14.0) and 54.9 GFLOP for
the reference PyTorch code, which also computes parameter gradients it never uses. The
output layer and the elementwise work are O(m (D + Σ_k w_k)). Beyond the FLOPs, every
product runs as an NN or NT matmul (`_transposed`), and the [m, D] prior terms are fused
into their consumers.

All functions are pure; `value_and_grad` is jittable with its keywords bound through
`functools.partial`. `supports` tells a caller whether to fall back to autodiff.
"""

from typing import Any, Mapping

import jax
import jax.numpy as jnp

Params = Mapping[str, Any]


def _layer_names(params: Params) -> list[str]:
  """["dense_0", …, "dense_{H−1}", "output"] after checking that θ has this structure.

  Raises:
    ValueError: the structure, shapes or number of outputs are not those of a one-output
      `trdr.models.HaimMLP`.
  """
  if not isinstance(params, Mapping):
    raise ValueError(f"params must be a mapping of layers, got {type(params).__name__}")
  hidden = 0
  while f"dense_{hidden}" in params:
    hidden += 1
  names = [f"dense_{k}" for k in range(hidden)] + ["output"]
  if hidden == 0 or set(params) != set(names):
    raise ValueError(f"expected HaimMLP layers {names if hidden else ['dense_0', '…', 'output']}"
                     f", got {sorted(params)}")
  width = None
  for name in names:
    layer = params[name]
    if not isinstance(layer, Mapping) or "kernel" not in layer or not set(layer) <= {
        "kernel", "bias"}:
      raise ValueError(f"layer {name!r} must hold 'kernel' and optionally 'bias', got "
                       f"{sorted(layer) if isinstance(layer, Mapping) else type(layer)}")
    kernel = layer["kernel"]
    if kernel.ndim != 2 or (width is not None and kernel.shape[0] != width):
      raise ValueError(f"layer {name!r}: kernel of shape {kernel.shape} does not follow a "
                       f"layer of width {width}")
    width = kernel.shape[1]
    if "bias" in layer and layer["bias"].shape != (width,):
      raise ValueError(f"layer {name!r}: bias of shape {layer['bias'].shape}, expected "
                       f"({width},)")
  if width != 1:
    raise ValueError(f"only one output (binary forms) is supported, got num_outputs = {width}"
                     "; use autodiff (decoreco.stationarity_loss) for multiclass")
  return names


def supports(params: Params) -> bool:
  """Whether `value_and_grad` handles θ (else use autodiff on `decoreco.stationarity_loss`).

  True for the parameters of a `trdr.models.HaimMLP` with num_outputs = 1, any number of
  hidden layers and any biases. The activation is not visible in θ: `value_and_grad`
  always assumes `decoreco.relu_sigmoid_backward(alpha)`.
  """
  try:
    _layer_names(params)
  except ValueError:
    return False
  return True


def _dot_nt(u: jax.Array, v: jax.Array) -> jax.Array:
  """u vᵀ for u float[p, k], v float[q, k] -> float[p, q], without transposing v."""
  return jax.lax.dot_general(u, v, (((1,), (1,)), ((), ())))


def _transposed(a: jax.Array) -> jax.Array:
  """aᵀ as a materialised copy, so that a product over samples, aᵀ b, runs as an NN matmul:
  XLA:CPU sends uᵀ v (TN) to a generic GEMM about twice as slow as its NN / NT kernels,
  and the barrier stops the transpose from being folded back into the product."""
  return jax.lax.optimization_barrier(a.T)


def _gram(x: jax.Array) -> jax.Array:
  """Symmetric X Xᵀ, float[m, n] -> float[m, m], with 3/4 of the multiply-adds.

  With X = [X_a; X_b] split in halves of rows: [X X_aᵀ | (X_b X_aᵀ)ᵀ over X_b X_bᵀ], so the
  block X_a X_bᵀ is computed once, not twice.
  """
  h = x.shape[0] // 2
  left = _dot_nt(x, x[:h])                                      # [m, h]: X X_aᵀ
  bottom_right = _dot_nt(x[h:], x[h:])                          # [m − h, m − h]
  right = jnp.concatenate([left[h:].T, bottom_right], axis=0)   # [m, m − h]
  return jnp.concatenate([left, right], axis=1)


def _bias(layer, dtype):
  return layer["bias"].astype(dtype) if "bias" in layer else None


def value_and_grad(params: Params, images: jax.Array, lambdas: jax.Array, labels: jax.Array,
                   *, alpha: float, scale: float = 1.0, x_min: float = -1.0,
                   x_max: float = 1.0, lambda_min: float = 0.05,
                   lambda_weight: float = 5.0) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
  """DecoReco loss L(x, λ) and (∂L/∂x, ∂L/∂λ) for a one-output Haim MLP (module docstring).

  Equals ``jax.value_and_grad(decoreco.stationarity_loss, argnums=(1, 2))`` with
  ``apply_fn`` the `trdr.models.HaimMLP` of θ using `decoreco.relu_sigmoid_backward(alpha)`,
  form "binary" (scale = 1) or "weight_decay" (scale = wd), and the same prior settings.

  Args:
    params: θ of a `trdr.models.HaimMLP` with num_outputs = 1: {"dense_k": {"kernel":
      float[w_{k−1}, w_k], "bias" (optional): float[w_k]}, "output": {"kernel":
      float[w_{H−1}, 1], "bias" (optional): float[1]}}, w_{−1} = D = H·W·C.
    images: float[m, H, W, C], the candidates x_i (float32 or float64; the computation
      runs in this dtype).
    lambdas: float[m], multipliers λ_i.
    labels: float[m] in {−1, +1}.
    alpha: sharpness α > 0 of the sigmoid derivative s(z) = sigmoid(α z); may be traced
      (a vmapped hyperparameter sweep), then it is not checked.
    scale: c, the factor of θ in the residual: 1 ("binary") or the weight decay
      ("weight_decay").
    x_min, x_max: the pixel box of the prior.
    lambda_min: λ_min of the multiplier prior.
    lambda_weight: w_λ of the multiplier prior.
  Returns:
    (loss float[], (grad_images float[m, H, W, C], grad_lambdas float[m])), in the dtype
    of ``images``.
  Raises:
    ValueError: θ not of a one-output Haim MLP (see `supports`), its input size not
      H·W·C, lambdas / labels not of shape [m], or alpha not positive.
  """
  names = _layer_names(params)
  if not isinstance(alpha, jax.core.Tracer) and not alpha > 0:  # a traced α: swept
    raise ValueError(f"alpha must be positive, got {alpha!r}")
  m = images.shape[0]
  if images.ndim < 2 or lambdas.shape != (m,) or labels.shape != (m,):
    raise ValueError(f"expected images float[m, ...] and lambdas, labels of shape ({m},), got "
                     f"{images.shape}, {lambdas.shape} and {labels.shape}")
  dtype = images.dtype
  x = images.reshape(m, -1)
  if x.shape[1] != params["dense_0"]["kernel"].shape[0]:
    raise ValueError(f"images have {x.shape[1]} pixels, the first layer expects "
                     f"{params['dense_0']['kernel'].shape[0]}")
  hidden = names[:-1]
  kernels = [params[n]["kernel"].astype(dtype) for n in hidden]
  biases = [_bias(params[n], dtype) for n in hidden]
  k_out = params["output"]["kernel"][:, 0].astype(dtype)
  b_out = _bias(params["output"], dtype)
  c = jnp.asarray(scale, dtype)
  a = (lambdas * labels / m).astype(dtype)                                  # [m]
  ac = a[:, None]
  act = lambda z: jax.nn.sigmoid(alpha * z)
  dot, dot_nt = jnp.matmul, _dot_nt

  # Forward; the first layer's Z_0 − b_0 = X K_0 and the Gram matrix Γ = X Xᵀ.
  z0_nobias = dot(x, kernels[0])
  gram = _gram(x)
  zs = [z0_nobias if biases[0] is None else z0_nobias + biases[0]]
  for kernel, bias in zip(kernels[1:], biases[1:]):
    z = dot(jax.nn.relu(zs[-1]), kernel)
    zs.append(z if bias is None else z + bias)
  hs = [x] + [jax.nn.relu(z) for z in zs]                                  # hs[k] = H_{k−1}
  ss = [act(z) for z in zs]

  # Backprop vectors Δ_k = S_k ∘ B_k.
  bs = [None] * len(zs)
  deltas = [None] * len(zs)
  bs[-1] = jnp.broadcast_to(k_out, zs[-1].shape)
  deltas[-1] = ss[-1] * k_out
  for k in range(len(zs) - 2, -1, -1):
    bs[k] = dot_nt(deltas[k + 1], kernels[k + 1])
    deltas[k] = ss[k] * bs[k]
  ys = [ac * d for d in deltas]

  # Residuals R = c θ − G and their squared norms; P_k and f_i.
  loss = jnp.zeros((), dtype)
  rbs = []
  for y, bias in zip(ys, biases):
    rb = None if bias is None else c * bias - jnp.sum(y, axis=0)
    rbs.append(rb)
    if rb is not None:
      loss += jnp.sum(rb * rb)
  rs = [None]
  for k in range(1, len(zs)):
    r = c * kernels[k] - dot(_transposed(hs[k]), ys[k])
    rs.append(r)
    loss += jnp.sum(r * r)
  r_out = c * k_out - a @ hs[-1]
  loss += jnp.sum(r_out * r_out)
  f = hs[-1] @ r_out
  if b_out is not None:
    rb_out = c * b_out[0] - jnp.sum(a)
    loss += rb_out * rb_out
    f += rb_out
  # First layer through the Gram matrix.
  m_mat = _gram(ys[0])                                                     # M = Y_0 Y_0ᵀ
  loss += (c * c * jnp.sum(kernels[0] * kernels[0]) - 2 * c * jnp.sum(ys[0] * z0_nobias)
           + jnp.sum(gram * m_mat))
  ps = [c * z0_nobias - dot(gram, ys[0])]
  for k in range(1, len(zs)):
    ps.append(dot(hs[k], rs[k]))
  for k, rb in enumerate(rbs):
    if rb is not None:
      ps[k] = ps[k] + rb
  for p, d in zip(ps, deltas):
    f += jnp.sum(p * d, axis=1)

  # Reverse pass of F = Σ_i a_i f_i with R fixed.
  u_bar = [None] * len(zs)
  u_bar[0] = ac * ps[0]
  for k in range(1, len(zs)):
    u_bar[k] = ac * ps[k] + dot(u_bar[k - 1] * ss[k - 1], kernels[k])
  h_bar = ac * r_out
  for k in range(len(zs) - 1, -1, -1):
    s = ss[k]
    z_bar = h_bar * s + u_bar[k] * bs[k] * (alpha * s * (1 - s))
    if k == 0:
      x_bar = dot_nt(z_bar + c * ys[0], kernels[0]) - dot(m_mat, x)
    else:
      h_bar = dot_nt(ys[k], rs[k]) + dot_nt(z_bar, kernels[k])

  # Priors. The two expressions of x − clip(x) differ on purpose: XLA then fuses each into
  # its consumer (the sum, the gradient) instead of writing an [m, D] temporary.
  excess = x - jnp.clip(x, x_min, x_max)
  short = jax.nn.relu(lambda_min - lambdas).astype(dtype)
  loss += jnp.sum(excess * excess) + lambda_weight * jnp.sum(short * short)
  grad_x = 2 * (jnp.maximum(x - x_max, 0) - jnp.maximum(x_min - x, 0)) - 2 * x_bar
  grad_lambdas = -2 * (labels / m).astype(dtype) * f - 2 * lambda_weight * short
  return loss, (grad_x.reshape(images.shape), grad_lambdas)
