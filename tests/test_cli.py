"""The command lines' errors on bad input: one line naming the file, a non-zero exit, and the
traceback only with --debug."""

import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from trdr import experiment
from trdr.runtime import files

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = ("landscape", "reconstruct", "sweep", "paper", "report", "membership")


def _start(script, *args, env, cwd):
  return subprocess.Popen(
      [sys.executable, os.path.join(REPO, "experiments", f"{script}.py"), *args],
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)


def _error_line(process) -> str:
  """The one `error:` line of a refused command (its exit status 2, no traceback)."""
  _, stderr = process.communicate(timeout=600)
  assert process.returncode == 2, stderr[-2000:]
  assert "Traceback" not in stderr, stderr[-2000:]
  (line,) = [line for line in stderr.splitlines() if line.startswith("error: ")]
  return line


def test_the_command_lines_import_jax_only_once_their_flags_are_parsed(subprocess_env):
  """`trdr.cli` and the configs import neither JAX nor matplotlib nor trdr's pipeline (seconds
  of imports): a command line refused at parsing (an unknown --config file or field) answers
  at once."""
  code = ("import sys; from trdr import cli; from trdr.configs import report; "
          "report.get_config('smoke'); "
          "print(sorted(m for m in ('jax', 'matplotlib', 'trdr.experiment', 'flax') "
          "if m in sys.modules))")
  out = subprocess.run([sys.executable, "-c", code], env=subprocess_env, check=True,
                       capture_output=True, text=True).stdout
  assert out.strip() == "[]"


@pytest.mark.slow  # a Python process per command
def test_bad_input_is_one_line_naming_the_file(subprocess_env, tmp_path):
  bad_model = tmp_path / "model.npz"
  np.savez(bad_model, foo=np.zeros(3))
  finished = tmp_path / "finished"
  finished.mkdir()
  files.write_json(finished / experiment.LANDSCAPE_FILE, [])
  config = os.path.join(REPO, "configs", "bilevel_affine.py") + ":smoke"
  run = lambda script, *args: _start(script, *args, f"--workdir={tmp_path / 'out'}",
                                     env=subprocess_env, cwd=tmp_path)
  # Started together (each mostly imports), read one by one.
  missing = {s: run(s, "--config=configs/nope.py") for s in SCRIPTS}
  model = {s: run(s, f"--config={config}", f"--config.victim.load={bad_model}")
           for s in ("landscape", "reconstruct")}
  # A user's CNN with a layer trdr cannot attack (BatchNorm, in PyTorch's state_dict names).
  batch_norm = tmp_path / "cnn_bn.npz"
  np.savez(batch_norm, **{"c.weight": np.zeros((4, 3, 3, 3)), "bn.weight": np.ones(4),
                          "bn.bias": np.zeros(4), "bn.running_mean": np.zeros(4),
                          "bn.running_var": np.ones(4), "fc.weight": np.zeros((1, 1024))})
  cnn = run("reconstruct", f"--config={os.path.join(REPO, 'configs', 'decoreco_cnn.py')}:smoke",
            f"--config.victim.load={batch_norm}")
  done = _start("landscape", f"--config={config}", f"--workdir={finished}",
                env=subprocess_env, cwd=tmp_path)
  debug = _start("landscape", f"--config={config}", f"--workdir={finished}", "--debug",
                 env=subprocess_env, cwd=tmp_path)
  export = run("landscape", f"--config={config}", f"--export_victim={tmp_path / 'theta.h5'}")
  for script, process in missing.items():
    line = _error_line(process)
    # the configs that exist are listed (here the repository's: none beside the path)
    assert "no config file configs/nope.py" in line and "bilevel_affine.py" in line, script
  for process in model.values():
    assert str(bad_model) in _error_line(process)
  line = _error_line(cnn)
  assert "layer 'bn' is a BatchNorm layer" in line and str(batch_norm) in line, line
  line = _error_line(done)
  assert str(finished) in line and "--overwrite" in line
  assert "theta.h5" in _error_line(export)  # refused before the run, not after it
  _, stderr = debug.communicate(timeout=600)
  assert debug.returncode != 0 and "Traceback" in stderr and "FileExistsError" in stderr
  assert not (tmp_path / "out").exists()  # nothing written by a refused command


