"""Files that are never half-written: atomic writes, strict JSON, checksummed msgpack, npz.

Every file is written to a temporary name and moved into place (`os.replace`), so a
process killed at any moment leaves either the previous complete file or the new one,
never a truncated file. θ* and checkpoints carry a SHA-256 (`write_verified`), checked
when they are read (`read_verified`). The run directory built from these files is
`trdr.runtime.rundir`.
"""

import contextlib
import hashlib
import io
import json
import os
from typing import Any

import flax.serialization
import ml_collections
import msgpack
import numpy as np


def atomic_write(path: str, *payloads: bytes) -> None:
  """Writes the ``payloads`` in turn (none copied into one buffer) to a temporary file
  beside ``path``, then moves it into place; on any error (e.g. ENOSPC) the temporary
  file is removed and ``path`` left as it was."""
  tmp = f"{path}.tmp{os.getpid()}"
  try:
    with open(tmp, "wb") as f:
      for payload in payloads:
        f.write(payload)
    os.replace(tmp, path)
  except BaseException:  # a full disk (OSError), an interrupt: leave no partial file
    with contextlib.suppress(OSError):
      os.remove(tmp)
    raise


NOT_FINITE = "_not_finite"


def to_jsonable(obj: Any) -> Any:
  """Nested dicts/lists/tuples of Python and NumPy scalars as plain JSON values. JSON
  has no NaN or ±inf: a non-finite number is written as null, and its dict entry ``k``
  gets a sibling ``k_not_finite`` giving the value ("nan", "inf" or "-inf"; for a list,
  {"i.j": value} by index path), which `from_jsonable` puts back. (A non-finite number
  outside any dict is written as null, without its value.)"""
  if isinstance(obj, ml_collections.ConfigDict):
    obj = obj.to_dict()
  if isinstance(obj, dict):
    out = {}
    for k, v in obj.items():
      out[str(k)] = to_jsonable(v)
      if lost := dict(_non_finite(v)):
        out[str(k) + NOT_FINITE] = lost.get("", lost)
    return out
  if isinstance(obj, (list, tuple)):
    return [to_jsonable(v) for v in obj]
  if isinstance(obj, np.ndarray):
    return to_jsonable(obj.tolist())
  if isinstance(obj, np.generic):
    obj = obj.item()
  if isinstance(obj, float) and not np.isfinite(obj):
    return None
  return obj


def _non_finite(obj: Any, path: str = ""):
  """(index path, "nan" | "inf" | "-inf") of the non-finite numbers in a list value."""
  if isinstance(obj, (list, tuple, np.ndarray)) and not isinstance(obj, np.generic):
    for i, v in enumerate(obj):
      yield from _non_finite(v, f"{path}.{i}" if path else str(i))
  elif isinstance(obj, (float, np.floating)) and not np.isfinite(obj):
    yield path, str(float(obj))


def from_jsonable(obj: Any) -> Any:
  """Inverts `to_jsonable`'s nulls: each ``k_not_finite`` sibling's values put back in
  ``k`` (as floats) and the sibling dropped."""
  if isinstance(obj, list):
    return [from_jsonable(v) for v in obj]
  if not isinstance(obj, dict):
    return obj
  out = {k: from_jsonable(v) for k, v in obj.items()}
  for key in [k for k in out if k.endswith(NOT_FINITE) and k[:-len(NOT_FINITE)] in out]:
    lost, base = out.pop(key), key[:-len(NOT_FINITE)]
    if isinstance(lost, str):
      out[base] = float(lost)
      continue
    for path, value in lost.items():
      *outer, last = map(int, path.split("."))
      target = out[base]
      for i in outer:
        target = target[i]
      target[last] = float(value)
  return out


def dumps_json(obj: Any, **kwargs) -> str:
  """``obj`` as strict JSON (`to_jsonable`; no NaN or inf token in the text)."""
  return json.dumps(to_jsonable(obj), allow_nan=False, **kwargs)


