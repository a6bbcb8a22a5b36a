"""Ctrl-C on an attack with long chunks: the process stops within seconds, writes a
checkpoint of the steps done, and the same command resumes to the uninterrupted run's bits
(issue 87, "a run that talks"; trdr.experiment.loop.run)."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from trdr import experiment
from trdr.experiment import loop
from trdr.runtime import rundir

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# One chunk of all the steps: before issue 87 the first progress line, the first
# checkpoint and the reaction to Ctrl-C all came only at its end. 3,000 steps at :smoke
# are 5 to 30 s of attack on a 2-core machine (idle or busy).
STEPS = 3000


def _command(workdir):
  return [sys.executable, os.path.join(REPO, "experiments", "reconstruct.py"),
          f"--config={os.path.join(REPO, 'configs', 'decoreco_cifar.py')}:smoke",
          f"--config.attack.steps={STEPS}", f"--config.attack.log_every={STEPS}",
          "--config.attack.truth_diagnostic=False", f"--workdir={workdir}"]


def _results(workdir):
  with experiment.load_results(workdir) as f:
    return dict(f)


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


@pytest.mark.slow
def test_ctrl_c_stops_within_seconds_and_resumes_bitwise(subprocess_env, tmp_path, processes):
  """SIGINT once the attack has logged its first scan: exit status 130 within 10 s, with
  the line naming the step the same command resumes from and a checkpoint of that step,
  mid-chunk (no metrics line yet); the same command then finishes with results.npz
  (final images, loss history, ...) and metrics.jsonl bitwise those of an uninterrupted run.

  Bitwise, not a tolerance: both runs execute the same steps in the same order on the same
  inputs (the checkpoint stores the state exactly, msgpack of the arrays). They split the
  chunk into different scans (the interrupted run stops where Ctrl-C fell; the scan length
  adapts to the measured step time), so this also checks that XLA on CPU gives a scan of
  k steps then one of j the bits of one scan of k + j: the loop body is one compiled
  computation whatever the trip count.
  """
  interrupted, reference = tmp_path / "interrupted", tmp_path / "reference"
  with open(tmp_path / "interrupted.log", "w") as log:
    proc = subprocess.Popen(_command(interrupted), stdout=subprocess.DEVNULL, stderr=log,
                            text=True, cwd=REPO, env=subprocess_env)
  processes.append(proc)
  deadline = time.time() + 300
  while f"step 1/{STEPS}" not in (tmp_path / "interrupted.log").read_text():
    assert proc.poll() is None, (tmp_path / "interrupted.log").read_text()[-3000:]
    assert time.time() < deadline, "the attack did not start within 300 s"
    time.sleep(0.05)
  time.sleep(loop.SCAN_SECONDS / 2)  # a scan or so into the chunk
  os.kill(proc.pid, signal.SIGINT)
  sent = time.time()
  try:
    proc.wait(timeout=10)
  except subprocess.TimeoutExpired:
    pytest.fail("the run did not stop within 10 s of Ctrl-C")
  stopped_after = time.time() - sent
  text = (tmp_path / "interrupted.log").read_text()
  assert proc.returncode == 130, text[-3000:]
  last = text.strip().splitlines()[-1]
  assert last.startswith("interrupted (Ctrl-C) at step "), last
  step = int(last.split("at step ")[1].split()[0])
  assert 1 < step < STEPS, last   # mid-chunk: the old loop would have run on to STEPS
  assert f"the same command resumes from step {step}" in last
  assert rundir.read_metrics(interrupted) == []
  assert not os.path.exists(interrupted / "results.npz")

  resumed = subprocess.run(_command(interrupted), capture_output=True, text=True, cwd=REPO,
                           env=subprocess_env, timeout=600)
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert f"Resuming from step {step}" in resumed.stderr
  whole = subprocess.run(_command(reference), capture_output=True, text=True, cwd=REPO,
                         env=subprocess_env, timeout=600)
  assert whole.returncode == 0, whole.stderr[-3000:]
  expected, got = _results(reference), _results(interrupted)
  assert got.keys() == expected.keys()
  for name in expected:
    assert got[name].dtype == expected[name].dtype, name
    assert np.array_equal(got[name], expected[name],
                          equal_nan=got[name].dtype.kind == "f"), name
  expected_metrics = _without_timing(rundir.read_metrics(reference))
  assert [r["step"] for r in expected_metrics] == [STEPS]
  assert _without_timing(rundir.read_metrics(interrupted)) == expected_metrics
  print(f"stopped {stopped_after:.1f} s after Ctrl-C at step {step} of {STEPS}")