@pytest.mark.slow  # a Python process per command
def test_flag_typos_and_a_file_as_workdir_are_one_error_line(subprocess_env, tmp_path):
  """A mistyped override or an unknown flag: one `error:` line with ml_collections' or
  absl's words and status 2 (not absl's "FATAL" and 1); --workdir naming a file: one line
  naming the flag and why."""
  config = f"--config={os.path.join(REPO, 'configs', 'bilevel_affine.py')}:smoke"
  a_file = tmp_path / "results"
  a_file.write_text("not a directory")
  started = {
      "typo": _start("landscape", config, "--config.attak.steps=10", env=subprocess_env,
                     cwd=tmp_path),
      "unknown": _start("landscape", config, "--stepz=10", env=subprocess_env, cwd=tmp_path),
      "file": _start("landscape", config, f"--workdir={a_file}", env=subprocess_env,
                     cwd=tmp_path)}
  assert 'Did you mean "attack"' in _error_line(started["typo"])
  assert "stepz" in _error_line(started["unknown"])
  line = _error_line(started["file"])
  assert f"--workdir={a_file}" in line and "is a file, not a directory" in line


@pytest.mark.slow  # a Python process, stopped mid-run
def test_ctrl_c_ends_with_one_line_saying_where_the_command_resumes(subprocess_env, tmp_path):
  """SIGINT once the attack has written a checkpoint: exit 130 and one line naming the step
  the same command resumes from, no traceback (that the resumed run equals an uninterrupted
  one: tests/test_landscape.py's killed runs)."""
  import signal   # noqa: PLC0415
  import time   # noqa: PLC0415
  workdir = tmp_path / "run"
  args = (f"--config={os.path.join(REPO, 'configs', 'bilevel_affine.py')}:smoke",
          f"--workdir={workdir}", "--config.attack.steps=100000", "--config.attack.log_every=10")
  # A terminal's foreground process has SIGINT at Python's handler. A test run started in
  # the background of a non-interactive shell (as CI may start it) has SIGINT ignored, and
  # its children inherit that: the run then went on past the signal (the hang this test
  # reported). So the child sets the handler itself before the script runs (in the same
  # process: no fork of a process that runs JAX). PYTHONFAULTHANDLER: a SIGABRT makes the
  # child print every thread's stack (below).
  terminal = ("import runpy, signal, sys; signal.signal(signal.SIGINT, "
              "signal.default_int_handler); sys.argv = sys.argv[1:]; "
              "runpy.run_path(sys.argv[0], run_name='__main__')")
  process = subprocess.Popen(
      [sys.executable, "-c", terminal, os.path.join(REPO, "experiments", "landscape.py"),
       *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
      env={**subprocess_env, "PYTHONFAULTHANDLER": "1"}, cwd=tmp_path)
  deadline = time.time() + 300
  while not (workdir / "checkpoint.msgpack").exists() and process.poll() is None:
    assert time.time() < deadline, "no checkpoint within 300 s"
    time.sleep(0.2)
  process.send_signal(signal.SIGINT)
  try:
    _, stderr = process.communicate(timeout=120)
  except subprocess.TimeoutExpired:
    # Seen twice on 2026-11-29 inside the full suite (never alone, nor under a CPU hog):
    # the run's log stops at the checkpoint line and the process never exits. A known,
    # defect should it recur with the handler set (above), reported as one instead of a
    # hung worker. The child is aborted, so
    # that it does not outlive the test and its faulthandler prints where each thread
    # hangs, which the reason carries.
    process.send_signal(signal.SIGABRT)
    try:
      _, stderr = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
      process.kill()
      _, stderr = process.communicate()
    stacks = stderr[stderr.find("Fatal Python error"):] if "Fatal Python error" in stderr else (
        stderr.strip().splitlines() or ["(nothing)"])[-1]
    pytest.xfail(f"open defect: SIGINT did not end the run within 120 s; where it hung: "
                 f"{stacks[:4000]}")
  assert process.returncode == 130, stderr[-2000:]
  assert "Traceback" not in stderr, stderr[-2000:]
  last = stderr.strip().splitlines()[-1]
  assert last.startswith("interrupted after step ") and "resumes from step" in last, last


def test_a_finished_run_ends_with_its_headline_and_files(smoke_report_dir):
  """The last lines of a landscape run: one row per pure start with its numbers, as
  landscape.json has them to 3 significant digits, then the files written."""
  from trdr import cli  # noqa: PLC0415  (defines the command lines' flags)
  from trdr.report import artefacts  # noqa: PLC0415

  run = artefacts.run_dir(smoke_report_dir, "landscape_bilevel")
  lines = cli.headline(run, "landscape").splitlines()
  records = files.read_json(os.path.join(run, experiment.LANDSCAPE_FILE))
  (gt,) = [r for r in records if r["lambda1"] == 1.0 and r["lambda2"] == 1.0]
  (row,) = [line for line in lines if line.startswith("| ground_truth |")]
  assert f"| {gt['param_distance']:.3g} | {gt['l2_to_train']:.3g} |" in row
  assert sum(line.startswith(("| noise", "| partition")) for line in lines) == 2
  assert lines[-1].startswith("Written: ") and "results.npz" in lines[-1]


@pytest.mark.slow  # Python processes that run a (tiny) landscape
def test_export_victim_keep_checkpoint_and_a_warm_second_run(subprocess_env, tmp_path):
  """--export_victim writes the run's θ* in a layout victim.load reads back bitwise, named
  in the last line; --keep_checkpoint keeps the checkpoint a finished run otherwise drops;
  a second run with the same --compilation_cache loads every program the first compiled
  and computes the same results bit for bit."""
  import re  # noqa: PLC0415

  from trdr import victim  # noqa: PLC0415
  from trdr.runtime import rundir  # noqa: PLC0415
  from trdr.victim import pretrained  # noqa: PLC0415

  path, cache = tmp_path / "theta.npz", tmp_path / "cache"
  env = {k: v for k, v in subprocess_env.items() if k != "JAX_COMPILATION_CACHE_DIR"}
  landscape = lambda workdir, *extra: _start(
      "landscape", f"--config={os.path.join(REPO, 'configs', 'bilevel_affine.py')}:smoke",
      f"--workdir={workdir}", "--config.data.n_per_class=5", "--config.attack.steps=2",
      "--config.init.lambda1=(0.0,1.0)", "--config.init.lambda2=(0.0,1.0)",
      f"--compilation_cache={cache}", *extra, env=env, cwd=tmp_path)
  runs = []
  for workdir, extra in ((tmp_path / "run", (f"--export_victim={path}", "--keep_checkpoint")),
                         (tmp_path / "again", ())):
    process = landscape(workdir, *extra)
    stdout, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, stderr[-3000:]
    (used,) = re.findall(r"Compilation cache .*: (\d+) programs loaded .*, (\d+) compiled",
                         stderr)
    runs.append((workdir, stdout, [int(n) for n in used]))
  (workdir, stdout, first), (again, _, second) = runs
  # The first run compiles into an empty cache; what it loads it stored itself earlier in
  # the same process (the bilevel premise's re-solve at the training images traces the
  # victim training's L-BFGS again). The second loads every program, compiles none.
  assert first[1] > 0 and first[0] < first[1] and second == [sum(first), 0], (first, second)
  with experiment.load_results(str(workdir)) as a, experiment.load_results(str(again)) as b:
    for key in a:
      np.testing.assert_array_equal(a[key], b[key], err_msg=key)
  assert stdout.splitlines()[-1].startswith(f"θ* exported: {path} (")
  assert (workdir / rundir.CHECKPOINT_FILE).exists()
  assert not (again / rundir.CHECKPOINT_FILE).exists()
  rundir.check_finished(str(workdir), experiment.LANDSCAPE_FILE)  # not in its SHA256SUMS
  theta_star = victim.from_run(str(workdir))
  exported = pretrained.layers(pretrained.read(str(path)), (32, 32, 3))
  for a, b in zip(jax.tree.leaves(pretrained.params(exported, theta_star.config, np.float32)),
                  jax.tree.leaves(theta_star.params)):
    np.testing.assert_array_equal(a, b)
