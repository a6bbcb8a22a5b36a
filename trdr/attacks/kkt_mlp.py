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

Gram trick, where a layer is wide against m: G_k = H_{k−1}ᵀ Y_k (w_{k−1} × w_k) is never
formed. With the Gram matrix Γ_k = H_{k−1} H_{k−1}ᵀ (m × m) and M_k = Y_k Y_kᵀ,

  P_k = H_{k−1} R_k + Rb_k = c (Z_k − b_k) − Γ_k Y_k + Rb_k,
  H̄_{k−1} = (Z̄_k + c Y_k) K_kᵀ − M_k H_{k−1},
  ||R_k||² = c² ||K_k||² − 2c Σ_i a_i Δ_{k,i}·(z_{k,i} − b_k) + Σ_ij (Γ_k)_ij (M_k)_ij,

so the three products with R_k (G_k, H_{k−1} R_k, Y_k R_kᵀ: 3 m w_{k−1} w_k multiply-adds)
become four with m × m matrices (Γ_k, M_k, Γ_k Y_k, M_k H_{k−1}: m² (w_{k−1} + w_k) plus
the symmetric Γ_k and M_k, computed as blocks with 3/4 of the multiply-adds, `_gram`).
`gram_layers` takes, layer by layer, the form with fewer multiply-adds: for Haim et al.'s
MLP D-1000-1000-1 at m = 1000 (paper size) the first layer (D = 3072 ≫ m) and not the
second; at m ≤ 200 (the CPU sizes) both. (The value ||R_k||² is then a difference of large
terms: its relative accuracy degrades where R_k ≪ c K_k, i.e. near an exact KKT point; the
gradients do not use it.)

Work (2 × multiply-adds), m candidates, D = w_{−1} inputs, hidden widths w_0 … w_{H−1}:

  every layer  2 m w_{k−1} w_k [Z_k] + 2 m w_{k−1} w_k [(…) K_kᵀ]
               + (k ≥ 1) 2 × 2 m w_{k−1} w_k [B_{k−1}, Ū_k]
  direct       3 × 2 m w_{k−1} w_k [G_k, P_k, Y_k R_kᵀ]
  Gram         (3/4)·2 m² w_{k−1} [Γ_k] + (3/4)·2 m² w_k [M_k] + 2 m² w_k [Γ_k Y_k]
               + 2 m² w_{k−1} [M_k H_{k−1}]

Autodiff's ∇(x, λ) does the direct form everywhere, less the first layer's unused B_{−1}
and Ū_0. At paper size (m = 1000, D = 3072, widths (1000, 1000)) that is 26.5 + 14.0 =
40.5 GFLOP per iteration against 44.7 GFLOP for autodiff (30.7 + 14.0) and 54.9 GFLOP for
the reference PyTorch code, which also computes parameter gradients it never uses; at the
`:cpu` size (m = 200) 3.0 + 1.9 = 4.9 GFLOP against autodiff's 6.1 + 2.8 = 8.9. The output
layer and the elementwise work are O(m (D + Σ_k w_k)). Beyond the FLOPs, every product runs
as an NN or NT matmul (`_transposed`), and the [m, D] prior terms are fused into their
consumers.

