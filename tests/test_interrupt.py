"""Ctrl-C on an attack with long chunks: the process stops within seconds, writes a
checkpoint of the steps done, and the same command resumes to the uninterrupted run's bits
(issue 87, "a run that talks"; trdr.experiment.loop.run)."""

import os
import signal
import subprocess
import sys
import time
from typing import NamedTuple

import jax
import jax.monitoring
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src import dispatch

from trdr import experiment
from trdr.attacks.protocol import Attack
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


class _Metrics(NamedTuple):
  objective: jax.Array


def _toy_attack() -> Attack:
  """x ← x / 2 + 0.1 sin(k x), its objective the mean of x: steps whose order shows."""
  def step(state):
    x, k = state
    return (x / 2 + 0.1 * jnp.sin(k * x), k + 1), _Metrics(jnp.mean(x))
  return Attack("toy", None, step, lambda s: s[0], True, "pixels")


def _toy_states():
  return (jax.random.uniform(jax.random.key(0), (2, 1, 2, 2, 1)), jnp.zeros(2, jnp.float32))


def _strip(records):
  return [{k: v for k, v in r.items() if k != "seconds_per_step"} for r in records]


def test_ctrl_c_mid_chunk_checkpoints_the_steps_done_and_resumes_to_the_same_bits(
    tmp_path, monkeypatch):
  """`loop.run` in this process, SIGINT during its second scan (chunks of 6 steps, the
  first run as scans of 1, 1 and 4: two to time a step, `loop._scan_length`):
  KeyboardInterrupt naming step 2, a checkpoint of step 2 and no metrics line (the chunk
  is not finished); resumed, the states, history and metrics.jsonl are the uninterrupted
  run's, bitwise (the same steps in the same order, cut into other calls of one program)."""
  kwargs = dict(steps=12, log_every=6, grid_batch_size=2)
  os.makedirs(tmp_path / "whole")
  whole, whole_history, _ = loop.run(_toy_attack(), _toy_states(),
                                     workdir=str(tmp_path / "whole"), resume=False, **kwargs)
  calls = []
  chunk_of = loop._chunk

  def interrupting(*args):
    chunk = chunk_of(*args)

    def call(states, n, *then):
      calls.append(n)
      if len(calls) == 2:  # handled at the next bytecode, during the second scan
        os.kill(os.getpid(), signal.SIGINT)
      return chunk(states, n, *then)
    return call

  monkeypatch.setattr(loop, "_chunk", interrupting)
  run = tmp_path / "run"
  os.makedirs(run)
  with pytest.raises(KeyboardInterrupt, match=r"after step 2 of 12; the same command "
                                              r"resumes from step 2 \(the checkpoint "):
    loop.run(_toy_attack(), _toy_states(), workdir=str(run), resume=False, **kwargs)
  assert calls == [1, 1]
  assert loop.history_steps(rundir.load_checkpoint(str(run))["history"]) == 2
  assert rundir.read_metrics(str(run)) == []
  monkeypatch.undo()
  resumed, history, _ = loop.run(_toy_attack(), _toy_states(), workdir=str(run), resume=True,
                                 **kwargs)
  jax.tree.map(np.testing.assert_array_equal, resumed, whole)
  np.testing.assert_array_equal(history["objective"], whole_history["objective"])
  assert _strip(rundir.read_metrics(str(run))) == _strip(
      rundir.read_metrics(str(tmp_path / "whole")))
  assert [r["step"] for r in rundir.read_metrics(str(run))] == [6, 12]


def test_progress_lines_come_by_the_clock_not_by_the_chunk(tmp_path, monkeypatch):
  """Progress lines: after the first scan, then at most one per `loop.PROGRESS_SECONDS`,
  and after the last step. 30 chunks of one step, with the interval far away: two lines,
  not 30. One chunk of 12 steps whose scans take 50 ms and more each (`loop.SCAN_SECONDS`
  0.2 s), the interval 0.12 s: lines inside the chunk too (at least 0.3 s of scans), never
  more than one per scan (the old loop logged once, at step 12)."""
  lines = []
  progress = loop._progress
  monkeypatch.setattr(loop, "_progress", lambda done, *a: lines.append(done) or progress(
      done, *a))
  monkeypatch.setattr(loop, "PROGRESS_SECONDS", 1e9)
  os.makedirs(tmp_path / "many")
  loop.run(_toy_attack(), _toy_states(), workdir=str(tmp_path / "many"), steps=30,
           log_every=1, grid_batch_size=2, resume=False)
  assert lines == [1, 30]
  assert len(rundir.read_metrics(str(tmp_path / "many"))) == 30   # one record per chunk still
  lines.clear()
  scans = []
  chunk_of = loop._chunk
  monkeypatch.setattr(loop, "_chunk", lambda *args: (
      lambda chunk: lambda s, n, *then: scans.append(n) or time.sleep(0.05) or chunk(
          s, n, *then))(chunk_of(*args)))
  monkeypatch.setattr(loop, "PROGRESS_SECONDS", 0.12)
  monkeypatch.setattr(loop, "SCAN_SECONDS", 0.2)
  os.makedirs(tmp_path / "long")
  loop.run(_toy_attack(), _toy_states(), workdir=str(tmp_path / "long"), steps=12,
           log_every=12, grid_batch_size=2, resume=False)
  # Then scans of 2 or 3 steps (as many as fit in 0.2 s at 50-100 ms a step).
  assert scans[:2] == [1, 1] and sum(scans) == 12 and len(scans) >= 6, scans
  assert lines[0] == 1 and lines[-1] == 12 and any(1 < done < 12 for done in lines), lines
  assert len(lines) <= len(scans) and lines == sorted(set(lines)), lines


