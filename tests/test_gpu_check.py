"""`make gpu-check SIZE=smoke` on the CPU: every part of experiments/gpu_check.py runs the
code path of the paper-size GPU check and writes what it measured; a part stopped at its
budget keeps its record; docs/gpu.md is what experiments/gpu_doc.py renders from docs/gpu/.

The notebook part replaces a notebook test of its own: experiments/colab.ipynb runs headless
(nbclient) here, and its printed lines and figures are checked below.
"""

import os
import shutil
import subprocess
import sys

import pytest

from trdr.configs import bilevel_affine
from trdr.studies import readings
from trdr.report import artefacts
from trdr.runtime import files, rundir

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "experiments"))
import gpu_check  # noqa: E402
import gpu_doc  # noqa: E402


@pytest.fixture(scope="module")
def smoke_check(smoke_report_dir, subprocess_env, tmp_path_factory):
  """(work dir, results dir) of `make gpu-check SIZE=smoke`.

  The notebook's bilevel cell reuses a finished landscape.json in its work dir, and the
  :smoke report's `landscape_bilevel` run has exactly the notebook's config
  (bilevel_affine.py:smoke), so it is copied there instead of computed a third time; that
  cell still draws all its figures, and the notebook's DecoReco cell runs from scratch.
  """
  runs = tmp_path_factory.mktemp("runs")
  workdir = runs / "gpu_check_smoke"
  shutil.copytree(artefacts.run_dir(smoke_report_dir, "landscape_bilevel"),
                  workdir / "notebook" / "bilevel_affine")
  assert files.read_json(workdir / "notebook" / "bilevel_affine" / rundir.CONFIG_FILE) == (
      files.to_jsonable(bilevel_affine.get_config("smoke")))
  # LIMIT: this machine's test workers share its cores; the parts take about 2 minutes.
  subprocess.run(["make", "gpu-check", "SIZE=smoke", f"RUNS={runs}", f"PYTHON={sys.executable}",
                  "LIMIT=1200"], cwd=REPO, env=subprocess_env, check=True)
  (results,) = (workdir / "results").iterdir()      # one folder per call
  return workdir, results


def test_every_part_finishes_and_says_where_it_ran(smoke_check):
  _, results = smoke_check
  env = files.read_json(results / "environment.json")
  assert env["backend"] == "cpu" and env["size"] == "smoke" and env["status"] == "finished"
  assert env["caps_seconds"] == gpu_check.CAPS
  for part in gpu_check.PARTS:
    record = files.read_json(results / f"{part}.json")
    assert record["status"] == "finished", record
    # Its own measurement lies inside its process's lifetime, which ended within its cap.
    assert record.get("seconds", 0) <= record["wall_seconds"] <= gpu_check.CAPS[part]
  assert (results / "log.txt").stat().st_size > 0


