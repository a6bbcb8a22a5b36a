"""The run directory: its lock, config.json, metrics.jsonl, checkpoints and finished marker.

A run holds its work dir's lock (`locked`) from before its first write. `prepare_workdir`
writes the run's config.json and says whether a checkpoint of the same config can be
resumed; the attack loop checkpoints through `save_checkpoint` (checksummed, tied to the
config.json's SHA-256) and appends one metrics.jsonl line per chunk; `finish` writes
SHA256SUMS and the finished marker that `check_finished` verifies before a run is reused.
Replacing a finished run builds the new one beside it (`staging_dir`, `replace_dir`).
Every file goes through `trdr.runtime.files` (atomic, strict JSON, checksummed).
"""

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
from typing import Any

import flax.serialization
import ml_collections

from trdr.runtime.files import (atomic_write, dumps_json, loads_json, read_json, read_verified,
                                sha256_file, to_jsonable, write_json, write_verified)

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.jsonl"
CHECKPOINT_FILE = "checkpoint.msgpack"


LOCK_FILE = ".lock"


@contextlib.contextmanager
def locked(workdir: str):
  """Holds an exclusive OS lock (flock) on ``workdir``/.lock while the block runs, so two
  runs never write one work dir; released on any exit, a killed process's included.

  Raises:
    RuntimeError: another process holds it (its PID is named)."""
  os.makedirs(workdir, exist_ok=True)
  path = os.path.join(workdir, LOCK_FILE)
  with open(path, "a+") as f:
    try:
      fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      f.seek(0)
      holder = f.read().strip() or "unknown"
      raise RuntimeError(f"{workdir} is in use by another run (process {holder}); wait for "
                         "it to end or use another --workdir") from None
    f.truncate(0)  # "a+": every write appends, at 0 after this
    f.write(str(os.getpid()))
    f.flush()
    try:
      yield
    finally:
      f.truncate(0)
      fcntl.flock(f, fcntl.LOCK_UN)


def staging_dir(workdir: str, keep: tuple[str, ...] = ()) -> str:
  """A fresh sibling of ``workdir`` (``workdir``.overwrite) to build a replacement run in,
  holding copies of the entries ``keep`` of ``workdir`` (e.g. a reusable θ*)."""
  staging = workdir.rstrip(os.sep) + ".overwrite"
  shutil.rmtree(staging, ignore_errors=True)  # a failed overwrite's leftover
  os.makedirs(staging)
  for name in keep:
    if os.path.isdir(os.path.join(workdir, name)):
      shutil.copytree(os.path.join(workdir, name), os.path.join(staging, name))
  return staging


def replace_dir(staging: str, workdir: str) -> None:
  """Moves the finished ``staging`` to ``workdir`` by two renames, then deletes the
  replaced run: until the first rename ``workdir`` is untouched."""
  old = workdir.rstrip(os.sep) + ".replaced"
  shutil.rmtree(old, ignore_errors=True)
  if os.path.exists(workdir):
    os.rename(workdir, old)
  os.rename(staging, workdir)
  shutil.rmtree(old, ignore_errors=True)


# Config keys that change how a run is executed but none of its results: a run is the
# same run whatever their values (a finished one is reused, a checkpoint resumed).
EXECUTION_KEYS = frozenset({"attack.checkpoint_every", "attack.checkpoint_minutes"})
# Their last names: a study's config nests run configs (victims.NAME.attack, attack.kkt), so
# a study compares these wherever they sit.
_EXECUTION_NAMES = frozenset(k.rsplit(".", 1)[-1] for k in EXECUTION_KEYS)
# Keys added to the configs after runs were made, each with the value that gives what those
# runs computed: a saved config without the key was run with that value (the same run).
ADDED_KEYS = {"victim.init": "default", "victim.later_init": "flax", "victim.flow_time": None,
              "data.training_set": None, "attack.stop_loss": 0.0, "attack.stop_grad_norm": 0.0,
              "attack.autodiff_order": "reverse_over_reverse",
              # trdr.evaluation.registry's defaults: the evaluation before the registry.
              "eval.metrics": ["ssim", "l2"], "eval.nearest": "ssim",
              # Haim et al.'s evaluation protocol beside trdr's counts: off before it existed.
              "eval.haim_protocol": False,
              # A run finished before the truth diagnostic is the same attack: it is reused
              # as it is, its summary.json without "truth" (not measured); an unfinished
              # one resumed adds it.
              "attack.truth_diagnostic": True}


