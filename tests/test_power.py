"""DecoReco's power (`trdr.evaluation.power`, `trdr.studies.power`, configs/power.py): the
architecture's signature, the calibration table and the statement read from a table the
test writes, the premise threshold's rule on synthetic cells, and the :smoke study end to
end."""

import json
import math

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from trdr import models
from trdr.configs import power as power_config
from trdr.configs.victim_recipe import B9DFYSPX
from trdr.evaluation import power
from trdr.runtime import files
from trdr.victim import pretrained

IMAGE_SHAPE = (32, 32, 3)
D = int(np.prod(IMAGE_SHAPE))
SIG = f"{D}x1000,1000x1000,1000x1"   # Haim et al.'s MLP on CIFAR-10


def _cell(n, setting, recovered, start, signature_=SIG):
  return power.calibration_cell(
      signature_=signature_, architecture="MLP", p=4_074_000, d=D, n=n, setting=setting,
      values=B9DFYSPX, seeds=range(len(recovered)), recovered=recovered, start=start)


def _table(tmp_path, cells) -> dict:
  """A calibration table written to and read back from a file, as `make power` writes it."""
  path = tmp_path / "power.json"
  files.write_json(str(path), {"format": power.FORMAT, "provenance": {"utc": "test"},
                               "criterion": {"count": "best buddies", "ssim_level": 0.4,
                                             "window": 11},
                               "cells": cells, "premise_threshold": None})
  return power.load_table(str(path))


def test_without_a_table_the_statement_says_power_is_not_measured(tmp_path, monkeypatch):
  """No table (a file that does not exist, or none in the package: the shipped name
  pointed elsewhere) reads "not measured", never a count."""
  assert power.load_table(str(tmp_path / "absent.json")) is None
  monkeypatch.setattr(power, "TABLE", "no_such_table.json")
  assert power.load_table() is None
  text = power.statement(SIG, 100, recovered=0)
  assert text.startswith("power not measured") and power.NOT_EVIDENCE in text
  (tmp_path / "bad.json").write_text(json.dumps({"cells": []}))
  with pytest.raises(ValueError, match="not a trdr power table"):
    power.load_table(str(tmp_path / "bad.json"))


def test_the_statement_reads_the_nearest_calibrated_cell(tmp_path):
  table = _table(tmp_path, [_cell(100, "b9dfyspx", [13, 20, 17], [0, 1, 0]),
                            _cell(100, "tuned", [15, 22, 18], [0, 1, 0]),
                            _cell(10, "b9dfyspx", [8, 8, 7], [0, 0, 1])])
  text = power.statement(SIG, 100, table=table, setting="b9dfyspx")
  assert text == ("on trdr's own victims of this architecture at n = 100 this attack recovers "
                  "13–20 of 100 at Haim et al.'s published settings (b9dfyspx) (3 seeds; "
                  "start images 0–1) (best buddies, SSIM ≥ 0.4, window 11)")
  both = power.statement(SIG, 100, table=table)
  assert "13–20 of 100 at Haim et al.'s" in both and "15–22 of 100 at settings tuned" in both
  # n = 120: 100 is the nearest calibrated size (|log 100/120| < |log 10/120|), named as such.
  near = power.statement(SIG, 120, recovered=0, table=table, setting="b9dfyspx")
  assert "at n = 100, the calibrated size nearest this run's n = 120," in near
  assert near.endswith("; this run recovers 0 of 120, below every calibrated seed (counts of "
                       "different n)")
  assert "within the calibrated range" in power.statement(SIG, 100, 13, table=table)
  # n = 201 is more than N_FACTOR = 2 from 100: not measured there.
  far = power.statement(SIG, 201, table=table)
  assert far.startswith("power not measured for this architecture at n = 201 (calibrated at "
                        "n = 10, 100)")
  # Another architecture, or a setting not calibrated: not measured.
  assert power.statement("3072x32,32x32,32x1", 100, table=table) == (
      "power not measured for this architecture: a 0 is not evidence of privacy")
  assert "at settings 'other'" in power.statement(SIG, 100, table=table, setting="other")
  with pytest.raises(ValueError, match="recovered must lie in"):
    power.statement(SIG, 10, recovered=11, table=table)
  with pytest.raises(ValueError, match="positive number"):
    power.statement(SIG, 0, table=table)


