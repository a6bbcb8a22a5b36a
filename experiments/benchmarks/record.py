"""The benchmark's record: each section's printed output, captured while it is echoed, and
one Markdown file written from it (docs/performance.md by default) with the date, the
machine and the versions in its header.

A time means little without the machine it ran on, so the file names it: the CPU model,
its cores, whether it has AVX-512 (XLA emits different code for AVX2 and AVX-512 CPUs), the
XLA flags, JAX's backend and devices, and the versions of the numerical stack. The file is
written only once every section has finished, and atomically: a failed or interrupted run
leaves the previous record as it was.
"""

import collections
import contextlib
import datetime
import importlib.metadata
import io
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from typing import Callable, NamedTuple

import jax

from trdr.runtime import files

REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGES = ("jax", "jaxlib", "flax", "optax", "jaxopt", "numpy", "torch")


class Section(NamedTuple):
  """One section's record: its --sections name, a one-line title, what it printed, and its
  wall time in seconds."""
  name: str
  title: str
  output: str
  seconds: float


class _Tee(io.TextIOBase):
  """A text stream that writes to every one of ``streams``."""

  def __init__(self, *streams):
    super().__init__()
    self._streams = streams

  def write(self, text: str) -> int:
    for stream in self._streams:
      stream.write(text)
    return len(text)

  def flush(self) -> None:
    for stream in self._streams:
      stream.flush()


def captured(name: str, title: str, run: Callable[[], None]) -> Section:
  """Runs ``run()`` with its standard output echoed as usual and captured; its record."""
  buffer = io.StringIO()
  began = time.perf_counter()
  with contextlib.redirect_stdout(_Tee(sys.stdout, buffer)):
    run()
  return Section(name, title, buffer.getvalue(), time.perf_counter() - began)


def check_writable(path: str) -> None:
  """Raises ValueError, before any section runs, when ``path`` could not be written at the
  end: it is a folder, or its folder cannot be made or written to (tried with a temporary
  file, removed at once)."""
  if os.path.isdir(path):
    raise ValueError(f"--output {path!r} is a folder; give a file name, e.g. docs/performance.md")
  try:
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=folder, prefix=".benchmark-check-"):
      pass
  except OSError as e:
    raise ValueError(f"--output {path!r} cannot be written: {e}") from e


def write(path: str, text: str) -> None:
  """Writes ``text`` to ``path`` atomically (`trdr.runtime.files.atomic_write`), creating
  its folder."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  files.atomic_write(path, text.encode("utf-8"))


def load() -> str:
  """The system's load average over 1, 5 and 15 minutes ("unknown" where there is none):
  other jobs on the cores slow every way alike, but widen the spread."""
  with contextlib.suppress(OSError, AttributeError):
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())
  return "unknown"


def _cpuinfo() -> dict[str, str]:
  """The first processor's fields of /proc/cpuinfo ({} where there is none)."""
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      first = f.read().split("\n\n")[0]
  except OSError:
    return {}
  return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in
                                               first.splitlines()) if k.strip()}


def machine() -> dict[str, str]:
  """The machine the sections ran on, as header rows."""
  info = _cpuinfo()
  cpu = info.get("model name") or platform.processor() or platform.machine()
  usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
  cores = f"{os.cpu_count()}" + (f" ({usable} usable by this process)" if usable else "")
  avx512 = ("yes" if "avx512f" in info["flags"].split() else "no") if "flags" in info else (
      "unknown (no /proc/cpuinfo)")
  kinds = collections.Counter(d.device_kind for d in jax.devices())
  return {"CPU": f"{cpu} ({platform.machine()}, {platform.system()})",
          "CPU cores": cores,
          "AVX-512 (avx512f)": avx512,
          "XLA_FLAGS": os.environ.get("XLA_FLAGS") or "(not set)",
          "JAX backend": jax.default_backend(),
          "JAX devices": ", ".join(f"{n} × {kind}" for kind, n in kinds.items())}


def versions() -> dict[str, str]:
  """Python's and the numerical stack's versions, as header rows."""
  out = {"python": platform.python_version()}
  for name in PACKAGES:
    try:
      out[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      out[name] = "not installed"
  return out


def _commit() -> str:
  """HEAD's short hash (local changes, if any, are not reflected), or "unknown"."""
  with contextlib.suppress(OSError, subprocess.SubprocessError):
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPOSITORY,
                          capture_output=True, text=True, timeout=10, check=True)
    return done.stdout.strip() or "unknown"
  return "unknown"


def _blocks(output: str) -> str:
  """A section's printed output as Markdown: its Markdown tables as they are, every other
  run of lines as a text block."""
  runs = []
  for line in output.strip("\n").splitlines():
    table = line.lstrip().startswith("|")
    if runs and runs[-1][0] == table:
      runs[-1][1].append(line)
    else:
      runs.append((table, [line]))
  out = []
  for table, chunk in runs:
    text = "\n".join(chunk).strip("\n")
    if table:
      out.append(text)
    elif text.strip():
      out.append(f"```text\n{text}\n```")
  return "\n\n".join(out) or "(no output)"


def _rows(values: dict[str, str]) -> list[str]:
  return ["| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in values.items())]


def markdown(sections: list[Section], started: datetime.datetime, header: dict[str, str]
             ) -> str:
  """The record: the header (date, command, commit, ``header``'s rows, machine, versions),
  then every section's output under its title."""
  total = sum(s.seconds for s in sections)
  lines = ["# Performance", "",
           "Written by `make benchmark` (`experiments/benchmark.py`); do not edit it by hand:",
           "run the command again. The times hold for the machine below; the ratios between",
           "ways measured side by side in one run are what carries over to other machines.",
           "", "## Machine and versions", "",
           *_rows({"date (UTC)": f"{started:%Y-%m-%d %H:%M} (sections: {total / 60:.1f} min)",
                   "command": f"`python {shlex.join(sys.argv)}`",
                   "commit": _commit(), **header, **machine(), **versions()}), ""]
  for s in sections:
    lines += [f"## {s.name}: {s.title}", "", f"Section time: {s.seconds:.0f} s.", "",
              _blocks(s.output), ""]
  return "\n".join(lines)