def test_checkpoints_come_by_the_clock_too(tmp_path, monkeypatch):
  """``checkpoint_minutes``: with checkpoint_every far above the run, a checkpoint still
  comes at every safe point once that much time has passed (here 0.6 ms, below the 2 ms
  each scan is made to take: every scan), mid-chunk too; 0 turns the clock off (only the
  last step's)."""
  saved = []
  save = rundir.save_checkpoint
  monkeypatch.setattr(rundir, "save_checkpoint", lambda workdir, tree, *a: saved.append(
      loop.history_steps(tree["history"])) or save(workdir, tree, *a))
  chunk_of = loop._chunk
  monkeypatch.setattr(loop, "_chunk", lambda *args: (
      lambda chunk: lambda *call: time.sleep(0.002) or chunk(*call))(chunk_of(*args)))
  kwargs = dict(steps=12, log_every=6, grid_batch_size=2, checkpoint_every=100, resume=False)
  for minutes, expected in ((1e-5, [1, 2, 6, 12]), (0, [12])):
    saved.clear()
    os.makedirs(tmp_path / str(minutes))
    loop.run(_toy_attack(), _toy_states(), workdir=str(tmp_path / str(minutes)),
             checkpoint_minutes=minutes, **kwargs)
    assert saved == expected, minutes
  with pytest.raises(ValueError, match="checkpoint_minutes >= 0"):
    loop.run(_toy_attack(), _toy_states(), workdir=str(tmp_path), checkpoint_minutes=-1,
             **kwargs)


@pytest.fixture
def compiles():
  """The names of the XLA programs compiled (or loaded from the persistent compilation
  cache: JAX records both as one backend compile) while the test runs."""
  names = []

  def listener(event, seconds, **kwargs):
    del seconds
    if event == dispatch.BACKEND_COMPILE_EVENT:
      names.append(kwargs.get("fun_name"))
  jax.monitoring.register_event_duration_secs_listener(listener)
  yield names
  jax.monitoring.unregister_event_duration_listener(listener)


@pytest.mark.parametrize("batch", [2, 1])  # one vmapped program; one program per start
def test_a_run_compiles_its_step_program_once(tmp_path, compiles, batch):
  """`loop.run` compiles the attack's step program once per run, whatever the calls it
  cuts the chunks into: 1, 1 (to time a step), then as many steps as fit in
  `loop.SCAN_SECONDS`, and a chunk's remainder (14 steps in chunks of 6: 6, 6, 2); and a
  run resumed mid-chunk (8 steps done, a checkpoint as Ctrl-C's or the clock's leaves)
  compiles it once too (each `loop.run` builds its program anew).

  Expected from the design, not counted from a run: every call runs `loop.run_count`'s
  one program, its trip count a traced value, and `loop.run` compiles nothing else for
  the toy attack (its states are float arrays: no key program). Before this design the
  loop ran `lax.scan`s of a static length, one program per length: 6 and the remainder 2
  before issue 87's scans (2 programs), and 1, 4, 6 and 2 with them (4), each a compile of
  the step program on a new user's empty cache."""
  for name, steps, resume in (("whole", 14, False), ("cut", 8, False), ("cut", 14, True)):
    os.makedirs(tmp_path / name, exist_ok=True)
    states = jax.block_until_ready(_toy_states())   # their programs are not the loop's
    compiles.clear()
    loop.run(_toy_attack(), states, workdir=str(tmp_path / name), resume=resume,
             steps=steps, log_every=6, grid_batch_size=batch)
    assert len(compiles) == 1, (name, steps, compiles)


def test_calls_of_the_one_program_give_the_bits_of_one_scan(tmp_path):
  """`loop._chunk`'s program run for 2 steps and then 3 gives the states and per-step
  metrics of `loop.run_grid`'s `lax.scan` of 5 steps (the loop before issue 87), bitwise:
  the same step in a while loop whose trip count is a value, its metrics written row by
  row as the scan writes them. Vmapped (batch 2) and one start at a time (batch 1)."""
  attack, states = _toy_attack(), _toy_states()
  devices = jax.local_devices()[:1]
  for batch in (2, 1):
    chunk = loop._chunk(attack.step, batch, devices, 3)
    first, early = chunk(states, 2, 3)
    last, late = chunk(first, 3)
    scanned, metrics = jax.jit(loop.run_grid, static_argnums=(0, 2, 3, 4))(
        attack.step, states, 5, batch, tuple(devices))
    jax.tree.map(np.testing.assert_array_equal, last, scanned)
    assert early.objective.shape == (2, 2) and late.objective.shape == (2, 3)
    np.testing.assert_array_equal(np.concatenate([early.objective, late.objective], axis=1),
                                  metrics.objective)
  with pytest.raises(ValueError, match="a chunk of 4 steps: its program runs 1 to 3"):
    chunk(states, 4)


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
  k steps then one of j the bits of one scan of k + j: every scan is one compiled
  program (`loop.run_count`), its trip count a value.
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
  assert last.startswith("interrupted after step "), last
  step = int(last.split("after step ")[1].split()[0])
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
