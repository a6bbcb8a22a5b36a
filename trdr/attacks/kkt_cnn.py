r"""Hand-derived, fused value and gradient of the DecoReco loss for the ConvNet victim.

What `trdr.attacks.kkt_mlp` is for the Haim MLP, for `trdr.models.ConvNet` (one output,
3 × 3 convolutions with padding 1, ReLU, 2 × 2 average or max pooling or none, a linear
head, biases optional per layer): the same numbers, to float rounding, as autodiff of
`trdr.attacks.decoreco.stationarity_loss` with `decoreco.relu_sigmoid_backward(α)` (either
of `decoreco.AUTODIFF_ORDERS`), with less work. σ = ReLU forward with every derivative
s(z) = sigmoid(α z) and second derivative s'(z) = α s(z)(1 − s(z)).

Loss, as kkt_mlp's (c = 1 "binary", c = wd "weight_decay"; a_i = λ_i y_i / m):

  L(x, λ) = Σ_tensors ||R||² + Σ relu(x − x_max)² + Σ relu(x_min − x)²
            + w_λ Σ_i relu(λ_min − λ_i)²,    R = c θ − G,   G = Σ_i a_i ∇θΦ(x_i).

A convolution is a matrix product with the patches of its input (`trdr.models.Conv3x3`):
with Q_{−1} = x, C_k = patches(Q_{k−1}) (rows: sample and position, columns the 3 × 3 × c
window), Z_k = C_k K_k + b_k, H_k = relu(Z_k), S_k = s(Z_k), Q_k = pool(H_k), and
Φ = flatten(Q_{L−1}) k_out + b_out. Pooling is linear in its input with weights ω held
fixed: ¼ for the average; for the max, the indicator of the window's maxima over their
count, which is how JAX differentiates a max (ties, such as the all-zero windows after a
ReLU, share the derivative) and is piecewise constant, so no derivative flows through it.
So the ConvNet is kkt_mlp's MLP with H_{k−1} replaced by C_k, and pool, its adjoint pool*
(ω ∘ the window's value repeated), patches and its adjoint col2im (the sum of the nine
shifted windows back onto the padded map, cropped) inserted. The backprop vectors
Δ_k = ∂Φ/∂Z_k:

  B_{L−1} = pool*(k_out),  Δ_k = S_k ∘ B_k,  B_k = pool*(col2im(Δ_{k+1} K_{k+1}ᵀ)),
  Y_k = diag(a) Δ_k,  G_k = C_kᵀ Y_k,  Gb_k = 1ᵀ Y_k,  G_out = Q_{L−1}ᵀ a,  Gb_out = 1ᵀ a,

the sums over samples and positions. With R fixed, dL = −2 <R, dG>, so

  ∂L/∂λ_i = −2 (y_i/m) f_i + prior,   ∂L/∂x_i = −2 ∇_{x_i} F + prior,   F = Σ_i a_i f_i,
  f_i = <R, ∇θΦ(x_i)> = Σ_k <P_{k,i}, Δ_{k,i}> + <Q_{L−1,i}, r_out> + Rb_out,
  P_k = C_k R_k + Rb_k,

and one hand-written reverse pass of F (U_k = diag(a) P_k = ∂F/∂Δ_k, Q̄_{L−1} = a r_outᵀ):

  Ū_0 = U_0,  Ū_k = U_k + patches(pool(Ū_{k−1} ∘ S_{k−1})) K_k          (adjoint of Δ_k)
  Z̄_k = pool*(Q̄_k) ∘ S_k + Ū_k ∘ B_k ∘ α S_k (1 − S_k)
  Q̄_{k−1} = col2im([Z̄_k | Y_k] [K_k | R_k]ᵀ),   X̄ = Q̄_{−1}.

Work, in units of one layer's C_k K_k: every layer the forward Z_k, G_k, P_k and the
two-block product for Q̄_{k−1} (5 units), and for k ≥ 1 the backprop B_{k−1} and Ū_k
(7 units). The first layer (the images' 3 channels: `PATCH_COLUMNS`) forms its narrow
patch matrix C_0 once and multiplies it for Z_0, G_0 and P_0; every wider layer runs its
products with Q_{k−1} and their adjoints as XLA convolutions, and G_k as nine products
of the shifted maps, never forming C_k. Autodiff (forward over reverse, the CNN config's
order) forms G by a VJP in θ, then differentiates a JVP in θ in x: the patches of every
map and their adjoints several times over, the tangents' own convolutions, and per-layer
kernel gradients it never uses.

All functions are pure; `value_and_grad` is jittable with its keywords bound through
`functools.partial`. `supports` tells a caller whether to fall back to autodiff.
"""

