"""C-class victims (Buzaglo et al. 2023): the task, the labels' fit to the victim, the
cross-entropy victim, per-class candidates and the per-class evaluation."""

import os

import jax.numpy as jnp
import numpy as np
import pytest

from trdr import data, experiment, models, victim
from trdr.configs import decoreco_cifar, decoreco_multiclass
from trdr.runtime import files, rundir


def test_a_task_of_c_groups_has_labels_0_to_c_minus_1():
  config = data.default_data_config()
  config.classes, config.n_per_class = ((3,), (5, 7), (0,)), 4
  task = data.make_task(config)
  np.testing.assert_array_equal(task.train_labels, np.repeat([0.0, 1.0, 2.0], 4))
  np.testing.assert_array_equal(task.partition_labels, task.train_labels)
  source = data.load_source("cifar10_sample")
  for split, index in (("train", task.train_index), ("train", task.partition_index)):
    group = {3: 0, 5: 1, 7: 1, 0: 2}
    np.testing.assert_array_equal(
        [group[c] for c in source[f"{split}_labels"][index]], task.train_labels)
  kept = np.isin(source["test_labels"], (3, 5, 7, 0))
  expected = [{3: 0, 5: 1, 7: 1, 0: 2}[c] for c in source["test_labels"][kept]]
  np.testing.assert_array_equal(task.test_labels, expected)
  binary = data.default_data_config()
  binary.n_per_class = 4
  assert set(data.make_task(binary).train_labels.tolist()) == {-1.0, 1.0}
  with pytest.raises(ValueError, match=r"\(0,\) and \(0, 2\) overlap in \[0\]"):
    data.parse_classes(((0,), (1,), (0, 2)))
  with pytest.raises(ValueError, match="two or more"):
    data.parse_classes(((0, 1),))


def test_predictions_and_class_indices_follow_the_labels_convention():
  logits = jnp.asarray([[0.1, 2.0, -1.0], [3.0, 0.0, 0.5]])
  np.testing.assert_array_equal(victim.predictions(logits), [1.0, 0.0])
  np.testing.assert_array_equal(victim.predictions(logits[:, :2]), [1.0, -1.0])
  np.testing.assert_array_equal(victim.class_index(jnp.asarray([-1.0, 1.0]), 2), [0, 1])
  np.testing.assert_array_equal(victim.class_index(jnp.asarray([2.0, 0.0]), 3), [2, 0])


@pytest.mark.parametrize("change, message", [
    ({"num_outputs": 1}, "not a binary task's ±1"),
    ({"loss": "bce"}, "not a binary task's ±1"),
    ({"num_outputs": 5}, "do not fit a victim with num_outputs=5")])
def test_labels_that_do_not_fit_the_victim_fail_before_any_write(tmp_path, change, message):
  """A 10-class task on a one-output victim, on the logistic (bce) loss, or on too few
  outputs is a named error before the work dir is touched (it would train on labels
  0 … 9 read as ±1 targets)."""
  config = decoreco_multiclass.get_config("smoke")
  config.victim.update(change)
  with pytest.raises(ValueError, match=message):
    experiment.run(config, str(tmp_path / "run"), "attack")
  assert not os.path.exists(tmp_path / "run")
  models.check_labels(decoreco_cifar.get_config("smoke").victim, [-1.0, 1.0])  # binary fits


@pytest.mark.slow
def test_the_smoke_ten_class_attack_end_to_end(tmp_path):
  """decoreco_multiclass.py:smoke: a D-32-32-10 cross-entropy victim, 2 candidates per
  training image with its class, the multiclass KKT form, and counts per class."""
  config = decoreco_multiclass.get_config("smoke")
  summary = experiment.run(config, str(tmp_path / "run"), "attack").summary
  n = 10 * config.data.n_per_class
  assert summary["candidates"] == 2 * n and summary["n_train"] == n
  # GD stopped below the loss threshold t: every image's cross-entropy is < n·t, so its
  # class has probability > exp(−n·t) > 1/2 (n·t ≪ 1) and is the argmax: accuracy 1.
  assert summary["victim"]["reached_threshold"]
  assert n * config.victim.loss_threshold < np.log(2)
  assert summary["victim"]["train_accuracy"] == 1.0
  assert np.isfinite(summary["final_loss"])
  with np.load(tmp_path / "run" / experiment.RESULTS_FILE) as results:
    np.testing.assert_array_equal(results["labels"], np.repeat(np.arange(10.0), 2 * 2))
    best = results["best_ssim_per_train"]
    labels = results["train_labels"]
  per_class = summary["reconstructed_per_class"]
  assert sorted(per_class, key=float) == [f"{c}" for c in range(10)]
  for c in range(10):
    assert per_class[str(c)]["ssim_ge_0.4"] == int(np.sum(best[labels == c] >= 0.4))
  assert sum(v["ssim_ge_0.4"] for v in per_class.values()) == summary["reconstructed"][
      "ssim_ge_0.4"]
  assert set(summary["reconstructed_per_class_w3"]) == set(per_class)
  saved = files.read_json(tmp_path / "run" / rundir.CONFIG_FILE)
  assert saved["victim"]["num_outputs"] == 10 and saved["attack"]["form"] == "multiclass"
