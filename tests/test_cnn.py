"""The convolutional victim (`trdr.models.ConvNet`, configs/decoreco_cnn.py): its layers and
initialisation as stated, the positive homogeneity DecoReco's KKT premise relies on, and a
DecoReco run on it at :smoke with its KKT premise fitted per tensor."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from trdr import models
from trdr.configs import decoreco_cnn


def _net(**kw):
  return models.ConvNet(**({"channels": (4, 8)} | kw))


def test_layers_biases_and_initialisation_as_stated():
  """conv_0 with a bias, N(0, 1e-4²); conv_1 and the head without, PyTorch's default
  U(±1/√fan_in) (fan_in 9·4 for conv_1, 8·8·8 for the head after two poolings of 32²)."""
  with jax.enable_x64(True):
    theta = models.init_params(_net(), jax.random.key(0), (32, 32, 3), jnp.float64)
  assert set(theta) == {"conv_0", "conv_1", "output"}
  assert set(theta["conv_0"]) == {"kernel", "bias"} and set(theta["conv_1"]) == {"kernel"}
  assert theta["conv_0"]["kernel"].shape == (3, 3, 3, 4)
  assert theta["output"]["kernel"].shape == (8 * 8 * 8, 1)
  # 108 + 4 draws of N(0, 1e-8): their sd within 20 % of 1e-4 (the sample sd's relative
  # error is about 1/√(2·112) = 7 %: 20 % is 3 of them)
  first = np.concatenate([np.ravel(theta["conv_0"]["kernel"]), theta["conv_0"]["bias"]])
  assert abs(first.std() / 1e-4 - 1) < 0.2
  for name, fan_in in (("conv_1", 9 * 4), ("output", 8 * 8 * 8)):
    kernel = np.asarray(theta[name]["kernel"])
    assert np.abs(kernel).max() <= 1 / np.sqrt(fan_in)
    # U(±b) has sd b/√3; over ≥ 288 draws within 20 % (the sd's error ≈ 1/√(2·288) ≈ 4 %)
    assert abs(kernel.std() * np.sqrt(3 * fan_in) - 1) < 0.2, name


def test_relu_cnn_without_later_biases_is_positively_homogeneous():
  """Scaling one later layer by c > 0 scales Φ by c (ReLU and average pooling commute with
  positive scaling; no bias after the first layer): float64, to 1e-12 relative."""
  net = _net()
  with jax.enable_x64(True):
    theta = models.init_params(net, jax.random.key(1), (16, 16, 3), jnp.float64)
    x = jax.random.uniform(jax.random.key(2), (5, 16, 16, 3), jnp.float64)
    scaled = jax.tree_util.tree_map(lambda a: a, theta)
    scaled["conv_1"] = {"kernel": 3.0 * theta["conv_1"]["kernel"]}
    phi = net.apply({"params": theta}, x)
    np.testing.assert_allclose(net.apply({"params": scaled}, x), 3.0 * phi, rtol=1e-12)


def test_bad_settings_name_what_is_wrong():
  x = jnp.zeros((1, 30, 30, 3))
  with pytest.raises(ValueError, match="do not pool"):
    _net().init(jax.random.key(0), x)
  with pytest.raises(ValueError, match="channels"):
    _net(channels=()).init(jax.random.key(0), jnp.zeros((1, 32, 32, 3)))


@pytest.mark.slow  # a DecoReco run
def test_decoreco_runs_on_the_cnn_with_its_premise_fitted(tmp_path):
  """configs/decoreco_cnn.py:smoke end to end: trained by the MLP's GD recipe to 100 %
  training accuracy, attacked by DecoReco through autodiff over the CNN, and the KKT
  premise fitted on every tensor of the CNN's θ*."""
  from trdr import experiment   # noqa: PLC0415
  from trdr.runtime import files   # noqa: PLC0415
  config = decoreco_cnn.get_config("smoke")
  config.attack.steps, config.attack.log_every = 20, 20
  experiment.run(config, str(tmp_path), "attack")
  summary = files.read_json(tmp_path / experiment.SUMMARY_FILE)
  assert summary["victim"]["train_accuracy"] == 1.0
  premise = summary["kkt_premise"]
  assert set(premise["relative"]) == {"conv_0/bias", "conv_0/kernel", "conv_1/kernel",
                                      "output/kernel"}
  assert premise["first_layer"].startswith("conv_0") and premise["n"] == 10


def _victim(seed=0, channels=(4, 8), shape=(16, 16, 3)):
  from trdr.victim import cache   # noqa: PLC0415
  import ml_collections   # noqa: PLC0415
  config = ml_collections.ConfigDict(dict(arch="cnn", channels=channels, pool=True,
                                          activation="relu", all_biases=False,
                                          num_outputs=1, later_init="pytorch"))
  model = models.build_model(config)
  with jax.enable_x64(True):
    theta = models.init_params(model, jax.random.key(seed), shape, jnp.float64)
  return cache.Victim(model, theta, config, {"config": {"image_shape": list(shape)}})


