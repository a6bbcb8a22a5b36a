"""Victim classifiers Φ(x; θ) as Flax Linen modules, and a registry keyed by name.

Every model maps images float[N, H, W, C] to one logit per image, float[N] (the Haim MLP
and the CNN with num_outputs C > 1 to float[N, C]); the binary label convention is y ∈ {−1, +1}
(see `trdr.data`). Parameters θ are the module's ``params`` collection, a pytree of arrays.
"""

import functools
from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np


class Affine(nn.Module):
  """Affine classifier Φ(x; θ) = x θ_wᵀ + θ_b (the paper's eq. 8; see `__call__`).

  θ = {"dense": {"kernel": float[D, 1], "bias": float[1]}} with D = H·W·C.
  """

  @nn.compact
  def __call__(self, images: jax.Array) -> jax.Array:
    """Φ(x; θ) = x θ_wᵀ + θ_b (Runkel eq. 8).

    Args: images float[N, H, W, C]. Returns: logits float[N].
    """
    x = images.reshape((images.shape[0], -1))
    return nn.Dense(1, name="dense", param_dtype=images.dtype)(x)[:, 0]


# Activations σ of the one-hidden-layer network. ReLU is the paper's; eq. 7 assumes E twice
# differentiable, which ReLU is only piecewise (its Hessian in θ ignores the kinks), so
# the smooth softplus and GELU are offered too.
ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "relu": jax.nn.relu,
    "softplus": jax.nn.softplus,
    "gelu": jax.nn.gelu,
}


class OneHidden(nn.Module):
  """One-hidden-layer network Φ(x; θ) = σ(x θ_w1ᵀ + θ_b1) θ_w2ᵀ + θ_b2 (the paper's eq. 9).

  θ = {"hidden": {"kernel": float[D, width], "bias": float[width]},
       "output": {"kernel": float[width, 1], "bias": float[1]}} with D = H·W·C; the paper
  uses width 6144 = 2·3072 on CIFAR-10. Parameters take the dtype of the images.

  Attributes:
    width: number of hidden units, > 0.
    activation: name in `ACTIVATIONS`.
  """
  width: int
  activation: str = "relu"

  @nn.compact
  def __call__(self, images: jax.Array) -> jax.Array:
    """Φ(x; θ) = σ(x θ_w1ᵀ + θ_b1) θ_w2ᵀ + θ_b2 (Runkel eq. 9).

    Args: images float[N, H, W, C]. Returns: logits float[N].

    Raises:
      ValueError: unknown activation or non-positive width.
    """
    if self.activation not in ACTIVATIONS:
      raise ValueError(f"unknown activation {self.activation!r}; known: {sorted(ACTIVATIONS)}")
    if self.width <= 0:
      raise ValueError(f"width must be positive, got {self.width}")
    x = images.reshape((images.shape[0], -1))
    h = ACTIVATIONS[self.activation](
        nn.Dense(self.width, name="hidden", param_dtype=images.dtype)(x))
    return nn.Dense(1, name="output", param_dtype=images.dtype)(h)[:, 0]


def _pytorch_linear(fan_in: int) -> dict:
  """PyTorch's ``nn.Linear`` default: the kernel by ``kaiming_uniform_(a=√5)``, whose bound
  gain·√(3/fan_in) with gain √(2/(1 + 5)) is 1/√fan_in, and the bias U(±1/√fan_in)."""
  bound = 1.0 / np.sqrt(fan_in)
  uniform = lambda key, shape, dtype=jnp.float32: jax.random.uniform(
      key, shape, dtype, -bound, bound)
  return dict(kernel_init=uniform, bias_init=uniform)


# The initialisation of a Haim MLP's layers after the first (`HaimMLP.later_init`): name ->
# fan_in -> Dense keyword arguments.
LATER_INITS: dict[str, Callable[[int], dict]] = {
    "pytorch": _pytorch_linear,
    "flax": lambda fan_in: {},
}


