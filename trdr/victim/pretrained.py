"""θ* trained outside trdr: a PyTorch state_dict, a NumPy .npz, a Flax msgpack or an orbax
checkpoint, mapped to trdr's Flax layout (``config.victim.load``).

The attack needs only θ* and the labels' count per class; the data named by
``config.data`` is used to check the input size and, after the attack, for evaluation.
Two layouts of named arrays are understood (`read` returns either):

* **PyTorch** (the Haim et al. 2022 / Buzaglo et al. 2023 reference code): ``<stem>.weight``
  float[out, in] and optional ``<stem>.bias`` float[out] per linear layer, layers in the
  natural order of their stems (``layers.0``, ``layers.1``, …), the first layer's inputs
  the image flattened channels first (NCHW: index c·H·W + h·W + w). A convolutional net
  (`trdr.models.ConvNet`): 3 × 3 ``Conv2d`` weights float[out, in, 3, 3] (padding 1), then
  one ``Linear`` head over the features flattened channels first; a 2 × 2 pooling after
  each convolution is read off the head's input size (a state_dict holds no pooling: trdr
  assumes average pooling). BatchNorm and other layers are refused by name. A
  ``{"state_dict": …}`` wrapper and a ``module.`` prefix (DataParallel) are removed.
* **trdr / Flax**: ``<layer>/kernel`` float[in, out] (a conv's float[3, 3, in, out]) and
  ``<layer>/bias`` float[out] with trdr's layer names (affine: ``dense``; one-hidden:
  ``hidden``, ``output``; Haim et al.'s MLP: ``dense_0``, …, ``dense_{L-2}``, ``output``;
  the CNN: ``conv_0``, …, ``output``), inputs flattened channels last (NHWC:
  h·W·C + w·C + c), as `trdr.models` defines them; an outer ``params`` level is removed.

Formats: ``.pth``/``.pt`` (needs PyTorch: ``pip install 'trdr[torch]'``), ``.npz`` (names
as above, e.g. ``layers.0.weight`` or ``dense_0/kernel``), ``.msgpack`` (Flax
``serialization.to_bytes`` of θ* or {"params": θ*}, or a trdr ``victim.msgpack``) and a
directory (an orbax PyTree checkpoint).

The architecture is inferred from the arrays where that is unambiguous (the number of
layers, the widths, the outputs C, which layers have biases); a two-layer net with both
biases and one output fits both the one-hidden network (eq. 9) and Haim et al.'s MLP, and
``victim.arch`` decides. The activation is never in the file: ``victim.activation``
(default ReLU, the reference's).
"""

import hashlib
import io
import os
import re

import flax.serialization
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax.tree
from absl import logging

from trdr import models
from trdr.runtime import files, rundir
from trdr.victim import cache, objective, onnx_model

FORMATS = (".onnx", ".pth", ".pt", ".npz", ".msgpack", "an orbax checkpoint directory")

# What a file of arrays (a state_dict) does not hold and the config states
# (``victim.file.<key>``, configs/decoreco_cifar.py): required where the file has
# convolutions, each with its values.
STATED = {"pooling": ("max", "average", "none"), "activation": tuple(models.ACTIVATIONS),
          "padding": (1,)}
_POOL = {"max": "max", "average": True, "none": False}   # -> `trdr.models.ConvNet.pool`


def read(path: str) -> dict[str, np.ndarray]:
  """The named arrays of the θ* file ``path`` (flat names: ``a.b`` PyTorch, ``a/b`` Flax).

  Raises:
    FileNotFoundError: nothing at ``path``.
    ModuleNotFoundError: a .pth/.pt file and PyTorch is not installed.
    ValueError: an unknown extension, or a file that cannot be read as its format.
  """
  if not os.path.exists(path):
    raise FileNotFoundError(f"victim.load: no file or directory {path}")
  ext = os.path.splitext(path)[1].lower()
  try:
    if os.path.isdir(path):
      tree = _read_orbax(path)
    elif ext in (".pth", ".pt"):
      tree = _read_torch(path)
    elif ext == ".npz":
      with open(path, "rb") as fh, np.load(fh, allow_pickle=False) as f:
        tree = {k: f[k] for k in f.files}
    elif ext == ".msgpack":
      with open(path, "rb") as f:
        tree = flax.serialization.msgpack_restore(f.read())
      if isinstance(tree, dict) and set(tree) == {"body", "sha256"}:  # trdr's victim.msgpack
        tree = files.read_verified(path, "use another file")["params"]
    else:
      raise ValueError(f"victim.load: {path} has an unknown format; known: {FORMATS}")
  except (ModuleNotFoundError, ValueError):
    raise
  except Exception as e:  # zip, msgpack and orbax raise many types for a damaged file
    raise ValueError(f"victim.load: cannot read {path} ({type(e).__name__}: {e})") from e
  if isinstance(tree, dict) and set(tree) in ({"params"}, {"state_dict"}):
    tree = next(iter(tree.values()))
  if not isinstance(tree, dict) or not tree:
    raise ValueError(f"victim.load: {path} holds no named arrays")
  flat = {}
  for key_path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
    name = "/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in key_path)
    flat[name.removeprefix("module.")] = np.asarray(leaf)
  return flat


