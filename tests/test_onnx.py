"""A victim read from an ONNX graph (`trdr.victim.onnx_model`, `trdr.models.Sequential`):
a PyTorch CNN with max pooling exported by torch.onnx.export gives onnxruntime's logits,
an MLP graph as well, an unsupported node is one error naming it, and DecoReco attacks an
exported CNN at :smoke with the settings and architecture it ran recorded."""

import os
import subprocess
import sys
import warnings

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from trdr import models

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from trdr.victim import onnx_model, pretrained  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
U32 = 2.0 ** -24   # float32's unit roundoff


def _gamma(k):
  """γ_k = k·u/(1 − k·u): a sum of k rounded terms is within γ_k times the sum of their
  magnitudes (Higham, *Accuracy and Stability of Numerical Algorithms*, §3.1)."""
  return k * U32 / (1 - k * U32)


def _float32_bound(victim_config, theta, images):
  """A bound on |Φ̂ − Φ| for a `models.Sequential` Φ̂ evaluated in float32 in any summation
  order (trdr's or onnxruntime's), to first order in u, from the exact activations (float64)
  layer by layer. Input normalisation (x − s)/c: three roundings (a subtraction, a division
  or a rounded reciprocal and a product), γ_3 |x'|. A conv or dense layer with n inputs per
  output and a bias: an input error e reaches the output as |W| e, plus γ_{n+1} (|W| |h| +
  |b|) of its own sums. ReLU and max pooling are 1-Lipschitz and round nothing (|max a −
  max b| ≤ max |a − b|); an average of k: the mean of the errors plus γ_{k+1} times the mean
  of |h| (k − 1 additions and one division). Flatten moves values only.

  Args: victim_config with layers, input_shift, input_scale; theta {name: {kernel, bias}};
  images float[N, H, W, C]. Returns: float64[N, K] (or [N] with one output)."""
  with jax.enable_x64(True):
    t = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), theta)
    x = jnp.asarray(images, jnp.float64)
    h = models.preprocess(x, victim_config.input_shift, victim_config.input_scale)
    err = _gamma(3) * jnp.abs(h) if victim_config.input_shift else jnp.zeros_like(h)
    parsed = [models.parse_layer(s) for s in victim_config.layers]
    last = max(i for i, (kind, _) in enumerate(parsed) if kind == "dense")
    counts = {"conv": 0, "dense": 0}
    for i, (kind, v) in enumerate(parsed):
      if kind == "relu":
        h = jax.nn.relu(h)
      elif kind == "flatten":
        flat = lambda a, v=v: (a if v.get("order") == ("nhwc",) else a.transpose(
            0, 3, 1, 2)).reshape(a.shape[0], -1)
        h, err = flat(h), flat(err)
      elif kind in ("maxpool", "avgpool"):
        views = models._windows(h, v["kernel"], v["stride"], v["pad"],
                                -jnp.inf if kind == "maxpool" else 0.0)
        errors = models._windows(err, v["kernel"], v["stride"], v["pad"], 0.0)
        if kind == "maxpool":
          h, err = jnp.max(jnp.stack(views), 0), jnp.max(jnp.stack(errors), 0)
        else:
          k = len(views)
          h = sum(views) / k
          err = sum(errors) / k + _gamma(k + 1) * sum(jnp.abs(a) for a in views) / k
      else:
        name = "output" if i == last else f"{kind}_{counts[kind]}"
        counts[kind] += 1
        kernel, bias = t[name]["kernel"], t[name].get("bias", jnp.zeros(v["out"][0]))
        if kind == "conv":
          patch = lambda a, v=v: jnp.concatenate(
              models._windows(a, v["kernel"], v["stride"], v["pad"], 0.0), axis=-1)
          h, err, kernel = patch(h), patch(err), kernel.reshape(-1, kernel.shape[-1])
        n = kernel.shape[0]
        err = err @ jnp.abs(kernel) + _gamma(n + 1) * (jnp.abs(h) @ jnp.abs(kernel)
                                                       + jnp.abs(bias))
        h = h @ kernel + bias
    return np.asarray(err[:, 0] if err.shape[-1] == 1 else err)