def activation_function(activation: str | Callable) -> Callable[[jax.Array], jax.Array]:
  """``activation`` as a function: a name of `ACTIVATIONS`, or a callable kept as it is.

  Raises:
    ValueError: an unknown name.
  """
  if not isinstance(activation, str):
    return activation
  if activation not in ACTIVATIONS:
    raise ValueError(f"unknown activation {activation!r}; known: {sorted(ACTIVATIONS)}")
  return ACTIVATIONS[activation]


def _checked_settings(module: nn.Module, sizes: str) -> Callable[[jax.Array], jax.Array]:
  """The activation function of a `HaimMLP` or `ConvNet` ``module``, after checking its
  settings: the activation (a name of `ACTIVATIONS` or a callable), the layer sizes
  (``module.<sizes>``: a non-empty tuple of positive ints), num_outputs ≥ 1 and
  later_init (a name of `LATER_INITS`).

  Raises:
    ValueError: naming the setting that is wrong.
  """
  act = activation_function(module.activation)
  values = getattr(module, sizes)
  if not values or any(v <= 0 for v in values):
    raise ValueError(f"{sizes} must be a non-empty tuple of positive ints, got {values}")
  if module.num_outputs < 1:
    raise ValueError(f"num_outputs must be >= 1, got {module.num_outputs}")
  if module.later_init not in LATER_INITS:
    raise ValueError(f"unknown later_init {module.later_init!r}; known: {list(LATER_INITS)}")
  return act


class HaimMLP(nn.Module):
  """Multilayer perceptron of Haim et al. (NeurIPS 2022), the DecoReco victim.

  Φ(x; θ) = W_L σ(… σ(W_1 x + b_1) …), x flattened to D = H·W·C. Hidden layers are
  named ``dense_0``, ``dense_1``, …, the last ``output``. Only the first layer has a bias
  unless ``all_biases``; the first layer's kernel and bias are drawn N(0, 1)·``first_scale``
  (1e-4 in the reference code, ``use_init_scale_only_first``). Later layers follow
  ``later_init`` (`LATER_INITS`): "pytorch", PyTorch's ``nn.Linear`` default that Haim
  et al.'s reference code leaves them at, kernel and bias U(−1/√fan_in, 1/√fan_in)
  (variance 1/(3·fan_in)); or "flax", Flax's ``Dense`` default, kernel ``lecun_normal``
  (variance 1/fan_in, three times PyTorch's) and bias 0. Parameters take the dtype of the
  images.

  θ = {"dense_0": {"kernel": float[D, w_0], "bias": float[w_0]},
       "dense_k": {"kernel": float[w_{k−1}, w_k]} (+ "bias" if all_biases),
       "output": {"kernel": float[w_last, C]} (+ "bias" if all_biases)}.

  Attributes:
    widths: hidden widths, each > 0; Haim et al. use (1000, 1000).
    activation: a name in `ACTIVATIONS`, or a callable float[...] -> float[...]; the
      DecoReco attack swaps in `trdr.attacks.decoreco.relu_sigmoid_backward` via
      ``model.clone(activation=...)``.
    all_biases: give every layer a bias, not only the first.
    num_outputs: C ≥ 1; with C = 1 the model returns float[N] (binary logit), otherwise
      float[N, C] (one logit per class).
    first_scale: standard deviation of the first layer's initial kernel and bias.
    later_init: the later layers' initialisation, a name in `LATER_INITS`.
    input_shift, input_scale: the input normalisation (x − shift) / scale per channel
      (`preprocess`; a θ* read from a file, `trdr.victim.pretrained`); empty: none.
  """
  widths: tuple[int, ...] = (1000, 1000)
  activation: str | Callable[[jax.Array], jax.Array] = "relu"
  all_biases: bool = False
  num_outputs: int = 1
  first_scale: float = 1e-4
  later_init: str = "pytorch"
  input_shift: tuple[float, ...] = ()
  input_scale: tuple[float, ...] = ()

  @nn.compact
  def __call__(self, images: jax.Array) -> jax.Array:
    """Args: images float[N, H, W, C]. Returns: logits float[N] (C = 1) or float[N, C].

    Raises:
      ValueError: unknown activation name or later_init, no or non-positive widths,
        num_outputs < 1, a bad input_shift / input_scale (`preprocess`).
    """
    act = _checked_settings(self, "widths")
    first_init = nn.initializers.normal(stddev=self.first_scale)
    later = LATER_INITS[self.later_init]
    h = preprocess(images, self.input_shift, self.input_scale)
    h = h.reshape((h.shape[0], -1))
    for k, width in enumerate(self.widths):
      inits = (dict(kernel_init=first_init, bias_init=first_init) if k == 0
               else later(h.shape[-1]))
      h = act(nn.Dense(width, use_bias=k == 0 or self.all_biases, name=f"dense_{k}",
                       param_dtype=images.dtype, **inits)(h))
    out = nn.Dense(self.num_outputs, use_bias=self.all_biases, name="output",
                   param_dtype=images.dtype, **later(h.shape[-1]))(h)
    return out[:, 0] if self.num_outputs == 1 else out