def added_key(key: str, value: Any) -> bool:
  """Whether ``key`` (dotted, of a run config) is one of `ADDED_KEYS` at ``value``, its added
  value: a saved config without the key was run with it (the same run)."""
  return key in ADDED_KEYS and value == ADDED_KEYS[key]


def config_change(old: Any, new: Any, shown: int = 4) -> str:
  """How config ``new`` differs from ``old`` (each as `to_jsonable` makes it): the first
  ``shown`` differing dotted keys in key order, as "key: old -> new" (absent where a
  config lacks the key), and how many more; "" when the two are equal. `EXECUTION_KEYS`
  (how a run is executed, not its results) are not compared, at the top level or nested
  in a study's config under their last name: the same run either way; nor
  is an `ADDED_KEYS` key that ``old`` lacks and ``new`` holds at its added value."""
  absent = type("Absent", (), {"__repr__": lambda _: "absent"})()  # equal only to itself
  def walk(a, b, key):
    if key[1:] in EXECUTION_KEYS or key.rsplit(".", 1)[-1] in _EXECUTION_NAMES:
      return []
    if a is absent and added_key(key[1:], b):
      return []
    if isinstance(a, dict) and isinstance(b, dict):
      return [line for k in sorted(set(a) | set(b))
              for line in walk(a.get(k, absent), b.get(k, absent), f"{key}.{k}")]
    return [] if a == b else [f"{key[1:]}: {a!r} -> {b!r}"]
  found = walk(to_jsonable(old), to_jsonable(new), "")
  more = f" and {len(found) - shown} more" if len(found) > shown else ""
  return ", ".join(found[:shown]) + more


def pin_settings(workdir: str, settings: dict, what: str = "rows") -> None:
  """A study whose finished rows are reused by key (the knowledge and victim-recipe
  experiments) keeps rows of one set of ``settings`` per directory: written to
  WORKDIR/config.json by the first run, compared by every later one.

  Raises:
    FileExistsError: ``workdir`` holds ``what`` of other settings (the message names the
      keys that differ).
  """
  os.makedirs(workdir, exist_ok=True)
  path = os.path.join(workdir, CONFIG_FILE)
  if not os.path.exists(path):
    write_json(path, settings)
  elif change := config_change(read_json(path), settings):
    raise FileExistsError(f"{workdir} holds {what} of other settings ({path}: {change}); "
                          "use another --workdir or delete it")


def study_rows(workdir: str, config: ml_collections.ConfigDict, rows_file: str,
               growing: tuple[str, ...] = ("seeds",), what: str = "rows",
               empty: Any = None) -> tuple[str, Any]:
  """The rows file of a study whose finished rows are reused by key, and what it holds.

  Pins ``config``'s settings to ``workdir`` (`pin_settings`), all sections but
  ``growing`` (those may grow between runs: a seed added runs only its own rows), then
  reads WORKDIR/``rows_file``.

  Returns:
    (the rows file's path, its JSON; ``empty`` (default: a new empty list) when there is
    none yet).
  Raises:
    FileExistsError: ``workdir`` holds ``what`` of other settings.
  """
  pin_settings(workdir, {k: v for k, v in config.to_dict().items() if k not in growing},
               what)
  path = os.path.join(workdir, rows_file)
  if os.path.exists(path):
    return path, read_json(path)
  return path, [] if empty is None else empty


