"""The victim: training to a gradient-norm tolerance, saving θ* and loading it back."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from trdr import data, models, victim


def _task(n_per_class=10):
  config = data.default_data_config()
  config.n_per_class = n_per_class
  return data.make_binary_task(config)


def _victim_config(**overrides):
  config = ml_collections.ConfigDict(dict(arch="affine", weight_decay=1e-2, tol=1e-5,
                                          max_iter=2000, memory_size=10, seed=0))
  config.update(overrides)
  return config


def test_training_reaches_the_gradient_tolerance_and_reports_accuracy():
  task = _task()
  model = models.build_model(_victim_config())
  theta0 = models.init_params(model, jax.random.key(0), task.train_images.shape[1:])
  theta, report = victim.train(model, theta0, task, _victim_config())
  assert report.grad_norm < 1e-5
  apply_fn = lambda p, x: model.apply({"params": p}, x)
  grad = jax.grad(victim.energy)(theta, jnp.asarray(task.train_images),
                                 jnp.asarray(task.train_labels), apply_fn=apply_fn,
                                 weight_decay=1e-2)
  assert float(jnp.sqrt(sum(jnp.sum(g ** 2) for g in jax.tree.leaves(grad)))) < 1e-5
  assert report.train_accuracy == 1.0        # 20 images in 3072 dimensions are separable
  assert 0.5 < report.test_accuracy < 1.0
  assert (report.n_train, report.n_test) == (20, 500)


def test_logistic_loss_value():
  logits = jnp.array([0.0, 2.0, -1.0])
  labels = jnp.array([1.0, -1.0, -1.0])
  expected = np.mean(np.log1p(np.exp([-0.0, 2.0, -1.0])))
  np.testing.assert_allclose(victim.logistic_loss(logits, labels), expected, rtol=1e-6)


def test_save_load_roundtrip_and_architecture_mismatch(tmp_path):
  model = models.Affine()
  theta = models.init_params(model, jax.random.key(3), (32, 32, 3))
  victim.save(str(tmp_path), theta, {"arch": "affine"})
  assert victim.load_metadata(str(tmp_path)) == {"arch": "affine"}
  loaded = victim.load(str(tmp_path), models.init_params(model, jax.random.key(4), (32, 32, 3)))
  jax.tree.map(np.testing.assert_array_equal, loaded, theta)
  other = models.init_params(model, jax.random.key(4), (28, 28, 1))
  with pytest.raises(ValueError, match=r"kernel.*shape \(3072, 1\), expected \(784, 1\)"):
    victim.load(str(tmp_path), other)
  with pytest.raises(FileNotFoundError):
    victim.load(str(tmp_path / "nothing"), theta)


def test_unknown_architecture():
  with pytest.raises(ValueError, match="unknown victim architecture 'resnet'"):
    models.build_model(_victim_config(arch="resnet"))
