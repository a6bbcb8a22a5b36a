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
    c.attack.steps = c.attack.log_every = c.sweep.steps = 10
  return config


def test_the_victims_of_a_pair_differ_only_in_their_architecture():
  for variant in cnn_config.VARIANTS:
    config = cnn_config.get_config(variant)
    cnn.check_same_setting(config)
    assert [[config.victims[n].victim.arch for n in p.victims] for p in config.pairs.values()
            ] == [["cnn", "haim_mlp"], ["cnn", "haim_mlp"]]
  config = _config()
  config.victims.mlp.data.n_per_class = 6
  with pytest.raises(ValueError, match="data.n_per_class: 5 -> 6"):
    cnn.check_same_setting(config)
  config = _config()
  config.pairs.wide.settings = ("b9dfyspx", "best")
  with pytest.raises(ValueError, match="unknown settings"):
    cnn.check_same_setting(config)
  with pytest.raises(ValueError, match="unknown config variant 'paper'"):
    cnn_config.get_config("paper")


@pytest.mark.parametrize("variant", cnn_config.VARIANTS)
def test_the_wide_cnn_has_more_parameters_than_pixel_values_and_the_control_fewer(variant):
  """Iurada et al.'s p / (d·n) from the configs: the wide pair's CNN above 1 at its n, the
  control CNN far below at n = 100 (":cpu": 7,104 / 307,200)."""
  config = cnn_config.get_config(variant)
  d = 32 * 32 * 3

  def ratio(name):
    c = config.victims[name]
    return cnn.parameter_count(c, (32, 32, 3)) / (d * 2 * c.data.n_per_class)
  assert ratio("cnn_wide") > 1 > ratio("cnn")
  if variant == "cpu":
    assert cnn.parameter_count(config.victims.cnn, (32, 32, 3)) == 7104
    assert f"{ratio('cnn'):.2g}" == "0.023"


