"""A landscape run killed with SIGKILL part-way resumes to the uninterrupted run's files."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from trdr import io

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 30


def _command(workdir, *extra):
  return [sys.executable, os.path.join(REPO, "experiments", "landscape.py"),
          f"--config={os.path.join(REPO, 'configs', 'bilevel_affine.py')}:smoke",
          f"--workdir={workdir}", f"--config.attack.steps={STEPS}",
          "--config.data.n_per_class=10",            # the protocol, not the size, is tested
          "--config.attack.log_every=1", *extra]


def _start(workdir, *extra):
  return subprocess.Popen(_command(workdir, *extra), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, cwd=REPO)


def _finish(proc, timeout=300):
  out, err = proc.communicate(timeout=timeout)
  assert proc.returncode == 0, err[-3000:]
  return err


def _results(workdir):
  with np.load(os.path.join(workdir, "results.npz")) as f:
    return {k: f[k] for k in f.files}


def _without_timing(records):
  return [{k: v for k, v in r.items() if k != "seconds_per_step"} for r in records]


@pytest.fixture
def processes():
  """Started subprocesses, killed if the test ends before they do."""
  started = []
  yield started
  for proc in started:
    if proc.poll() is None:
      proc.kill()
    proc.communicate()


def test_sigkilled_run_resumes_to_the_same_results(tmp_path, processes):
  """SIGKILL after a chunk was checkpointed, start the same command again: results.npz
  bitwise equal to an uninterrupted run's, the same landscape.json, one metrics line per
  step. A finished run is refused without --overwrite and recomputed with it.

  Two runs go at a time (2 cores): the killed/resumed one beside the uninterrupted one,
  which is then refused and overwritten.
  """
  killed, reference = tmp_path / "killed", tmp_path / "reference"
  uninterrupted = _start(reference)
  proc = _start(killed)
  processes += [uninterrupted, proc]
  deadline = time.time() + 300
  while not os.path.exists(killed / io.CHECKPOINT_FILE):
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    assert time.time() < deadline, "no checkpoint within 300 s"
    time.sleep(0.01)
  os.kill(proc.pid, signal.SIGKILL)
  proc.communicate(timeout=60)
  assert proc.returncode == -signal.SIGKILL
  assert not os.path.exists(killed / "landscape.json")
  assert not os.path.exists(killed / "results.npz")
  # Killed during the attack. Often right after the first checkpoint and before its
  # metrics line: the resumed run must still log that chunk once.
  assert len(io.read_metrics(killed)) < STEPS
  resume = _start(killed)
  processes.append(resume)

  _finish(uninterrupted)
  expected = _results(reference)
  expected_records = io.read_json(reference / "landscape.json")
  expected_metrics = _without_timing(io.read_metrics(reference))
  assert expected["history_upper_loss"].shape == (9, STEPS)
  assert [r["step"] for r in expected_metrics] == list(range(1, STEPS + 1))
  # A finished run is left alone without --overwrite ...
  before = (reference / "results.npz").read_bytes()
  again = subprocess.run(_command(reference), capture_output=True, text=True, cwd=REPO,
                         timeout=300)
  assert again.returncode != 0 and "--overwrite" in again.stderr
  assert (reference / "results.npz").read_bytes() == before
  # ... and recomputed from scratch with it (checked below).
  overwrite = _start(reference, "--overwrite")
  processes.append(overwrite)

  err = _finish(resume)
  assert "Resuming from step" in err and "Reusing θ*" in err
  resumed = _results(killed)
  assert resumed.keys() == expected.keys()
  for name in expected:
    assert resumed[name].dtype == expected[name].dtype, name
    assert np.array_equal(resumed[name], expected[name]), name
  assert io.read_json(killed / "landscape.json") == expected_records
  # One line per step, no duplicate or lost chunk, with the uninterrupted run's numbers.
  assert _without_timing(io.read_metrics(killed)) == expected_metrics

  err = _finish(overwrite)
  assert "Resuming" not in err and f"step 1/{STEPS} " in err
  rerun = _results(reference)
  assert all(np.array_equal(rerun[name], expected[name]) for name in expected)
  assert _without_timing(io.read_metrics(reference)) == expected_metrics


def test_metrics_file_survives_a_kill_mid_append(tmp_path):
  """A line cut short by a kill is skipped when read and replaced on resume; a corrupt
  line before others is an error, not silently dropped."""
  io.write_metrics(tmp_path, [{"step": 1}, {"step": 2}])
  with open(tmp_path / io.METRICS_FILE, "a") as f:
    f.write('{"step": 3, "upper_lo')
  assert io.read_metrics(tmp_path) == [{"step": 1}, {"step": 2}]
  io.write_metrics(tmp_path, io.read_metrics(tmp_path))
  io.append_metrics(tmp_path, {"step": 3})
  assert [r["step"] for r in io.read_metrics(tmp_path)] == [1, 2, 3]
  (tmp_path / io.METRICS_FILE).write_text('{"step": 1}\n{"ste\n{"step": 3}\n')
  with pytest.raises(ValueError):
    io.read_metrics(tmp_path)
  assert io.read_metrics(tmp_path / "missing") == []