def loads_json(text: str) -> Any:
  """The object `dumps_json` wrote, its non-finite numbers restored (`from_jsonable`)."""
  return from_jsonable(json.loads(text))


def write_json(path: str, obj: Any) -> None:
  """Writes ``obj`` as indented strict JSON (`dumps_json`), atomically."""
  atomic_write(path, dumps_json(obj, indent=2, sort_keys=True).encode())


def read_json(path: str) -> Any:
  """The object `write_json` wrote to ``path`` (`loads_json`)."""
  with open(path) as f:
    return loads_json(f.read())


def sha256_file(path: str) -> str:
  """SHA-256 (hex) of the file at ``path``, read in blocks."""
  with open(path, "rb") as f:
    return hashlib.file_digest(f, "sha256").hexdigest()


def array_digest(*arrays: np.ndarray) -> str:
  """SHA-256 (hex) of arrays' dtypes, shapes and bytes: their content's identity."""
  h = hashlib.sha256()
  for a in arrays:
    a = np.ascontiguousarray(a)
    h.update(f"{a.dtype.str}{a.shape}".encode())
    h.update(a.tobytes())
  return h.hexdigest()


def write_verified(path: str, tree: Any) -> None:
  """Writes a pytree of arrays, strings and dicts (flax msgpack) with its SHA-256,
  atomically (`read_verified` checks it): the msgpack map {"body": the tree's msgpack,
  "sha256": its digest}, written in three parts so that the body (hundreds of MB in a
  landscape's checkpoint) is not copied again into the map's encoding."""
  body = flax.serialization.msgpack_serialize(tree)
  n = len(body)  # msgpack's bin 8/16/32 header: its type byte, then the length big-endian
  size = 1 if n < 1 << 8 else 2 if n < 1 << 16 else 4
  head = bytes([{1: 0xC4, 2: 0xC5, 4: 0xC6}[size]]) + n.to_bytes(size, "big")
  packer = msgpack.Packer()  # the encoding flax uses: str for the keys and the digest
  atomic_write(path, packer.pack_map_header(2) + packer.pack("body") + head, body,
               packer.pack("sha256") + packer.pack(hashlib.sha256(body).hexdigest()))


def read_verified(path: str, remedy: str) -> Any:
  """The pytree `write_verified` wrote to ``path``.

  Raises:
    FileNotFoundError: no file at ``path``.
    ValueError: the file is truncated, corrupted (its SHA-256 does not match) or not by
      `write_verified`; the message names ``path`` and ``remedy``.
  """
  with open(path, "rb") as f:
    raw = f.read()
  try:
    outer = flax.serialization.msgpack_restore(raw)
  except Exception as e:  # msgpack raises several types for malformed input
    raise ValueError(f"{path} is unreadable ({type(e).__name__}: {e}); {remedy}") from e
  if not (isinstance(outer, dict) and isinstance(outer.get("body"), bytes)
          and isinstance(outer.get("sha256"), str)):
    raise ValueError(f"{path} is not a file this trdr version wrote (no checksum); {remedy}")
  if hashlib.sha256(outer["body"]).hexdigest() != outer["sha256"]:
    raise ValueError(f"{path} is corrupted: its SHA-256 does not match; {remedy}")
  return flax.serialization.msgpack_restore(outer["body"])


def disk_usage(path: str) -> int:
  """The bytes of a file, or of every file under a directory (their sizes, as ``du -b``
  counts them; links not followed)."""
  if not os.path.isdir(path):
    return os.path.getsize(path)
  return sum(os.path.getsize(os.path.join(root, name))
             for root, _, names in os.walk(path) for name in names
             if not os.path.islink(os.path.join(root, name)))


def save_npz(path: str, **arrays) -> None:
  """np.savez, atomically (uncompressed: zlib would cost the main job seconds for a few
  percent of its hundreds of MB)."""
  buf = io.BytesIO()
  np.savez(buf, **arrays)
  atomic_write(path, buf.getbuffer())
