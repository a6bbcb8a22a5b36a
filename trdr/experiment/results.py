"""results.npz: a run's arrays, as written (`save`) and read back (`load`).

A landscape run (the eq. 10 grid) stores nothing it can regenerate bit for bit:

  initial_images  not stored: eq. 10 of the saved training, partition and noise images at
                  the saved (λ1, λ2) (`trdr.attacks.init.grid_images`, elementwise numpy
                  arithmetic, so the same bits on every machine)
  final_images    stored once per distinct grid point (the eq. 10 grid repeats its noise
                  start at every λ1 when λ2 = 0, and `trdr.experiment.loop` attacks each
                  distinct start once), with the grid point -> stored row map

`load` gives every array back as the run computed it, so a reader never sees how they were
stored. The other modes store their arrays as they are.
"""

import collections.abc
import os

import numpy as np

from trdr.attacks import init as inits
from trdr.runtime import files, sharding

RESULTS_FILE = "results.npz"
# final_images [U, m, H, W, C] of the U distinct grid points, and int[G]: each grid point's row.
DISTINCT_SUFFIX = "_distinct"
SPREAD = "grid_spread"
DEDUPLICATED = ("final_images",)
REGENERATED = "initial_images"
# What `initial_images` is regenerated from (a landscape's `Starts.extra` and the task).
MIXTURE_KEYS = ("lambda1", "lambda2", "train_images", "partition_images", "noise_images")


def save(path: str, arrays: dict, *, landscape: bool = False) -> None:
  """Writes ``arrays`` to ``path`` (atomically, `trdr.runtime.files.save_npz`).

  Args:
    path: the .npz file to write.
    arrays: name -> array, as `load` will give them back.
    landscape: a landscape run's arrays (final_images float[G, m, H, W, C] with the
      `MIXTURE_KEYS`): store them as the module docstring says.
  Raises:
    ValueError: ``landscape`` and the saved initial_images are not eq. 10 of the saved
      images bit for bit (they would not come back as the run computed them).
  """
  if landscape:
    arrays = dict(arrays)
    initial = arrays.pop(REGENERATED)
    if not np.array_equal(_regenerate(arrays), initial):
      raise ValueError(f"{path}: the start images are not eq. 10 of the saved training, "
                       "partition and noise images; refusing to drop them")
    for key in DEDUPLICATED:
      distinct, spread = sharding.distinct_points(arrays[key])
      arrays[key + DISTINCT_SUFFIX] = arrays.pop(key)[distinct]
      arrays[SPREAD] = spread
  files.save_npz(path, **arrays)


def _regenerate(arrays) -> np.ndarray:
  """A landscape's start images float[G, m, H, W, C], from its saved arrays, in the run's
  precision: the noise images' dtype (the task's float32 images cast to it exactly)."""
  grid = inits.Grid(arrays["lambda1"], arrays["lambda2"], None)
  noise = arrays["noise_images"]
  return inits.grid_images(grid, *(arrays[k].astype(noise.dtype)
                                   for k in ("train_images", "partition_images")), noise)


class Results(collections.abc.Mapping):
  """A run's results.npz as name -> np.ndarray, each array read (or regenerated) when
  first used: a figure needs few of them. Use it as a context manager, or `close` it."""

  def __init__(self, path: str):
    self.path = path
    self._npz = np.load(path)
    self._read = {}
    stored = set(self._npz.files)
    self._names = [k.removesuffix(DISTINCT_SUFFIX) for k in self._npz.files if k != SPREAD]
    if REGENERATED not in stored and stored.issuperset(MIXTURE_KEYS):
      self._names.append(REGENERATED)

  def __getitem__(self, key: str) -> np.ndarray:
    if key not in self._read:
      if key in self._npz.files:
        self._read[key] = self._npz[key]
      elif key + DISTINCT_SUFFIX in self._npz.files:
        self._read[key] = self._npz[key + DISTINCT_SUFFIX][self._npz[SPREAD]]
      elif key == REGENERATED and key in self._names:
        self._read[key] = _regenerate(self)
      else:
        raise KeyError(f"{self.path} has no array {key!r}")
    return self._read[key]

  def __iter__(self):
    return iter(self._names)

  def __len__(self) -> int:
    return len(self._names)

  def close(self) -> None:
    self._npz.close()

  def __enter__(self) -> "Results":
    return self

  def __exit__(self, *exc) -> None:
    self.close()


def load(path: str) -> Results:
  """A run's arrays as the run computed them, each read when first used.

  Args:
    path: a run directory (its results.npz is read) or an .npz file.
  Returns:
    `Results`: a Mapping name -> np.ndarray (float32 or float64 images as the run's
    precision; see each mode's writer in `trdr.experiment.modes`).
  Raises:
    FileNotFoundError: no results.npz there (the run has not finished its evaluation).
  """
  if os.path.isdir(path):
    path = os.path.join(path, RESULTS_FILE)
  if not os.path.exists(path):
    raise FileNotFoundError(f"no {RESULTS_FILE} at {path}: the run has not finished")
  return Results(path)
