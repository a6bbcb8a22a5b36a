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
  return data.make_task(config)


def _victim_config(**overrides):
  config = ml_collections.ConfigDict(dict(arch="affine", weight_decay=1e-2, tol=1e-5,
                                          max_iter=2000, memory_size=10, seed=0))
  config.update(overrides)
  return config


@pytest.mark.slow  # trains θ* by L-BFGS; fast tier: tests/test_solver.py
def test_training_reaches_the_gradient_tolerance_and_reports_accuracy(x64):
  # In float64: a float32 gradient of this victim could be off by far more than tol (each
  # logit is a 3073-term dot with sum |w x| up to ~50: ~3073 · 50 · 2^-24 ≈ 1e-2 worst case).
  task = _task()
  task = task._replace(**{name: np.asarray(getattr(task, name), np.float64) for name in (
      "train_images", "train_labels", "test_images", "test_labels")})
  model = models.build_model(_victim_config())
  theta0 = models.init_params(model, jax.random.key(0), task.train_images.shape[1:])
  theta0 = jax.tree.map(lambda p: jnp.asarray(p, jnp.float64), theta0)
  theta, report = victim.train(model, theta0, task, _victim_config())
  assert report.grad_norm < 1e-5  # the solver's stopping rule, ||∇E|| < tol = 1e-5
  apply_fn = lambda p, x: model.apply({"params": p}, x)
  x, w = task.train_images.reshape(20, -1), np.asarray(theta["dense"]["kernel"])[:, 0]
  assert np.max(np.sum(np.abs(x * w), axis=1)) < 100  # the premise of the bound below
  grad = jax.grad(victim.energy)(theta, jnp.asarray(task.train_images),
                                 jnp.asarray(task.train_labels), apply_fn=apply_fn,
                                 weight_decay=1e-2)
  # Recomputed, the norm may differ from the solver's by float64 rounding: each logit (3073
  # terms, sum |w x| < 100) within 3073 · 100 · 2^-53 = 3.4e-11, each gradient component
  # within a quarter of that (softplus' slope <= 1/4, |x| <= 1), the norm within
  # sqrt(3073) · 8.5e-12 = 4.7e-10; two evaluations: < 1e-9.
  assert float(jnp.sqrt(sum(jnp.sum(g ** 2) for g in jax.tree.leaves(grad)))) < 1e-5 + 1e-9
  assert report.train_accuracy == 1.0        # 20 images in 3072 dimensions are separable
  assert 0.5 < report.test_accuracy < 1.0
  assert (report.n_train, report.n_test) == (20, 500)


def test_logistic_loss_value():
  logits = jnp.array([0.0, 2.0, -1.0])
  labels = jnp.array([1.0, -1.0, -1.0])
  expected = np.mean(np.log1p(np.exp([-0.0, 2.0, -1.0])))
  # float32: each softplus (exp, log1p, one add) within ~4u relative, u = 2^-24; the mean of
  # three positive terms adds 3u: <= 7u = 4.2e-7. A wrong sign or a sum for the mean: >1e-1.
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


def test_gradient_descent_training_logs_the_time_left_to_its_epoch_cap(caplog, monkeypatch):
  """The victim's log line per chunk: 10 of 100 epochs in 10 s leave at most 90 s (the
  pace so far, to the cap; the loss threshold may stop it sooner). The clock is fixed."""
  import logging  # noqa: PLC0415

  from trdr.victim import cache  # noqa: PLC0415

  monkeypatch.setattr(cache.time, "time", lambda: 1010.0)
  log = cache._gd_progress(ml_collections.ConfigDict(
      {"max_epochs": 100, "loss_threshold": 1e-4}), 1000.0)
  with caplog.at_level(logging.INFO):
    log({"epoch": 10, "train_loss": 0.5, "train_accuracy": 0.75})
  assert "victim epoch 10: train loss 5.000e-01, accuracy 0.750 (at most about 90 s left: " \
         "the cap of 100 epochs, or sooner at a loss below 0.0001)" in caplog.text
