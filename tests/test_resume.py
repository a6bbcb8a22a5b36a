"""A landscape run killed with SIGKILL part-way resumes to the uninterrupted run's files."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from trdr import experiment
from trdr.configs import bilevel_affine
from trdr.report import artefacts
from trdr.runtime import files, rundir

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _command(workdir, *extra):
  """The :smoke landscape, exactly as the :smoke report ran it (artefacts.RUNS)."""
  return [sys.executable, os.path.join(REPO, "experiments", "landscape.py"),
          f"--config={os.path.join(REPO, 'configs', 'bilevel_affine.py')}:smoke",
          f"--workdir={workdir}", *extra]


def _results(workdir):
  with experiment.load_results(workdir) as f:
    return dict(f)


def _without_timing(records):
  return [{k: v for k, v in r.items() if k != "seconds_per_step"} for r in records]


@pytest.mark.slow
def test_sigkilled_run_resumes_to_the_same_results(smoke_report_dir, subprocess_env,
                                                    tmp_path, processes):
  """SIGKILL right after the first chunk was checkpointed, start the same command again:
  results.npz bitwise equal to an uninterrupted run's, the same landscape.json, one
  metrics line per logged step. A finished run is then refused without --overwrite.

  The uninterrupted run is the :smoke report's (conftest.py), with the same config, so
  only the killed run and its resumption run here.
  """
  reference = artefacts.run_dir(smoke_report_dir, "landscape_bilevel")
  killed = tmp_path / "killed"
  proc = subprocess.Popen(_command(killed), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, cwd=REPO, env=subprocess_env)
  processes.append(proc)
  deadline = time.time() + 300
  while not os.path.exists(killed / rundir.CHECKPOINT_FILE):
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    assert time.time() < deadline, "no checkpoint within 300 s"
    time.sleep(0.005)
  os.kill(proc.pid, signal.SIGKILL)
  proc.communicate(timeout=60)
  assert proc.returncode == -signal.SIGKILL
  assert files.read_json(killed / rundir.CONFIG_FILE) == files.read_json(
      os.path.join(reference, rundir.CONFIG_FILE))
  assert not os.path.exists(killed / "landscape.json")
  assert not os.path.exists(killed / "results.npz")
  # Killed during the attack as a rule (its 30 steps take about a second after the first
  # checkpoint, the evaluation after them ten), often before the checkpointed chunk's
  # metrics line: the resumed run must still log that chunk once.
  killed_at = len(rundir.read_metrics(killed))

  resume = subprocess.run(_command(killed), capture_output=True, text=True, cwd=REPO,
                          env=subprocess_env, timeout=600)
  assert resume.returncode == 0, resume.stderr[-3000:]
  assert "Resuming from step" in resume.stderr and "Reusing θ*" in resume.stderr
  expected, resumed = _results(reference), _results(killed)
  assert resumed.keys() == expected.keys()
  for name in expected:
    assert resumed[name].dtype == expected[name].dtype, name
    assert np.array_equal(resumed[name], expected[name],
                          equal_nan=resumed[name].dtype.kind == "f"), name
  assert files.read_json(killed / "landscape.json") == files.read_json(
      os.path.join(reference, "landscape.json"))
  # One line per logged step, no duplicate or lost chunk, with the uninterrupted numbers.
  expected_metrics = _without_timing(rundir.read_metrics(reference))
  assert [r["step"] for r in expected_metrics] == [10, 20, 30]
  assert _without_timing(rundir.read_metrics(killed)) == expected_metrics
  print(f"killed after {killed_at} of 3 metrics lines")

  # The resumed run, finished, is left alone without --overwrite. `experiment.run` here,
  # the function the command runs, not a third process (seconds of imports): the command
  # line's refusal of a finished run, its exit status and message, is
  # test_landscape.py::test_command_line_with_user_npz_and_class_override's (--overwrite too).
  before = (killed / "results.npz").read_bytes()
  with pytest.raises(FileExistsError, match="finished run .*--overwrite"):
    experiment.run(bilevel_affine.get_config("smoke"), str(killed), "landscape")
  assert (killed / "results.npz").read_bytes() == before


def test_metrics_file_survives_a_kill_mid_append(tmp_path):
  """A line cut short by a kill is skipped when read and replaced on resume; a corrupt
  line before others is an error, not silently dropped."""
  rundir.write_metrics(tmp_path, [{"step": 1}, {"step": 2}])
  with open(tmp_path / rundir.METRICS_FILE, "a") as f:
    f.write('{"step": 3, "upper_lo')
  assert rundir.read_metrics(tmp_path) == [{"step": 1}, {"step": 2}]
  rundir.write_metrics(tmp_path, rundir.read_metrics(tmp_path))
  rundir.append_metrics(tmp_path, [{"step": 3}])
  assert [r["step"] for r in rundir.read_metrics(tmp_path)] == [1, 2, 3]
  (tmp_path / rundir.METRICS_FILE).write_text('{"step": 1}\n{"ste\n{"step": 3}\n')
  with pytest.raises(ValueError):
    rundir.read_metrics(tmp_path)
  assert rundir.read_metrics(tmp_path / "missing") == []