from typing import Any, Mapping

import jax
import jax.numpy as jnp

from trdr.attacks import kkt_mlp

Params = Mapping[str, Any]

# `value_and_grad`'s ``pool`` values, as `trdr.models.ConvNet.pool` takes them.
POOLS = (False, True, "average", "max")

# The widest patch matrix (columns 9 × input channels) a layer keeps and multiplies; wider
# ones (every layer after the images') go through XLA's convolution (`value_and_grad`).
PATCH_COLUMNS = 32


def _layer_names(params: Params) -> list[str]:
  """`kkt_mlp.layer_names` of a `trdr.models.ConvNet` after checking its shapes.

  Raises:
    ValueError: the structure, shapes or number of outputs are not those of a one-output
      `trdr.models.ConvNet`.
  """
  names = kkt_mlp.layer_names(params, "conv", "ConvNet")
  channels = None
  for name in names:
    layer = params[name]
    kernel = layer["kernel"]
    if name != "output" and (kernel.ndim != 4 or kernel.shape[:2] != (3, 3) or (
        channels is not None and kernel.shape[2] != channels)):
      raise ValueError(f"layer {name!r}: kernel of shape {kernel.shape} is no 3 × 3 "
                       f"convolution after {channels} channels")
    if name == "output" and kernel.ndim != 2:
      raise ValueError(f"layer 'output': kernel of shape {kernel.shape}, expected [F, 1]")
    channels = kernel.shape[-1]
    if "bias" in layer and layer["bias"].shape != (channels,):
      raise ValueError(f"layer {name!r}: bias of shape {layer['bias'].shape}, expected "
                       f"({channels},)")
  kkt_mlp.check_one_output(channels)
  return names


def supports(params: Params) -> bool:
  """Whether `value_and_grad` handles θ (else use autodiff on `decoreco.stationarity_loss`).

  True for the parameters of a `trdr.models.ConvNet` with num_outputs = 1, any number of
  conv layers and any biases. Neither the activation nor the pooling is visible in θ:
  `value_and_grad` assumes `decoreco.relu_sigmoid_backward(alpha)` and takes the pooling.
  """
  try:
    _layer_names(params)
  except ValueError:
    return False
  return True


def _patches(q: jax.Array) -> jax.Array:
  """The 3 × 3 windows of q float[m, H, W, c] padded by 1, float[m, H, W, 9c], columns
  ordered (i, j, channel) as a [3, 3, c, F] kernel's rows (`trdr.models.Conv3x3`)."""
  _, height, width, _ = q.shape
  padded = jnp.pad(q, ((0, 0), (1, 1), (1, 1), (0, 0)))
  return jnp.concatenate([padded[:, i:i + height, j:j + width, :]
                          for i in range(3) for j in range(3)], axis=-1)


_NHWC = ("NHWC", "HWIO", "NHWC")


def _conv(q: jax.Array, kernel: jax.Array) -> jax.Array:
  """patches(q) kernel as XLA's convolution: q float[m, H, W, c], kernel float[3, 3, c, c']
  -> float[m, H, W, c']."""
  return jax.lax.conv_general_dilated(q, kernel, (1, 1), ((1, 1), (1, 1)),
                                      dimension_numbers=_NHWC)


def _conv_adjoint(d: jax.Array, kernel: jax.Array) -> jax.Array:
  """col2im(d kernelᵀ), the adjoint of `_conv` in q: d float[m, H, W, c'] -> float[m, H, W,
  c], a convolution with the kernel flipped and its in and out channels swapped."""
  return _conv(d, jnp.flip(kernel, (0, 1)).transpose(0, 1, 3, 2))


