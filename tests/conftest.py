"""Shared fixtures."""

import contextlib
import hashlib
import os
import pathlib
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import filelock
import pytest

# jax and matplotlib are imported where they are used, not here: the xdist controller
# imports this file before it starts the workers and never needs either (seconds of
# imports on the critical path of every run, `-m "not slow"` included).

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Every process of the session (the controller, the xdist workers, and every subprocess:
# the :smoke report and membership runs, the command-line, resume, multi-process and
# GPU-check tests, `like_the_runs`) compiles with the flags below, added to the session's
# own XLA_FLAGS (under .ci/run the AVX2 pin) where those do not name them, so a flag given
# in XLA_FLAGS stands for every process (`XLA_FLAGS="--xla_backend_optimization_level=3
# --xla_cpu_use_fusion_emitters=true" pytest` compiles everything as users' runs are).
# Set here, before JAX starts its backend; the workers and subprocesses inherit them.
#
# XLA's older CPU emitters: the fusion emitters build an MLIR pipeline per kernel, a floor
# under each of the session's thousands of compilations (XLA's HLO passes, fusion and
# layout, still run). LLVM's backend optimisation at level 1: level 0 compiles each program
# faster, but once this machine has run the suite its programs come from the persistent
# compilation cache below, not the compiler, and then what costs is running them, which
# level 0 slows (the :smoke report's and the CNN's lower-level solves, the DP study's
# training most). Measured by running the suite twice into a new cache under each level,
# e.g. `TRDR_TEST_XLA_CACHE=/tmp/c0 XLA_FLAGS=--xla_backend_optimization_level=0 pytest`:
# the first run takes the empty cache's time, the second the kept cache's.
#
# The tests hold under any of these settings: tolerances are argued from rounding, and a
# bitwise comparison is only made between programs compiled under the same flags. A test
# that asks for the bits of a subprocess's result computes its own side in a subprocess
# too (`like_the_runs`: the same flags, devices and precision as the run's process). The
# one comparison of two different programs, 8 devices against one (tests/test_sharding.py),
# needs XLA to generate the same per-point code for both, which the fusion emitters do
# and the older ones do not: it sets its own flags.
_OPT_LEVEL_FLAG = "--xla_backend_optimization_level"
_EMITTER_FLAG = "--xla_cpu_use_fusion_emitters"
_SESSION_FLAGS = ((_OPT_LEVEL_FLAG, 1), (_EMITTER_FLAG, "false"))


def _with_flags(flags: str, added) -> str:
  """``flags`` (XLA_FLAGS) with each (flag, value) of ``added`` that it does not name."""
  return " ".join([flags] + [f"{flag}={value}" for flag, value in added
                             if flag not in flags]).strip()


os.environ["XLA_FLAGS"] = _with_flags(os.environ.get("XLA_FLAGS", ""), _SESSION_FLAGS)


def _enable_x64():
  import jax
  previous = jax.config.jax_enable_x64
  jax.config.update("jax_enable_x64", True)
  yield
  jax.config.update("jax_enable_x64", previous)


@pytest.fixture
def x64():
  """Runs a test with float64 enabled in JAX, restoring the previous setting after."""
  yield from _enable_x64()


@pytest.fixture(scope="module")
def x64_module():
  """float64 for a whole module (for module-scoped float64 fixtures), restored after."""
  yield from _enable_x64()


# ------------------------------------ the :smoke report and membership, built once per session
#
# `experiments/report.py --config=configs/report.py:smoke` and `experiments/membership.py
# --config=configs/membership.py:smoke`, minutes each on 2 cores, are read by several test
# files (`_BACKGROUND`). Each is started in the background as soon as a test process has
# collected a test that needs it, and the tests that need one are run last
# (`pytest_collection_modifyitems`), so the two run side by side (the report does not wait
# for membership: `make figures` no longer runs it) and beside the tests that need neither,
# and the two xdist workers do not idle on them. Each runs once per session: its directory
# is shared by the controller, the workers and their subprocesses through an environment
# variable the controller sets before the workers start.
#
# Every process of the session (the test processes, the report, the notebook's kernel, the
# command-line, resume and multi-process tests' subprocesses; the resume and distributed
# tests and the notebook run the report's :smoke landscape again) shares one JAX persistent
# compilation cache: a program compiled once is loaded, not compiled again, by any process
# of this session or of a later one on this machine. An entry is the compiled executable
# itself, keyed by the program, the XLA flags (the pinned ISA and the optimisation level
# included), the devices and the jaxlib version, so a process gets exactly the code it
# would have compiled and its results are bitwise the same (the resume and two-process
# tests' bitwise comparisons rely on it). The directory is also keyed by this CPU's
# features, so that a home directory shared with a machine of another ISA never loads
# code for it.
#
# No max size: with one, JAX's cache takes a file lock and lists and reads every entry's
# access time on each write, which is quadratic in the entries (the fast tier writes over
# a thousand entries, and ran slower with a bounded cache than with none). An entry
# half-written by a concurrent (or killed) process fails to load, with a warning, and is
# compiled instead: the same program. The controller trims the directory to
# `_XLA_CACHE_KEEP_BYTES` at the end of the session, least recently used first.
#
# Within one cold session few of the test processes' programs repeat, so a fresh machine
# (CI) gains little beyond what the subprocesses share (the resumed and two-process runs
# load the :smoke report's programs); a second session on the same machine loads most of its
# programs (`TRDR_TEST_XLA_CACHE=<new directory> pytest -m "not slow"`, run twice, shows
# both). TRDR_TEST_XLA_CACHE names another directory; "off" turns it off for the test
# processes and keeps it to this session's subprocesses (a temporary directory, removed at
# its end): a fresh machine's run, without the writes.
_XLA_CACHE = "TRDR_TEST_XLA_CACHE"
_XLA_CACHE_KEEP_BYTES = 2 << 30


def _cpu_key() -> str:
  """This machine's architecture and CPU feature flags, hashed."""
  flags = ""
  with contextlib.suppress(OSError):
    with open("/proc/cpuinfo") as f:
      flags = next((line for line in f if line.startswith(("flags", "Features"))), "")
  return hashlib.sha256(f"{platform.machine()} {flags}".encode()).hexdigest()[:16]


def _xla_cache_dir() -> str | None:
  """The persistent cache's directory; None with TRDR_TEST_XLA_CACHE=off."""
  chosen = os.environ.get(_XLA_CACHE, "")
  if chosen == "off":
    return None
  base = chosen or os.path.join(
      os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "trdr-tests")
  return os.path.join(base, f"xla-{_cpu_key()}")


def _cache_env(directory: str) -> dict[str, str]:
  return {"JAX_COMPILATION_CACHE_DIR": directory,
          "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
          "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
          "JAX_COMPILATION_CACHE_MAX_SIZE": "-1"}


_SESSION_DIR = "TRDR_TEST_SESSION_DIR"
_REPORT_TIMEOUT_S = 1800
_WORKER_NICENESS = 10


def pytest_configure(config):
  if _SESSION_DIR not in os.environ:  # the controller (or a run without xdist)
    os.environ[_SESSION_DIR] = tempfile.mkdtemp(prefix="trdr-tests-")
  # The compilation cache (above), for this process and every process it starts; set
  # before this process imports JAX (collection does), updated if a plugin already has.
  directory = _xla_cache_dir()
  if directory:
    os.environ.update(_cache_env(directory))
    if "jax" in sys.modules:
      import jax
      jax.config.update("jax_compilation_cache_dir", directory)
      jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
      jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
      jax.config.update("jax_compilation_cache_max_size", -1)
  controller = config.getoption("numprocesses", None) and not os.environ.get(
      "PYTEST_XDIST_WORKER")
  if not controller:  # a process that runs tests
    # The figures are drawn to files: no display (trdr.plotting leaves the backend to
    # its caller; the scripts choose Agg too, trdr.cli).
    import matplotlib
    matplotlib.use("Agg")


def _subprocess_env() -> dict[str, str]:
  session_cache = os.path.join(os.environ[_SESSION_DIR], "xla_cache")
  return {**_cache_env(session_cache), **os.environ,  # the persistent cache, if on
          "PYTHONPATH": os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p),
          # One CPU device, not one per core (`trdr.runtime.sharding.set_cpu_devices`): the
          # subprocesses run beside the two workers, so a second device would only add a
          # compilation of each one-at-a-time attack (tests/test_sharding.py runs that
          # loop on 2 emulated devices, bitwise against one).
          "JAX_NUM_CPU_DEVICES": "1"}


