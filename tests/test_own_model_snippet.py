"""docs/own_model.md's "Training a model the attack suits (PyTorch)" block: its constants
are configs/decoreco_cifar.py's recipe, and the block, run as written at a small size
(its named constants rebound, ten images of the shipped sample), initialises every tensor
as the recipe does, fits its training set, and writes a .pth and a training-set .npz that
trdr loads into the same network (its logits equal PyTorch's to a bound argued from the
rounding)."""

import ast
import math
import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

import trdr
from trdr import assets, models
from trdr.configs import decoreco_cifar
from trdr.victim import training

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                   "own_model.md")
HEADING = "## Training a model the attack suits (PyTorch)"
U64 = np.finfo(np.float64).eps / 2   # unit roundoff of float64, 2⁻⁵³
U32 = np.finfo(np.float32).eps / 2   # of float32, 2⁻²⁴
# A Kolmogorov–Smirnov p-value below this rejects "the recipe's distribution": with the
# snippet's own draws from it, a false alarm has probability 1e-6 per tensor.
P_REJECT = 1e-6


def _snippet() -> str:
  """The section's first ```python block, as the doc has it."""
  with open(DOC, encoding="utf-8") as f:
    text = f.read()
  assert text.count(HEADING) == 1, f"{DOC} has no single section {HEADING!r}"
  section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
  return section.split("```python\n", 1)[1].split("```", 1)[0]


def _constant(code: str, name: str):
  """The literal value of the block's top-level line ``NAME = value  # …``."""
  found = re.findall(rf"^{name} = ([^#\n]+)", code, flags=re.M)
  assert len(found) == 1, f"the block assigns {name} {len(found)} times, not once"
  return found[0].strip()


def _rebind(code: str, **values) -> str:
  """``code`` with each ``NAME = …`` line (and the data lines ``images = ...``, ``labels =
  ...``) bound to the given Python expression instead; each must occur exactly once."""
  for name, expression in values.items():
    value = r"\.\.\." if name in ("images", "labels") else ""   # the data placeholders
    code, n = re.subn(rf"^{name} = {value}[^\n]*$", f"{name} = {expression}", code,
                      flags=re.M)
    assert n == 1, f"the block's line {name} = … occurs {n} times, not once"
  return code


def test_the_blocks_constants_are_the_configs_recipe():
  """Every number the block states is configs/decoreco_cifar.py's (paper size; the comment
  line's are the ":cpu" variant's), and what it hard-codes (the architecture, the later
  layers' initialisation, the loss, no weight decay) is what the config says: a change of
  the recipe fails here until the doc follows it."""
  code = _snippet()
  paper, cpu = decoreco_cifar.get_config(), decoreco_cifar.get_config("cpu")
  v = paper.victim
  assert ast.literal_eval(_constant(code, "WIDTHS")) == tuple(v.widths)
  assert ast.literal_eval(_constant(code, "FIRST_SCALE")) == models.HaimMLP.first_scale
  assert ast.literal_eval(_constant(code, "LR")) == v.lr
  assert ast.literal_eval(_constant(code, "EPOCHS")) == training.gd_epochs(v)
  assert ast.literal_eval(_constant(code, "LOSS_THRESHOLD")) == v.loss_threshold
  assert ast.literal_eval(_constant(code, "SEED")) == v.seed
  assert _constant(code, "DTYPE") == ("torch.float64" if paper.float64 else "torch.float32")
  cpu_line = re.findall(r'^# ":cpu" instead: LR, EPOCHS, LOSS_THRESHOLD = ([^#\n]+)$', code,
                        flags=re.M)
  assert len(cpu_line) == 1
  assert ast.literal_eval(cpu_line[0]) == (cpu.victim.lr, training.gd_epochs(cpu.victim),
                                           cpu.victim.loss_threshold)
  assert cpu.victim.widths == v.widths and cpu.float64 == paper.float64
  for config in (paper, cpu):
    c = config.victim
    assert (c.arch, c.activation, c.all_biases, c.num_outputs) == ("haim_mlp", "relu", False, 1)
    assert (c.later_init, c.init, c.training, c.loss) == ("pytorch", "default", "gd", "bce")
    assert c.weight_decay == 0.0 and config.data.subtract_mean


def _sample_images(per_group: int):
  """``per_group`` images of each class group of the shipped sample's test split: float64
  N × 3 × 32 × 32 pixels in [0, 1] (k/255) and labels 0/1 (1: data.classes' second group),
  as a user's training set would come."""
  torch = pytest.importorskip("torch")
  classes = decoreco_cifar.get_config("smoke").data.classes
  with np.load(assets.sample_path()) as f:
    sample, labels = f["test_images"], f["test_labels"]
  group = np.isin(labels, classes[1]).astype(np.int64)
  picked = np.concatenate([np.flatnonzero(group == g)[:per_group] for g in (0, 1)])
  images = sample[picked].transpose(0, 3, 1, 2).astype(np.float64) / 255.0
  return torch.from_numpy(np.ascontiguousarray(images)), torch.from_numpy(group[picked])


