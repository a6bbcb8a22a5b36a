"""Figs. 1–4 and Table 1 on configs/paper_figures.py:smoke: the paper's findings, in numbers."""

import os
import sys

import numpy as np
import pytest

from trdr import figures, io, landscape

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "configs"))
import paper_figures  # noqa: E402


@pytest.fixture(scope="module")
def smoke(smoke_report_dir):
  """The report's :smoke runs (conftest.py), reused here: figures.run redraws every
  artefact from them."""
  workdir = os.path.join(smoke_report_dir, "paper_figures")
  written = figures.run(paper_figures.get_config("smoke"), workdir)
  return workdir, written, io.read_json(os.path.join(workdir, "table1.json"))


@pytest.mark.parametrize("victim", figures.VICTIMS)
def test_ground_truth_initialisation_recovers_the_training_images(smoke, victim):
  _, _, table = smoke
  row = table["rows"][victim]
  assert row["measured"]["ground truth"] < 1e-5     # θ(x) = θ*: a fixed point
  assert row["ssim_to_train"]["ground truth"] > 0.999


@pytest.mark.parametrize("victim", figures.VICTIMS)
def test_random_initialisation_stays_noise_while_the_parameters_match(smoke, victim):
  """Random → noise-like images (nearest to their own initial noise, far from the
  training set) although ||θ* − θ||² fell to a fraction of its initial value."""
  workdir, _, table = smoke
  row = table["rows"][victim]
  assert row["ssim_to_noise"]["random"] > 0.8
  assert row["ssim_to_train"]["random"] < 0.2
  with np.load(os.path.join(workdir, victim, landscape.RESULTS_FILE)) as results:
    g = list(zip(results["lambda1"], results["lambda2"])).index(landscape.PURE_INITS["noise"])
    initial = results["history_upper_loss"][g, 0]
  assert row["measured"]["random"] < 0.5 * initial, (row["measured"]["random"], initial)


@pytest.mark.parametrize("victim", figures.VICTIMS)
def test_partition_initialisation_resembles_the_partition_not_the_training_set(smoke, victim):
  workdir, _, table = smoke
  row = table["rows"][victim]
  assert row["ssim_to_partition"]["partition"] > row["ssim_to_train"]["partition"] + 0.3
  records = io.read_json(os.path.join(workdir, victim, landscape.LANDSCAPE_FILE))
  (part,) = [r for r in records if (r["lambda1"], r["lambda2"]) == (0.0, 1.0)]
  assert part["l2_to_partition"] < part["l2_to_train"]


def test_table1_holds_the_measured_and_the_paper_values(smoke):
  workdir, written, table = smoke
  assert set(written) == set(figures.ARTEFACTS)
  for victim in figures.VICTIMS:
    row = table["rows"][victim]
    assert row["paper"] == figures.PAPER_TABLE1[victim]
    records = io.read_json(os.path.join(workdir, victim, landscape.LANDSCAPE_FILE))
    for column, init in figures.TABLE1_COLUMNS.items():
      (record,) = [r for r in records
                   if (r["lambda1"], r["lambda2"]) == landscape.PURE_INITS[init]]
      assert row["measured"][column] == record["param_distance"]
    assert row["lower_level_start"] == "previous"
    assert row["lower_level"]["fraction_converged"] == 1.0
  with open(os.path.join(workdir, "table1.md")) as f:
    markdown = f.read()
  assert f"{table['rows']['one_hidden']['measured']['random']:.4e}" in markdown
  assert "6.1157e-05" in markdown and "1.1214e-03" in markdown
  for name in ("fig1", "fig2", "fig3", "fig4"):
    assert os.path.getsize(os.path.join(workdir, f"{name}.png")) > 10_000


def test_finished_runs_are_reused_not_recomputed(smoke, monkeypatch):
  workdir, _, table = smoke
  monkeypatch.setattr(landscape, "run", lambda *a, **k: pytest.fail("a finished run reran"))
  figures.run(paper_figures.get_config("smoke"), workdir, ["table1"])
  assert io.read_json(os.path.join(workdir, "table1.json")) == table
  other = paper_figures.get_config("smoke")
  other.affine.attack.steps = 5
  with pytest.raises(FileExistsError, match="different config"):
    figures.run(other, workdir, ["fig3"])
  with pytest.raises(ValueError, match="unknown artefacts"):
    figures.run(other, workdir, ["fig5"])