@pytest.fixture(scope="session")
def subprocess_env() -> dict[str, str]:
  """The environment for a test's subprocess: this one (with the shared XLA compilation
  cache, see above), the repository on PYTHONPATH and one CPU device."""
  return _subprocess_env()


@pytest.fixture(scope="session")
def like_the_runs(subprocess_env):
  """Runs Python source in a subprocess with `subprocess_env`, so as the background runs
  and the other subprocesses run (their XLA flags, one CPU device, JAX's settings fresh
  rather than what the test process's earlier tests left), and returns what it printed;
  fails the test with its error output if it fails.

  For a test that computes again what a background run computed and asks for the same
  bits: only the same programs, compiled under the same flags, give them."""
  def run(source: str) -> str:
    done = subprocess.run([sys.executable, "-c", source], env=subprocess_env, cwd=REPO,
                          capture_output=True, text=True, timeout=_REPORT_TIMEOUT_S)
    if done.returncode:
      pytest.fail(f"the subprocess failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return done.stdout
  return run


def pytest_unconfigure(config):
  del config
  if os.environ.get("PYTEST_XDIST_WORKER"):
    return
  session = pathlib.Path(os.environ.pop(_SESSION_DIR))
  for name, _ in _BACKGROUND.values():
    pid_file = session / f"{name}.pid"
    if pid_file.exists() and not (session / f"{name}.returncode").exists():
      with contextlib.suppress(ProcessLookupError):  # a session cut short: stop the run
        os.killpg(int(pid_file.read_text()), signal.SIGKILL)
  shutil.rmtree(session, ignore_errors=True)
  if directory := _xla_cache_dir():
    _trim(pathlib.Path(directory), _XLA_CACHE_KEEP_BYTES)


def _trim(directory: pathlib.Path, keep_bytes: int) -> None:
  """Deletes the least recently used files of ``directory`` (by access time, else
  modification) until the rest take at most ``keep_bytes``."""
  entries = []
  with contextlib.suppress(OSError):
    for path in directory.iterdir():
      with contextlib.suppress(OSError):
        stat = path.stat()
        entries.append((max(stat.st_atime, stat.st_mtime), stat.st_size, path))
  total = sum(size for _, size, _ in entries)
  for _, size, path in sorted(entries):
    if total <= keep_bytes:
      break
    with contextlib.suppress(OSError):
      path.unlink()
      total -= size


# fixture -> (the run's name in the session directory, its script under experiments/ and
# configs/: `experiments/{script}.py --config=configs/{script}.py:smoke`)
_BACKGROUND = {"smoke_report_dir": ("report_smoke", "report"),
               "smoke_membership_dir": ("membership_smoke", "membership")}


def _needed(item) -> list[str]:
  """The background runs (fixture names of `_BACKGROUND`) a test reads."""
  return [f for f in _BACKGROUND if f in getattr(item, "fixturenames", ())]


def pytest_itemcollected(item):
  """A test that reads a background run is slow (setup.cfg's marker): `-m "not slow"` then
  deselects it, before `pytest_collection_modifyitems` below would start the run."""
  if _needed(item):
    item.add_marker(pytest.mark.slow)


# Among the files that read a background run, these go first, in this order: each holds
# a test that runs whole command lines in subprocesses, one after another (the GPU check's
# parts, two processes killed and resumed, the command-line runs, the controls' re-
# evaluations), the longest single tests of the session. The files of short tests then
# end it, so the two workers finish together instead of one idling while the other runs a
# long test that came last.
_LONG_TESTS_FIRST = ("test_gpu_check.py", "test_distributed.py", "test_cli.py",
                     "test_controls.py", "test_landscape.py")


@pytest.hookimpl(trylast=True)  # after -m / -k / --deselect have chosen the items
def pytest_collection_modifyitems(config, items):
  """Starts each background run a chosen test needs, and moves the test files that need
  one to the end (`_LONG_TESTS_FIRST` first among them), and within such a file the tests
  that need one after those that do not (xdist hands out whole files, in this order; a
  stable sort, so every worker sorts alike)."""
  needed = {f for item in items for f in _needed(item)}
  files = {item.path for item in items if _needed(item)}
  first = lambda path: (_LONG_TESTS_FIRST.index(path.name) if path.name in _LONG_TESTS_FIRST
                        else len(_LONG_TESTS_FIRST))
  items.sort(key=lambda item: (item.path in files, item.path in files and first(item.path),
                               bool(_needed(item))))
  if needed and not config.option.collectonly:
    for fixture in sorted(needed):
      _start_background(fixture)
    if os.environ.get("PYTEST_XDIST_WORKER"):
      # The runs are the session's critical path: the workers, started after them, yield
      # them the CPU and fill the rest of the cores with the tests that need neither.
      os.nice(_WORKER_NICENESS)


def _start_background(fixture: str) -> pathlib.Path:
  """Starts the background run of ``fixture`` (`_BACKGROUND`) unless a process of this
  session has; returns its work dir. Its exit status goes to `{name}.returncode` when it
  ends (written by rename, so a reader never sees half of it), its output to `.log`."""
  name, script = _BACKGROUND[fixture]
  session = pathlib.Path(os.environ[_SESSION_DIR])
  workdir = session / name
  with filelock.FileLock(session / f"{name}.lock"):
    pid_file = session / f"{name}.pid"
    if not pid_file.exists():
      env = _subprocess_env()
      command = [sys.executable, os.path.join(REPO, "experiments", f"{script}.py"),
                 f"--config={os.path.join(REPO, 'configs', f'{script}.py')}:smoke",
                 f"--workdir={workdir}"]
      rc = session / f"{name}.returncode"
      log = shlex.quote(str(session / f"{name}.log"))
      done = f"echo $? > {shlex.quote(f'{rc}.tmp')} && mv {shlex.quote(f'{rc}.tmp')} " + (
          shlex.quote(str(rc)))
      # A new process group (killed as one) whose shell leaves the job running alone, so
      # no process of the session has a child to wait for.
      shell = subprocess.Popen(
          ["sh", "-c", f"({shlex.join(command)} > {log} 2>&1; {done}) < /dev/null &"],
          cwd=REPO, env=env, start_new_session=True)
      shell.wait()
      pid_file.write_text(str(shell.pid))  # = the group's id
  return workdir


def _finished(fixture: str) -> str:
  """The work dir of ``fixture``'s background run (started if it was not), once the run
  has finished; fails the test when it failed, died or ran past `_REPORT_TIMEOUT_S`."""
  name, script = _BACKGROUND[fixture]
  workdir = _start_background(fixture)
  rc = workdir.parent / f"{name}.returncode"
  deadline = time.monotonic() + _REPORT_TIMEOUT_S
  group = int((workdir.parent / f"{name}.pid").read_text())
  while not rc.exists():
    if not _alive(group) and not rc.exists():
      pytest.fail(f"the background experiments/{script}.py ended without an exit status")
    if time.monotonic() > deadline:
      pytest.fail(f"experiments/{script}.py did not finish in {_REPORT_TIMEOUT_S} s")
    time.sleep(0.5)
  if int(rc.read_text()):
    log = (workdir.parent / f"{name}.log").read_text()
    pytest.fail(f"experiments/{script}.py failed ({rc.read_text().strip()}):\n{log[-4000:]}")
  return str(workdir)


@pytest.fixture(scope="session")
def smoke_report_dir():
  """A work dir where `experiments/report.py --config=configs/report.py:smoke` has run.

  It holds the finished :smoke runs of Figs. 1–4 (paper_figures/) and Figs. 5–12
  (decoreco_figures/), which the landscape, DecoReco, paper and report tests reuse, and
  report.md (its membership section says the experiment has not run there: it runs apart,
  `smoke_membership_dir`). Run once per test session in a background subprocess (see
  above), so JAX's process-wide settings stay untouched here; this waits for it to finish.
  """
  return _finished("smoke_report_dir")


@pytest.fixture(scope="session")
def smoke_membership_dir():
  """A work dir where `experiments/membership.py --config=configs/membership.py:smoke` has
  run: one sub-directory per attack and victim, membership.json, membership.md and .png.
  Run once per test session in the background beside the :smoke report (see above)."""
  return _finished("smoke_membership_dir")


def _alive(group: int) -> bool:
  try:
    os.killpg(group, 0)
  except ProcessLookupError:
    return False
  return True


@pytest.fixture
def processes():
  """Started subprocesses, killed if the test ends before they do."""
  started = []
  yield started
  for proc in started:
    if proc.poll() is None:
      proc.kill()
    proc.communicate()