def _pytorch_conv(fan_in: int) -> dict:
  """PyTorch's ``nn.Conv2d`` default, as its ``nn.Linear``'s (`_pytorch_linear`) with
  fan_in = in_channels · kh · kw: kernel and bias U(±1/√fan_in)."""
  return _pytorch_linear(fan_in)


class Conv3x3(nn.Module):
  """A 3 × 3 convolution, stride 1, padding 1 (PyTorch's ``Conv2d(…, 3, padding=1)``), with
  the parameters of ``nn.Conv(features, (3, 3), padding=1)``: the same names, shapes,
  initialisers and draws.

  out[n, y, x, o] = Σ_{i, j, c} x_pad[n, y + i, x + j, c] · kernel[i, j, c, o] + bias[o],
  computed as one matrix product of the nine shifted copies of the padded input (its 3 × 3
  patches, channels ordered (i, j, c) as the kernel's rows) with the kernel reshaped to
  [9·C_in, features]. The same sums as ``lax.conv_general_dilated``, in another order;
  written so because XLA's CPU backend runs a convolution inside a loop (``lax.scan``,
  ``while_loop``: every attack's steps and every lower-level solve) far slower than at
  the top level of a program, and a matrix product not (`make benchmark-conv` measures
  both on `ConvNet`, in a loop and at the top level).

  Attributes:
    features: output channels, > 0.
    use_bias: add a bias per output channel.
    kernel_init, bias_init: initialisers of kernel float[3, 3, C_in, features] and bias
      float[features].
  """
  features: int
  use_bias: bool = True
  kernel_init: Callable = nn.initializers.lecun_normal()
  bias_init: Callable = nn.initializers.zeros_init()

  @nn.compact
  def __call__(self, images: jax.Array) -> jax.Array:
    """Args: images float[N, H, W, C_in]. Returns: float[N, H, W, features], the images'
    dtype (as are the parameters)."""
    _, height, width, channels = images.shape
    kernel = self.param("kernel", self.kernel_init, (3, 3, channels, self.features),
                        images.dtype)
    padded = jnp.pad(images, ((0, 0), (1, 1), (1, 1), (0, 0)))
    patches = jnp.concatenate([padded[:, i:i + height, j:j + width, :]
                               for i in range(3) for j in range(3)], axis=-1)
    out = patches @ kernel.reshape(9 * channels, self.features)
    if self.use_bias:
      out = out + self.param("bias", self.bias_init, (self.features,), images.dtype)
    return out