def test_a_cell_no_better_than_its_start_images_has_no_power(tmp_path):
  """A cell whose recovered count never exceeds its start images' maximum says so: its 0
  is not evidence."""
  table = _table(tmp_path, [_cell(50, "b9dfyspx", [0, 1, 0], [1, 0, 0])])
  text = power.statement(SIG, 50, table=table)
  assert text.endswith("(3 seeds; start images 0–1, no more than its start images) (best "
                       "buddies, SSIM ≥ 0.4, window 11): it has no measured power here and a "
                       "0 is not evidence of privacy")
  # Beside a setting that has power, only the powerless one is marked.
  table = _table(tmp_path, [_cell(50, "b9dfyspx", [0, 1, 0], [1, 0, 0]),
                            _cell(50, "tuned", [4, 6, 5], [1, 0, 0])])
  text = power.statement(SIG, 50, table=table)
  assert text.count("no more than its start images") == 1 and "no measured power" not in text


def test_nearest_breaks_a_tie_towards_the_larger_n_and_keeps_the_factor_two_boundary():
  """n = 20 lies a factor 2 from both 10 and 40 (|log 2| each): the larger n, where the
  attack has less power (the conservative reading of a 0), wins; a factor of exactly 2 is
  still near (the boundary included), a factor above it not."""
  table = {"cells": [_cell(10, "b9dfyspx", [5], [0]), _cell(40, "b9dfyspx", [2], [0])]}
  assert [c["n"] for c in power.nearest(table, SIG, 20)] == [40]
  assert [c["n"] for c in power.nearest(table, SIG, 80)] == [40]
  assert power.nearest(table, SIG, 81) == []
  assert [c["n"] for c in power.nearest(table, SIG, 5)] == [10]
  assert power.nearest(table, SIG, 4) == []


def test_a_trdr_mlp_and_the_same_mlp_loaded_from_a_pytorch_state_dict_share_a_signature(
    tmp_path):
  """The signature is θ*'s kernel shapes in the network's order: a trdr HaimMLP, and the
  same architecture written as Haim et al.'s PyTorch state_dict (``layers.k.weight``
  float[out, in], read by `trdr.victim.pretrained` as users' files are) give the same; a
  width changed gives another, and a raw state_dict (no kernels) is refused."""
  config = ml_collections.ConfigDict({"arch": "haim_mlp", "widths": (16, 8),
                                      "activation": "relu", "all_biases": False,
                                      "num_outputs": 1})
  theta = models.init_params(models.build_model(config), jax.random.key(0), IMAGE_SHAPE,
                             jnp.float32)
  assert power.signature(theta) == f"{D}x16,16x8,8x1"
  assert power.signature({"params": theta}) == power.signature(theta)
  rng = np.random.default_rng(0)
  state = {"layers.0.weight": rng.normal(size=(16, D)), "layers.0.bias": rng.normal(size=16),
           "layers.1.weight": rng.normal(size=(8, 16)), "layers.2.weight": rng.normal(size=(1, 8))}
  np.savez(tmp_path / "model.npz", **state)
  found = pretrained.layers(pretrained.read(str(tmp_path / "model.npz")), IMAGE_SHAPE)
  loaded = pretrained.params(found, pretrained.architecture(found, config), jnp.float32)
  assert power.signature(loaded) == power.signature(theta)
  # The order is the network's, not the names' (dense_10 after dense_9, output last).
  many = {f"dense_{k}": {"kernel": np.zeros((k + 1, k + 2))} for k in range(11)}
  many["output"] = {"kernel": np.zeros((12, 1))}
  assert power.signature(dict(reversed(list(many.items())))).split(",")[-2:] == ["11x12",
                                                                                 "12x1"]
  wider = ml_collections.ConfigDict({**config.to_dict(), "widths": (16, 9)})
  other = models.init_params(models.build_model(wider), jax.random.key(0), IMAGE_SHAPE,
                             jnp.float32)
  assert power.signature(other) != power.signature(theta)
  with pytest.raises(ValueError, match="no layer with a 'kernel'"):
    power.signature({"layers.0": {"weight": np.zeros((16, D))}})


def _cells(*triples):
  return [{"unexplained": u, "recovered": r, "start": s} for u, r, s in triples]