def _onnxruntime(path, images):
  """onnxruntime's logits of the graph at ``path`` for images float32[N, H, W, C]."""
  ort = pytest.importorskip("onnxruntime")
  session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
  feed = np.ascontiguousarray(images.transpose(0, 3, 1, 2), np.float32)
  if session.get_inputs()[0].shape[1:] == list(images.shape[1:]):   # NHWC (Keras)
    feed = np.ascontiguousarray(images, np.float32)
  if len(session.get_inputs()[0].shape) == 2:
    feed = feed.reshape(len(feed), -1)
  return session.run(None, {session.get_inputs()[0].name: feed})[0]


def _trdr(path, images, victim=None):
  """trdr's logits (float32) of the graph at ``path``, its victim config and θ."""
  graph = onnx_model.read(path, images.shape[1:])
  config = pretrained.onnx_architecture(graph, ml_collections.ConfigDict(
      {"arch": "haim_mlp", "widths": (4,), "activation": "relu", **(victim or {})}),
      images.shape[1:])
  model = models.build_model(config)
  theta = {name: {k: jnp.asarray(a, jnp.float32) for k, a in layer.items()}
           for name, layer in graph["params"].items()}
  template = models.init_params(model, jax.random.key(0), images.shape[1:])
  assert jax.tree.map(np.shape, template) == jax.tree.map(np.shape, theta)
  return np.asarray(model.apply({"params": theta}, jnp.asarray(images))), config, theta


def _torch_cnn(torch):
  """What a user writes first, and a little more: Normalize as a Sub/Div on the input, a
  3 × 3 conv (padding 1), ReLU, 2 × 2 max pooling, a 5 × 5 conv (padding 2, no bias), ReLU,
  2 × 2 average pooling, flatten, two linear layers."""

  class Net(torch.nn.Module):
    def __init__(self):
      super().__init__()
      self.register_buffer("mean", torch.tensor([0.49, 0.48, 0.45]).view(1, 3, 1, 1))
      self.register_buffer("std", torch.tensor([0.25, 0.24, 0.26]).view(1, 3, 1, 1))
      self.c0 = torch.nn.Conv2d(3, 4, 3, padding=1)
      self.c1 = torch.nn.Conv2d(4, 8, 5, padding=2, bias=False)
      self.fc0 = torch.nn.Linear(8 * 4 * 4, 10)
      self.fc1 = torch.nn.Linear(10, 3)

    def forward(self, x):
      x = (x - self.mean) / self.std
      h = torch.nn.functional.max_pool2d(torch.relu(self.c0(x)), 2)
      h = torch.nn.functional.avg_pool2d(torch.relu(self.c1(h)), 2)
      return self.fc1(torch.relu(self.fc0(h.flatten(1))))

  torch.manual_seed(0)
  return Net().eval()


