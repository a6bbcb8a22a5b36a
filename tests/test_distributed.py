"""The grid across processes (`trdr.runtime.distributed`): two local CPU processes over gloo.

The `:smoke` landscape runs across two processes that are killed mid-run and started
again; the resumed two-process run must continue from its checkpoints and write the
landscape.json of the single-process run of the same command, the :smoke report's
(conftest.py), number for number. Grid points never communicate: each runs the same jitted
per-point program (batches of 1) on the same inputs whichever process holds it, and the
evaluation runs on process 0 over the merged grid, as in one process; so the two runs give
the same bits, which the test asserts (measured: 171 numbers, 0 differ, natively and
under the AVX2 pin).
"""

import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from trdr.configs import bilevel_affine
from trdr.report import artefacts
from trdr.runtime import files, rundir

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT = 600  # seconds for one run: minutes on 2 busy cores; a hung gloo peer fails


def _two_processes(env, workdir):
  """The :smoke landscape, as the :smoke report ran it (artefacts.RUNS), on 2 processes."""
  with socket.socket() as s:  # a free port for the coordinator
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  return [subprocess.Popen(
      [sys.executable, os.path.join(REPO, "experiments", "landscape.py"),
       f"--config={os.path.join(REPO, 'configs', 'bilevel_affine.py')}:smoke",
       f"--workdir={workdir}", f"--coordinator_address=127.0.0.1:{port}",
       "--num_processes=2", f"--process_id={i}"],
      cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
      for i in range(2)]


@pytest.mark.slow
def test_two_processes_killed_mid_run_resume_to_the_single_process_landscape(
    smoke_report_dir, subprocess_env, tmp_path):
  """The resumed processes load the killed ones' compiled programs from the session's
  compilation cache (`subprocess_env`): the same executables, so the same numbers."""
  reference = artefacts.run_dir(smoke_report_dir, "landscape_bilevel")
  workdir = tmp_path / "two"
  shards = [workdir / rundir.CHECKPOINT_FILE, workdir / "process_1" / rundir.CHECKPOINT_FILE]
  processes = _two_processes(subprocess_env, workdir)
  deadline = time.time() + TIMEOUT
  while not all(s.exists() for s in shards) and time.time() < deadline and all(
      p.poll() is None for p in processes):
    time.sleep(0.02)
  for p in reversed(processes):  # process 1 first: process 0 is left waiting on it
    p.send_signal(signal.SIGKILL)
    p.communicate()
  assert all(s.exists() for s in shards), "a process wrote no checkpoint before it ended"
  assert not (workdir / "landscape.json").exists(), (
      "the run finished before the kill; the test needs more steps to kill it mid-run")

  processes = _two_processes(subprocess_env, workdir)
  outputs = [p.communicate(timeout=TIMEOUT)[0] for p in processes]
  for p, output in zip(processes, outputs):
    assert p.returncode == 0, output[-3000:]
    assert "Resuming from step" in output, output[-3000:]
  assert (workdir / "process_1" / "shard.json").exists()
  assert not (workdir / "process_1" / "landscape.json").exists()

  assert files.read_json(workdir / "landscape.json") == files.read_json(
      os.path.join(reference, "landscape.json"))
  attack = bilevel_affine.get_config("smoke").attack
  steps = [r["step"] for r in rundir.read_metrics(workdir)]
  assert steps == list(range(attack.log_every, attack.steps + 1, attack.log_every)), (
      "one metrics line per chunk after the resume")


def test_initialize_needs_all_three_or_none():
  from trdr.runtime import distributed
  with pytest.raises(ValueError, match="together"):
    distributed.initialize("127.0.0.1:1234", None, 0)
  with pytest.raises(ValueError, match="process_id"):
    distributed.initialize("127.0.0.1:1234", 2, 2)


@pytest.fixture
def two_process_checkpoints(tmp_path, monkeypatch):
  """A process's directory holding the checkpoints of steps 2 (previous) and 4 (latest),
  written by `loop._save` as it writes them across processes."""
  import ml_collections

  from trdr.experiment import loop
  from trdr.runtime import distributed, files, rundir
  monkeypatch.setattr(distributed, "active", lambda: True)
  rundir.prepare_workdir(str(tmp_path), ml_collections.ConfigDict({"seed": 0}), "done.json")
  for step in (2, 4):
    loop._save(str(tmp_path), {"state": {"x": np.full((3, 2), float(step))},
                               "history": {"loss": np.zeros((5, step))},
                               "metrics": files.dumps_json([])}, [{"step": step}], step)
  return tmp_path, monkeypatch


@pytest.mark.parametrize("common", [0, 2, 4])
def test_resume_takes_the_checkpoint_of_the_step_every_process_has(
    two_process_checkpoints, common):
  from trdr.experiment import loop
  from trdr.runtime import distributed
  workdir, monkeypatch = two_process_checkpoints
  seen = []
  monkeypatch.setattr(distributed, "common_step", lambda step: seen.append(step) or common)
  saved = loop._restore(str(workdir), True, 5, slice(3, 6))
  assert seen == [4]  # this process offers its latest step
  if common == 0:  # another process has no checkpoint: everyone starts again
    assert saved is None
  else:
    assert loop.history_steps(saved["history"]) == common
    np.testing.assert_array_equal(saved["state"]["x"], np.full((3, 2), float(common)))


def test_resume_refuses_a_step_this_process_does_not_have(two_process_checkpoints):
  from trdr.experiment import loop
  from trdr.runtime import distributed
  workdir, monkeypatch = two_process_checkpoints
  monkeypatch.setattr(distributed, "common_step", lambda step: 3)
  with pytest.raises(ValueError, match="not of step 3"):
    loop._restore(str(workdir), True, 5, slice(3, 6))
  monkeypatch.setattr(distributed, "common_step", lambda step: 4)
  with pytest.raises(ValueError, match="holds 3 grid points, but this process runs 2"):
    loop._restore(str(workdir), True, 5, slice(3, 5))
