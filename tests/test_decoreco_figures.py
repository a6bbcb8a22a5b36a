"""Figs. 5–12 on the :smoke configs: every artefact written from computed runs, the
sweep's best setting used downstream, finished runs reused."""

import os
import sys

import jax
import numpy as np
import pytest

from trdr import decoreco_figures, io

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "configs"))
import decoreco_figures as decoreco_figures_config  # noqa: E402


@pytest.fixture(scope="module")
def figures(smoke_report_dir):
  """The report's :smoke runs (conftest.py), reused: decoreco_figures.run redraws every
  figure from them."""
  previous = jax.config.jax_enable_x64
  workdir = os.path.join(smoke_report_dir, "decoreco_figures")
  config = decoreco_figures_config.get_config("smoke")
  written = decoreco_figures.run(config, workdir)
  yield config, workdir, written
  jax.config.update("jax_enable_x64", previous)


def test_every_figure_is_written(figures):
  _, workdir, written = figures
  for name in (*decoreco_figures.ARTEFACTS, "fig7_ssim_vs_output"):
    for ext in ("png", "pdf"):
      path = os.path.join(workdir, f"{name}.{ext}")
      assert path in written and os.path.getsize(path) > 1000, path


def test_sweep_best_setting_feeds_the_tuned_runs(figures):
  _, workdir, _ = figures
  best = io.read_json(os.path.join(workdir, "sweep", "best.json"))
  for run in ("tuned", "partition"):
    hp = io.read_json(os.path.join(workdir, run, "summary.json"))["hyperparameters"]
    assert hp == {k: pytest.approx(best[k]) for k in hp}, run
  uniform = io.read_json(os.path.join(workdir, "uniform", "summary.json"))
  assert uniform["init"] == "uniform" and uniform["hyperparameters"]["lr"] == 0.4
  # All DecoReco runs attacked the one shared θ*.
  assert not os.path.exists(os.path.join(workdir, "tuned", "victim"))


def test_partition_run_is_closer_to_the_partition(figures):
  _, workdir, _ = figures
  results = np.load(os.path.join(workdir, "partition", "results.npz"))
  assert results["partition_ssim"].mean() > results["train_ssim"].mean()


def test_finished_runs_are_reused(figures):
  config, workdir, _ = figures
  marker = os.path.join(workdir, "tuned", "summary.json")
  before = os.path.getmtime(marker)
  decoreco_figures.run(config, workdir, ("fig8",))
  assert os.path.getmtime(marker) == before
  with pytest.raises(ValueError, match="unknown artefact"):
    decoreco_figures.run(config, workdir, ("fig13",))
  changed = config.copy_and_resolve_references()
  changed.decoreco.attack.lr = 0.3
  with pytest.raises(FileExistsError, match="different config"):
    decoreco_figures.run(changed, workdir, ("fig5",))