def _export(torch, net, example, path, dynamo=True):
  """torch.onnx.export of ``net`` at the batch of ``example`` to ``path``: the default
  (dynamo) exporter, or the TorchScript one. Both warn of their own deprecations (the
  TorchScript exporter, PyTorch's pytree API), which pytest would raise."""
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    warnings.simplefilter("ignore", FutureWarning)
    torch.onnx.export(net, (example,), path, dynamo=dynamo)
  return path


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_a_pytorch_cnn_with_max_pooling_exported_to_onnx_gives_onnxruntimes_logits(
    tmp_path, dynamo):
  """torch.onnx.export (both exporters: the TorchScript one writes Flatten, the dynamo one
  Reshape and its constants as initializers) of `_torch_cnn`: trdr reads every layer, the
  normalisation as (x − mean)/std per channel, and its float32 logits equal onnxruntime's
  within twice `_float32_bound` (each side within it of the exact Φ)."""
  torch = pytest.importorskip("torch")
  if dynamo:
    pytest.importorskip("onnxscript")
  net, n = _torch_cnn(torch), 6
  path = str(tmp_path / "model.onnx")
  _export(torch, net, torch.zeros(n, 3, 16, 16), path, dynamo)
  images = np.random.default_rng(0).random((n, 16, 16, 3)).astype(np.float32)
  ours, config, theta = _trdr(path, images)
  assert config.arch == "sequential" and config.num_outputs == 3
  assert [s.split()[0] for s in config.layers] == [
      "conv", "relu", "maxpool", "conv", "relu", "avgpool", "flatten", "dense", "relu",
      "dense"]
  assert "kernel=5,5 stride=1,1 pad=2,2,2,2 bias=0" in config.layers[3]
  np.testing.assert_allclose(config.input_shift, [0.49, 0.48, 0.45], rtol=1e-6)
  np.testing.assert_allclose(config.input_scale, [0.25, 0.24, 0.26], rtol=1e-6)
  theirs = _onnxruntime(path, images)
  bound = _float32_bound(config, theta, images)
  assert np.all(np.abs(ours - theirs) <= 2 * bound), (np.abs(ours - theirs), bound)
  assert np.max(2 * bound) < 0.01 * np.max(np.abs(theirs))   # the check can fail
  with torch.no_grad():   # and the export is the network
    reference = net(torch.from_numpy(images.transpose(0, 3, 1, 2).copy())).numpy()
  assert np.all(np.abs(ours - reference) <= 2 * bound)


def test_a_keras_cnn_converted_by_tf2onnx_gives_onnxruntimes_logits(tmp_path):
  """Keras 3 (TensorFlow) through tf2onnx's ``from_function`` (its ``from_keras`` fails on
  Keras 3): an NHWC input transposed to NCHW, a 3 × 3 "same" conv, ReLU, max pooling, a
  5 × 5 "valid" conv, average pooling, the transpose back and Keras' channels-last flatten
  with its computed Reshape, two dense layers. trdr's logits equal onnxruntime's within
  twice `_float32_bound`."""
  tf = pytest.importorskip("tensorflow")
  tf2onnx = pytest.importorskip("tf2onnx")
  keras = tf.keras
  keras.utils.set_random_seed(0)
  model = keras.Sequential([
      keras.Input((16, 16, 3)), keras.layers.Conv2D(4, 3, padding="same", activation="relu"),
      keras.layers.MaxPooling2D(2), keras.layers.Conv2D(6, 5, activation="relu"),
      keras.layers.AveragePooling2D(2), keras.layers.Flatten(),
      keras.layers.Dense(5, activation="relu", bias_initializer="ones"),
      keras.layers.Dense(2, bias_initializer="ones")])
  path = str(tmp_path / "keras.onnx")
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    warnings.simplefilter("ignore", FutureWarning)
    tf2onnx.convert.from_function(
        tf.function(lambda x: model(x)), output_path=path,
        input_signature=(tf.TensorSpec((None, 16, 16, 3), tf.float32, name="x"),))
  images = np.random.default_rng(2).random((5, 16, 16, 3)).astype(np.float32)
  ours, config, theta = _trdr(path, images)
  assert [s.split()[0] for s in config.layers] == [
      "conv", "relu", "maxpool", "conv", "relu", "avgpool", "flatten", "dense", "relu",
      "dense"]
  assert config.layers[6] == "flatten nhwc" and "pad=0,0,0,0" in config.layers[3]
  theirs = _onnxruntime(path, images)
  bound = _float32_bound(config, theta, images)
  assert np.all(np.abs(ours - theirs) <= 2 * bound), (np.abs(ours - theirs), bound)
  assert np.max(2 * bound) < 0.01 * np.max(np.abs(theirs))
  np.testing.assert_allclose(ours, model(images).numpy(), atol=float(np.max(2 * bound)))


def _graph(nodes, initializers, input_shape, output="y", path=None):
  """A float32 ONNX model of ``nodes`` (opset 17) written to ``path``."""
  graph = helper.make_graph(
      nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, input_shape)],
      [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)],
      [numpy_helper.from_array(np.asarray(a, np.float32), name) for name, a in
       initializers.items()])
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
  model.ir_version = 8
  onnx.save(model, path)
  return path