def test_the_premise_threshold_follows_its_rule():
  """The rule (`premise_threshold`'s docstring) on cells built to give each outcome.

  Separating: the recovering cells (recovered > start) lie at u = 0.10 and 0.20, the two
  others (0 > 0 false; 1 > 1 false) at 0.60 and 0.70: the threshold is the largest
  recovering u, 0.20, and no failing cell lies at or below it, so it separates.
  Adding a failing cell at u = 0.15 (below 0.20) keeps the threshold at 0.20 but breaks
  the separation: 1 failing cell below it, and the wording says the residual alone cannot
  certify privacy. With no recovering cell there is no threshold; with every cell
  recovering there is nothing to separate (None), and nothing was measured above it."""
  separating = _cells((0.10, 5, 0), (0.20, 3, 1), (0.60, 0, 0), (0.70, 1, 1))
  t = power.premise_threshold(separating)
  assert (t["threshold"], t["recovering"], t["failing_below"], t["separates"]) == (
      0.20, 2, 0, True)
  assert t["range"] == [0.10, 0.70] and "cannot certify" not in t["warning"]
  assert "more than 0.20 of the first layer unexplained" in t["warning"]
  mixed = power.premise_threshold(separating + _cells((0.15, 0, 0)))
  assert (mixed["threshold"], mixed["failing_below"], mixed["separates"]) == (0.20, 1, False)
  assert "does not separate" in mixed["reading"]
  assert "the residual alone cannot certify privacy" in mixed["warning"]
  none = power.premise_threshold(_cells((0.1, 0, 0), (0.3, 2, 2)))
  assert none["threshold"] is None and none["recovering"] == 0 and not none["separates"]
  every = power.premise_threshold(_cells((0.1, 3, 0), (0.3, 2, 1)))
  assert every["threshold"] == 0.3 and every["separates"] is None
  assert "beyond every calibrated victim" in every["warning"]
  with pytest.raises(ValueError, match="no calibrated cells"):
    power.premise_threshold([])
  with pytest.raises(ValueError, match=r"\[0, 1\]"):
    power.premise_threshold(_cells((1.5, 1, 0)))


def test_the_configs_grid_is_checked():
  from trdr.studies import power as study   # noqa: PLC0415
  for variant in power_config.VARIANTS:
    config = power_config.get_config(variant)
    study.check(config)
    assert study.settings(config) == ["b9dfyspx", power_config.TUNED]
    assert config.decoreco.victim.arch == "haim_mlp"
  config = power_config.get_config("smoke")
  # The in-run score's k fits the smallest n (k ≤ n training images).
  assert study.cell_config(config, 4, 0).eval.score_k == 4
  assert study.cell_config(config, 8, 1).data.n_per_class == 4
  for ns in ((5, 10), (10, 10), (0,)):
    config.ns = ns
    with pytest.raises(ValueError, match="distinct even sizes"):
      study.check(config)
  with pytest.raises(ValueError, match="unknown config variant"):
    power_config.get_config("paper")