def _average_pool_2x2(h: jax.Array) -> jax.Array:
  """2 × 2 average pooling, stride 2 (``nn.avg_pool(h, (2, 2), strides=(2, 2))``, as a
  reshape and a mean: no ``reduce_window``, for the reason of `Conv3x3`).
  float[N, H, W, C] with H, W even -> float[N, H/2, W/2, C]."""
  n, height, width, c = h.shape
  return h.reshape(n, height // 2, 2, width // 2, 2, c).mean(axis=(2, 4))


def _max_pool_2x2(h: jax.Array) -> jax.Array:
  """2 × 2 max pooling, stride 2 (PyTorch's ``MaxPool2d(2)``, as a reshape and a max, as
  `_average_pool_2x2`). Positively homogeneous (max(c·a, c·b) = c·max(a, b) for c > 0), so
  a ReLU net with it and no bias after the first layer keeps the property DecoReco's KKT
  premise relies on. float[N, H, W, C] with H, W even -> float[N, H/2, W/2, C]."""
  n, height, width, c = h.shape
  return h.reshape(n, height // 2, 2, width // 2, 2, c).max(axis=(2, 4))


# `ConvNet.pool`'s values: True (kept from before max pooling existed) and "average" the
# 2 × 2 average pooling, "max" the 2 × 2 max pooling; False none.
POOLINGS: dict = {True: _average_pool_2x2, "average": _average_pool_2x2, "max": _max_pool_2x2}


def preprocess(images: jax.Array, shift, scale) -> jax.Array:
  """(x − shift) / scale per channel, the input normalisation a model was trained with
  (torchvision's ``Normalize(mean, std)``: shift = mean, scale = std).

  Args:
    images: float[N, H, W, C] (NHWC: channels last).
    shift, scale: sequences of C floats, or of 1 (every channel alike), or empty (no
      shift / no scaling); scale entries non-zero.
  Returns:
    float[N, H, W, C], the images' dtype.
  Raises:
    ValueError: a shift or scale of another length than 0, 1 or C, or a zero scale.
  """
  channels = images.shape[-1]
  out = images
  for name, values in (("input_shift", shift), ("input_scale", scale)):
    values = tuple(float(v) for v in (values or ()))
    if len(values) not in (0, 1, channels):
      raise ValueError(f"victim.{name} has {len(values)} values; the images have "
                       f"{channels} channels (give 1 or {channels})")
    if name == "input_scale" and any(v == 0 for v in values):
      raise ValueError(f"victim.input_scale {values} holds a zero")
    if values:
      a = jnp.asarray(values, images.dtype)
      out = out - a if name == "input_shift" else out / a
  return out


class ConvNet(nn.Module):
  """A small convolutional victim: the networks Buzaglo et al. (2023) reconstruct from.

  Φ(x; θ) = W_out · flatten(P(σ(conv_L(… P(σ(conv_0(x))) …)))), each conv 3 × 3, stride
  1, padding 1 (the spatial size kept, as PyTorch's ``padding=1``; `Conv3x3`), σ the
  activation, P a 2 × 2 average pooling when ``pool`` (linear, so a ReLU net without
  biases after the first layer stays positively homogeneous, the property the KKT attack
  relies on), the head over the NHWC-flattened features. Layers are named ``conv_0``,
  ``conv_1``, …, and ``output``; only the first has a bias unless ``all_biases``. The
  first layer's kernel and bias are drawn N(0, 1)·``first_scale`` (as Haim et al. scale
  their MLP's), the later ones by ``later_init`` (`LATER_INITS`; "pytorch": PyTorch's
  ``nn.Conv2d`` / ``nn.Linear`` default U(±1/√fan_in), fan_in = 9 · in_channels for a
  conv). Parameters take the images' dtype.

  θ = {"conv_0": {"kernel": float[3, 3, C_in, c_0], "bias": float[c_0]},
       "conv_k": {"kernel": float[3, 3, c_{k−1}, c_k]} (+ "bias" if all_biases),
       "output": {"kernel": float[F, C]} (+ "bias" if all_biases)}, F = H'·W'·c_last.

  Attributes:
    channels: output channels of each conv, each > 0.
    pool: the pooling (stride 2) after each conv's activation, a key of `POOLINGS`:
      True or "average" a 2 × 2 average, "max" a 2 × 2 max pooling; False none.
    activation: a name in `ACTIVATIONS`, or a callable (DecoReco swaps in its own).
    all_biases: every layer a bias, not only the first.
    num_outputs: C ≥ 1; C = 1: float[N] (a binary logit), else float[N, C].
    first_scale: standard deviation of the first layer's initial kernel and bias.
    later_init: the later layers' initialisation, a name in `LATER_INITS`.
    conv: the 3 × 3 convolution, called as ``conv(features, use_bias=, name=,
      kernel_init=, bias_init=)``: `Conv3x3`, or a stand-in with its parameters (`make
      benchmark-conv` puts flax's ``nn.Conv`` there).
    input_shift, input_scale: the input normalisation (x − shift) / scale per channel
      before the first conv (`preprocess`); empty: none. Fixed, not parameters.
  """
  channels: tuple[int, ...] = (16, 32)
  pool: bool | str = True
  activation: str | Callable[[jax.Array], jax.Array] = "relu"
  all_biases: bool = False
  num_outputs: int = 1
  first_scale: float = 1e-4
  later_init: str = "pytorch"
  conv: Callable[..., nn.Module] = Conv3x3
  input_shift: tuple[float, ...] = ()
  input_scale: tuple[float, ...] = ()

  @nn.compact
  def __call__(self, images: jax.Array) -> jax.Array:
    """Args: images float[N, H, W, C] (H and W divisible by 2^len(channels) with pool).
    Returns: logits float[N] (C = 1) or float[N, C].

    Raises:
      ValueError: unknown activation or later_init, no or non-positive channels,
        num_outputs < 1, or a pooled size that is not whole.
    """
    act = _checked_settings(self, "channels")
    if self.pool is not False and self.pool not in POOLINGS:
      raise ValueError(f"unknown pool {self.pool!r}; known: False, {list(POOLINGS)}")
    factor = 2 ** len(self.channels) if self.pool else 1
    if images.shape[1] % factor or images.shape[2] % factor:
      raise ValueError(f"images of {images.shape[1]} × {images.shape[2]} pixels do not pool "
                       f"{len(self.channels)} times by 2 (set victim.pool False or use "
                       "fewer channels)")
    first_init = nn.initializers.normal(stddev=self.first_scale)
    later = LATER_INITS[self.later_init]
    h = preprocess(images, self.input_shift, self.input_scale)
    for k, c in enumerate(self.channels):
      inits = (dict(kernel_init=first_init, bias_init=first_init) if k == 0
               else later(9 * h.shape[-1]))
      h = act(self.conv(c, use_bias=k == 0 or self.all_biases, name=f"conv_{k}",
                        **inits)(h))
      if self.pool:
        h = POOLINGS[self.pool](h)
    h = h.reshape((h.shape[0], -1))
    out = nn.Dense(self.num_outputs, use_bias=self.all_biases, name="output",
                   param_dtype=images.dtype, **later(h.shape[-1]))(h)
    return out[:, 0] if self.num_outputs == 1 else out


def parse_layer(spec: str) -> tuple[str, dict[str, tuple[int, ...]]]:
  """A `Sequential` layer's statement, ``"<kind> key=v,v … "``, as (kind, {key: ints}).

  Kinds and keys: ``conv out=F kernel=kh,kw stride=sh,sw pad=top,left,bottom,right
  bias=0|1``; ``dense out=F bias=0|1``; ``maxpool`` / ``avgpool kernel= stride= pad=``
  (avgpool also ``count_pad=0|1``: whether padded zeros count in the mean); ``relu`` (the
  model's activation); ``flatten`` (the feature map flattened channels first, NCHW, as
  PyTorch's ``x.flatten(1)`` and ONNX's Flatten), or ``flatten nhwc`` (channels last, as
  Keras flattens).

  Raises:
    ValueError: an unknown kind, a key the kind lacks or does not take, or a value that is
      not integers.
  """
  kind, *tokens = spec.split()
  if tokens == ["nhwc"] and kind == "flatten":
    return kind, {"order": ("nhwc",)}
  needed = {"conv": {"out", "kernel", "stride", "pad", "bias"}, "dense": {"out", "bias"},
            "maxpool": {"kernel", "stride", "pad"},
            "avgpool": {"kernel", "stride", "pad", "count_pad"},
            "relu": set(), "flatten": set()}
  if kind not in needed:
    raise ValueError(f"layer {spec!r}: unknown kind {kind!r}; known: {sorted(needed)}")
  try:
    values = {k: tuple(int(v) for v in x.split(","))
              for k, _, x in (t.partition("=") for t in tokens)}
  except ValueError:
    raise ValueError(f"layer {spec!r}: values must be integers") from None
  if set(values) != needed[kind]:
    raise ValueError(f"layer {spec!r}: a {kind} layer takes the keys {sorted(needed[kind])}")
  return kind, values


def _windows(h: jax.Array, kernel, stride, pad, fill) -> list[jax.Array]:
  """The kh·kw shifted, strided views of ``h`` float[N, H, W, C] padded by ``pad`` (top,
  left, bottom, right) with ``fill``: window offset (i, j) of every output position,
  row-major in (i, j); each float[N, H', W', C], H' = (H + top + bottom − kh) // sh + 1.
  Slices, not ``reduce_window`` or a convolution, for the reason of `Conv3x3`."""
  (kh, kw), (sh, sw), (top, left, bottom, right) = kernel, stride, pad
  padded = jnp.pad(h, ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=fill)
  rows = (padded.shape[1] - kh) // sh + 1
  cols = (padded.shape[2] - kw) // sw + 1
  if rows < 1 or cols < 1:
    raise ValueError(f"a {kh} × {kw} window does not fit a {h.shape[1]} × {h.shape[2]} "
                     f"map padded by {pad}")
  return [padded[:, i:i + sh * (rows - 1) + 1:sh, j:j + sw * (cols - 1) + 1:sw, :]
          for i in range(kh) for j in range(kw)]


class Sequential(nn.Module):
  """A sequential network of convolutions, poolings, activations, a flatten and linear
  layers, as stated layer by layer (``layers``): what `trdr.victim.onnx_model` reads from an
  ONNX graph (any LeNet-style network: convolutions, then one or more linear layers).

  Φ(x) = L_K(… L_1((x − shift) / scale)), images NHWC; each layer a statement of
  `parse_layer`. A convolution of any kernel, stride and zero padding (cross-correlation,
  as PyTorch's ``Conv2d`` and ONNX's Conv), computed as one matrix product of its
  kh·kw shifted views (`Conv3x3`'s way); max pooling pads with −inf, average pooling with
  zeros (counted in the mean or not); "flatten" flattens channels first (NCHW) so a dense
  layer's kernel is the file's weight transposed, whatever the framework. Parameters are
  named ``conv_0``, ``conv_1``, …, ``dense_0``, …, the last dense layer ``output``:
  conv kernel float[kh, kw, C_in, F] (HWIO), dense kernel float[in, F], bias float[F].
  Initialised as PyTorch's defaults (U(±1/√fan_in)); a loaded θ* replaces them.

  With ReLU, max or average pooling and no bias after the first layer, Φ is positively
  homogeneous in the later layers' parameters, as DecoReco's KKT premise wants.

  Attributes:
    layers: the statements, in order (`parse_layer`); a "flatten" before the first dense
      layer, the last layer a dense one.
    activation: applied at every "relu" statement: a name in `ACTIVATIONS` or a callable
      (DecoReco swaps in its own).
    num_outputs: C, the last layer's outputs: C = 1 gives float[N] (a binary logit).
    input_shift, input_scale: the input normalisation (`preprocess`); empty: none.
  """
  layers: tuple[str, ...]
  activation: str | Callable[[jax.Array], jax.Array] = "relu"
  num_outputs: int = 1
  input_shift: tuple[float, ...] = ()
  input_scale: tuple[float, ...] = ()

  @nn.compact
  def __call__(self, images: jax.Array) -> jax.Array:
    """Args: images float[N, H, W, C]. Returns: logits float[N] (C = 1) or float[N, C].

    Raises:
      ValueError: a bad statement (`parse_layer`), a conv or pooling after the flatten, a
        dense layer before it, a last layer that is not dense with num_outputs outputs, an
        unknown activation, a window larger than its padded map.
    """
    act = activation_function(self.activation)
    parsed = [parse_layer(spec) for spec in self.layers]
    if not parsed or parsed[-1][0] != "dense" or parsed[-1][1]["out"] != (self.num_outputs,):
      raise ValueError(f"layers {self.layers}: the last must be a dense layer with "
                       f"num_outputs = {self.num_outputs} outputs")
    h = preprocess(images, self.input_shift, self.input_scale)
    counts = {"conv": 0, "dense": 0}
    last_dense = max(i for i, (kind, _) in enumerate(parsed) if kind == "dense")
    for index, (kind, v) in enumerate(parsed):
      flat = h.ndim == 2
      if flat == (kind in ("conv", "maxpool", "avgpool", "flatten")) and kind != "relu":
        raise ValueError(f"layers {self.layers}: {self.layers[index]!r} on "
                         f"{'flattened features' if flat else 'a feature map'}")
      if kind == "relu":
        h = act(h)
      elif kind == "flatten":
        h = (h if v.get("order") == ("nhwc",) else h.transpose(0, 3, 1, 2)).reshape(
            h.shape[0], -1)
      elif kind in ("maxpool", "avgpool"):
        fill = -jnp.inf if kind == "maxpool" else 0.0
        views = _windows(h, v["kernel"], v["stride"], v["pad"], fill)
        if kind == "maxpool":
          h = functools.reduce(jnp.maximum, views)
        else:
          total = functools.reduce(jnp.add, views)
          if v["count_pad"] == (1,) or not any(v["pad"]):
            h = total / len(views)
          else:  # the mean over the window's pixels inside the map
            ones = jnp.ones((1, *h.shape[1:3], 1), h.dtype)
            h = total / functools.reduce(jnp.add, _windows(ones, v["kernel"], v["stride"],
                                                           v["pad"], 0.0))
      else:
        count = counts[kind]
        counts[kind] += 1
        name = "output" if index == last_dense else f"{kind}_{count}"
        fan_in = h.shape[-1] * (int(np.prod(v["kernel"])) if kind == "conv" else 1)
        init = _pytorch_linear(fan_in)
        if kind == "conv":
          h = _Conv(v["out"][0], tuple(v["kernel"]), tuple(v["stride"]), tuple(v["pad"]),
                    use_bias=bool(v["bias"][0]), name=name, **init)(h)
        else:
          h = nn.Dense(v["out"][0], use_bias=bool(v["bias"][0]), name=name,
                       param_dtype=h.dtype, **init)(h)
    return h[:, 0] if self.num_outputs == 1 else h


class _Conv(nn.Module):
  """A convolution of any kernel, stride and zero padding (`Sequential`), as `Conv3x3`
  computes its 3 × 3 one: a matrix product of the kh·kw shifted, strided views of the
  padded input with the kernel float[kh, kw, C_in, features] reshaped to
  [kh·kw·C_in, features]."""
  features: int
  kernel: tuple[int, int]
  stride: tuple[int, int]
  pad: tuple[int, int, int, int]
  use_bias: bool = True
  kernel_init: Callable = nn.initializers.lecun_normal()
  bias_init: Callable = nn.initializers.zeros_init()

  @nn.compact
  def __call__(self, h: jax.Array) -> jax.Array:
    channels = h.shape[-1]
    kernel = self.param("kernel", self.kernel_init, (*self.kernel, channels, self.features),
                        h.dtype)
    patches = jnp.concatenate(_windows(h, self.kernel, self.stride, self.pad, 0.0), axis=-1)
    out = patches @ kernel.reshape(-1, self.features)
    if self.use_bias:
      out = out + self.param("bias", self.bias_init, (self.features,), h.dtype)
    return out


MODELS: dict[str, Callable[[ml_collections.ConfigDict], nn.Module]] = {
    "affine": lambda cfg: Affine(),
    # victim_config.width, victim_config.activation
    "one_hidden": lambda cfg: OneHidden(width=cfg.width, activation=cfg.activation),
    # victim_config.widths, .activation, .all_biases, .num_outputs, .later_init ("flax"
    # where a config lacks it: a run's config.json written before the key existed)
    "haim_mlp": lambda cfg: HaimMLP(
        widths=tuple(cfg.widths), activation=cfg.activation, all_biases=cfg.all_biases,
        num_outputs=cfg.num_outputs,
        later_init=cfg.get("later_init", ABSENT_FIELDS["later_init"]), **_preprocessing(cfg)),
    # victim_config.channels, .pool, .activation, .all_biases, .num_outputs, .later_init
    "cnn": lambda cfg: ConvNet(
        channels=tuple(cfg.channels), pool=cfg.pool, activation=cfg.activation,
        all_biases=cfg.all_biases, num_outputs=cfg.num_outputs, later_init=cfg.later_init,
        **_preprocessing(cfg)),
    # victim_config.layers, .activation, .num_outputs (a θ* read from ONNX:
    # `trdr.victim.onnx_model`)
    "sequential": lambda cfg: Sequential(
        layers=tuple(cfg.layers), activation=cfg.activation, num_outputs=cfg.num_outputs,
        **_preprocessing(cfg)),
}

def _preprocessing(cfg: ml_collections.ConfigDict) -> dict:
  """The input normalisation of a victim config: ``input_shift`` and ``input_scale``,
  set only for a θ* read from a file (`trdr.victim.pretrained`); absent: none."""
  return {k: tuple(float(x) for x in cfg.get(k) or ()) for k in ("input_shift", "input_scale")}


# What a victim config that lacks a field (a run's config.json written before the field
# existed) was trained with.
ABSENT_FIELDS = {"later_init": "flax"}

# Victim-config fields, beyond `arch`, that an architecture reads (they determine θ*).
MODEL_FIELDS: dict[str, tuple[str, ...]] = {
    "affine": (),
    "one_hidden": ("width", "activation"),
    "haim_mlp": ("widths", "activation", "all_biases", "num_outputs", "later_init"),
    "cnn": ("channels", "pool", "activation", "all_biases", "num_outputs", "later_init"),
    "sequential": ("layers", "activation", "num_outputs", "input_shift", "input_scale"),
}


def check_labels(victim_config: ml_collections.ConfigDict, labels) -> None:
  """Checks that a task's labels (`trdr.data.Task`) fit the victim: one output (and
  L-BFGS training on the logistic loss, the bilevel lower level) needs a binary task,
  labels ±1; C > 1 outputs need labels ±1 (C = 2) or the classes 0 … C−1.

  Raises:
    ValueError: they do not fit, naming the victim's outputs and the labels found.
  """
  labels = np.unique(np.asarray(labels))
  outputs = (victim_config.num_outputs
             if victim_config.arch in ("haim_mlp", "cnn", "sequential") else 1)
  binary = set(labels.tolist()) <= {-1.0, 1.0}
  lbfgs = victim_config.training == "lbfgs"
  if (outputs == 1 or lbfgs or victim_config.loss in ("bce", "mse")) and not binary:
    raise ValueError(
        f"labels {labels.tolist()[:12]} are not a binary task's ±1: a C-class task (data."
        "classes with C > 2 groups) needs victim.arch='haim_mlp', num_outputs=C, "
        "training='gd' and loss='ce' (and attack.form='multiclass')")
  if not binary and not set(labels.tolist()) <= set(range(outputs)):
    raise ValueError(f"labels {labels.tolist()[:12]} do not fit a victim with "
                     f"num_outputs={outputs}: set victim.num_outputs to the class count")


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