def _read_torch(path):
  try:
    import torch  # noqa: PLC0415  (an optional extra)
  except ModuleNotFoundError as e:
    raise ModuleNotFoundError(
        f"reading {path} needs PyTorch: pip install 'trdr[torch]' (or save θ* as .npz: "
        "numpy.savez(path, **{k: v.numpy() for k, v in model.state_dict().items()}))") from e
  state = torch.load(path, map_location="cpu", weights_only=True)
  if isinstance(state, dict) and "state_dict" in state:
    state = state["state_dict"]
  return {k: v.detach().cpu().numpy() if hasattr(v, "detach") else v
          for k, v in state.items()}


def _read_orbax(path):
  import orbax.checkpoint as ocp  # noqa: PLC0415  (slow to import; only for this format)
  return ocp.PyTreeCheckpointer().restore(os.path.abspath(path))


def _flax_order(stem: str):
  """trdr's Flax layer names in the network's order: dense / hidden / dense_0, … or
  conv_0, … first, output last."""
  found = re.fullmatch(r"(dense|conv)_(\d+)", stem)
  return stem == "output", int(found.group(2)) if found else -1


# Keys of layers trdr does not read, by what they belong to (a PyTorch state_dict).
_UNSUPPORTED = {"running_mean": "BatchNorm", "running_var": "BatchNorm",
                "num_batches_tracked": "BatchNorm", "in_proj_weight": "attention"}
_SUPPORTED = ("linear layers, and 3 × 3 convolutions (padding 1) each followed by the "
              "activation and optionally a 2 × 2 average pooling, then one linear head")


