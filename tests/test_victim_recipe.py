"""The victim-recipe ablation (`trdr.studies.victim_recipe`) at a toy size: its cells, the
continued training, the reuse of finished cells and the page."""

import json

import pytest

from trdr import report, victim
from trdr.configs import victim_recipe as recipe_config
from trdr.studies import victim_recipe


def _config():
  config = recipe_config.get_config("smoke")
  config.seeds = (0,)
  config.times = ("loss", 400.0)
  config.decoreco.attack.steps = config.decoreco.attack.log_every = 10
  return config


@pytest.mark.slow  # four smoke victims' training and four short attacks
def test_cells_are_run_once_continued_and_written(tmp_path):
  config = _config()
  rows = victim_recipe.run(config, str(tmp_path))
  assert sorted(victim_recipe._key(r) for r in rows) == sorted(
      (i, str(t), 0, "b9dfyspx") for i in ("pytorch", "flax") for t in ("loss", 400.0))
  for init in ("pytorch", "flax"):
    by = {str(r["time"]): r for r in rows if r["init"] == init}
    # The 400 cell continues the loss cell: its epochs are ⌈400 / lr⌉ in all.
    assert by["400.0"]["epochs"] == round(400.0 / config.decoreco.victim.lr)
    assert by["loss"]["epochs"] < by["400.0"]["epochs"]
    assert by["400.0"]["flow_time"] == pytest.approx(400.0)
    saved = victim.load_metadata(str(tmp_path / "victims" / f"{init}_t400.0_seed0"))
    assert saved["config"]["later_init"] == init and saved["config"]["flow_time"] == 400.0
    for r in by.values():
      assert 0 <= r["kkt"]["relative_total"] <= 1
      assert set(r["recovered"]) == set(r["start_recovered"]) == {"w11", "w3", "w11_bb",
                                                                    "w3_bb"}
  written = json.loads((tmp_path / victim_recipe.ROWS_FILE).read_text())
  assert len(written) == 4
  # A rerun reuses every finished cell: nothing is trained or attacked again.
  before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("victim.msgpack")}
  assert victim_recipe.run(config, str(tmp_path)) == written
  assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("victim.msgpack")} == before
  page = victim_recipe.markdown(written, config, report.provenance("smoke"))
  assert page.count("| pytorch |") == 2 and page.count("| flax |") == 2
  assert "## Reading" in page and "of 1 seeds" not in page
  # Other settings in the same directory are refused, naming the key.
  config.times = ("loss", 800.0)
  with pytest.raises(FileExistsError, match="times"):
    victim_recipe.run(config, str(tmp_path))


def test_times_that_do_not_increase_are_refused(tmp_path):
  config = _config()
  config.times = ("loss", 1.0)   # the loss stop at :smoke is past time 1
  with pytest.raises(ValueError, match="config.times must increase"):
    victim_recipe.run(config, str(tmp_path))


def test_the_reading_says_more_or_fewer_best_buddies_not_a_signed_count():
  """docs/victim_recipe.md printed "it recovers -18 best buddies": a difference read as a
  count. PyTorch's cells at 2 and 3 best buddies against Flax's 12 and 11 read "18 fewer
  best buddies … than Flax's"; equal counts "as many … as"."""
  config = _config()
  config.seeds = (0, 1)
  config.times = ("loss",)

  def row(init, seed, buddies):
    return {"init": init, "time": "loss", "seed": seed, "setting": next(iter(config.settings)),
            "kkt": {"first_layer": "d", "relative": {"d": 0.1}, "residual_total": 1.0},
            "recovered": {"w11_bb": buddies}, "final_loss": 2.0}

  rows = [row("pytorch", 0, 2), row("pytorch", 1, 3), row("flax", 0, 12), row("flax", 1, 11)]
  text = victim_recipe.reading(rows, config)
  assert "it recovers 18 fewer best buddies (w11) in total than Flax's" in text, text
  assert "-18" not in text
  rows[0]["recovered"]["w11_bb"], rows[1]["recovered"]["w11_bb"] = 12, 11
  assert "as many best buddies (w11) in total as Flax's" in victim_recipe.reading(rows, config)
