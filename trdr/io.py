"""Run directories: config.json, metrics.jsonl, results.npz and checkpoints.

Every file is written to a temporary name and moved into place (`os.replace`), so a run
killed at any moment leaves either the previous complete file or the new one, never a
truncated file.
"""

import io
import json
import os
from typing import Any

import flax.serialization
import ml_collections
import numpy as np

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.jsonl"
CHECKPOINT_FILE = "checkpoint.msgpack"


def atomic_write(path: str, payload: bytes) -> None:
  """Writes ``payload`` to a temporary file beside ``path``, then moves it into place."""
  tmp = f"{path}.tmp{os.getpid()}"
  with open(tmp, "wb") as f:
    f.write(payload)
  os.replace(tmp, path)


def to_jsonable(obj: Any) -> Any:
  """Nested dicts/lists/tuples of Python and NumPy scalars as plain JSON values."""
  if isinstance(obj, ml_collections.ConfigDict):
    obj = obj.to_dict()
  if isinstance(obj, dict):
    return {str(k): to_jsonable(v) for k, v in obj.items()}
  if isinstance(obj, (list, tuple)):
    return [to_jsonable(v) for v in obj]
  if isinstance(obj, np.ndarray):
    return to_jsonable(obj.tolist())
  if isinstance(obj, np.generic):
    return obj.item()
  return obj


def write_json(path: str, obj: Any) -> None:
  """Writes ``obj`` (converted by `to_jsonable`) as indented JSON, atomically."""
  atomic_write(path, json.dumps(to_jsonable(obj), indent=2, sort_keys=True).encode())


def read_json(path: str) -> Any:
  with open(path) as f:
    return json.load(f)


def prepare_workdir(workdir: str, config: ml_collections.ConfigDict, finished_file: str,
                    overwrite: bool = False) -> bool:
  """Creates ``workdir`` and writes config.json; says whether to resume a checkpoint.

  Args:
    workdir: the run directory.
    config: the run's full config.
    finished_file: a file name whose presence means the run finished.
    overwrite: allow replacing a finished run, or a run started with another config.
  Returns:
    True if a checkpoint of a run with this same config exists and should be resumed.
  Raises:
    FileExistsError: the run already finished, or an unfinished run with a different
      config is in ``workdir``, and ``overwrite`` is False.
  """
  os.makedirs(workdir, exist_ok=True)
  config_path = os.path.join(workdir, CONFIG_FILE)
  new_config = to_jsonable(config)
  if not overwrite:
    if os.path.exists(os.path.join(workdir, finished_file)):
      raise FileExistsError(
          f"{workdir} holds a finished run ({finished_file}); pass --overwrite to replace it")
    if os.path.exists(config_path) and read_json(config_path) != new_config:
      raise FileExistsError(
          f"{workdir} holds a run with a different config ({config_path}); use another "
          "--workdir or pass --overwrite")
  resume = (not overwrite and os.path.exists(os.path.join(workdir, CHECKPOINT_FILE)))
  if overwrite:
    for name in (CHECKPOINT_FILE, METRICS_FILE, finished_file):
      if os.path.exists(os.path.join(workdir, name)):
        os.remove(os.path.join(workdir, name))
  write_json(config_path, new_config)
  return resume


def _metrics_line(record: dict) -> str:
  return json.dumps(to_jsonable(record), sort_keys=True) + "\n"


def append_metrics(workdir: str, record: dict) -> None:
  """Appends one JSON object as a line to metrics.jsonl.

  Not atomic: a process killed while appending may leave a truncated last line, which
  `read_metrics` skips and a resumed run replaces (`write_metrics`).
  """
  with open(os.path.join(workdir, METRICS_FILE), "a") as f:
    f.write(_metrics_line(record))


def write_metrics(workdir: str, records: list[dict]) -> None:
  """Replaces metrics.jsonl by ``records``, one JSON object per line, atomically."""
  atomic_write(os.path.join(workdir, METRICS_FILE),
                "".join(_metrics_line(r) for r in records).encode())


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
      records.append(json.loads(line))
    except json.JSONDecodeError:
      if i < len(lines) - 1 and any(rest.strip() for rest in lines[i + 1:]):
        raise
  return records


def save_checkpoint(workdir: str, tree: Any) -> None:
  """Saves a pytree of arrays (NamedTuples and dicts allowed) with flax msgpack."""
  atomic_write(os.path.join(workdir, CHECKPOINT_FILE), flax.serialization.to_bytes(tree))


def load_checkpoint(workdir: str) -> dict:
  """The last checkpoint as a nested state dict (restore with flax `from_state_dict`)."""
  with open(os.path.join(workdir, CHECKPOINT_FILE), "rb") as f:
    return flax.serialization.msgpack_restore(f.read())


def save_npz(path: str, **arrays) -> None:
  """np.savez_compressed, atomically."""
  buf = io.BytesIO()
  np.savez_compressed(buf, **arrays)
  atomic_write(path, buf.getvalue())