def _kernel_adjoint(patches: jax.Array, d: jax.Array) -> jax.Array:
  """patches(q)ᵀ d summed over samples and positions, the adjoint of `_conv` in the kernel,
  from the patches float[m, H, W, 9c] and d float[m, H, W, c'] -> float[9c, c']. Computed
  as (dᵀ patches)ᵀ: the product over the long axis with the narrow d first, and no XLA
  kernel-gradient convolution, which XLA:CPU runs far slower inside a loop."""
  flat = d.reshape(-1, d.shape[-1])
  return (flat.T @ patches.reshape(flat.shape[0], -1)).T



def _shifted_kernel_adjoint(q: jax.Array, d: jax.Array) -> jax.Array:
  """`_kernel_adjoint` without the patch matrix: for each of the 3 × 3 window offsets, the
  shifted map of q float[m, H, W, c] against d float[m, H, W, c'], stacked to float[9c, c']
  (rows (i, j, channel), as `_patches`' columns). Nine narrow products instead of forming
  a wide patch matrix."""
  _, height, width, c = q.shape
  padded = jnp.pad(q, ((0, 0), (1, 1), (1, 1), (0, 0)))
  flat = d.reshape(-1, d.shape[-1])
  return jnp.concatenate([(flat.T @ padded[:, i:i + height, j:j + width, :].reshape(-1, c)).T
                          for i in range(3) for j in range(3)], axis=0)