@pytest.mark.slow  # four smoke victims' training, a sweep each and short DecoReco runs
def test_rows_are_the_runs_numbers_reused_and_written(tmp_path):
  from trdr import experiment   # noqa: PLC0415
  from trdr.runtime import files   # noqa: PLC0415
  config = _config()
  rows = cnn.run(config, str(tmp_path))
  assert [(r["victim"], r["seed"], r["setting"]) for r in rows] == [
      ("cnn", 0, "b9dfyspx"), ("mlp", 0, "b9dfyspx"), ("cnn_wide", 0, "b9dfyspx"),
      ("cnn_wide", 0, "tuned"), ("mlp_small_n", 0, "b9dfyspx"), ("mlp_small_n", 0, "tuned")]
  for r in rows:
    summary = files.read_json(tmp_path / r["run"] / experiment.SUMMARY_FILE)
    # Each count is the run's own, at the study's level; best buddies are a subset of the
    # training images whose SSIM-nearest reconstruction reaches the level.
    key = f"ssim_ge_{config.eval.ssim_level:g}"
    assert r["recovered"]["w11"] == summary["reconstructed"][key]
    assert r["start_recovered"]["w3_bb"] == summary["start_reconstructed_best_buddies_w3"][key]
    for counts in (r["recovered"], r["start_recovered"]):
      assert 0 <= counts["w11_bb"] <= counts["w11"] <= r["n"]
      assert 0 <= counts["w3_bb"] <= counts["w3"] <= r["n"]
    assert r["kkt"] == summary["kkt_premise"] and 0 <= r["kkt"]["relative_total"] <= 1
    assert r["test_accuracy"] == summary["victim"]["test_accuracy"]
    assert r["train_accuracy"] == 1.0 and r["candidates"] == 2 * r["n"] and r["steps"] == 10
    assert r["ratio"] == r["parameters"] / (3072 * r["n"])
    assert r["truth"] == summary.get("truth")
    assert r["victim_seconds"] > 0 and r["attack_seconds"] > 0
  by = {(r["victim"], r["setting"]): r for r in rows}
  assert [by[(v, "b9dfyspx")]["n"] for v in ("cnn", "mlp", "cnn_wide", "mlp_small_n")
          ] == [10, 10, 2, 2]
  assert by[("cnn", "b9dfyspx")]["kkt"]["first_layer"] == "conv_0/kernel"
  assert by[("mlp", "b9dfyspx")]["kkt"]["first_layer"] == "dense_0/kernel"
  # conv 3·3·3·4 + 4, conv 3·3·4·8, head 8·8·8 (32² pooled twice); the MLP 3072·32 + 32,
  # 32·32, 32; the wide CNN conv 3·3·3·16 + 16, 3·3·16·32, head 8·8·32 (> d·n = 6,144)
  assert by[("cnn", "b9dfyspx")]["parameters"] == 108 + 4 + 288 + 512
  assert by[("mlp", "b9dfyspx")]["parameters"] == 3072 * 32 + 32 + 32 * 32 + 32
  assert by[("cnn_wide", "b9dfyspx")]["parameters"] == 432 + 16 + 4608 + 2048
  # The tuned run is the sweep's best setting on the b9dfyspx run's θ*.
  tuned = by[("cnn_wide", "tuned")]
  best = files.read_json(tmp_path / "runs" / "cnn_wide_seed0_sweep" / experiment.BEST_FILE)
  assert tuned["hyperparameters"] == {k: best[k] for k in tuned["hyperparameters"]}
  assert tuned["sweep_seconds"] > 0 and tuned["test_accuracy"] == \
      by[("cnn_wide", "b9dfyspx")]["test_accuracy"]
  written = json.loads((tmp_path / cnn.ROWS_FILE).read_text())
  assert written == rows
  # A rerun reuses every finished run: nothing is trained or attacked again.
  before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("summary.json")}
  assert cnn.run(config, str(tmp_path)) == rows
  assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("summary.json")} == before

  page = cnn.markdown(rows, config, report.provenance("smoke"))
  cnn_line = next(line for line in page.splitlines() if line.startswith("| cnn |"))
  b9 = by[("cnn", "b9dfyspx")]
  assert cnn_line.startswith(f"| cnn | b9dfyspx | 10 | 912 | 0.03 | "
                             f"{b9['test_accuracy']:.3g} | {b9['recovered']['w11']} / "
                             f"{b9['recovered']['w3']} |")
  assert "6 runs of 6 finished" in page and "## Reading" in page
  assert "Not run yet" not in page
  fig = cnn.figure(rows, str(tmp_path), config)
  assert fig is not None and len(fig.subfigs) == 1 + len(rows)
  plt.close(fig)
  # Another seed is new rows; a missing one is named on the page.
  config.pairs.control.seeds = (0, 1)
  assert "mlp / seed 1 / b9dfyspx" in cnn.markdown(rows, config, report.provenance("smoke"))
  # A finished run of other settings in the same directory is refused, naming the key.
  config.victims.cnn.attack.steps = config.victims.mlp.attack.steps = 12
  with pytest.raises(FileExistsError, match="attack.steps"):
    cnn.run(config, str(tmp_path))


def _row(pair, victim, seed, setting, n, parameters, buddies, start=0, truth=None):
  return {"pair": pair, "victim": victim, "seed": seed, "setting": setting, "n": n,
          "parameters": parameters, "ratio": parameters / (3072 * n),
          "recovered": {"w11": buddies, "w3": buddies, "w11_bb": buddies, "w3_bb": buddies},
          "start_recovered": {"w11": start, "w3": start, "w11_bb": start, "w3_bb": start},
          "truth": truth}