def _run(tmp_path, monkeypatch, per_group, **constants):
  """The block run as written in ``tmp_path``, its constants rebound and its data lines
  bound to ``per_group`` sample images per class group; returns its namespace."""
  torch = pytest.importorskip("torch")
  images, labels = _sample_images(per_group)
  code = _rebind(_snippet(), images="GIVEN_IMAGES", labels="GIVEN_LABELS", **constants)
  monkeypatch.chdir(tmp_path)
  namespace = {"GIVEN_IMAGES": images, "GIVEN_LABELS": labels}
  threads = torch.get_num_threads()
  torch.set_num_threads(1)   # a few small matrices: threads would only contend
  try:
    exec(compile(code, DOC, "exec"), namespace)  # noqa: S102
  finally:
    torch.set_num_threads(threads)
  return namespace


def test_the_block_initialises_every_tensor_as_the_recipe(tmp_path, monkeypatch):
  """θ0 of the block (no epoch run, widths (256, 256): 786,432 first-layer weights, 65,536
  and 256 later ones): the first kernel and bias N(0, FIRST_SCALE²), each later kernel
  U(±1/√fan_in), no later bias. Each by a Kolmogorov–Smirnov test (P_REJECT: a false alarm
  1e-6 per tensor), beside the alternatives it must tell apart at these sample sizes: PyTorch's
  default U(±1/√D) for the first layer, and for a later kernel the normal of the same
  variance (Flax's lecun_normal has three times that variance, easier still); and each
  uniform draw within its bound."""
  ns = _run(tmp_path, monkeypatch, per_group=2, WIDTHS="(256, 256)", EPOCHS="0")
  layers = ns["net"].layers
  assert [layer.bias is None for layer in layers] == [False, True, True]
  scale = ns["FIRST_SCALE"]
  d = layers[0].in_features
  assert d == 3 * 32 * 32
  for tensor in (layers[0].weight, layers[0].bias):
    values = tensor.detach().numpy().ravel()
    assert values.dtype == np.float64
    assert scipy.stats.kstest(values, scipy.stats.norm(0.0, scale).cdf).pvalue > P_REJECT
    default = scipy.stats.uniform(-d ** -0.5, 2 * d ** -0.5).cdf   # PyTorch's default
    assert scipy.stats.kstest(values, default).pvalue < P_REJECT
  for layer in layers[1:]:
    values = layer.weight.detach().numpy().ravel()
    bound = layer.in_features ** -0.5
    assert np.all(np.abs(values) <= bound)
    assert scipy.stats.kstest(values, scipy.stats.uniform(-bound, 2 * bound).cdf
                              ).pvalue > P_REJECT
    if values.size > 10_000:   # the output layer's 256 values cannot tell the two apart
      same_variance = scipy.stats.norm(0.0, bound / math.sqrt(3)).cdf
      assert scipy.stats.kstest(values, same_variance).pvalue < P_REJECT


def _abs_forward(state, x):
  """|W_3|·|W_2|·(|W_1||x| + |b_1|) per image: the forward pass on absolute values with
  every unit active (ReLU only zeroes units), float64[N]."""
  h = np.abs(x) @ np.abs(state["layers.0.weight"]).T + np.abs(state["layers.0.bias"])
  h = h @ np.abs(state["layers.1.weight"]).T
  return (h @ np.abs(state["layers.2.weight"]).T)[:, 0]


