"""θ* and its architecture read from an ONNX graph (``config.victim.load=model.onnx``).

A state_dict holds the parameters but not the network: the pooling, the padding and
strides, the activation, the flatten order and any normalisation of the input are in the
code that built it. An ONNX file (PyTorch's ``torch.onnx.export``, tf2onnx for Keras /
TensorFlow, jax2onnx) holds both, so nothing about the architecture is guessed.

`read` maps a sequential graph of these operators onto `trdr.models.Sequential`:

  * Sub / Div by a constant (a scalar or one value per channel) on the input, before any
    layer: the input normalisation (x − shift) / scale (torchvision's ``Normalize``);
  * Conv (any kernel, stride and zero padding; dilation 1, group 1), with or without bias;
  * Gemm (alpha 1, transA 0; the bias times beta) and MatMul, each optionally followed by
    an Add of a constant (the layer's bias);
  * Relu; MaxPool and AveragePool (ceil_mode 0, dilation 1);
  * Flatten (axis 1) and a Reshape to (N, features): channels first (NCHW), as ONNX and
    PyTorch flatten; Identity.
  * Keras / TensorFlow graphs (tf2onnx): an input N × H × W × C transposed to NCHW by its
    first node, a Transpose back to NHWC before the flatten (Keras flattens channels last),
    and the shape computation of a Reshape (Shape, Gather, Cast, Slice, Concat, Unsqueeze,
    Squeeze on shapes), evaluated at a batch size of `_BATCH` (`_shape_op`).

Any sequential graph of them: convolutions, poolings, then one or more linear layers
(LeNet-style), or linear layers alone. Anything else (another operator, an attribute of
another value, a branch, a second input) is a ValueError naming the node: the CLIs print it
as one ``error:`` line, exit status 2.
"""

import os

import numpy as np

OPERATORS = ("Conv", "Gemm", "MatMul", "Add (a layer's bias)", "Relu", "MaxPool",
             "AveragePool", "Flatten", "Reshape", "Identity", "Sub / Div on the input")


def _onnx():
  try:
    import onnx  # noqa: PLC0415  (an optional extra)
    import onnx.numpy_helper  # noqa: F401, PLC0415
  except ModuleNotFoundError as e:
    raise ModuleNotFoundError("reading an .onnx file needs the onnx package: pip install "
                              "'trdr[onnx]'") from e
  return onnx


# A batch size no image dimension is likely to equal: a shape computation (`_shape_op`)
# evaluated at it shows which of its entries is the batch's.
_BATCH = 7919
_SHAPE_OPS = ("Gather", "Cast", "Slice", "Concat", "Unsqueeze", "Squeeze")


def _shape_op(onnx, node, inputs: list) -> np.ndarray:
  """The value of ``node`` (an operator of `_SHAPE_OPS`) on the constant ``inputs``: how
  tf2onnx computes the target shape of a Keras flatten's Reshape from a Shape node."""
  attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
  x = np.asarray(inputs[0])
  if node.op_type == "Gather":
    return np.take(x, np.asarray(inputs[1]), axis=attrs.get("axis", 0))
  if node.op_type == "Cast":
    return x
  if node.op_type == "Concat":
    return np.concatenate([np.atleast_1d(np.asarray(i)) for i in inputs], axis=attrs["axis"])
  if node.op_type in ("Unsqueeze", "Squeeze"):
    axes = inputs[1] if len(inputs) > 1 and inputs[1] is not None else attrs.get("axes")
    axes = tuple(int(a) for a in np.atleast_1d(axes)) if axes is not None else None
    if node.op_type == "Unsqueeze":
      return np.expand_dims(x, axes)
    return np.squeeze(x, axes)
  starts, ends = np.atleast_1d(inputs[1]), np.atleast_1d(inputs[2])   # Slice
  axes = np.atleast_1d(inputs[3]) if len(inputs) > 3 and inputs[3] is not None else range(
      len(starts))
  steps = np.atleast_1d(inputs[4]) if len(inputs) > 4 and inputs[4] is not None else [1] * len(
      starts)
  index = [slice(None)] * x.ndim
  for a, b, e, t in zip(axes, starts, ends, steps):
    index[int(a)] = slice(int(b), int(e), int(t))
  return x[tuple(index)]