@pytest.mark.parametrize("ext", [".npz", ".pth"])
def test_a_cnn_theta_star_written_and_read_back_is_bitwise_the_same(tmp_path, ext):
  """`pretrained.export` of a CNN θ* (Flax names in .npz; a PyTorch state_dict, OIHW convs
  and the head over NCHW-flattened features, in .pth) and `layers` / `architecture` /
  `params` read it back to the same arrays and the same architecture."""
  import ml_collections   # noqa: PLC0415
  from trdr.victim import pretrained   # noqa: PLC0415
  if ext == ".pth":
    pytest.importorskip("torch")
  target = _victim()
  path = pretrained.export(target, str(tmp_path / f"theta{ext}"))
  found = pretrained.layers(pretrained.read(path), (16, 16, 3))
  arch = pretrained.architecture(found, ml_collections.ConfigDict(
      {"arch": "haim_mlp", "widths": (1000, 1000), "activation": "relu"}))
  assert arch.arch == "cnn" and tuple(arch.channels) == (4, 8) and arch.pool
  assert "widths" not in arch
  with jax.enable_x64(True):
    back = pretrained.params(found, arch, jnp.float64)
  assert jax.tree.structure(back) == jax.tree.structure(target.params)
  for a, b in zip(jax.tree.leaves(target.params), jax.tree.leaves(back)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_pytorch_cnn_gives_pytorch_s_phi():
  """A PyTorch CNN of trdr's shape (Conv2d 3×3 padding 1, ReLU, avg_pool2d 2, Linear on
  x.flatten(1)) read through its state_dict: trdr's Φ equals PyTorch's to float64
  rounding. Both evaluate the same sums in another order; each output's forward error is
  at most γ_m times the same network evaluated on |θ| and |x| (every term positive: the
  sum of the absolute terms), m ≤ 1,000 the longest chain of additions (27 + 36 terms of
  the convs, 4 + 4 of the poolings, 128 of the head), γ_m = m·u/(1 − m·u), u = 2⁻⁵³,
  twice (one error each side)."""
  torch = pytest.importorskip("torch")
  import io   # noqa: PLC0415
  from trdr.victim import pretrained   # noqa: PLC0415
  import ml_collections   # noqa: PLC0415

  class Net(torch.nn.Module):
    def __init__(self):
      super().__init__()
      self.layers = torch.nn.ModuleList([
          torch.nn.Conv2d(3, 4, 3, padding=1, dtype=torch.float64),
          torch.nn.Conv2d(4, 8, 3, padding=1, bias=False, dtype=torch.float64),
          torch.nn.Linear(8 * 4 * 4, 1, bias=False, dtype=torch.float64)])

    def forward(self, x):
      h = torch.nn.functional.avg_pool2d(torch.relu(self.layers[0](x)), 2)
      h = torch.nn.functional.avg_pool2d(torch.relu(self.layers[1](h)), 2)
      return self.layers[2](h.flatten(1))[:, 0]

  torch.manual_seed(0)
  net = Net()
  buffer = io.BytesIO()   # saved and read as a user's .pth is
  torch.save(net.state_dict(), buffer)
  buffer.seek(0)
  arrays = {k: v.numpy() for k, v in torch.load(buffer).items()}
  found = pretrained.layers(arrays, (16, 16, 3))
  arch = pretrained.architecture(found, ml_collections.ConfigDict({"arch": "cnn",
                                                                    "activation": "relu"}))
  x = np.random.default_rng(0).random((3, 16, 16, 3))
  model = models.build_model(arch)
  with jax.enable_x64(True):
    theta = pretrained.params(found, arch, jnp.float64)
    ours = np.asarray(model.apply({"params": theta}, jnp.asarray(x)))
    absolute = np.asarray(model.apply({"params": jax.tree.map(jnp.abs, theta)},
                                      jnp.asarray(x)))
  theirs = net(torch.from_numpy(x.transpose(0, 3, 1, 2).copy())).detach().numpy()
  u = np.finfo(np.float64).eps / 2
  gamma = 1000 * u / (1 - 1000 * u)
  assert np.all(np.abs(ours - theirs) <= 2 * gamma * absolute), (ours - theirs, absolute)


@pytest.mark.parametrize("arrays, words", [
    ({"c.weight": np.zeros((4, 3, 3, 3)), "bn.weight": np.ones(4), "bn.bias": np.zeros(4),
      "bn.running_mean": np.zeros(4), "bn.running_var": np.ones(4),
      "fc.weight": np.zeros((1, 1024))}, "layer 'bn' is a BatchNorm layer"),
    ({"c.weight": np.zeros((4, 3, 5, 5)), "fc.weight": np.zeros((1, 1024))},
     "is a 5 × 5 convolution"),
    ({"a.weight": np.zeros((4, 768)), "b.weight": np.zeros((4, 4, 3, 3))},
     "a convolution after a linear layer"),
    ({"c.weight": np.zeros((4, 3, 3, 3)), "fc.weight": np.zeros((1, 100))},
     "the convolutions give 1024 features without pooling and 256 with")])
def test_an_unsupported_layer_is_one_error_naming_it(arrays, words):
  from trdr.victim import pretrained   # noqa: PLC0415
  with pytest.raises(ValueError, match="trdr") as raised:
    pretrained.layers(arrays, (16, 16, 3))
  assert words in str(raised.value)