def test_the_block_trains_a_model_trdr_loads_into_the_same_network(tmp_path, monkeypatch):
  """The block at decoreco_cifar.py:smoke's size (widths, lr, loss threshold, epoch cap:
  seconds) on ten sample images: it stops at the threshold within the cap, and the .pth
  and .npz it writes load through trdr as a user's would (`trdr.load_task`,
  `trdr.load_victim`) into a network whose logits are the PyTorch model's:

  (1) inputs: trdr's (images − mean) from the .npz are the block's x up to float32
  rounding of the image, of the mean and of their difference, each ≤ u₃₂ of its magnitude
  (the block's own float64 roundings are 2⁻²⁹ of these; the factor 2 covers them and the
  second-order terms);
  (2) the same inputs: trdr's float64 logits against PyTorch's differ only by summation
  order, each layer's dot products of m ≤ D + 1 terms off by ≤ γ_m of the same products
  on absolute values, so |ΔΦ| ≤ 2·(γ_{D+1} + γ_{w₁} + γ_{w₂})·(|W₃||W₂|(|W₁||x| + |b₁|))
  (two programs; the ReLUs, 1-Lipschitz, only shrink the error);
  (3) the block's own inputs: (2) once more for PyTorch's evaluation on the block's x,
  plus ‖Δx‖·∏‖W_k‖₂ (a ReLU network's Lipschitz bound) for the input difference of (1).

  Training accuracy 1 follows from the stop: a mean BCE below the threshold t over n
  images puts each image's term below n·t = 1e-3 < log 2, i.e. its logit on its label's
  side; trdr's report of the loaded model must say the same.

  (4) the training is trdr's: from the block's θ0 (the block run with no epoch, read by
  `trdr.load_victim`), trdr's own `train_gd` at the :smoke recipe on the block's inputs
  stops after as many steps as the block. The two trajectories differ by float64 rounding
  only (summation order; tests/test_torch_recipe.py bounds it), so an epoch more or less
  would need a loss within rounding of the threshold: the two final losses must be nearer
  each other than the block's is to the threshold."""
  torch = pytest.importorskip("torch")
  smoke = decoreco_cifar.get_config("smoke")
  v = smoke.victim
  assert v.flow_time is None and v.loss_threshold > 0   # :smoke stops at the threshold
  per_group = 5
  recipe = dict(WIDTHS=repr(tuple(v.widths)), LR=repr(v.lr),
                LOSS_THRESHOLD=repr(v.loss_threshold))
  (tmp_path / "theta0").mkdir()
  _run(tmp_path / "theta0", monkeypatch, per_group=per_group, **recipe, EPOCHS="0")
  ns = _run(tmp_path, monkeypatch, per_group=per_group, **recipe, EPOCHS=repr(v.max_epochs))
  net, x, y = ns["net"], ns["x"], ns["y"]
  n = len(x)
  assert n == 2 * per_group and n * v.loss_threshold < math.log(2)
  with torch.no_grad():
    logits = net(x).numpy()
    final_loss = ns["loss_fn"](net(x), y).item()
  assert final_loss < v.loss_threshold, f"not at the stop within {v.max_epochs} epochs"
  assert np.all((logits >= 0) == (y.numpy() == 1))
  state = {k: t.numpy() for k, t in torch.load("model.pth").items()}
  assert sorted(state) == ["layers.0.bias", "layers.0.weight", "layers.1.weight",
                           "layers.2.weight"]

  config = decoreco_cifar.get_config("smoke")
  config.data.training_set = str(tmp_path / "my_training_set.npz")
  task = trdr.load_task(config)
  target = trdr.load_victim(str(tmp_path / "model.pth"), config, task)
  assert tuple(config.victim.widths) == tuple(v.widths) and not config.victim.all_biases
  assert target.metadata["report"]["train_accuracy"] == 1.0

  # (1) the inputs trdr builds from the .npz.
  pixels = ns["images"].permute(0, 2, 3, 1).numpy()
  mean = ns["mean"].permute(1, 2, 0).numpy()
  ours = x.permute(0, 2, 3, 1).numpy()
  theirs = task.train_images.astype(np.float64)
  input_bound = 2 * U32 * (np.abs(pixels) + np.abs(mean) + np.abs(ours))
  assert np.all(np.abs(theirs - ours) <= input_bound)
  np.testing.assert_array_equal(task.train_labels, 2.0 * y.numpy() - 1.0)

  # (2) trdr's logits against PyTorch's on trdr's inputs.
  with jax.enable_x64(True):
    phi = np.asarray(target.apply(target.params, jnp.asarray(theirs)))
  assert phi.dtype == np.float64
  with torch.no_grad():
    expected = net(torch.from_numpy(np.ascontiguousarray(theirs.transpose(0, 3, 1, 2)))).numpy()
  d = theirs[0].size
  gamma = sum(m * U64 / (1 - m * U64) for m in (d + 1, *v.widths))
  rounding = 2 * gamma * _abs_forward(state, theirs.transpose(0, 3, 1, 2).reshape(n, -1))
  assert np.all(np.abs(phi - expected) <= rounding), (np.abs(phi - expected).max(),
                                                      rounding.min())

  # (3) trdr's logits on its inputs against the block's logits on its own.
  lipschitz = np.prod([np.linalg.norm(state[f"layers.{k}.weight"], 2) for k in range(3)])
  shift = np.linalg.norm((theirs - ours).reshape(n, -1), axis=1)
  bound = 2 * rounding + lipschitz * shift * (1 + 1e-12)
  assert np.all(np.abs(phi - logits) <= bound), (np.abs(phi - logits).max(), bound.min())

  # (4) trdr's gradient descent from the block's θ0 stops after as many steps.
  assert ns["epoch"] < v.max_epochs - 1   # the loop broke: ns["epoch"] steps were taken
  start_config = decoreco_cifar.get_config("smoke")
  start = trdr.load_victim(str(tmp_path / "theta0" / "model.pth"), start_config, task)
  with jax.enable_x64(True):
    inputs = task._replace(train_images=ours)   # the block's x, float64 NHWC
    _, report = training.train_gd(start.model, start.params, inputs, v)
  assert report.reached_threshold and report.epochs == ns["epoch"], (report, ns["epoch"])
  assert abs(report.train_loss - final_loss) < v.loss_threshold - final_loss
