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