def _windows(h: jax.Array) -> jax.Array:
  """float[m, H, W, c] -> float[m, H/2, 2, W/2, 2, c], the 2 × 2 pooling windows."""
  m, height, width, c = h.shape
  return h.reshape(m, height // 2, 2, width // 2, 2, c)


def _pool_weights(h: jax.Array, pool) -> jax.Array:
  """ω of the pooling of h float[m, H, W, c], float[m, H/2, 2, W/2, 2, c] (or a scalar ¼ for
  the average): the derivative of each window's pooled value in each of its entries."""
  if pool == "max":
    windows = _windows(h)
    hit = (windows == jnp.max(windows, axis=(2, 4), keepdims=True)).astype(h.dtype)
    return hit / jnp.sum(hit, axis=(2, 4), keepdims=True)
  return jnp.asarray(0.25, h.dtype)


def _pool(t: jax.Array, weights) -> jax.Array:
  """Σ over each 2 × 2 window of ω ∘ t: float[m, H, W, c] -> float[m, H/2, W/2, c]."""
  return jnp.sum(_windows(t) * weights, axis=(2, 4))


def _pool_adjoint(q: jax.Array, weights) -> jax.Array:
  """The adjoint of `_pool`: float[m, H/2, W/2, c] -> float[m, H, W, c], ω ∘ q repeated."""
  m, half_h, half_w, c = q.shape
  repeated = jnp.broadcast_to(q[:, :, None, :, None, :] * weights,
                              (m, half_h, 2, half_w, 2, c))
  return repeated.reshape(m, 2 * half_h, 2 * half_w, c)


def _bias(layer, dtype):
  return layer["bias"].astype(dtype) if "bias" in layer else None


def value_and_grad(params: Params, images: jax.Array, lambdas: jax.Array, labels: jax.Array,
                   *, alpha: float, pool=True, scale: float = 1.0, x_min: float = -1.0,
                   x_max: float = 1.0, lambda_min: float = 0.05, lambda_weight: float = 5.0,
                   ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
  """DecoReco loss L(x, λ) and (∂L/∂x, ∂L/∂λ) for a one-output ConvNet (module docstring).

  Equals ``jax.value_and_grad(decoreco.stationarity_loss, argnums=(1, 2))`` with
  ``apply_fn`` the `trdr.models.ConvNet` of θ (without input normalisation) using
  `decoreco.relu_sigmoid_backward(alpha)` and pooling ``pool``, form "binary" (scale = 1)
  or "weight_decay" (scale = wd), and the same prior settings.

  Args:
    params: θ of a `trdr.models.ConvNet` with num_outputs = 1: {"conv_k": {"kernel":
      float[3, 3, c_{k−1}, c_k], "bias" (optional): float[c_k]}, "output": {"kernel":
      float[F, 1], "bias" (optional): float[1]}}, F = H'·W'·c_last (NHWC-flattened).
    images: float[m, H, W, C], the candidates (float32 or float64; the computation runs in
      this dtype), H and W divisible by 2^L when pooling.
    lambdas: float[m], multipliers λ_i.
    labels: float[m] in {−1, +1}.
    alpha: sharpness α > 0 of s(z) = sigmoid(α z); may be traced (a vmapped sweep), then
      it is not checked.
    pool: the ConvNet's pooling, a value of `POOLS`: True or "average", "max", False.
    scale: c, the factor of θ in the residual: 1 ("binary") or the weight decay.
    x_min, x_max: the pixel box of the prior.
    lambda_min: λ_min of the multiplier prior.
    lambda_weight: w_λ of the multiplier prior.
  Returns:
    (loss float[], (grad_images float[m, H, W, C], grad_lambdas float[m])), in the dtype
    of ``images``.
  Raises:
    ValueError: θ not of a one-output ConvNet (see `supports`) or not fitting the images'
      channels and size, an unknown pool, lambdas / labels not of shape [m], alpha not
      positive.
  """
  names = _layer_names(params)
  if pool not in POOLS:
    raise ValueError(f"unknown pool {pool!r}; known: {list(POOLS)}")
  if not isinstance(alpha, jax.core.Tracer) and not alpha > 0:  # a traced α: swept
    raise ValueError(f"alpha must be positive, got {alpha!r}")
  m = images.shape[0]
  if images.ndim != 4 or lambdas.shape != (m,) or labels.shape != (m,):
    raise ValueError(f"expected images float[m, H, W, C] and lambdas, labels of shape "
                     f"({m},), got {images.shape}, {lambdas.shape} and {labels.shape}")
  convs = names[:-1]
  if images.shape[-1] != params["conv_0"]["kernel"].shape[2]:
    raise ValueError(f"images have {images.shape[-1]} channels, the first layer expects "
                     f"{params['conv_0']['kernel'].shape[2]}")
  factor = 2 ** len(convs) if pool else 1
  if images.shape[1] % factor or images.shape[2] % factor:
    raise ValueError(f"images of {images.shape[1]} × {images.shape[2]} pixels do not pool "
                     f"{len(convs)} times by 2")
  dtype = images.dtype
  kernels = [params[n]["kernel"].astype(dtype) for n in convs]
  biases = [_bias(params[n], dtype) for n in convs]
  k_out = params["output"]["kernel"][:, 0].astype(dtype)
  b_out = _bias(params["output"], dtype)
  c = jnp.asarray(scale, dtype)
  a = (lambdas * labels / m).astype(dtype)
  ac = a[:, None, None, None]
  act = lambda z: jax.nn.sigmoid(alpha * z)
  pooled = (lambda h, w: _pool(h, w)) if pool else (lambda h, w: h)
  pooled_adjoint = (lambda q, w: _pool_adjoint(q, w)) if pool else (lambda q, w: q)

  # Forward: Q_{k−1}, Z_k, S_k, the pooling weights ω_k, Q_k. A layer whose input has few
  # channels (the images': 9c ≤ `PATCH_COLUMNS`) keeps its patches C_k for Z_k, G_k and
  # P_k, three matrix products with them; the others run Z_k, P_k and every adjoint in
  # patches' space as XLA convolutions, the faster of the two on XLA:CPU inside a loop at
  # the :cpu CNN's sizes when this was written (`make benchmark-conv` times the resulting
  # step against autodiff and the MLP's, not the alternatives).
  q, qs, cs, zs, ss, ws = images, [], [], [], [], []
  for kernel, bias in zip(kernels, biases):
    qs.append(q)
    narrow = 9 * q.shape[-1] <= PATCH_COLUMNS
    cs.append(_patches(q) if narrow else None)
    z = cs[-1] @ kernel.reshape(-1, kernel.shape[-1]) if narrow else _conv(q, kernel)
    zs.append(z if bias is None else z + bias)
    h = jax.nn.relu(zs[-1])
    ws.append(_pool_weights(h, pool) if pool else None)
    if pool == "max":     # the max itself, not Σ ω ∘ h, which equals it up to rounding
      q = jnp.max(_windows(h), axis=(2, 4))
    else:
      q = pooled(h, ws[-1])
    ss.append(act(zs[-1]))
  features = q                                                        # Q_{L−1}
  k_map = k_out.reshape(features.shape[1:])

  # Backprop vectors Δ_k = S_k ∘ B_k, and Y_k = a Δ_k.
  depth = len(zs)
  bs, deltas = [None] * depth, [None] * depth
  bs[-1] = pooled_adjoint(jnp.broadcast_to(k_map, features.shape), ws[-1])
  deltas[-1] = ss[-1] * bs[-1]
  for k in range(depth - 2, -1, -1):
    bs[k] = pooled_adjoint(_conv_adjoint(deltas[k + 1], kernels[k + 1]), ws[k])
    deltas[k] = ss[k] * bs[k]
  ys = [ac * d for d in deltas]

  # Residuals R = c θ − G, their squared norms, P_k and f_i.
  loss = jnp.zeros((), dtype)
  rs, ps = [], []
  for kernel, bias, q, patches, y in zip(kernels, biases, qs, cs, ys):
    g = (_shifted_kernel_adjoint(q, y) if patches is None        # G_k = C_kᵀ Y_k
         else _kernel_adjoint(patches, y))
    rs.append(c * kernel - g.reshape(kernel.shape))
    loss += jnp.sum(rs[-1] * rs[-1])
    p = (_conv(q, rs[-1]) if patches is None
         else patches @ rs[-1].reshape(-1, kernel.shape[-1]))
    if bias is not None:
      rb = c * bias - jnp.sum(y, axis=(0, 1, 2))
      loss += jnp.sum(rb * rb)
      p = p + rb
    ps.append(p)
  r_out = c * k_out - a @ features.reshape(m, -1)
  loss += jnp.sum(r_out * r_out)
  f = features.reshape(m, -1) @ r_out
  if b_out is not None:
    rb_out = c * b_out[0] - jnp.sum(a)
    loss += rb_out * rb_out
    f += rb_out
  for p, d in zip(ps, deltas):
    f += jnp.sum(p * d, axis=(1, 2, 3))

  # Reverse pass of F = Σ_i a_i f_i with R fixed; Q̄_{−1} = X̄.
  u_bar = [None] * depth
  u_bar[0] = ac * ps[0]
  for k in range(1, depth):
    u_bar[k] = ac * ps[k] + _conv(pooled(u_bar[k - 1] * ss[k - 1], ws[k - 1]), kernels[k])
  q_bar = ac * r_out.reshape(features.shape[1:])
  for k in range(depth - 1, -1, -1):
    s = ss[k]
    z_bar = (pooled_adjoint(q_bar, ws[k]) * s + u_bar[k] * bs[k] * (alpha * s * (1 - s)))
    q_bar = _conv_adjoint(jnp.concatenate([z_bar, ys[k]], axis=-1),
                          jnp.concatenate([kernels[k], rs[k]], axis=-1))
  x_bar = q_bar

  # Priors, as kkt_mlp's.
  x = images
  excess = x - jnp.clip(x, x_min, x_max)
  short = jax.nn.relu(lambda_min - lambdas).astype(dtype)
  loss += jnp.sum(excess * excess) + lambda_weight * jnp.sum(short * short)
  grad_x = 2 * (jnp.maximum(x - x_max, 0) - jnp.maximum(x_min - x, 0)) - 2 * x_bar
  grad_lambdas = -2 * (labels / m).astype(dtype) * f - 2 * lambda_weight * short
  return loss, (grad_x, grad_lambdas)