@pytest.mark.slow  # two smoke victims, two sweeps and four short DecoReco runs
def test_the_smoke_study_writes_its_rows_table_and_page(tmp_path):
  from trdr import experiment, report   # noqa: PLC0415
  from trdr.studies import power as study   # noqa: PLC0415
  config = power_config.get_config("smoke")
  config.decoreco.attack.steps = config.decoreco.attack.log_every = 10
  # The sweep tries one setting, Haim et al.'s other published run (k60fvjdy): "tuned" is
  # then that setting, known in advance.
  k60 = tuple(config.decoreco.sweep.include[1])
  config.decoreco.sweep.include, config.decoreco.sweep.num_settings = (k60,), 1
  config.decoreco.sweep.steps = 10
  workdir = tmp_path / "study"
  rows = study.run(config, str(workdir))
  assert [study._key(r) for r in rows] == [(n, 0, s) for n in (4, 8)
                                           for s in ("b9dfyspx", "tuned")]
  key = f"ssim_ge_{config.eval.ssim_level:g}"
  saved_truth = lambda r: files.read_json(workdir / r["run"] / "config.json")["attack"][
      "truth_diagnostic"]
  for r in rows:
    summary = files.read_json(workdir / r["run"] / experiment.SUMMARY_FILE)
    assert r["recovered"]["w11_bb"] == summary["reconstructed_best_buddies"][key]
    assert r["start_recovered"]["w3_bb"] == summary["start_reconstructed_best_buddies_w3"][key]
    assert r["kkt"] == summary["kkt_premise"]
    assert r["truth"] == summary.get("truth")
    if "truth_diagnostic" in config.decoreco.attack:   # trdr.attacks.truth, at its settings
      assert (r["truth"] is not None) == (r["setting"] in config.truth_settings)
      assert saved_truth(r) == (r["setting"] in config.truth_settings)
    assert r["signature"] == f"{D}x32,32x32,32x1" and r["d"] == D
    assert r["p"] == D * 32 + 32 + 32 * 32 + 32 and r["ratio"] == r["p"] / (D * r["n"])
    assert r["candidates"] == 2 * r["n"] and r["steps"] == 10
    saved = files.read_json(workdir / r["run"] / "config.json")
    assert saved["victim"]["checkpoint_dir"] == study.victim_dir(str(workdir), r["n"], 0)
    expected = B9DFYSPX if r["setting"] == "b9dfyspx" else k60
    np.testing.assert_allclose(r["values"], expected, rtol=1e-6)
    assert [saved["attack"][k] for k in study.HPARAMS] == pytest.approx(expected, rel=1e-6)
  # Both settings' runs attack the one victim of (n, seed), trained once.
  assert sorted(p.parent.name for p in workdir.glob("victims/*/victim.msgpack")) == [
      "n4_seed0", "n8_seed0"]
  assert json.loads((workdir / study.ROWS_FILE).read_text()) == files.to_jsonable(rows)
  # A rerun reuses every finished row: nothing is trained, swept or attacked again.
  before = {p: p.stat().st_mtime_ns for p in workdir.rglob("summary.json")}
  assert study.run(config, str(workdir)) == rows
  assert {p: p.stat().st_mtime_ns for p in workdir.rglob("summary.json")} == before

  provenance = report.provenance("smoke")
  table = study.calibration(rows, config, provenance)
  files.write_json(str(tmp_path / "power.json"), table)
  table = power.load_table(str(tmp_path / "power.json"))
  assert [(c["n"], c["setting"]) for c in table["cells"]] == [
      (4, "b9dfyspx"), (4, "tuned"), (8, "b9dfyspx"), (8, "tuned")]
  by = {(r["n"], r["setting"]): r for r in rows}
  for c in table["cells"]:
    r = by[c["n"], c["setting"]]
    assert c["recovered"] == {k: float(r["recovered"]["w11_bb"]) for k in ("min", "max", "mean")}
    assert c["start"]["max"] == r["start_recovered"]["w11_bb"]
  assert table["premise_threshold"]["cells"] == 4
  text = power.statement(f"{D}x32,32x32,32x1", 8, table=table, setting="b9dfyspx")
  assert text.startswith("on trdr's own victims of this architecture at n = 8 this attack "
                         f"recovers {by[8, 'b9dfyspx']['recovered']['w11_bb']} of 8")

  page = study.markdown(rows, config, provenance)
  line = next(x for x in page.splitlines() if x.startswith("| 8 | "))
  r = by[8, "b9dfyspx"]
  assert line.startswith(f"| 8 | {r['ratio']:.3g} | b9dfyspx | {r['recovered']['w11_bb']} / "
                         f"{r['recovered']['w3_bb']} | {r['start_recovered']['w11_bb']} / ")
  assert "4 runs of 4" in page and "## The premise warning's threshold" in page
  assert "## Reading" in page and "Not run yet" not in page
  fig = study.figure(rows, config, table["premise_threshold"])
  assert len(fig.axes) >= 2
  # Another seed is named as missing; other settings in the same directory are refused.
  config.seeds = (0, 1)
  assert "n = 8 / seed 1 / tuned" in study.markdown(rows, config, provenance)
  config.eval.ssim_level = 0.5
  with pytest.raises(FileExistsError, match="ssim_level"):
    study.run(config, str(workdir))


@pytest.mark.slow  # one smoke victim, a one-setting sweep and one short DecoReco run
def test_a_tuned_setting_equal_to_the_published_one_reuses_its_run(tmp_path):
  """The sweep's only setting is b9dfyspx itself: "tuned" reuses that run (same_as), and
  the threshold counts the run once."""
  from trdr.studies import power as study   # noqa: PLC0415
  config = power_config.get_config("smoke")
  config.ns = (4,)
  config.decoreco.attack.steps = config.decoreco.attack.log_every = 10
  config.decoreco.sweep.include, config.decoreco.sweep.num_settings = (B9DFYSPX,), 1
  config.decoreco.sweep.steps = 10
  rows = study.run(config, str(tmp_path))
  published, tuned = rows
  assert tuned["same_as"] == "b9dfyspx" and tuned["run"] == published["run"]
  assert tuned["recovered"] == published["recovered"] and tuned["tuned_on"] == 0
  assert not (tmp_path / "runs" / "n4_seed0_tuned").exists()
  assert study.threshold(rows)["cells"] == 1
  assert math.isclose(study.first_layer(tuned), study.first_layer(published))