def test_an_mlp_graph_with_matmul_add_and_gemm_gives_onnxruntimes_logits(tmp_path):
  """A graph on pre-flattened inputs [N, C·H·W] (channels first): MatMul + Add (a bias),
  Relu, Gemm with transB 0 and beta 0.5 (the bias halved), one output (trdr's float[N]);
  within `_float32_bound` twice of onnxruntime's."""
  rng = np.random.default_rng(1)
  d = 4 * 4 * 3
  init = {"w0": rng.normal(size=(d, 7)) / np.sqrt(d), "b0": rng.normal(size=7),
          "w1": rng.normal(size=(7, 1)), "b1": rng.normal(size=1)}
  path = _graph([helper.make_node("MatMul", ["x", "w0"], ["h0"], name="mm"),
                 helper.make_node("Add", ["h0", "b0"], ["h1"], name="bias"),
                 helper.make_node("Relu", ["h1"], ["h2"], name="act"),
                 helper.make_node("Gemm", ["h2", "w1", "b1"], ["y"], name="head", beta=0.5)],
                init, ["N", d], path=str(tmp_path / "mlp.onnx"))
  images = rng.random((5, 4, 4, 3)).astype(np.float32)
  ours, config, theta = _trdr(path, images)
  assert config.layers == ("flatten", "dense out=7 bias=1", "relu", "dense out=1 bias=1")
  assert ours.shape == (5,)
  theirs = _onnxruntime(path, images)[:, 0]
  bound = _float32_bound(config, theta, images)
  assert np.all(np.abs(ours - theirs) <= 2 * bound), (np.abs(ours - theirs), bound)
  assert np.max(2 * bound) < 0.01 * np.max(np.abs(theirs))


_CONV = {"w": np.ones((2, 3, 3, 3))}
_HEAD = {"fc": np.ones((2 * 4 * 4, 1))}


@pytest.mark.parametrize("nodes, init, words", [
    ([helper.make_node("Conv", ["x", "w"], ["h"], name="c", pads=[1, 1, 1, 1]),
      helper.make_node("Tanh", ["h"], ["y"], name="squash")], _CONV,
     "node 'squash' (Tanh): an operator trdr does not read"),
    ([helper.make_node("Conv", ["x", "w"], ["y"], name="grouped", group=3)],
     {"w": np.ones((3, 1, 3, 3))}, "node 'grouped' (Conv): group 3"),
    ([helper.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[2, 2],
                       ceil_mode=1)], {}, "node 'pool' (MaxPool): ceil_mode 1"),
    ([helper.make_node("Conv", ["x", "w"], ["h"], name="c", pads=[1, 1, 1, 1]),
      helper.make_node("Relu", ["h"], ["r"], name="act"),
      helper.make_node("Add", ["r", "h"], ["y"], name="skip")], _CONV,
     "node 'skip' (Add): an Add that is not the bias"),
    ([helper.make_node("Conv", ["x", "w"], ["h"], name="c", pads=[1, 1, 1, 1]),
      helper.make_node("Sub", ["h", "w"], ["y"], name="late")], _CONV,
     "node 'late' (Sub): a Sub after a layer"),
    ([helper.make_node("Conv", ["x", "w"], ["h"], name="c", pads=[1, 1, 1, 1]),
      helper.make_node("Flatten", ["h"], ["f"], name="flat"),
      helper.make_node("Gemm", ["f", "fc"], ["y"], name="head", alpha=2.0)],
     {**_CONV, "fc": np.ones((2 * 16 * 16, 1))}, "node 'head' (Gemm): alpha 2.0"),
])
def test_an_unsupported_operator_or_attribute_is_one_error_naming_the_node(
    tmp_path, nodes, init, words):
  path = _graph(nodes, init, ["N", 3, 16, 16], path=str(tmp_path / "bad.onnx"))
  with pytest.raises(ValueError, match="trdr reads sequential graphs of") as raised:
    onnx_model.read(path, (16, 16, 3))
  assert words in str(raised.value)