def prepare_workdir(workdir: str, config: ml_collections.ConfigDict, finished_file: str
                    ) -> bool:
  """Creates the run directory ``workdir``, writes the run's full ``config`` to its
  config.json and says whether to resume a checkpoint; ``finished_file`` is the file whose
  presence means the run finished. Never deletes anything (replacing: `staging_dir`).

  Returns:
    True if a checkpoint of a run with this same config exists and should be resumed.
  Raises:
    FileExistsError: the run already finished, or an unfinished run with a different
      config is in ``workdir`` (the message names the keys that differ).
    ValueError: ``workdir``'s config.json is unreadable.
  """
  os.makedirs(workdir, exist_ok=True)
  config_path = os.path.join(workdir, CONFIG_FILE)
  new_config = to_jsonable(config)
  if os.path.exists(os.path.join(workdir, finished_file)):
    raise FileExistsError(
        f"{workdir} holds a finished run ({finished_file}); pass --overwrite to replace it")
  try:
    old_config = read_json(config_path) if os.path.exists(config_path) else new_config
  except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError is a ValueError
    raise ValueError(f"{config_path} is unreadable ({e}); use another --workdir or pass "
                     "--overwrite") from e
  if change := config_change(old_config, new_config):
    raise FileExistsError(f"{workdir} holds a run with a different config ({config_path}: "
                          f"{change}); use another --workdir or pass --overwrite")
  resume = os.path.exists(os.path.join(workdir, CHECKPOINT_FILE))
  if not os.path.exists(config_path):  # else kept: its checkpoint carries its SHA-256
    write_json(config_path, new_config)
  return resume


SUMS_FILE = "SHA256SUMS"

def finish(workdir: str, marker: str, obj: Any) -> None:
  """Marks a run finished: SHA256SUMS of every file in ``workdir`` (config.json,
  results.npz, metrics.jsonl, …, and the marker's own bytes, last; the attack's
  checkpoints left out: `drop_checkpoints`), then the marker ``marker`` (``obj`` as
  `write_json` writes it). `check_finished` verifies the files; so does
  ``sha256sum -c SHA256SUMS`` in ``workdir``."""
  payload = dumps_json(obj, indent=2, sort_keys=True).encode()
  resumption = [n for n in os.listdir(workdir) if _only_for_resuming(n)]
  names = sorted(n for n in os.listdir(workdir) if os.path.isfile(os.path.join(workdir, n))
                 and n not in (LOCK_FILE, SUMS_FILE, marker) and ".tmp" not in n
                 and n not in resumption)
  lines = [f"{sha256_file(os.path.join(workdir, n))}  {n}\n" for n in names]
  lines.append(f"{hashlib.sha256(payload).hexdigest()}  {marker}\n")
  atomic_write(os.path.join(workdir, SUMS_FILE), "".join(lines).encode())
  atomic_write(os.path.join(workdir, marker), payload)


def drop_checkpoints(workdir: str) -> None:
  """Removes the attack's checkpoints from a run `finish` has marked finished: they serve
  only resumption, and a finished run is never resumed (the main job's are hundreds of
  MB). Called after the marker, so a kill before it leaves a resumable run."""
  for name in os.listdir(workdir):
    if _only_for_resuming(name):
      with contextlib.suppress(OSError):
        os.remove(os.path.join(workdir, name))


def _only_for_resuming(name: str) -> bool:
  """The attack loop's checkpoints (`CHECKPOINT_FILE` and, across processes, the previous
  one kept beside it): what a finished run no longer needs."""
  stem, ext = os.path.splitext(CHECKPOINT_FILE)
  return name.startswith(stem) and name.endswith(ext) and ".tmp" not in name