def layers(arrays: dict[str, np.ndarray], image_shape) -> list[dict]:
  """The layers of ``arrays`` (`read`) in order, in trdr's orientation: linear layers, or
  3 × 3 convolutions followed by one linear head (`trdr.models.ConvNet`).

  Args:
    arrays: name -> array, PyTorch or Flax layout (module docstring; a PyTorch conv
      weight float[out, in, 3, 3], a Flax conv kernel float[3, 3, in, out]).
    image_shape: (H, W, C) of the images Φ takes.
  Returns:
    Per layer {"kernel": float[in, out] over NHWC-flattened inputs for a linear layer
    (the first, or the head after convolutions, whose PyTorch rows follow NCHW-flattened
    features), float[3, 3, in, out] for a convolution, "bias": float[out] or None,
    "stem": the file's name of the layer, "flax": whether the file has the Flax layout,
    "conv": whether it is a convolution, "pool": for the head after convolutions whether
    its input size says each convolution was followed by a 2 × 2 pooling (a state_dict
    holds no pooling: trdr assumes average pooling; a max-pooled net is not trdr's CNN),
    else None}.
  Raises:
    ValueError: a name of neither layout (or both), a BatchNorm or attention layer, a
      kernel that is neither 2-D nor 3 × 3 4-D, a convolution after a linear layer or
      last, a bias whose size is not the layer's outputs, a layer's inputs that are not
      the previous layer's outputs (the first layer's: H·W·C; the head's: the features
      with or without pooling), a non-float dtype or a NaN/inf; each names the array,
      what was expected and what was found.
  """
  for key in arrays:
    what = _UNSUPPORTED.get(key.rpartition(".")[2])
    if what:
      raise ValueError(f"layer {key.rpartition('.')[0]!r} is a {what} layer ({key}), which "
                       f"trdr does not read: it reads {_SUPPORTED}")
  torch_style = [k for k in arrays if re.fullmatch(r".+\.(weight|bias)", k)]
  flax_style = [k for k in arrays if re.fullmatch(r"[^/.]+/(kernel|bias)", k)]
  if len(torch_style) == len(arrays):
    stems = {k.rpartition(".")[0] for k in arrays}
    natural = lambda s: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]
    found = [(s, f"{s}.weight", f"{s}.bias") for s in sorted(stems, key=natural)]
  elif len(flax_style) == len(arrays):
    stems = {k.partition("/")[0] for k in arrays}
    found = [(s, f"{s}/kernel", f"{s}/bias") for s in sorted(stems, key=_flax_order)]
    for kind in ("dense", "conv"):
      numbered = [int(x.partition("_")[2]) for x in stems if re.fullmatch(kind + r"_\d+", x)]
      missing = sorted({f"{kind}_{k}/kernel" for k in range(max(numbered, default=-1))}
                       - set(arrays))
      if missing:
        raise ValueError(f"missing keys {missing}: trdr's names number the layers "
                         f"{kind}_0 … {kind}_{max(numbered)}, then output")
  else:
    odd = sorted(set(arrays) - set(torch_style)) or sorted(set(arrays) - set(flax_style))
    raise ValueError(f"unexpected keys {odd}: θ* arrays must be named <layer>.weight / "
                     "<layer>.bias (PyTorch) or <layer>/kernel / <layer>/bias (Flax), "
                     "not both")
  out = []
  fan_in = int(np.prod(image_shape))
  height, width, channels = image_shape   # the features entering the next layer
  for stem, w_name, b_name in found:
    if w_name not in arrays:
      raise ValueError(f"missing key {w_name!r}: layer {stem!r} has a bias but no weights")
    w = _checked(w_name, arrays[w_name])
    torch_layout = w_name.endswith(".weight")
    conv = w.ndim == 4
    pool = None
    if conv:
      if out and not out[-1]["conv"]:
        raise ValueError(f"{w_name}: a convolution after a linear layer; trdr reads "
                         f"{_SUPPORTED}")
      if torch_layout:   # PyTorch (out, in, kh, kw) -> Flax (kh, kw, in, out)
        w = w.transpose(2, 3, 1, 0)
      if w.shape[:2] != (3, 3):
        raise ValueError(f"{w_name} is a {w.shape[0]} × {w.shape[1]} convolution; trdr "
                         f"reads {_SUPPORTED}")
      if w.shape[2] != channels:
        raise ValueError(f"{w_name} has {w.shape[2]} input channels (shape "
                         f"{arrays[w_name].shape}), expected {channels}")
      channels = int(w.shape[3])
    elif w.ndim != 2:
      raise ValueError(f"{w_name} has shape {w.shape}: expected a 2-D weight matrix (a "
                       "linear layer) or a 4-D kernel (a convolution)")
    else:
      if torch_layout:  # PyTorch (out, in) -> (in, out)
        w = w.T
      if out and out[-1]["conv"]:   # the head over the convolutions' flattened features
        convs = sum(layer["conv"] for layer in out)
        sizes = {False: height * width * channels,
                 True: (height // 2 ** convs) * (width // 2 ** convs) * channels}
        pooled = [p for p, size in sizes.items() if size == w.shape[0]
                  and (not p or (height % 2 ** convs == 0 and width % 2 ** convs == 0))]
        if not pooled:
          raise ValueError(
              f"{w_name} has {w.shape[0]} inputs, but the convolutions give "
              f"{sizes[False]} features without pooling and {sizes[True]} with a 2 × 2 "
              f"average pooling after each; trdr reads {_SUPPORTED}")
        pool = pooled[0]
        if torch_layout:  # PyTorch flattens NCHW features: rows (c, h, w) -> (h, w, c)
          h = height // 2 ** convs if pool else height
          wd = width // 2 ** convs if pool else width
          w = w.reshape(channels, h, wd, -1).transpose(1, 2, 0, 3).reshape(w.shape[0], -1)
      elif not out and torch_layout and w.shape[0] == fan_in:  # NCHW -> NHWC inputs
        h, wd, c = image_shape
        w = w.reshape(c, h, wd, -1).transpose(1, 2, 0, 3).reshape(fan_in, -1)
      expected_in = (w.shape[0] if out and out[-1]["conv"] else
                     fan_in if not out else out[-1]["kernel"].shape[1])
      if w.shape[0] != expected_in:
        what = (f"the images' {fan_in} = {'×'.join(map(str, image_shape))} pixels"
                if not out else f"the previous layer's {expected_in} outputs")
        raise ValueError(f"{w_name} has {w.shape[0]} inputs (shape {arrays[w_name].shape}), "
                         f"expected {what}")
    outputs = int(w.shape[-1])
    bias = _checked(b_name, arrays[b_name]) if b_name in arrays else None
    if bias is not None and bias.shape != (outputs,):
      raise ValueError(f"{b_name} has shape {bias.shape}, expected ({outputs},)")
    out.append({"kernel": w, "bias": bias, "stem": stem, "flax": not torch_layout,
                "conv": conv, "pool": pool})
  if out and out[-1]["conv"]:
    raise ValueError(f"the last layer {out[-1]['stem']!r} is a convolution; trdr reads "
                     f"{_SUPPORTED}")
  return out


def _checked(name: str, a: np.ndarray) -> np.ndarray:
  if not np.issubdtype(a.dtype, np.floating):
    raise ValueError(f"{name} has dtype {a.dtype}, expected a floating-point dtype")
  if not np.all(np.isfinite(a)):
    raise ValueError(f"{name} holds {np.sum(~np.isfinite(a))} NaN/inf values")
  return a


# trdr's layer names per architecture, for L layers (`trdr.models`).
_FLAX_NAMES = {"affine": lambda n: ["dense"], "one_hidden": lambda n: ["hidden", "output"],
               "haim_mlp": lambda n: [*(f"dense_{k}" for k in range(n - 1)), "output"],
               "cnn": lambda n: [*(f"conv_{k}" for k in range(n - 1)), "output"]}


def architecture(found: list[dict], victim_config: ml_collections.ConfigDict
                 ) -> ml_collections.ConfigDict:
  """``victim_config`` with the architecture of the layers ``found`` (`layers`): ``arch``
  and its fields (`trdr.models.MODEL_FIELDS`) as the arrays say, where they are
  unambiguous; otherwise ``victim_config.arch`` decides.

  Raises:
    ValueError: no trdr architecture has these layers (e.g. a bias on some later layers
      only, or on none of the first), naming what was found.
  """
  n, outputs = len(found), found[-1]["kernel"].shape[-1]
  biases = [layer["bias"] is not None for layer in found]
  widths = tuple(int(layer["kernel"].shape[-1]) for layer in found[:-1])
  fits = {}
  if any(layer["conv"] for layer in found):
    if biases[0] and len(set(biases[1:])) == 1:
      fits["cnn"] = {"channels": widths, "pool": bool(found[-1]["pool"]),
                     "all_biases": all(biases), "num_outputs": int(outputs)}
  else:
    if n == 1 and outputs == 1 and biases[0]:
      fits["affine"] = {}
    if n == 2 and outputs == 1 and all(biases):
      fits["one_hidden"] = {"width": widths[0]}
    if n >= 2 and biases[0] and len(set(biases[1:])) == 1:
      fits["haim_mlp"] = {"widths": widths, "all_biases": all(biases),
                          "num_outputs": int(outputs)}
  description = (f"{n} layer(s) of widths {[int(x['kernel'].shape[-1]) for x in found]}, "
                 f"biases {biases}")
  if not fits:
    raise ValueError(f"no victim architecture of trdr has {description}; known: affine "
                     "(eq. 8), one_hidden (eq. 9), haim_mlp and cnn (a bias on the first "
                     "layer, and on every later layer or none)")
  if found[0]["flax"]:  # trdr's own layer names say which architecture it is
    stems = [layer["stem"] for layer in found]
    named = next((arch for arch, names in _FLAX_NAMES.items() if names(n) == stems), None)
    if named is None or named not in fits:
      raise ValueError(f"unexpected layer names {stems} for {description}: Flax-layout "
                       f"θ* must use trdr's names, here "
                       f"{_FLAX_NAMES['cnn' if 'cnn' in fits else 'haim_mlp'](n)}"
                       + (f" or {_FLAX_NAMES['one_hidden'](n)}" if n == 2 else ""))
    fits = {named: fits[named]}
  arch = victim_config.arch if victim_config.arch in fits else next(iter(fits))
  if len(fits) > 1 and victim_config.arch not in fits:
    raise ValueError(f"{description} fits {sorted(fits)}: set victim.arch to one of them")
  out = ml_collections.ConfigDict(victim_config.to_dict())
  out.arch = arch
  for name, value in fits[arch].items():
    out[name] = value
  if arch != "affine" and "activation" not in out:
    out.activation = "relu"
  if arch == "cnn":   # the MLP's fields say nothing of a CNN
    for name in ("widths", "width"):
      if name in out:
        del out[name]
    if "later_init" not in out:
      out.later_init = "pytorch"
  return out


def is_onnx(path: str) -> bool:
  """Whether ``path`` names an ONNX graph (`trdr.victim.onnx_model`): by its extension."""
  return os.path.splitext(str(path))[1].lower() == ".onnx"


def _per_channel(values, channels: int, name: str) -> np.ndarray:
  values = np.asarray(tuple(float(v) for v in values), np.float64)
  if values.size not in (1, channels):
    raise ValueError(f"victim.file.{name} has {values.size} values; the images have "
                     f"{channels} channels (give 1 or {channels})")
  return np.broadcast_to(values, (channels,))


def _stated_preprocessing(victim_config, channels: int, shift=(), scale=()) -> dict:
  """{input_shift, input_scale}: ``victim.file``'s normalisation (x − s₁)/c₁ followed by a
  graph's own (· − s₂)/c₂, composed as (x − (s₁ + s₂·c₁))/(c₁·c₂) per channel; empty
  tuples where there is none."""
  given = victim_config.get("file") or {}
  s1, c1 = given.get("input_shift"), given.get("input_scale")
  if s1 is None and c1 is None and not shift and not scale:
    return {"input_shift": (), "input_scale": ()}
  s1 = _per_channel(s1 if s1 is not None else (0.0,), channels, "input_shift")
  c1 = _per_channel(c1 if c1 is not None else (1.0,), channels, "input_scale")
  if np.any(c1 == 0):
    raise ValueError(f"victim.file.input_scale {tuple(c1)} holds a zero")
  s2 = np.asarray(shift or (0.0,) * channels, np.float64)
  c2 = np.asarray(scale or (1.0,) * channels, np.float64)
  return {"input_shift": tuple(float(v) for v in s1 + s2 * c1),
          "input_scale": tuple(float(v) for v in c1 * c2)}


def stated(found: list[dict], victim_config: ml_collections.ConfigDict, image_shape
           ) -> ml_collections.ConfigDict:
  """``victim_config`` (`architecture`'s) with what the file cannot hold, as
  ``victim.file`` states it: for convolutions the pooling, activation and padding
  (`STATED`; nothing guessed: unset is an error), and the input normalisation
  (``input_shift``, ``input_scale``, any network). ``image_shape``: (H, W, C).

  Raises:
    ValueError: convolutions and one of ``victim.file.pooling``, ``activation``,
      ``padding`` unset (one message listing the flags to set and pointing to ONNX), a
      value trdr does not read, or a pooling the head's input size contradicts.
  """
  out = ml_collections.ConfigDict(victim_config.to_dict())
  given = victim_config.get("file") or {}
  if any(layer["conv"] for layer in found):
    missing = [k for k in STATED if given.get(k) is None]
    if missing:
      flags = " ".join(f"--config.victim.file.{k}={'|'.join(map(str, STATED[k]))}"
                       for k in missing)
      raise ValueError(
          f"the file holds convolutions, and a state_dict holds no {', '.join(missing)}: "
          f"state them ({flags}), or export the model to ONNX (torch.onnx.export(model, "
          "example, 'model.onnx')) and load the .onnx, which holds the whole architecture "
          "(docs/own_model.md)")
    for k, allowed in STATED.items():
      if given[k] not in allowed:
        raise ValueError(
            f"victim.file.{k} is {given[k]!r}; trdr reads a state_dict's 3 × 3 convolutions "
            f"with {k} {' or '.join(map(str, allowed))}: for another architecture export "
            "the model to ONNX (docs/own_model.md)")
    inferred = bool(found[-1]["pool"])
    if (given.pooling != "none") != inferred:
      head = found[-1]["kernel"].shape[0]
      raise ValueError(
          f"victim.file.pooling is {given.pooling!r}, but the head's {head} inputs say "
          f"{'a 2 × 2 pooling after each convolution' if inferred else 'no pooling'}")
    if "pool" in out:   # a ConfigDict keeps a field's type: a bool here before "max"
      del out["pool"]
    out.pool = _POOL[given.pooling]
    out.activation = given.activation
  elif given.get("activation") is not None:
    if given.activation not in STATED["activation"]:
      raise ValueError(f"victim.file.activation is {given.activation!r}; known: "
                       f"{STATED['activation']}")
    out.activation = given.activation
  preprocessing = _stated_preprocessing(victim_config, int(image_shape[-1]))
  if preprocessing["input_shift"] or preprocessing["input_scale"]:
    out.update(preprocessing)
  return out


def onnx_architecture(graph: dict, victim_config: ml_collections.ConfigDict, image_shape
                      ) -> ml_collections.ConfigDict:
  """``victim_config`` for the ONNX graph ``graph`` (`trdr.victim.onnx_model.read`):
  arch "sequential" (`trdr.models.Sequential`) with its layers, outputs and input
  normalisation (``victim.file``'s, if stated, before the graph's own Sub/Div); the
  activation at its Relu nodes ReLU. The fields of the other architectures are removed.
  ``image_shape``: (H, W, C) of the images.

  Raises:
    ValueError: a bad ``victim.file.input_shift`` / ``input_scale``.
  """
  out = ml_collections.ConfigDict(victim_config.to_dict())
  for name in ("widths", "width", "channels", "pool", "all_biases", "later_init"):
    if name in out:
      del out[name]
  ignored = [k for k in ("pooling", "activation", "padding")
             if (victim_config.get("file") or {}).get(k) is not None]
  if ignored:
    logging.warning("victim.file.%s ignored: the ONNX graph states the architecture",
                    ", victim.file.".join(ignored))
  out.arch = "sequential"
  out.layers = tuple(graph["layers"])
  out.num_outputs = graph["num_outputs"]
  out.activation = "relu"
  out.update(_stated_preprocessing(victim_config, int(image_shape[-1]),
                                   graph["input_shift"], graph["input_scale"]))
  return out


def describe(victim_config: ml_collections.ConfigDict) -> dict:
  """The architecture and the input normalisation a victim config builds, in words, for
  the ``Victim:`` log line and summary.json: {"architecture": str, "preprocessing": str}."""
  v = victim_config
  if v.arch == "sequential":
    arch = "sequential (ONNX): " + " → ".join(v.layers)
  elif v.arch == "cnn":
    pool = {False: "no pooling", True: "2 × 2 average pooling", "average":
            "2 × 2 average pooling", "max": "2 × 2 max pooling"}[v.pool]
    arch = (f"cnn: 3 × 3 convolutions {tuple(v.channels)}, padding 1, stride 1, "
            f"{v.activation}, {pool}, a linear head (a PyTorch layout's inputs read as "
            "the features flattened channels first, x.flatten(1))")
  elif v.arch == "haim_mlp":
    arch = f"mlp: widths {tuple(v.widths)}, {v.activation}"
  elif v.arch == "one_hidden":
    arch = f"one hidden layer: width {v.width}, {v.activation}"
  else:
    arch = v.arch
  shift, scale = v.get("input_shift") or (), v.get("input_scale") or ()
  pre = ("(x − shift) / scale, shift " + str(tuple(round(x, 6) for x in shift or (0.0,)))
         + ", scale " + str(tuple(round(x, 6) for x in scale or (1.0,)))
         if shift or scale else "none (the images as data.* gives them)")
  return {"architecture": arch, "preprocessing": pre}


def resolve(config: ml_collections.ConfigDict, image_shape) -> ml_collections.ConfigDict:
  """``config`` with ``victim`` set to the architecture of the file ``victim.load``: an
  ONNX graph's (`onnx_architecture`), or the arrays' (`architecture`) with what they cannot
  hold as ``victim.file`` states it (`stated`); unchanged when ``victim.load`` is not set.

  Raises:
    ValueError: as `read`, `layers`, `architecture`, `stated` and
      `trdr.victim.onnx_model.read`; also ``victim.checkpoint_dir`` set together with
      ``victim.load``.
    ModuleNotFoundError: an .onnx file without the onnx package.
  """
  path = config.victim.load
  if not path:
    return config
  if config.victim.checkpoint_dir:
    raise ValueError("victim.load and victim.checkpoint_dir are both set: a loaded θ* is "
                     "not trained, so it has no cache; unset victim.checkpoint_dir")
  resolved = ml_collections.ConfigDict(config.to_dict())
  try:
    if is_onnx(path):
      resolved.victim = onnx_architecture(onnx_model.read(path, image_shape), config.victim,
                                          image_shape)
    else:
      found = layers(read(path), image_shape)
      resolved.victim = stated(found, architecture(found, config.victim), image_shape)
  except ValueError as e:  # named by the file it is about
    raise (e if path in str(e) else ValueError(f"{path}: {e}")) from None
  changed = {k: resolved.victim[k] for k in resolved.victim
             if config.victim.get(k) != resolved.victim[k]}
  if changed:  # the file decides, but a config that said otherwise may be a mistake
    logging.warning("victim architecture from %s replaces the config's: %s", path, changed)
  return resolved


def params(found: list[dict], model_config: ml_collections.ConfigDict, dtype) -> dict:
  """θ* in trdr's Flax layout for the architecture ``model_config`` (`architecture`)."""
  names = _FLAX_NAMES[model_config.arch](len(found))
  return {name: {"kernel": jnp.asarray(layer["kernel"], dtype),
                 **({} if layer["bias"] is None else {"bias": jnp.asarray(layer["bias"],
                                                                         dtype)})}
          for name, layer in zip(names, found)}


def sha256(path: str) -> str:
  """SHA-256 of a file, or of a directory's files (names and bytes, in sorted order)."""
  h = hashlib.sha256()
  files = ([path] if os.path.isfile(path) else sorted(
      os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs))
  for file in files:
    h.update(os.path.relpath(file, path).encode())
    with open(file, "rb") as f:
      for block in iter(lambda: f.read(1 << 20), b""):
        h.update(block)
  return h.hexdigest()


def load(config: ml_collections.ConfigDict, task) -> cache.Victim:
  """The `trdr.victim.Victim` of the file ``config.victim.load``.

  Args:
    config: a config `resolve` returned (sections victim, data, float64).
    task: the `trdr.data.Task` named by ``config.data`` (for the input size and
      the accuracies reported; the attack does not see it).
  Returns:
    The victim; metadata {"config": {"load": path, "sha256": the file's}, "report":
    train/test accuracy and sizes}.
  Raises:
    ValueError: as `resolve`; the parameters do not fit the model that ``config.victim``
      builds (a missing or extra parameter, or a shape); or the task's labels do not fit
      its outputs (`trdr.models.check_labels`).
  """
  path = config.victim.load
  models.check_labels(config.victim, task.train_labels)
  dtype = jnp.float64 if config.float64 else jnp.float32
  image_shape = task.train_images.shape[1:]
  if is_onnx(path):
    theta = {name: {k: jnp.asarray(_checked(f"{name}/{k}", a), dtype) for k, a in layer.items()}
             for name, layer in onnx_model.read(path, image_shape)["params"].items()}
  else:
    theta = params(layers(read(path), image_shape), config.victim, dtype)
  model = models.build_model(config.victim)
  template = models.init_params(model, jax.random.key(0), image_shape, dtype)
  expected = jax.tree.map(np.shape, template)
  if jax.tree.map(np.shape, theta) != expected:
    raise ValueError(f"θ* of {path} does not fit victim {config.victim.to_dict()}: "
                     f"expected {expected}, found {jax.tree.map(np.shape, theta)}")
  apply = lambda x: model.apply({"params": theta}, jnp.asarray(x, dtype))
  acc = lambda x, y: float(jnp.mean(objective.predictions(apply(x)) == jnp.asarray(y)))
  report = {"loaded_from": os.path.abspath(path),
            "train_accuracy": acc(task.train_images, task.train_labels),
            "test_accuracy": acc(task.test_images, task.test_labels),
            "n_train": int(len(task.train_images)), "n_test": int(len(task.test_images)),
            **describe(config.victim)}
  report.update(_stationarity(config, model, theta, task, path))
  meta = {"config": {"load": os.path.abspath(path), "sha256": sha256(path)},
          "report": report}
  return cache.Victim(model, theta, config.victim, meta)


def _stationarity(config, model, theta, task, path) -> dict:
  """How far a file's θ* is from what the attack assumes of a trained θ*, with a warning
  where it is not so.

  Bilevel (binary victims): ||∇θE(θ*)|| on the task's training set (E of
  `trdr.victim.objective.energy` with ``victim.weight_decay``) against ``victim.tol``, the
  stationarity trdr trains its own victims to: the training images minimise the upper
  level (Runkel et al., eq. 2) only where ∇θE(θ*) = 0. DecoReco: its KKT conditions (Haim et al.
  2022) describe a network trained to fit its training set; warned about when the
  training accuracy is below 1.

  Returns:
    {"grad_norm": float} for the bilevel attack on a binary victim, else {}.
  """
  dtype = jax.tree.leaves(theta)[0].dtype
  x, y = jnp.asarray(task.train_images, dtype), jnp.asarray(task.train_labels, dtype)
  apply_fn = lambda p, images: model.apply({"params": p}, images)
  logits = apply_fn(theta, x)
  if config.attack.name == "decoreco":
    fit = float(jnp.mean(objective.predictions(logits) == y))
    if fit < 1.0:
      logging.warning("%s", mismatch_message(path, fit, config))
    return {}
  if config.attack.name != "bilevel" or logits.ndim != 1:
    return {}
  wd = float(config.victim.weight_decay)
  grad = jax.grad(lambda p: objective.energy(p, x, y, apply_fn=apply_fn, weight_decay=wd))
  g = float(optax.tree.norm(grad(theta)))
  if g > config.victim.tol:
    # E is wd-strongly convex for the affine victim: ||θ* − θ(x_GT)|| ≤ ||∇θE(θ*)|| / wd.
    bound = (f"; ||θ* − θ(x_GT)|| ≤ ||∇θE||/wd = {g / wd:.3g} for this strongly convex E"
             if config.victim.arch == "affine" and wd > 0 else "")
    logging.warning(
        "θ* of %s is not stationary on the task's training set: ||∇θE(θ*)|| = %.3g > "
        "victim.tol = %g (E: mean logistic loss + weight decay %g). The bilevel attack "
        "assumes ∇θE(θ*) = 0, where the training images minimise its upper level (Runkel "
        "eq. 2); here they do not exactly%s. Check that config.data is the model's training "
        "set and victim.weight_decay its training's.", path, g, config.victim.tol, wd, bound)
  return {"grad_norm": g}


def mismatch_message(path: str, fit: float, config: ml_collections.ConfigDict) -> str:
  """The warning for a read θ* that classifies only ``fit`` (in [0, 1)) of the given
  training set: its likely causes, the architecture read, the preprocessing and the data,
  each with how to check it (DecoReco's KKT premise is a network that fits its set)."""
  v, d = config.victim, describe(config.victim)
  if is_onnx(path):
    arch = (f"the architecture read from the ONNX graph ({d['architecture']}): an export "
            "is that network, so this cause is unlikely unless the model was exported "
            "in training mode or from another checkpoint")
  elif v.arch == "cnn":
    arch = (f"the architecture: a state_dict holds none of it, and trdr ran {d['architecture']}"
            " (victim.file.pooling, victim.file.activation, victim.file.padding): compare "
            "each with the model's forward(); max against average pooling, the activation, "
            "the padding and the flatten order (x.flatten(1) of an NCHW map) change Φ "
            "without changing a shape. An ONNX export (torch.onnx.export) states them all")
  else:
    arch = (f"the architecture ({d['architecture']}; victim.file.activation): compare it "
            "with the model's forward(), and the first layer's inputs flattened channels "
            "first (x.view(N, -1) of an NCHW image) for a PyTorch layout")
  mean = "minus the training mean" if config.data.get("subtract_mean") else "not mean-subtracted"
  return (
      f"θ* of {path} classifies {100 * fit:.1f}% of the given training set correctly; a "
      "network trained to fit it, as DecoReco's KKT premise (Haim et al. 2022) wants, "
      "classifies all of it. trdr may be reading a different network, or different data. "
      f"Likely causes, and how to check each: (1) {arch}. (2) the preprocessing: trdr "
      f"feeds pixels in [0, 1] {mean} (data.subtract_mean), then {d['preprocessing']} "
      "(victim.file.input_shift / input_scale: torchvision's Normalize(mean, std) is "
      "shift = mean, scale = std): compare with the transforms used in training. (3) the "
      "data: config.data must be the exact training set (data.training_set=your .npz). "
      "One check separates them: evaluate the model in its own framework on the same "
      f"images; if it classifies them all but trdr {100 * fit:.1f}%, the architecture or "
      "the preprocessing is misread; if it also misclassifies them, the data are not its "
      "training set (or it was not trained to fit it).")


def prepare(config: ml_collections.ConfigDict, task, workdir: str | None
            ) -> tuple[ml_collections.ConfigDict, cache.Victim | None]:
  """For `trdr.experiment.run`, before it writes: (``config`` `resolve`d, the loaded
  victim or None when ``victim.load`` is unset). ``workdir``: the run directory to be
  resumed, None for a fresh one (--overwrite).

  Raises:
    ValueError: as `resolve` and `load`; or ``workdir`` holds a checkpoint of an attack on
      another θ* read from the same path (the file changed since that run started).
  """
  if not config.victim.load:
    return config, None
  config = resolve(config, task.train_images.shape[1:])
  loaded = load(config, task)
  copy = workdir and os.path.join(workdir, "victim")
  if copy and os.path.exists(os.path.join(workdir, rundir.CHECKPOINT_FILE)) and os.path.exists(
      os.path.join(copy, cache.VICTIM_FILE)):
    old = cache.load_metadata(copy)["config"]
    if old != loaded.metadata["config"]:
      raise ValueError(f"{config.victim.load} changed since the run in {workdir} started "
                       f"(SHA-256 {loaded.metadata['config']['sha256'][:12]}…, the run's "
                       f"θ* {str(old.get('sha256'))[:12]}…); restore it, use another "
                       "--workdir or pass --overwrite")
  return config, loaded


def check_export_path(path: str) -> str:
  """The format of an `export` to ``path`` (".npz", ".pth" or ".pt"), checked before any
  work: a CLI refuses a bad --export_victim before its run, not after.

  Raises:
    ValueError: another extension, or ``path``'s directory does not exist.
    ModuleNotFoundError: .pth/.pt and PyTorch is not installed.
  """
  ext = os.path.splitext(path)[1].lower()
  if ext not in (".npz", ".pth", ".pt"):
    raise ValueError(f"cannot export θ* to {path}: known formats .npz, .pth, .pt")
  directory = os.path.dirname(os.path.abspath(path))
  if not os.path.isdir(directory):
    raise ValueError(f"cannot export θ* to {path}: no directory {directory}")
  if ext != ".npz":
    import torch  # noqa: F401, PLC0415  (an optional extra)
  return ext


def export(target: cache.Victim, path: str, image_shape=None) -> str:
  """Writes θ* to ``path`` in a layout `read` takes back, bitwise (what `load` returns).

  ``.npz``: trdr's Flax names (``<layer>/kernel`` float[in, out] or a conv's float[3, 3,
  in, out], ``<layer>/bias``), the inputs NHWC-flattened. ``.pth``/``.pt`` (needs
  PyTorch): a PyTorch ``state_dict``, ``layers.<i>.weight`` float[out, in] (a conv's
  float[out, in, 3, 3]) and ``layers.<i>.bias`` in the network's order, the first linear
  layer's inputs NCHW-flattened (channels first, as a ``torch.nn.Linear`` on
  ``x.flatten(1)`` of an NCHW image or feature map expects). Arrays keep θ*'s dtype. Written to a
  temporary file and moved into place: a failed write leaves no partial file.

  Args:
    target: the victim (`trdr.victim.Victim`); its θ* is a dict of layers {kernel, bias}.
    path: the file to write (.npz, .pth or .pt).
    image_shape: (H, W, C) of the images (for .pth's channel order); default: the one
      its training recorded (``metadata["config"]["image_shape"]``).
  Returns:
    ``path``.
  Raises:
    ValueError: another extension or no such directory (`check_export_path`); .pth
      without an image shape known.
    ModuleNotFoundError: .pth and PyTorch is not installed.
  """
  ext = check_export_path(path)
  stems = sorted(target.params, key=_flax_order)
  if ext == ".npz":
    arrays = {f"{stem}/{name}": np.asarray(a) for stem in stems
              for name, a in target.params[stem].items()}
    files.save_npz(path, **arrays)
    return path
  shape = image_shape or target.metadata.get("config", {}).get("image_shape")
  if shape is None:
    raise ValueError(f"cannot export θ* to {path}: the image shape (H, W, C) is unknown "
                     "(pass image_shape)")
  import torch  # noqa: PLC0415  (an optional extra)
  state = {}
  h, w, c = shape
  for i, stem in enumerate(stems):
    kernel = np.asarray(target.params[stem]["kernel"])
    if kernel.ndim == 4:   # a convolution: Flax (kh, kw, in, out) -> PyTorch (out, in, kh, kw)
      state[f"layers.{i}.weight"] = torch.from_numpy(np.array(kernel.transpose(3, 2, 0, 1),
                                                              order="C"))
      c = kernel.shape[3]
      if target.config.get("pool"):
        h, w = h // 2, w // 2
      if "bias" in target.params[stem]:
        state[f"layers.{i}.bias"] = torch.from_numpy(np.array(target.params[stem]["bias"]))
      continue
    if i == 0 or np.asarray(target.params[stems[i - 1]]["kernel"]).ndim == 4:
      # NHWC-flattened inputs (the image, or the convolutions' features) -> NCHW, as
      # `layers` reads them back
      kernel = kernel.reshape(h, w, c, -1).transpose(2, 0, 1, 3).reshape(h * w * c, -1)
    state[f"layers.{i}.weight"] = torch.from_numpy(np.array(kernel.T, order="C"))  # a copy
    if "bias" in target.params[stem]:
      state[f"layers.{i}.bias"] = torch.from_numpy(np.array(target.params[stem]["bias"]))
  buffer = io.BytesIO()
  torch.save(state, buffer)
  files.atomic_write(path, buffer.getbuffer())
  return path


def keep(loaded: cache.Victim, workdir: str) -> cache.Victim:
  """Saves a copy of the loaded θ* as the run's ``victim/`` (`trdr.victim.save`), so the
  run's files alone suffice to evaluate it later; returns ``loaded``."""
  cache.save(os.path.join(workdir, "victim"), loaded.params, loaded.metadata)
  return loaded