def test_a_graph_of_another_input_shape_or_not_ending_in_a_linear_layer_is_refused(tmp_path):
  conv = [helper.make_node("Conv", ["x", "w"], ["y"], name="c", pads=[1, 1, 1, 1])]
  path = _graph(conv, _CONV, ["N", 3, 8, 8], path=str(tmp_path / "small.onnx"))
  with pytest.raises(ValueError, match=r"expected \[N, 3, 16, 16\]"):
    onnx_model.read(path, (16, 16, 3))
  with pytest.raises(ValueError, match="not a linear layer"):
    onnx_model.read(path, (8, 8, 3))


def _train_max_pooled(torch, task, steps=60):
  """trdr's :smoke CNN shape with max pooling (Conv2d 3 × 3 p1, ReLU, MaxPool2d(2), twice;
  a linear head; biases on the first layer only), trained briefly in PyTorch (float32,
  full-batch GD on the logistic loss) on ``task``'s training images."""

  class Net(torch.nn.Module):
    def __init__(self):
      super().__init__()
      self.c0 = torch.nn.Conv2d(3, 4, 3, padding=1)
      self.c1 = torch.nn.Conv2d(4, 8, 3, padding=1, bias=False)
      self.fc = torch.nn.Linear(8 * 8 * 8, 1, bias=False)

    def forward(self, x):
      h = torch.nn.functional.max_pool2d(torch.relu(self.c0(x)), 2)
      h = torch.nn.functional.max_pool2d(torch.relu(self.c1(h)), 2)
      return self.fc(h.flatten(1))

  to_torch = lambda a: torch.from_numpy(np.ascontiguousarray(a.transpose(0, 3, 1, 2),
                                                             np.float32))
  x = to_torch(task.train_images)
  y = torch.from_numpy(task.train_labels.astype(np.float32))
  torch.manual_seed(0)
  net = Net()
  optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
  for _ in range(steps):
    optimizer.zero_grad()
    torch.nn.functional.softplus(-y * net(x)[:, 0]).mean().backward()
    optimizer.step()
  return net.eval(), x


