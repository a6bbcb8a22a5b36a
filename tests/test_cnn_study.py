"""DecoReco on the CNN beside the MLP (`trdr.studies.cnn`, configs/cnn.py) at :smoke: the
rows from each run's files, the reuse of finished runs, the page and the figure."""

import json

import matplotlib.pyplot as plt
import pytest

from trdr import report
from trdr.configs import cnn as cnn_config
from trdr.studies import cnn


def _config():
  config = cnn_config.get_config("smoke")
  for c in config.victims.values():
    c.attack.steps = c.attack.log_every = 10
  return config


def test_the_victims_differ_only_in_their_architecture():
  for variant in cnn_config.VARIANTS:
    config = cnn_config.get_config(variant)
    cnn.check_same_setting(config)
    assert [config.victims[n].victim.arch for n in config.victims] == ["cnn", "haim_mlp"]
  config = _config()
  config.victims.mlp.data.n_per_class = 6
  with pytest.raises(ValueError, match="data.n_per_class: 5 -> 6"):
    cnn.check_same_setting(config)
  with pytest.raises(ValueError, match="unknown config variant 'paper'"):
    cnn_config.get_config("paper")


@pytest.mark.slow  # two smoke victims' training and two short DecoReco runs
def test_rows_are_the_runs_numbers_reused_and_written(tmp_path):
  from trdr import experiment   # noqa: PLC0415
  from trdr.runtime import files   # noqa: PLC0415
  config = _config()
  rows = cnn.run(config, str(tmp_path))
  assert [(r["victim"], r["seed"]) for r in rows] == [("cnn", 0), ("mlp", 0)]
  for r in rows:
    summary = files.read_json(tmp_path / r["run"] / experiment.SUMMARY_FILE)
    # Each count is the run's own, at the study's level; best buddies are a subset of the
    # training images whose SSIM-nearest reconstruction reaches the level.
    key = f"ssim_ge_{config.eval.ssim_level:g}"
    assert r["recovered"]["w11"] == summary["reconstructed"][key]
    assert r["start_recovered"]["w3_bb"] == summary["start_reconstructed_best_buddies_w3"][key]
    for counts in (r["recovered"], r["start_recovered"]):
      assert 0 <= counts["w11_bb"] <= counts["w11"] <= r["n"] == 10
      assert 0 <= counts["w3_bb"] <= counts["w3"] <= r["n"]
    assert r["kkt"] == summary["kkt_premise"] and 0 <= r["kkt"]["relative_total"] <= 1
    assert r["test_accuracy"] == summary["victim"]["test_accuracy"]
    assert r["train_accuracy"] == 1.0 and r["candidates"] == 20 and r["steps"] == 10
    assert r["victim_seconds"] > 0 and r["attack_seconds"] > 0
  by = {r["victim"]: r for r in rows}
  assert by["cnn"]["kkt"]["first_layer"] == "conv_0/kernel"
  assert by["mlp"]["kkt"]["first_layer"] == "dense_0/kernel"
  # conv 3·3·3·4 + 4, conv 3·3·4·8, head 8·8·8 (32² pooled twice); the MLP 3072·32 + 32,
  # 32·32, 32
  assert by["cnn"]["parameters"] == 108 + 4 + 288 + 512
  assert by["mlp"]["parameters"] == 3072 * 32 + 32 + 32 * 32 + 32
  written = json.loads((tmp_path / cnn.ROWS_FILE).read_text())
  assert written == rows
  # A rerun reuses every finished row: nothing is trained or attacked again.
  before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("summary.json")}
  assert cnn.run(config, str(tmp_path)) == rows
  assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("summary.json")} == before

  page = cnn.markdown(rows, config, report.provenance("smoke"))
  cnn_line = next(line for line in page.splitlines() if line.startswith("| cnn |"))
  assert cnn_line.startswith(f"| cnn | {by['cnn']['test_accuracy']:.3g} | "
                             f"{by['cnn']['recovered']['w11']} / "
                             f"{by['cnn']['recovered']['w3']} |")
  assert "2 runs of 2 (1 seed) finished" in page and "## Reading" in page
  assert "in 1, fewer in 0" in page or "in 0, fewer in 1" in page or "as many in 1" in page
  assert "Not run yet" not in page
  fig = cnn.figure(rows, str(tmp_path), config)
  assert fig is not None and len(fig.subfigs) == 1 + len(config.victims)
  plt.close(fig)
  # Another seed is a new pair; a missing one is named on the page.
  config.seeds = (0, 1)
  assert "mlp / seed 1" in cnn.markdown(rows, config, report.provenance("smoke"))
  # Other settings in the same directory are refused, naming the key.
  config.eval.ssim_level = 0.5
  with pytest.raises(FileExistsError, match="ssim_level"):
    cnn.run(config, str(tmp_path))


def test_the_reading_counts_the_final_losses_below_the_floor():
  """The reading's floor sentence from the rows: a run whose final loss is under its
  residual at the true training images counts, one above it not; the gaps' means."""
  config = cnn_config.get_config("smoke")
  config.seeds = (0, 1)

  def row(victim, seed, final, floor):
    return {"victim": victim, "seed": seed, "n": 10, "candidates": 20, "final_loss": final,
            "test_accuracy": 0.5, "recovered": {"w11": 0, "w11_bb": 0},
            "start_recovered": {"w11_bb": 0, "w3_bb": 0},
            "kkt": {"residual_total": floor, "relative": {"a": 0.5}, "first_layer": "a"}}

  rows = [row("cnn", 0, 1.0, 4.0), row("mlp", 0, 5.0, 4.0),
          row("cnn", 1, 2.0, 4.0), row("mlp", 1, 3.0, 4.0)]
  text = cnn.reading(rows, config)
  assert "lies below the floor" in text and "in 2 of 2 seeds for the cnn and 1 for the mlp" in text
  # cnn: gaps 0.75 and 0.5; mlp: −0.25 and 0.25
  assert "(floor − final) / floor 0.625 and 0)" in text