def read(path: str, image_shape) -> dict:
  """The network of the ONNX file ``path`` for images of shape ``image_shape``.

  Args:
    path: an .onnx file whose graph takes one input float[N, C, H, W] (NCHW, or float[N,
      C·H·W] flattened channels first) and returns float[N, K].
    image_shape: (H, W, C) of trdr's images (NHWC).
  Returns:
    {"layers": tuple of `trdr.models.parse_layer` statements, "params": {name: {"kernel":
    float array (conv HWIO float[kh, kw, in, out], dense float[in, out]), "bias"?: float[out]}}
    named as `trdr.models.Sequential` names them, "num_outputs": K, "input_shift",
    "input_scale": per-channel tuples of C floats (empty: none), "nodes": the graph's
    operator types in order}.
  Raises:
    FileNotFoundError: nothing at ``path``.
    ModuleNotFoundError: the onnx package is not installed.
    ValueError: a file ONNX cannot parse, or a graph trdr does not read: each names the
      node (its name and operator), what was found and what trdr reads.
  """
  onnx = _onnx()
  if not os.path.isfile(path):
    raise FileNotFoundError(f"victim.load: no file {path}")
  try:
    model = onnx.load(path)
  except Exception as e:  # protobuf's DecodeError and others
    raise ValueError(f"cannot read {path} as ONNX ({type(e).__name__}: {e})") from e
  graph = model.graph
  to_array = onnx.numpy_helper.to_array
  values = {t.name: to_array(t) for t in graph.initializer}
  height, width, channels = (int(d) for d in image_shape)
  inputs = [i for i in graph.input if i.name not in values]
  if len(inputs) != 1:
    raise ValueError(f"the graph has {len(inputs)} inputs {[i.name for i in inputs]}; trdr "
                     "reads a graph of one input, the images")
  dims = [d.dim_value if d.HasField("dim_value") else None
          for d in inputs[0].type.tensor_type.shape.dim]
  layers, params = [], {}
  shape = (channels, height, width)   # the current tensor's shape without the batch axis
  nhwc = False   # the map is channels last (a Keras graph's input, or before its flatten)
  sizes = {}   # the chain's tensors' full shapes, at a batch of _BATCH (for Shape nodes)
  full = lambda: [_BATCH, *((shape[1], shape[2], shape[0]) if nhwc else shape)]
  if dims[1:] == [channels * height * width]:
    layers.append("flatten")   # a flat input: taken as NCHW-flattened (PyTorch's x.view)
    shape = (channels * height * width,)
  elif dims[1:] == [height, width, channels] and dims[1:] != [channels, height, width]:
    nhwc = True   # a Keras / TensorFlow graph: its first node transposes to NCHW
  elif dims[1:] != [channels, height, width]:
    raise ValueError(f"the graph's input {inputs[0].name!r} has shape {dims}; trdr's images "
                     f"are {channels} × {height} × {width} (H × W × C {tuple(image_shape)}): "
                     f"expected [N, {channels}, {height}, {width}] (NCHW) or [N, "
                     f"{channels * height * width}]")
  current = inputs[0].name
  sizes[current] = full()
  shift, scale = np.zeros(channels), np.ones(channels)
  counts = {"conv": 0, "dense": 0}
  pending_bias = None   # the last conv / dense layer's name while it has no bias yet

  def fail(node, what):
    return ValueError(f"node {node.name!r} ({node.op_type}): {what}; trdr reads sequential "
                      f"graphs of {', '.join(OPERATORS)}")

  def attributes(node, defaults):
    found = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    unknown = sorted(set(found) - set(defaults))
    if unknown:
      raise fail(node, f"attribute(s) {unknown} not read")
    out = {**defaults, **found}
    return {k: v.decode() if isinstance(v, bytes) else v for k, v in out.items()}

  def constant(node, name):
    if name not in values:
      raise fail(node, f"its input {name!r} is not a constant")
    return np.asarray(values[name])

  def window(node, attrs, kernel):
    if attrs["auto_pad"] not in ("NOTSET", "VALID"):
      raise fail(node, f"auto_pad {attrs['auto_pad']!r} (export with explicit pads)")
    if any(d != 1 for d in attrs["dilations"] or (1, 1)):
      raise fail(node, f"dilations {list(attrs['dilations'])}")
    if attrs.get("ceil_mode", 0) != 0:
      raise fail(node, "ceil_mode 1")
    pads = tuple(attrs["pads"] or (0, 0, 0, 0))
    if attrs["auto_pad"] == "VALID":
      pads = (0, 0, 0, 0)
    strides = tuple(attrs["strides"] or (1, 1))
    if len(kernel) != 2 or len(pads) != 4 or len(strides) != 2:
      raise fail(node, f"a window of {len(kernel)} spatial axes (kernel {list(kernel)})")
    # ONNX pads (begin_h, begin_w, end_h, end_w) = trdr's (top, left, bottom, right)
    rows = (shape[1] + pads[0] + pads[2] - kernel[0]) // strides[0] + 1
    cols = (shape[2] + pads[1] + pads[3] - kernel[1]) // strides[1] + 1
    if rows < 1 or cols < 1:
      raise fail(node, f"a {kernel[0]} × {kernel[1]} window on a {shape[1]} × {shape[2]} map")
    spec = (f"kernel={kernel[0]},{kernel[1]} stride={strides[0]},{strides[1]} "
            f"pad={','.join(str(int(p)) for p in pads)}")
    return spec, rows, cols

  for node in graph.node:
    op = node.op_type
    if op == "Constant":
      attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
      if "value" not in attrs:
        raise fail(node, f"a constant given as {sorted(attrs)}")
      values[node.output[0]] = to_array(attrs["value"])
      continue
    if op == "Shape" and node.input[0] in sizes:
      values[node.output[0]] = np.asarray(sizes[node.input[0]], np.int64)
      continue
    if op in _SHAPE_OPS and all(i in values for i in node.input if i):
      values[node.output[0]] = _shape_op(onnx, node, [values[i] if i else None
                                                      for i in node.input])
      continue
    if op == "Transpose":
      perm = list(attributes(node, {"perm": None})["perm"] or [])
      if node.input[0] != current or len(shape) != 3 or perm != (
          [0, 3, 1, 2] if nhwc else [0, 2, 3, 1]):
        raise fail(node, f"a transpose {perm} (trdr reads NHWC -> NCHW at the input and "
                   "NCHW -> NHWC before a flatten)")
      nhwc = not nhwc
      current = node.output[0]
      sizes[current] = full()
      continue
    if nhwc and op not in ("Flatten", "Reshape"):
      raise fail(node, "a layer on a channels-last map (only a flatten follows a transpose "
                 "to NHWC)")
    if not node.input or node.input[0] != current:
      raise fail(node, "it does not take the previous layer's output as its first input "
                 "(a branch, a skip connection or a reordered graph)")
    if len(node.output) != 1:
      raise fail(node, f"{len(node.output)} outputs")
    if op in ("Sub", "Div"):
      if layers and layers != ["flatten"]:
        raise fail(node, f"a {op} after a layer (only the input's normalisation is read)")
      c = constant(node, node.input[1]).astype(np.float64)
      if c.size == 1:
        c = np.full(channels, float(c.reshape(())))
      elif (len(shape) == 3 and c.size == channels
            and c.shape[-3:] in ((channels, 1, 1),) and c.ndim <= 4):
        c = c.reshape(channels)
      else:
        raise fail(node, f"a constant of shape {list(c.shape)}: trdr reads a scalar or one "
                   f"value per channel, shape [1, {channels}, 1, 1] or [{channels}, 1, 1]")
      if op == "Sub":    # (x − s)/d − c = (x − (s + c·d))/d
        shift = shift + c * scale
      else:
        if np.any(c == 0):
          raise fail(node, "a division by zero")
        scale = scale * c
      pending_bias = None
    elif op == "Conv":
      if len(shape) != 3:
        raise fail(node, "a convolution after the flatten")
      w = constant(node, node.input[1])
      attrs = attributes(node, {"auto_pad": "NOTSET", "dilations": None, "group": 1,
                                "kernel_shape": None, "pads": None, "strides": None})
      if attrs["group"] != 1:
        raise fail(node, f"group {attrs['group']} (a grouped or depthwise convolution)")
      if w.ndim != 4 or w.shape[1] != shape[0]:
        raise fail(node, f"weight of shape {list(w.shape)} on {shape[0]} channels")
      spec, rows, cols = window(node, attrs, tuple(attrs["kernel_shape"] or w.shape[2:]))
      name = f"conv_{counts['conv']}"
      counts["conv"] += 1
      params[name] = {"kernel": w.transpose(2, 3, 1, 0)}   # OIHW -> HWIO
      has_bias = len(node.input) > 2 and node.input[2] != ""
      if has_bias:
        params[name]["bias"] = constant(node, node.input[2]).reshape(-1)
      layers.append(f"conv out={w.shape[0]} {spec} bias={int(has_bias)}")
      shape = (int(w.shape[0]), rows, cols)
      pending_bias = None if has_bias else name
    elif op in ("Gemm", "MatMul"):
      if len(shape) != 1:
        raise fail(node, f"a linear layer on a {len(shape) + 1}-D tensor (Flatten first)")
      w = constant(node, node.input[1])
      bias = None
      if op == "Gemm":
        attrs = attributes(node, {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0})
        if attrs["alpha"] != 1.0 or attrs["transA"] != 0:
          raise fail(node, f"alpha {attrs['alpha']}, transA {attrs['transA']} (trdr reads "
                     "alpha 1, transA 0)")
        w = w.T if attrs["transB"] else w
        if len(node.input) > 2 and node.input[2] != "":
          bias = constant(node, node.input[2]) * np.asarray(attrs["beta"], w.dtype)
      else:
        attributes(node, {})
      if w.ndim != 2 or w.shape[0] != shape[0]:
        raise fail(node, f"weight of shape {list(w.shape)} on {shape[0]} features")
      name = f"dense_{counts['dense']}"
      counts["dense"] += 1
      params[name] = {"kernel": w}
      if bias is not None:
        if bias.size != w.shape[1]:
          raise fail(node, f"a bias of shape {list(bias.shape)} for {w.shape[1]} outputs")
        params[name]["bias"] = bias.reshape(-1)
      layers.append(f"dense out={w.shape[1]} bias={int(bias is not None)}")
      shape = (int(w.shape[1]),)
      pending_bias = None if bias is not None else name
    elif op == "Add":
      if pending_bias is None:
        raise fail(node, "an Add that is not the bias of the conv or linear layer before it")
      b = constant(node, node.input[1])
      out = shape[0]
      ok = (b.size == out and (b.ndim <= 1 or b.shape[-len(shape):] == (
          (out, 1, 1) if len(shape) == 3 else (out,))))
      if not ok:
        raise fail(node, f"a bias of shape {list(b.shape)} for {out} outputs")
      params[pending_bias]["bias"] = b.reshape(-1)
      layers[-1] = layers[-1].replace("bias=0", "bias=1")
      pending_bias = None
    elif op == "Relu":
      attributes(node, {})
      layers.append("relu")
      pending_bias = None
    elif op in ("MaxPool", "AveragePool"):
      if len(shape) != 3:
        raise fail(node, "a pooling after the flatten")
      defaults = {"auto_pad": "NOTSET", "ceil_mode": 0, "dilations": None,
                  "kernel_shape": None, "pads": None, "strides": None}
      defaults.update({"storage_order": 0} if op == "MaxPool" else {"count_include_pad": 0})
      attrs = attributes(node, defaults)
      spec, rows, cols = window(node, attrs, tuple(attrs["kernel_shape"]))
      if op == "MaxPool":
        layers.append(f"maxpool {spec}")
      else:
        layers.append(f"avgpool {spec} count_pad={int(attrs['count_include_pad'])}")
      shape = (shape[0], rows, cols)
      pending_bias = None
    elif op in ("Flatten", "Reshape"):
      size = int(np.prod(shape))
      if op == "Flatten":
        if attributes(node, {"axis": 1})["axis"] != 1:
          raise fail(node, "axis other than 1")
      else:
        attributes(node, {"allowzero": 0})
        target = [int(t) for t in constant(node, node.input[1]).reshape(-1)]
        if len(target) != 2 or not (target[1] == size or (target[1] == -1
                                                          and target[0] != -1)):
          raise fail(node, f"a reshape to {target}; trdr reads a flatten to [N, {size}]")
      if len(shape) == 3:
        layers.append("flatten nhwc" if nhwc else "flatten")
        shape = (size,)
        nhwc = False
      pending_bias = None
    elif op == "Identity":
      pass
    else:
      raise fail(node, "an operator trdr does not read")
    current = node.output[0]
    sizes[current] = full()
  outputs = [o.name for o in graph.output]
  if outputs != [current]:
    raise ValueError(f"the graph's outputs {outputs} are not the last node's {current!r}: "
                     "trdr reads a sequential graph with one output")
  dense = [i for i, spec in enumerate(layers) if spec.startswith("dense")]
  if not dense or dense[-1] != len(layers) - 1:
    raise ValueError(f"the graph ends in {layers[-1] if layers else 'its input'!r}, not a "
                     "linear layer (Gemm / MatMul): trdr's victims output their logits")
  last = f"dense_{counts['dense'] - 1}"
  params["output"] = params.pop(last)
  identity = np.all(shift == 0) and np.all(scale == 1)
  return {"layers": tuple(layers), "params": params, "num_outputs": int(shape[0]),
          "input_shift": () if identity else tuple(float(s) for s in shift),
          "input_scale": () if identity else tuple(float(s) for s in scale),
          "nodes": tuple(n.op_type for n in graph.node if n.op_type != "Constant")}