@pytest.mark.slow  # trains in PyTorch, then a DecoReco run
def test_an_exported_max_pooled_cnn_is_attacked_at_smoke_with_published_settings(tmp_path):
  """Acceptance 1 of issue 87: a PyTorch CNN with max pooling exported to ONNX loads (the
  architecture from the graph, nothing stated), its Φ is PyTorch's, and DecoReco attacks it
  at :smoke with Haim et al.'s published b9dfyspx settings (not the config's defaults); the
  run's summary.json records the architecture, the preprocessing and the settings' source.
  The same network as a .pth loads only with its pooling stated, and stated as max gives the
  ONNX graph's Φ."""
  torch = pytest.importorskip("torch")
  from trdr import data, experiment   # noqa: PLC0415
  from trdr.attacks import decoreco   # noqa: PLC0415
  from trdr.configs import decoreco_cnn   # noqa: PLC0415
  from trdr.runtime import files   # noqa: PLC0415
  config = decoreco_cnn.get_config("smoke")
  task = data.make_task(config.data)
  net, x = _train_max_pooled(torch, task)
  pytest.importorskip("onnxscript")   # the default exporter's
  path = _export(torch, net, x, str(tmp_path / "model.onnx"))
  config.victim.load = path
  resolved = pretrained.resolve(config, task.train_images.shape[1:])
  assert resolved.victim.arch == "sequential"
  assert sum("maxpool" in s for s in resolved.victim.layers) == 2
  images = np.asarray(task.train_images, np.float32)
  ours, _, theta = _trdr(path, images)
  bound = _float32_bound(resolved.victim, theta, images)
  with torch.no_grad():
    theirs = net(x).numpy()[:, 0]
  assert np.all(np.abs(ours - theirs) <= 2 * bound), (np.abs(ours - theirs), bound)

  config.attack.steps, config.attack.log_every = 20, 20
  experiment.run(config, str(tmp_path / "run"), "attack")
  summary = files.read_json(tmp_path / "run" / experiment.SUMMARY_FILE)
  assert np.isfinite(summary["final_loss"])
  victim = summary["victim"]
  assert victim["architecture"].startswith("sequential (ONNX): conv out=4")
  assert "maxpool" in victim["architecture"]
  assert victim["preprocessing"].startswith("none")
  assert "b9dfyspx" in victim["attack_settings_source"]
  assert victim["attack_settings"] == decoreco.PUBLISHED["b9dfyspx"]._asdict()
  run_config = files.read_json(tmp_path / "run" / "config.json")
  assert run_config["attack"]["lr"] == decoreco.PUBLISHED["b9dfyspx"].lr

  # The same network's state_dict: refused until its pooling, activation and padding are
  # stated; stated, its Φ is the graph's.
  torch.save({f"layers.{i}.{k}": v for i, (stem, module) in enumerate(
      (("c0", net.c0), ("c1", net.c1), ("fc", net.fc))) for k, v in
      module.state_dict().items()}, tmp_path / "model.pth")
  config.victim.load = str(tmp_path / "model.pth")
  with pytest.raises(ValueError, match="holds convolutions") as raised:
    pretrained.resolve(config, task.train_images.shape[1:])
  for key in ("pooling", "activation", "padding"):
    assert f"--config.victim.file.{key}=" in str(raised.value)
  assert "ONNX" in str(raised.value)
  config.victim.file.update(pooling="max", activation="relu", padding=1)
  resolved = pretrained.resolve(config, task.train_images.shape[1:])
  assert resolved.victim.arch == "cnn" and resolved.victim.pool == "max"
  with jax.enable_x64(True):   # the :smoke config's float64
    loaded = pretrained.load(resolved, task)
  via_pth = np.asarray(loaded.model.apply(
      {"params": jax.tree.map(lambda a: jnp.asarray(a, jnp.float32), loaded.params)},
      jnp.asarray(images)))
  assert np.all(np.abs(via_pth - theirs) <= 2 * bound)
  assert "2 × 2 max pooling" in loaded.metadata["report"]["architecture"]


@pytest.mark.slow  # two command lines
def test_the_command_line_refuses_an_unsupported_node_and_an_unstated_pooling(
    subprocess_env, tmp_path):
  """One `error:` line, exit status 2 (as every bad input): an ONNX node trdr does not
  read, named; a .pth with convolutions and no pooling stated, the keys to set listed."""
  torch = pytest.importorskip("torch")
  bad = _graph([helper.make_node("Conv", ["x", "w"], ["h"], name="c", pads=[1, 1, 1, 1]),
                helper.make_node("Sigmoid", ["h"], ["y"], name="gate")],
               _CONV, ["N", 3, 32, 32], path=str(tmp_path / "bad.onnx"))
  torch.save({"layers.0.weight": torch.zeros(4, 3, 3, 3), "layers.0.bias": torch.zeros(4),
              "layers.1.weight": torch.zeros(1, 4 * 16 * 16)}, tmp_path / "model.pth")
  script = os.path.join(REPO, "experiments", "reconstruct.py")
  config = os.path.join(REPO, "configs", "decoreco_cnn.py") + ":smoke"
  started = {name: subprocess.Popen(
      [sys.executable, script, f"--config={config}", f"--config.victim.load={path}",
       f"--workdir={tmp_path / name}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      text=True, env=subprocess_env, cwd=tmp_path)
      for name, path in (("onnx", bad), ("pth", tmp_path / "model.pth"))}
  lines = {}
  for name, process in started.items():
    _, stderr = process.communicate(timeout=600)
    assert process.returncode == 2, stderr[-2000:]
    assert "Traceback" not in stderr, stderr[-2000:]
    (lines[name],) = [line for line in stderr.splitlines() if line.startswith("error: ")]
  assert "node 'gate' (Sigmoid)" in lines["onnx"]
  for key in ("pooling", "activation", "padding"):
    assert f"--config.victim.file.{key}=" in lines["pth"]
  assert "ONNX" in lines["pth"]