def check_finished(workdir: str, marker: str) -> None:
  """Verifies a finished run's files in ``workdir`` against its SHA256SUMS (`finish`),
  which must list the finished ``marker`` last, before they are reused; files added
  later (figures) are not checked.

  Raises:
    ValueError: SHA256SUMS is missing or malformed, or a file it lists is missing or
      changed; the message names the file and the remedy.
  """
  path = os.path.join(workdir, SUMS_FILE)
  remedy = f"delete {workdir} to compute the run again"
  if not os.path.exists(path):
    raise ValueError(f"{workdir} has no {SUMS_FILE} (written by an older trdr, or removed): "
                     f"its results cannot be verified; {remedy}")
  with open(path, "rb") as f:
    lines = f.read().split(b"\n")
  entries = [re.fullmatch(rb"([0-9a-f]{64})  ([\w.-]+)", line) for line in lines[:-1]]
  if (lines[-1] or not all(entries) or len(entries) < 2 or entries[-1][2] != marker.encode()
      or CONFIG_FILE.encode() not in {e[2] for e in entries}):
    raise ValueError(f"{path} is corrupted; {remedy}")
  for entry in entries:
    file = os.path.join(workdir, entry[2].decode())
    if not os.path.isfile(file):
      raise ValueError(f"{file} is missing from the finished run; {remedy}")
    if sha256_file(file) != entry[1].decode():
      raise ValueError(f"{file} was changed or corrupted after the run finished (its "
                       f"SHA-256 differs from {path}); {remedy}")


def _metrics_line(record: dict) -> str:  # one metrics.jsonl line
  return dumps_json(record, sort_keys=True) + "\n"


def append_metrics(workdir: str, records: list[dict]) -> None:
  """Appends JSON objects as lines to metrics.jsonl in one write; not atomic: a process
  killed while appending may leave a truncated last line, which `read_metrics` skips and a
  resumed run replaces (`write_metrics`)."""
  with open(os.path.join(workdir, METRICS_FILE), "a") as f:
    f.write("".join(map(_metrics_line, records)))


def write_metrics(workdir: str, records: list[dict]) -> None:
  """Replaces metrics.jsonl by ``records``, one JSON object per line, atomically."""
  atomic_write(os.path.join(workdir, METRICS_FILE), "".join(map(_metrics_line, records)).encode())


def read_metrics(workdir: str) -> list[dict]:
  """The records of metrics.jsonl ([] if there is none); a truncated last line is skipped."""
  path = os.path.join(workdir, METRICS_FILE)
  if not os.path.exists(path):
    return []
  records = []
  with open(path) as f:
    lines = f.read().split("\n")
  for i, line in enumerate(lines):
    if not line.strip():
      continue
    try:
      records.append(loads_json(line))
    except json.JSONDecodeError:
      if i < len(lines) - 1 and any(rest.strip() for rest in lines[i + 1:]):
        raise
  return records


def save_checkpoint(workdir: str, tree: Any, name: str = CHECKPOINT_FILE) -> None:
  """Saves a pytree of arrays (NamedTuples and dicts allowed) as ``workdir``/``name``,
  with its checksum and the SHA-256 of the work dir's config.json (`load_checkpoint`)."""
  write_verified(os.path.join(workdir, name),
                 {"run": flax.serialization.to_state_dict(tree),
                  "config_sha256": _config_digest(workdir)})


def _config_digest(workdir: str) -> str:
  path = os.path.join(workdir, CONFIG_FILE)
  return sha256_file(path) if os.path.exists(path) else ""


def load_checkpoint(workdir: str, name: str = CHECKPOINT_FILE) -> dict:
  """The checkpoint ``name`` as a nested state dict (restore with flax `from_state_dict`).

  Raises:
    ValueError: it is corrupted (`read_verified`) or was written under another
      config.json than the work dir's (copied from another run).
  """
  path = os.path.join(workdir, name)
  remedy = f"delete {path} (and {METRICS_FILE}) to start the run again"
  saved = read_verified(path, remedy)
  if not (isinstance(saved, dict) and "run" in saved and "config_sha256" in saved):
    raise ValueError(f"{path} is not a checkpoint; {remedy}")
  if saved["config_sha256"] != _config_digest(workdir):
    raise ValueError(f"{path} was written by a run with another {CONFIG_FILE}; {remedy}")
  return saved["run"]