def test_decoreco_part_counts_what_the_run_found(smoke_check):
  workdir, results = smoke_check
  record = files.read_json(results / "decoreco.json")
  config = files.read_json(workdir / "decoreco" / rundir.CONFIG_FILE)
  summary = files.read_json(workdir / "decoreco" / "summary.json")
  # Haim et al.'s published run reached the attack that ran.
  for key in ("init_scale", "lr", "lambda_min", "alpha"):
    assert config["attack"][key] == gpu_check.PUBLISHED_RUN[key]
  assert record["candidates"] == summary["candidates"] == 2 * record["n_train"]
  assert record["steps"] == summary["steps"]
  t = f"ssim_ge_{gpu_check.SSIM_THRESHOLD}"
  assert record["reconstructed"]["window_11"] == summary["reconstructed"][t]
  assert record["reconstructed"]["window_3"] == summary["reconstructed_w3"][t]
  assert record["start_reconstructed"]["window_3"] == summary["start_reconstructed_w3"][t]
  for counts in (record["reconstructed"], record["start_reconstructed"]):
    for window in ("11", "3"):
      # A best buddy at SSIM ≥ t is one of the training images matched at SSIM ≥ t.
      assert 0 <= counts[f"best_buddies_window_{window}"] <= counts[f"window_{window}"]
      assert counts[f"window_{window}"] <= record["n_train"]
  timing = record["iteration_ms"]
  assert timing["trdr"] > 0
  torch_there = "reference" in timing
  assert (record["reference_over_trdr"] is not None) == torch_there
  if torch_there:
    assert record["reference_over_trdr"] == pytest.approx(timing["reference"] / timing["trdr"],
                                                          rel=1e-12)
  with open(results / "decoreco_grid.png", "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_one_hidden_part_reports_every_reading_and_why_each_solve_stopped(smoke_check):
  _, results = smoke_check
  r = files.read_json(results / "one_hidden.json")
  width = r["width"]
  assert r["activation"] == "relu"
  assert r["parameters"] == 32 * 32 * 3 * width + 2 * width + 1    # eq. 9: W1, b1, w2, b2
  assert set(r["readings"]) == set(readings.READINGS)
  for sets in r["readings"].values():
    assert set(sets) == set(readings.IMAGE_SETS)
    for solve in sets.values():
      assert solve["distance"] >= 0
      assert solve["distance_per_parameter"] == pytest.approx(
          solve["distance"] / r["parameters"], rel=1e-12)
      assert solve["stopped"] == gpu_check._stop_reason(  # pylint: disable=protected-access
          solve["grad_norm"], solve["num_iter"], r["tol"], r["max_iter"])
      assert solve["num_iter"] <= r["max_iter"]
  for victim in r["victims"].values():
    assert victim["stopped"] == gpu_check._stop_reason(  # pylint: disable=protected-access
        victim["grad_norm"], victim["num_iter"], r["tol"], r["max_iter"])
  assert r["x_gt_minimises"] == readings.minimiser_readings(r["readings"],
                                                            r["minimiser_tolerance"])
  assert r["paper_table1"] == artefacts.PAPER_TABLE1["one_hidden"]


def test_notebook_part_runs_every_cell_headless(smoke_check):
  _, results = smoke_check
  r = files.read_json(results / "notebook.json")
  text = r["printed"]
  assert r["backend"] == "cpu" and r["notebook_size"] == "smoke"
  assert "backend: cpu" in text and "size: smoke" in text
  assert r["reused"] == ["bilevel_affine/landscape.json"]
  assert text.count("||θ* − θ||²") == 9          # the 3×3 smoke grid, printed
  assert "training images reconstructed" in text
  assert r["figures"] == 10                       # 6 landscape + 4 DecoReco figures
  for name in ("bilevel_affine/fig10_heatmaps.png", "decoreco/summary.json"):
    assert name in r["files"]
  assert len(r["cell_seconds"]) == 6 and all(s is not None and s >= 0 for s in r["cell_seconds"])


def test_the_doc_renders_a_smoke_check(smoke_check):
  workdir, results = smoke_check
  text = gpu_doc.render(str(results.parent), None, str(workdir / "gpu.md"))
  record = files.read_json(results / "decoreco.json")
  assert text.count("## Part") == 3
  assert f"| SSIM ≥ 0.4 (window 11) | {record['reconstructed']['window_11']} | " in text
  assert "Not run on a GPU yet." not in text


@pytest.mark.slow
def test_a_part_past_its_budget_is_stopped_and_keeps_its_record(subprocess_env, tmp_path):
  # 8 s: at most the environment part and the start of one_hidden's process fit; its two
  # victims' training and twelve re-solves, each compiled for seconds, do not. With an
  # empty compilation cache of its own: from the session's, a process that loads every
  # program compiled (a second session on this machine) finishes in the seconds left.
  env = {**subprocess_env, "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "empty_xla_cache")}
  subprocess.run([sys.executable, os.path.join(REPO, "experiments", "gpu_check.py"),
                  "--size=smoke", "--parts=one_hidden", "--limit=8",
                  f"--workdir={tmp_path}"], cwd=REPO, env=env, check=True)
  (results,) = (tmp_path / "results").iterdir()
  record = files.read_json(results / "one_hidden.json")
  assert record["status"] == "stopped"
  assert "ran out" in record["reason"] or "limit" in record["reason"]
  # A second call into the same --output refuses before it writes anything.
  again = subprocess.run([sys.executable, os.path.join(REPO, "experiments", "gpu_check.py"),
                          "--size=smoke", "--parts=one_hidden", f"--output={results}"],
                         cwd=REPO, env=subprocess_env, capture_output=True, text=True)
  assert again.returncode != 0 and "holds files already" in again.stderr
  assert files.read_json(results / "one_hidden.json") == record


def test_docs_gpu_md_is_what_gpu_doc_renders_from_docs_gpu(monkeypatch):
  """docs/gpu.md is generated (`make gpu-doc`): edited by hand or left behind a new call's
  files, it differs from its rendering."""
  monkeypatch.chdir(REPO)     # the page names its folder as `make gpu-doc` passes it
  expected = gpu_doc.render(os.path.join("docs", "gpu"),
                            os.path.join("docs", "gpu", "cpu_decoreco_summary.json"),
                            os.path.join("docs", "gpu.md"))
  with open(os.path.join(REPO, "docs", "gpu.md"), encoding="utf-8") as f:
    assert f.read() == expected
