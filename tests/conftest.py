"""Shared fixtures."""

import os
import subprocess
import sys

import filelock
import jax
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _enable_x64():
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


@pytest.fixture(scope="session")
def smoke_report_dir(tmp_path_factory):
  """A work dir where `experiments/report.py --config=configs/report.py:smoke` has run.

  It holds the finished :smoke runs of Figs. 1–4 (paper_figures/) and Figs. 5–12
  (decoreco_figures/), which the landscape, DecoReco, paper and report tests reuse, and
  report.md. Run once per test session in a subprocess (about 2 minutes on 2 CPU cores),
  so JAX's process-wide settings stay untouched here. With pytest-xdist the workers
  share it: the first to need it computes it under a file lock, the others wait for it.
  """
  root = tmp_path_factory.getbasetemp()
  if os.environ.get("PYTEST_XDIST_WORKER"):
    root = root.parent  # the directory every worker's base temp lives in
  workdir = root / "report_smoke"
  with filelock.FileLock(f"{workdir}.lock"):
    if not (workdir / "report.md").exists():
      env = {**os.environ, "PYTHONPATH": os.pathsep.join(
          p for p in (REPO, os.environ.get("PYTHONPATH")) if p)}
      done = subprocess.run(
          [sys.executable, os.path.join(REPO, "experiments", "report.py"),
           f"--config={os.path.join(REPO, 'configs', 'report.py')}:smoke",
           f"--workdir={workdir}"], cwd=REPO, env=env, capture_output=True, text=True)
      if done.returncode:
        pytest.fail(f"experiments/report.py failed ({done.returncode}):\n"
                    f"{done.stderr[-4000:]}")
  return str(workdir)