def test_a_zero_reads_uninformative_unless_a_positive_control_at_its_n_recovered():
  """The labels and reading from the rows: the control CNN's zero by parameter count even
  beside the MLP's recovery; the wide CNN's zero uninformative while no victim at its n
  recovers, a negative beside a positive control once the MLP there does; never a word
  that calls a zero private or compares counts across the victims."""
  config = cnn_config.get_config("cpu")
  config.pairs.control.seeds = config.pairs.wide.seeds = (0,)
  rows = [_row("control", "cnn", 0, "b9dfyspx", 100, 7104, 0),
          _row("control", "mlp", 0, "b9dfyspx", 100, 4_074_000, 17),
          _row("wide", "cnn_wide", 0, "b9dfyspx", 4, 42752, 0),
          _row("wide", "cnn_wide", 0, "tuned", 4, 42752, 0),
          _row("wide", "mlp_small_n", 0, "b9dfyspx", 4, 3_075_000, 0, start=0),
          _row("wide", "mlp_small_n", 0, "tuned", 4, 3_075_000, 1, start=1)]
  table = cnn.cells(rows, config)
  says = {(c["victim"], c["setting"]): cnn.label(c, [x for x in table if x["pair"] == c["pair"]])
          for c in table}
  assert says[("cnn", "b9dfyspx")] == "uninformative by parameter count (p / (d·n) = 0.023)"
  assert says[("mlp", "b9dfyspx")] == "recovers"
  # the MLP's one best buddy at "tuned" ties its start images': no recovery at n = 4
  assert says[("cnn_wide", "tuned")].startswith("uninformative: no victim at this n")
  text = cnn.reading(rows, config)
  assert "uninformative by parameter count (p / (d·n) = 0.023)" in text
  for word in ("private", "privacy", "fewer", "more best buddies than"):
    assert word not in text.lower()
  rows[-1]["recovered"]["w11_bb"] = 2
  table = cnn.cells(rows, config)
  wide = [c for c in table if c["pair"] == "wide"]
  assert cnn.label(wide[1], wide) == ("a negative beside a positive control at the same n "
                                      "(mlp_small_n at tuned)")


def test_the_truth_diagnostic_shows_where_the_runs_made_it():
  """The page's truth columns read summary["truth"] per row: its losses' spread (the
  loss reached as the verdict compares it: the lower of the run's own and λ-fitted), the
  truth-start run's kept count and the verdicts; "–" for rows without it."""
  config = cnn_config.get_config("cpu")
  config.pairs.control.seeds = (0, 1)
  config.pairs.wide.seeds = ()
  truth = lambda at, reached, kept, verdict: {
      "loss_at_truth": at, "loss_reached": reached + 1.0,
      "loss_reached_lambda_fitted": reached, "verdict": verdict,
      "truth_start": {"kept": kept, "n": 100}}
  kkt = {"relative": {"a": 0.5}, "first_layer": "a", "residual_total": 1.0}
  rows = [{**_row("control", "cnn", s, "b9dfyspx", 100, 7104, 0, truth=t), "kkt": kkt,
           "test_accuracy": 0.7, "victim_seconds": 1.0, "attack_seconds": 2.0}
          for s, t in ((0, truth(3.0, 2.0, 0, "objective")), (1, truth(1.0, 2.0, 60, "search")))]
  rows += [{**_row("control", "mlp", 0, "b9dfyspx", 100, 4_074_000, 17), "kkt": kkt,
            "test_accuracy": 0.7, "victim_seconds": 1.0, "attack_seconds": 2.0}]
  page = cnn.markdown(rows, config, report.provenance("cpu"), figure_written=False)
  line = next(x for x in page.splitlines() if x.startswith("| cnn |"))
  assert "| 2 [1, 3] / 2 [2, 2] | 30 [0, 60] | objective 1, search 1 |" in line
  assert "| – / – | – | – |" in next(x for x in page.splitlines() if x.startswith("| mlp |"))
  text = cnn.reading(rows, config)
  assert 'truth diagnostic: "search" in 1, "objective" in 1 of 2 seeds' in text
  assert "(the objective does not single out the truth)" in text
  assert "Not run yet" in page and "mlp / seed 1 / b9dfyspx" in page