All functions are pure; `value_and_grad` is jittable with its keywords bound through
`functools.partial`. `supports` tells a caller whether to fall back to autodiff.
"""

from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp

Params = Mapping[str, Any]


def layer_names(params: Params, prefix: str, model: str) -> list[str]:
  """["{prefix}_0", …, "{prefix}_{L−1}", "output"]: θ's layers in order, after checking
  that θ is a mapping of exactly these layers, each holding a 'kernel' and optionally a
  'bias' (the structure `value_and_grad` here and `trdr.attacks.kkt_cnn` share; each
  checks its own shapes).

  Raises:
    ValueError: θ is not such a mapping (``model`` names the network expected).
  """
  if not isinstance(params, Mapping):
    raise ValueError(f"params must be a mapping of layers, got {type(params).__name__}")
  depth = 0
  while f"{prefix}_{depth}" in params:
    depth += 1
  names = [f"{prefix}_{k}" for k in range(depth)] + ["output"]
  if depth == 0 or set(params) != set(names):
    raise ValueError(f"expected {model} layers "
                     f"{names if depth else [f'{prefix}_0', '…', 'output']}, got "
                     f"{sorted(params)}")
  for name in names:
    layer = params[name]
    if not isinstance(layer, Mapping) or "kernel" not in layer or not set(layer) <= {
        "kernel", "bias"}:
      raise ValueError(f"layer {name!r} must hold 'kernel' and optionally 'bias', got "
                       f"{sorted(layer) if isinstance(layer, Mapping) else type(layer)}")
  return names


def check_one_output(outputs: int) -> None:
  """Raises ValueError unless the network has one output (the binary forms)."""
  if outputs != 1:
    raise ValueError(f"only one output (binary forms) is supported, got num_outputs = "
                     f"{outputs}; use autodiff (decoreco.stationarity_loss) for multiclass")


def _layer_names(params: Params) -> list[str]:
  """`layer_names` of a `trdr.models.HaimMLP` after checking its shapes.

  Raises:
    ValueError: the structure, shapes or number of outputs are not those of a one-output
      `trdr.models.HaimMLP`.
  """
  names = layer_names(params, "dense", "HaimMLP")
  width = None
  for name in names:
    layer = params[name]
    kernel = layer["kernel"]
    if kernel.ndim != 2 or (width is not None and kernel.shape[0] != width):
      raise ValueError(f"layer {name!r}: kernel of shape {kernel.shape} does not follow a "
                       f"layer of width {width}")
    width = kernel.shape[1]
    if "bias" in layer and layer["bias"].shape != (width,):
      raise ValueError(f"layer {name!r}: bias of shape {layer['bias'].shape}, expected "
                       f"({width},)")
  check_one_output(width)
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


def gram_multiply_adds(m: int, n: int) -> int:
  """Multiply-adds of `_gram` on float[m, n]: m·⌊m/2⌋·n + ⌈m/2⌉²·n (3/4 of m² n for even m)."""
  half = m // 2
  return (m * half + (m - half) ** 2) * n


def residual_multiply_adds(m: int, a: int, b: int, gram: bool) -> int:
  """Multiply-adds of a layer's products with its residual R_k (w_{k−1} = a, w_k = b):
  the direct form's G_k, H_{k−1} R_k, Y_k R_kᵀ (3 m a b) or the Gram form's Γ_k, M_k
  (`gram_multiply_adds`), Γ_k Y_k and M_k H_{k−1} (m² (a + b))."""
  if gram:
    return gram_multiply_adds(m, a) + gram_multiply_adds(m, b) + m * m * (a + b)
  return 3 * m * a * b


def gram_layers(m: int, widths: Sequence[int]) -> tuple[bool, ...]:
  """Per hidden layer, whether `value_and_grad` uses the Gram form (module docstring).

  Args:
    m: number of candidates, ≥ 1.
    widths: (D, w_0, …, w_{H−1}): the input size and the hidden widths; layer k maps
      w_{k−1} -> w_k.
  Returns:
    H booleans: True where the Gram form takes fewer multiply-adds than the direct one,
    (3/4)(m² w_{k−1} + m² w_k) + m² (w_{k−1} + w_k) < 3 m w_{k−1} w_k (`_gram`'s exact
    count for odd m).
  Raises:
    ValueError: m < 1, or fewer than two widths.
  """
  if m < 1 or len(widths) < 2:
    raise ValueError(f"need m ≥ 1 and widths (D, w_0, …), got m = {m}, widths = {widths}")
  return tuple(residual_multiply_adds(m, a, b, True) < residual_multiply_adds(m, a, b, False)
               for a, b in zip(widths[:-1], widths[1:]))


def _bias(layer, dtype):
  return layer["bias"].astype(dtype) if "bias" in layer else None


def value_and_grad(params: Params, images: jax.Array, lambdas: jax.Array, labels: jax.Array,
                   *, alpha: float, scale: float = 1.0, x_min: float = -1.0,
                   x_max: float = 1.0, lambda_min: float = 0.05,
                   lambda_weight: float = 5.0, gram: Sequence[bool] | None = None,
                   ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
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
    gram: per hidden layer, the Gram form (True) or the direct one (False); None:
      `gram_layers`, the form with fewer multiply-adds. The result is the same to float
      rounding either way.
  Returns:
    (loss float[], (grad_images float[m, H, W, C], grad_lambdas float[m])), in the dtype
    of ``images``.
  Raises:
    ValueError: θ not of a one-output Haim MLP (see `supports`), its input size not
      H·W·C, lambdas / labels not of shape [m], alpha not positive, or ``gram`` not one
      boolean per hidden layer.
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
  if gram is None:
    gram = gram_layers(m, [x.shape[1]] + [k.shape[1] for k in kernels])
  if len(gram) != len(hidden):
    raise ValueError(f"gram must hold one boolean per hidden layer ({len(hidden)}), got "
                     f"{gram}")
  gram = tuple(bool(g) for g in gram)
  k_out = params["output"]["kernel"][:, 0].astype(dtype)
  b_out = _bias(params["output"], dtype)
  c = jnp.asarray(scale, dtype)
  a = (lambdas * labels / m).astype(dtype)                                  # [m]
  ac = a[:, None]
  act = lambda z: jax.nn.sigmoid(alpha * z)
  dot, dot_nt = jnp.matmul, _dot_nt

  # Forward: Z_k − b_k = H_{k−1} K_k (kept for the Gram form), Z_k, H_k, S_k.
  hs, zs_nobias, zs = [x], [], []                                        # hs[k] = H_{k−1}
  for kernel, bias in zip(kernels, biases):
    z = dot(hs[-1], kernel)
    zs_nobias.append(z)
    zs.append(z if bias is None else z + bias)
    hs.append(jax.nn.relu(zs[-1]))
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

  # Residuals R = c θ − G and their squared norms, P_k (direct or Gram form) and f_i.
  loss = jnp.zeros((), dtype)
  rs, m_mats, ps = [None] * len(zs), [None] * len(zs), []
  for k, (kernel, bias, y) in enumerate(zip(kernels, biases, ys)):
    if gram[k]:
      gram_k = _gram(hs[k])                                                # Γ_k
      m_mats[k] = _gram(y)                                                 # M_k
      loss += (c * c * jnp.sum(kernel * kernel) - 2 * c * jnp.sum(y * zs_nobias[k])
               + jnp.sum(gram_k * m_mats[k]))
      p = c * zs_nobias[k] - dot(gram_k, y)
    else:
      rs[k] = c * kernel - dot(_transposed(hs[k]), y)
      loss += jnp.sum(rs[k] * rs[k])
      p = dot(hs[k], rs[k])
    if bias is not None:
      rb = c * bias - jnp.sum(y, axis=0)
      loss += jnp.sum(rb * rb)
      p = p + rb
    ps.append(p)
  r_out = c * k_out - a @ hs[-1]
  loss += jnp.sum(r_out * r_out)
  f = hs[-1] @ r_out
  if b_out is not None:
    rb_out = c * b_out[0] - jnp.sum(a)
    loss += rb_out * rb_out
    f += rb_out
  for p, d in zip(ps, deltas):
    f += jnp.sum(p * d, axis=1)

  # Reverse pass of F = Σ_i a_i f_i with R fixed; H̄_{−1} = X̄.
  u_bar = [None] * len(zs)
  u_bar[0] = ac * ps[0]
  for k in range(1, len(zs)):
    u_bar[k] = ac * ps[k] + dot(u_bar[k - 1] * ss[k - 1], kernels[k])
  h_bar = ac * r_out
  for k in range(len(zs) - 1, -1, -1):
    s = ss[k]
    z_bar = h_bar * s + u_bar[k] * bs[k] * (alpha * s * (1 - s))
    if gram[k]:
      h_bar = dot_nt(z_bar + c * ys[k], kernels[k]) - dot(m_mats[k], hs[k])
    else:
      h_bar = dot_nt(ys[k], rs[k]) + dot_nt(z_bar, kernels[k])
  x_bar = h_bar

  # Priors. The two expressions of x − clip(x) differ on purpose: XLA then fuses each into
  # its consumer (the sum, the gradient) instead of writing an [m, D] temporary.
  excess = x - jnp.clip(x, x_min, x_max)
  short = jax.nn.relu(lambda_min - lambdas).astype(dtype)
  loss += jnp.sum(excess * excess) + lambda_weight * jnp.sum(short * short)
  grad_x = 2 * (jnp.maximum(x - x_max, 0) - jnp.maximum(x_min - x, 0)) - 2 * x_bar
  grad_lambdas = -2 * (labels / m).astype(dtype) * f - 2 * lambda_weight * short
  return loss, (grad_x.reshape(images.shape), grad_lambdas)