def _row(n, seed, setting, u, recovered, start, verdict=None, same_as=None, truth_start=None):
  """A synthetic row of the power study (`trdr.studies.power`), as its page reads it."""
  truth = None if verdict is None else {
      "verdict": verdict, "loss_at_truth": 1.0, "loss_reached": 2.0,
      "loss_reached_lambda_fitted": 1.5, "truth_start": truth_start or {"kept": 3, "n": n},
      "seconds": 9.0}
  return {"n": n, "seed": seed, "setting": setting, "values": list(B9DFYSPX),
          "same_as": same_as, "tuned_on": 0, "signature": SIG, "architecture": "MLP",
          "p": 4_074_000, "d": D, "ratio": 4_074_000 / (D * n), "candidates": 2 * n,
          "steps": 40, "kkt": {"first_layer": "dense_0/kernel",
                               "relative": {"dense_0/kernel": u}, "relative_total": u},
          "recovered": {"w11": recovered, "w3": recovered, "w11_bb": recovered,
                        "w3_bb": recovered},
          "start_recovered": {"w11": start, "w3": start, "w11_bb": start, "w3_bb": start},
          "truth": truth, "haim": None, "start_haim": None, "final_loss": 3.0,
          "victim_seconds": 1.0, "attack_seconds": 2.0, "truth_seconds": truth and 9.0,
          "run": "runs/x"}



def test_the_page_states_the_threshold_and_each_seeds_truth_verdict():
  """The page from synthetic rows: the truth verdict per seed (a tuned run that reused the
  published one not shown twice), and, where a non-recovering cell lies below the largest
  unexplained fraction that still recovers (0.30 < 0.40 here), the threshold 0.400 with the
  words that the residual alone cannot certify privacy."""
  from trdr import report   # noqa: PLC0415
  from trdr.studies import power as study   # noqa: PLC0415
  config = power_config.get_config("smoke")
  config.seeds = (0, 1)

  rows = [_row(4, 0, "b9dfyspx", 0.40, 2, 0, "search"), _row(4, 0, "tuned", 0.40, 2, 0,
                                                            "search", same_as="b9dfyspx"),
          _row(8, 0, "b9dfyspx", 0.30, 0, 0, "objective"), _row(8, 0, "tuned", 0.5, 0, 1),
          _row(4, 1, "b9dfyspx", 0.20, 3, 1, "search"), _row(4, 1, "tuned", 0.2, 3, 1)]
  page = study.markdown(rows, config, report.provenance("smoke"), figure_written=False)
  truth_rows = [x for x in page.splitlines() if x.startswith(("| 4 | b9dfyspx | search",
                                                              "| 8 | b9dfyspx |", "| 4 | tuned |"))]
  # seed 0's verdict at n = 4 against the lower of 2.0 and 1.5; seed 1's too; n = 8 has seed 0
  assert truth_rows[-2:] == [
      "| 4 | b9dfyspx | search (at truth 1 vs reached 1.5; kept 3 of 4) | search (at truth 1 "
      "vs reached 1.5; kept 3 of 4) |",
      "| 8 | b9dfyspx | objective (at truth 1 vs reached 1.5; kept 3 of 8) | — |"]
  # Cells counted once each (5: the reused tuned run not again): recovering at u 0.40 and
  # 0.20 (and 0.20 tuned), failing at 0.30 (below 0.40) and 0.50.
  assert "Cells: 5, recovering: 3" in page and "Threshold: 0.400" in page
  assert "the residual alone cannot certify privacy" in page
  assert "Not run yet" in page and "n = 8 / seed 1 / b9dfyspx" in page


def test_a_truth_start_run_below_the_search_is_named_in_its_cell_and_the_reading():
  """A run whose truth-start run ends at 1.2, below the loss the verdict compares (the lower
  of 2.0 reached and 1.5 with λ fitted), keeping 3 of 4 (at least half): its cell gives
  that loss and the reading names the cell; kept 1 of 4 (fewer than half), it is not
  named."""
  from trdr import report   # noqa: PLC0415
  from trdr.studies import power as study   # noqa: PLC0415
  config = power_config.get_config("smoke")
  config.seeds = (0,)
  kept = _row(4, 0, "b9dfyspx", 0.2, 2, 0, "objective",
              truth_start={"kept": 3, "n": 4, "loss": 1.2})
  left = _row(8, 0, "b9dfyspx", 0.2, 2, 0, "objective",
              truth_start={"kept": 1, "n": 8, "loss": 1.2})
  page = study.markdown([kept, left], config, report.provenance("smoke"),
                        figure_written=False)
  assert "kept 3 of 4; the truth-start run ends lower, at 1.2 < 1.5)" in page
  assert "kept 1 of 8)" in page
  assert "In 1 of them (n = 4 seed 0 at b9dfyspx)" in page
