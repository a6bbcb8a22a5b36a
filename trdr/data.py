"""Data sources and the binary (or C-class) task attacked by the reconstruction.

1. `load_source(source, path, name)` reads a labelled image data set (train and test
   splits) as uint8 arrays. Sources, registered in `SOURCES`:

   * ``"cifar10_sample"`` (default, offline): 1500 train + 500 test real CIFAR-10
     images shipped inside the package (`trdr/assets/cifar10_sample.npz`; 150 train
     and 50 test images per class).
   * ``"npz"``: a user ``.npz`` file with keys train_images, train_labels,
     test_images, test_labels.
   * ``"cifar10_python"``: the official CIFAR-10 python-pickle release, either the
     ``cifar-10-batches-py`` folder or the ``cifar-10-python.tar.gz`` tarball.
   * ``"tfds"``: a tensorflow-datasets data set (optional extra
     ``pip install -e ".[tfds]"``).

2. `make_task(data_config)` merges the classes into two groups (labels −1, +1;
   or C > 2 groups, labels 0 … C−1), draws the victim's training set and a disjoint
   "distinct partition" of the same size from the train split, and scales pixels to
   [0, 1] (optionally subtracting the training set's per-pixel mean).
"""

from __future__ import annotations

import ast
import itertools
import os
import pickle
import tarfile
import zipfile
from typing import Any, Callable, NamedTuple, Optional

import ml_collections
import numpy as np
from absl import logging
from ml_collections import config_dict

from trdr import assets

CIFAR10_VEHICLES_VS_ANIMALS = ((0, 1, 8, 9), (2, 3, 4, 5, 6, 7))
MNIST_EVEN_VS_ODD = ((0, 2, 4, 6, 8), (1, 3, 5, 7, 9))

_KEYS = ("train_images", "train_labels", "test_images", "test_labels")
_CIFAR10_TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
_CIFAR10_TEST_BATCH = "test_batch"


# ------------------------------------------------------------------------ sources --


def _check(data: dict[str, Any], origin: str) -> dict[str, np.ndarray]:
  """Validates and normalises a loaded data set (see `load_source` for the format)."""
  out = {}
  for split in ("train", "test"):
    images = np.asarray(data[f"{split}_images"])
    labels = np.asarray(data[f"{split}_labels"])
    if images.dtype != np.uint8:
      raise ValueError(f"{origin}: {split}_images must have dtype uint8 (pixel values "
                       f"0..255), got {images.dtype}")
    if images.ndim == 3:
      images = images[..., None]
    if images.ndim != 4 or not len(images) or images.shape[-1] > 4:
      raise ValueError(f"{origin}: {split}_images must have shape (N, H, W) or (N, H, W, C),"
                       f" N ≥ 1, C ≤ 4 (channels last), got {images.shape}" + (
                           " (channels first? transpose to NHWC)" if images.ndim == 4
                           and images.shape[1] <= 4 < images.shape[-1] else ""))
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
      raise ValueError(f"{origin}: {split}_labels must be a 1-D integer array, got "
                       f"shape {labels.shape} and dtype {labels.dtype}")
    if len(labels) != len(images):
      raise ValueError(f"{origin}: {split}_labels has {len(labels)} entries but "
                       f"{split}_images has {len(images)} images")
    out[f"{split}_images"] = np.ascontiguousarray(images)
    out[f"{split}_labels"] = labels.astype(np.int64)
  if out["train_images"].shape[1:] != out["test_images"].shape[1:]:
    raise ValueError(f"{origin}: train and test images differ in shape: (H, W, C) = "
                     f"{out['train_images'].shape[1:]} vs {out['test_images'].shape[1:]}")
  return out


def _require_path(path: Optional[str], source: str) -> str:
  if path is None:
    raise ValueError(f"source {source!r} needs a path (data_config.path)")
  path = os.path.expanduser(os.fspath(path))
  if not os.path.exists(path):
    raise ValueError(f"source {source!r}: {path} does not exist")
  return path


def _read_npz(path: str, origin: str) -> dict[str, np.ndarray]:
  try:
    with open(path, "rb") as fh, np.load(fh, allow_pickle=False) as f:  # .npy: TypeError
      arrays = {k: f[k] for k in _KEYS if k in f.files}
      files = sorted(f.files)
  except (OSError, EOFError, ValueError, AttributeError, TypeError,
          zipfile.BadZipFile) as e:
    raise ValueError(f"{origin}: cannot read the file as .npz (uint8/integer "
                     f"arrays, no pickled objects): {e}") from e
  missing = [k for k in _KEYS if k not in arrays]
  if missing:
    raise ValueError(f"{origin}: missing key(s) {missing}; the file has {files} but "
                     f"needs {list(_KEYS)}")
  return arrays


def _load_cifar10_sample(path: Optional[str], name: Optional[str]) -> dict:
  del path, name  # The shipped file has a fixed location.
  try:
    file = assets.sample_path()
  except FileNotFoundError as e:
    raise ValueError(str(e)) from e
  return _read_npz(file, f"cifar10_sample ({file})")


def _load_npz(path: Optional[str], name: Optional[str]) -> dict:
  del name
  path = _require_path(path, "npz")
  return _read_npz(path, path)


def _cifar10_batch(raw: bytes, what: str) -> tuple[np.ndarray, np.ndarray]:
  """Decodes one CIFAR-10 pickle batch into (N, 32, 32, 3) uint8 HWC images."""
  batch = pickle.loads(raw, encoding="bytes")
  if not isinstance(batch, dict) or b"data" not in batch or b"labels" not in batch:
    raise ValueError(f"{what} is not a CIFAR-10 batch (a dict with b'data' and "
                     "b'labels')")
  data = np.asarray(batch[b"data"], dtype=np.uint8)
  if data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
    raise ValueError(f"{what}: b'data' must have shape (N, 3072), got {data.shape}")
  images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)  # CHW planes -> HWC.
  return images, np.asarray(batch[b"labels"], dtype=np.int64)


def _load_cifar10_python(path: Optional[str], name: Optional[str]) -> dict:
  del name
  path = _require_path(path, "cifar10_python")
  wanted = _CIFAR10_TRAIN_BATCHES + (_CIFAR10_TEST_BATCH,)
  raw = {}
  if os.path.isdir(path):
    folder = path
    nested = os.path.join(path, "cifar-10-batches-py")
    if not os.path.exists(os.path.join(path, wanted[0])) and os.path.isdir(nested):
      folder = nested
    for b in wanted:
      file = os.path.join(folder, b)
      if not os.path.isfile(file):
        raise ValueError(f"cifar10_python: {file} is missing (a cifar-10-batches-py "
                         f"folder holds {', '.join(wanted)})")
      with open(file, "rb") as f:
        raw[b] = f.read()
  else:
    try:
      with tarfile.open(path, "r:*") as tar:
        members = {os.path.basename(m.name): m for m in tar.getmembers() if m.isfile()}
        for b in wanted:
          if b not in members:
            raise ValueError(f"cifar10_python: tarball {path} has no member "
                             f"cifar-10-batches-py/{b}")
          raw[b] = tar.extractfile(members[b]).read()
    except tarfile.TarError as e:
      raise ValueError(f"cifar10_python: {path} is neither a folder nor a readable "
                       f"tarball: {e}") from e
  train = [_cifar10_batch(raw[b], f"{path}:{b}") for b in _CIFAR10_TRAIN_BATCHES]
  test_images, test_labels = _cifar10_batch(raw[_CIFAR10_TEST_BATCH],
                                            f"{path}:{_CIFAR10_TEST_BATCH}")
  return {"train_images": np.concatenate([x for x, _ in train]),
          "train_labels": np.concatenate([y for _, y in train]),
          "test_images": test_images, "test_labels": test_labels}


def _load_tfds(path: Optional[str], name: Optional[str]) -> dict:
  if not name:
    raise ValueError("source 'tfds' needs a data set name (data_config.name), e.g. "
                     "'cifar10' or 'mnist'")
  try:
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError("source 'tfds' needs tensorflow-datasets; install the tfds "
                      "extra: pip install -e \".[tfds]\"") from e
  out = {}
  for split in ("train", "test"):
    ds = tfds.load(name, split=split, as_supervised=True, data_dir=path)
    images, labels = [], []
    # Batched iteration; batch_size=-1 aborts TF under tfds.testing.mock_data.
    for x, y in tfds.as_numpy(ds.batch(1024)):
      images.append(np.asarray(x))
      labels.append(np.asarray(y))
    if not images:
      raise ValueError(f"tfds data set {name!r}: split {split!r} is empty")
    out[f"{split}_images"] = np.concatenate(images)
    out[f"{split}_labels"] = np.concatenate(labels)
  return out


SOURCES: dict[str, Callable[[Optional[str], Optional[str]], dict]] = {
    "cifar10_sample": _load_cifar10_sample,
    "npz": _load_npz,
    "cifar10_python": _load_cifar10_python,
    "tfds": _load_tfds,
}


def load_source(source: str, path: Optional[str] = None,
                name: Optional[str] = None) -> dict[str, np.ndarray]:
  """Loads a labelled image data set with a train and a test split.

  Args:
    source: one of `SOURCES`: "cifar10_sample" (shipped, offline), "npz" (a user
      file with keys train_images, train_labels, test_images, test_labels; images
      uint8 (N, H, W) or (N, H, W, C), labels integer (N,)), "cifar10_python" (the
      official `cifar-10-batches-py` folder or `cifar-10-python.tar.gz`; read with
      pickle, so only use files you trust) or "tfds" (tensorflow-datasets).
    path: the file or folder for "npz" and "cifar10_python"; the tfds data_dir for
      "tfds" (None: tfds's default); ignored for "cifar10_sample".
    name: the tensorflow-datasets name for "tfds" (e.g. "cifar10", "mnist").

  Returns:
    A dict with "train_images" and "test_images", uint8 (N, H, W, C) in 0..255
    (a channel axis C = 1 is added to grayscale (N, H, W) images), and
    "train_labels" and "test_labels", int64 (N,).

  Raises:
    ValueError: unknown source; missing path, file, folder, key or batch; wrong
      dtype or ndim; label count differing from image count; train and test images
      differing in (H, W, C).
    ImportError: source "tfds" without tensorflow-datasets installed.
  """
  if source not in SOURCES:
    raise ValueError(f"unknown data source {source!r}; known sources: "
                     f"{', '.join(sorted(SOURCES))}")
  data = SOURCES[source](path, name)
  origin = source if path is None else f"{source} ({path})"
  return _check(data, origin)


# -------------------------------------------------------------------------- task --


def to_pixels(images: np.ndarray, mean: Optional[np.ndarray]) -> np.ndarray:
  """Undoes mean subtraction: images float[..., H, W, C] (`Task`) + mean
  float32[H, W, C] (or None: unchanged), in [0, 1] pixels (reconstructions may exceed).
  """
  return images if mean is None else images + mean


class Task(NamedTuple):
  """A classification task of C ≥ 2 class groups: victim training set, distinct
  partition, test. Shapes below for two groups (labels ±1); C > 2 groups give C·n images
  (labels 0 … C−1).

  Attributes:
    train_images: float32 [2n, H, W, C], pixels in [0, 1] (minus `mean` if mean
      subtraction is on). The n images of the first class group, then the n of the
      second (then the third …).
    train_labels: float32 [2n] in {-1, +1}: -1 for the first group, +1 for the second;
      with C > 2 groups, the group index 0 … C−1.
    partition_images: float32 [2n, H, W, C], the attack's distinct partition, drawn
      from the train split and disjoint from the training set; same layout.
    partition_labels: float32 [2n], as train_labels.
    test_images: float32 [M, H, W, C], every test-split image of the groups.
    test_labels: float32 [M], as train_labels.
    mean: float32 [H, W, C], the per-pixel mean that was subtracted from all images
      (the training set's, or the test split's where ``mean_from`` is "test"), or None.
    train_index: int64 [2n], indices of the training images in the source's train
      split.
    partition_index: int64 [2n], indices of the partition images in the train split.
  """
  train_images: np.ndarray
  train_labels: np.ndarray
  partition_images: np.ndarray
  partition_labels: np.ndarray
  test_images: np.ndarray
  test_labels: np.ndarray
  mean: Optional[np.ndarray]
  train_index: np.ndarray
  partition_index: np.ndarray

  def to_pixels(self, images: np.ndarray) -> np.ndarray:
    """`to_pixels(images, self.mean)`: undoes this task's mean subtraction."""
    return to_pixels(images, self.mean)


def parse_classes(classes: Any) -> tuple[tuple[int, ...], ...]:
  """Normalises `classes` to C ≥ 2 disjoint, non-empty tuples of int class ids (C = 2:
  a binary task; more: a C-class task, e.g. ((0,), (1,), …, (9,)), Buzaglo et al.).

  Accepts tuples or lists (as ml_collections may deliver from the command line) or
  their string form, e.g. "((0,2,4,6,8),(1,3,5,7,9))".

  Raises:
    ValueError: not two or more non-empty groups of integers, or groups that overlap.
  """
  if isinstance(classes, str):
    try:
      classes = ast.literal_eval(classes)
    except (ValueError, SyntaxError) as e:
      raise ValueError(f"classes {classes!r} is not a Python literal") from e
  bad = ValueError(f"classes must be two or more non-empty tuples of class ids, e.g. "
                   f"((0, 1, 8, 9), (2, 3, 4, 5, 6, 7)); got {classes!r}")
  if not isinstance(classes, (tuple, list)) or len(classes) < 2:
    raise bad
  groups = []
  for group in classes:
    if not isinstance(group, (tuple, list)) or not group or not all(
        isinstance(c, (int, np.integer)) and not isinstance(c, bool) for c in group):
      raise bad
    groups.append(tuple(int(c) for c in group))
  for i, j in itertools.combinations(range(len(groups)), 2):
    shared = sorted(set(groups[i]) & set(groups[j]))
    if shared:
      raise ValueError(f"class groups {groups[i]} and {groups[j]} overlap in "
                       f"{shared}; each class may belong to one group only")
  return tuple(groups)


def read_training_set(path: str, groups: int) -> dict[str, np.ndarray]:
  """A user's exact training set: the images and labels θ* was trained on, as they are.

  The .npz holds "images", uint8 (N, H, W) or (N, H, W, C) in 0..255 or floating point
  in [0, 1] (pixels); "labels", integer (N,): with two class groups −1/+1 or 0/1 (0 and
  −1: the first group), with C > 2 groups 0 … C−1; and optionally "mean", floating point
  (H, W, C) in pixel units: the per-pixel mean the user subtracted from every input
  before training (then trdr subtracts exactly it). The order is kept.

  Args:
    path: the .npz file.
    groups: the class groups of the task (`parse_classes`).
  Returns:
    {"images": float32 (N, H, W, C) in [0, 1], "labels": float32 (N,) in the task's
    convention (±1, or 0 … C−1), "mean": float32 (H, W, C) or None}.
  Raises:
    ValueError: a missing key or file, a non-.npz, wrong dtype, shape, range or label
      values, or a group without images (one line naming the file and what is wrong).
  """
  origin = f"data.training_set ({path})"
  try:
    with open(os.path.expanduser(path), "rb") as fh, np.load(fh, allow_pickle=False) as f:
      arrays = {k: f[k] for k in ("images", "labels", "mean") if k in f.files}
      found = sorted(f.files)
  except (OSError, EOFError, ValueError, AttributeError, TypeError,
          zipfile.BadZipFile) as e:
    raise ValueError(f"{origin}: cannot read the file as .npz: {e}") from e
  if "images" not in arrays or "labels" not in arrays:
    raise ValueError(f"{origin}: needs the keys images and labels (mean optional); the file "
                     f"has {found}")
  images, labels = arrays["images"], arrays["labels"]
  if images.ndim == 3:
    images = images[..., None]
  if images.ndim != 4 or not len(images) or images.shape[-1] > 4:
    raise ValueError(f"{origin}: images must have shape (N, H, W) or (N, H, W, C), C ≤ 4 "
                     f"(channels last), got {images.shape}")
  if images.dtype == np.uint8:
    images = images.astype(np.float32) / np.float32(255.0)
  elif np.issubdtype(images.dtype, np.floating):
    low, high = float(images.min()), float(images.max())
    if low < 0.0 or high > 1.0 or not np.isfinite([low, high]).all():
      raise ValueError(f"{origin}: floating-point images must be pixels in [0, 1], got "
                       f"values in [{low:g}, {high:g}] (pass the images before the mean "
                       "subtraction, and the mean as the key mean)")
    images = images.astype(np.float32)
  else:
    raise ValueError(f"{origin}: images must be uint8 (0..255) or floating point in "
                     f"[0, 1], got {images.dtype}")
  if labels.shape != (len(images),) or not np.issubdtype(labels.dtype, np.integer):
    raise ValueError(f"{origin}: labels must be an integer array of shape ({len(images)},), "
                     f"got {labels.dtype} {labels.shape}")
  values = set(np.unique(labels).tolist())
  if groups == 2:
    if not values <= {-1, 1} and not values <= {0, 1}:
      raise ValueError(f"{origin}: a binary task's labels are −1/+1 or 0/1, got "
                       f"{sorted(values)}")
    labels = np.where(labels == 1, 1.0, -1.0).astype(np.float32)
    present = {-1.0, 1.0} & set(labels.tolist())
  else:
    if not values <= set(range(groups)):
      raise ValueError(f"{origin}: a {groups}-class task's labels are 0 … {groups - 1}, got "
                       f"{sorted(values)}")
    labels = labels.astype(np.float32)
    present = set(labels.tolist())
  if len(present) < groups:
    raise ValueError(f"{origin}: every class group needs training images; the labels hold "
                     f"{len(present)} of {groups}")
  mean = arrays.get("mean")
  if mean is not None:
    mean = np.asarray(mean, np.float32)
    if mean.ndim == 2:
      mean = mean[..., None]
    if mean.shape != images.shape[1:]:
      raise ValueError(f"{origin}: mean must have the images' shape {images.shape[1:]}, got "
                       f"{mean.shape}")
  return {"images": images, "labels": labels, "mean": mean}


# ``data.mean_from``: the images whose mean ``subtract_mean`` subtracts; "test" is public
# data, outside the training set.
MEAN_FROM = ("train", "test")


def make_task(data_config: Any, exclude: Any = ()) -> Task:
  """Builds the victim's task from a data config (see `default_data_config`): two class
  groups (labels ±1) or C > 2 (labels 0 … C−1).

  For each class group, the group's train-split indices are permuted by
  `np.random.default_rng(seed)` (one generator, first group first); the first
  `n_per_class` go to the training set, the next `n_per_class` to the distinct
  partition. Indices in ``exclude`` are removed from a group before it is permuted.

  With ``training_set`` (a path: `read_training_set`), the training set is the user's,
  exactly: its images in its order, its labels, and its mean subtraction where the file
  states one (else ``subtract_mean`` subtracts the given images' mean). The source then
  gives the partition (per group as many images as the training set has, drawn as
  above without a training draw, so it may hold a training image if the user's came
  from that source) and the test split; ``n_per_class`` is not used and train_index is
  −1 (no index in the source).

  Args:
    data_config: an `ml_collections.ConfigDict` (or any object with these
      attributes): source, path, name, classes, n_per_class, seed, subtract_mean;
      optionally mean_from, the images whose per-pixel mean ``subtract_mean`` subtracts:
      "train" (the default: the training set's) or "test" (the test split's, which
      depends on no training image).
    exclude: int indices into the source's train split that are never drawn (a shadow
      victim's data in `trdr.studies.membership.shadow_victims`: public images outside a
      victim's training set and partition). Empty (the default): the draw is exactly
      the one described above.

  Returns:
    A `Task`.

  Raises:
    ValueError: as `load_source` and `read_training_set`; malformed or overlapping
      `classes`; a class id absent from the train split; a group with fewer than
      2 * n_per_class train images (outside ``exclude``); n_per_class < 1; an index of
      ``exclude`` outside the train split; a training set whose image shape differs from
      the source's.
  """
  groups = parse_classes(data_config.classes)
  given = getattr(data_config, "training_set", None)
  if given:
    given = read_training_set(given, len(groups))
  n = data_config.n_per_class
  if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
    raise ValueError(f"n_per_class must be a positive integer, got {n!r}")
  n = int(n)
  data = load_source(data_config.source, getattr(data_config, "path", None),
                     getattr(data_config, "name", None))
  train_labels, test_labels = data["train_labels"], data["test_labels"]
  present = np.unique(train_labels)
  absent = [c for g in groups for c in g if c not in present]
  if absent:
    raise ValueError(f"class id(s) {absent} do not occur in the train split of "
                     f"{data_config.source!r}; classes present: {present.tolist()}")

  excluded = np.asarray(exclude).reshape(-1)
  if excluded.size and (not np.issubdtype(excluded.dtype, np.integer) or excluded.min() < 0
                        or excluded.max() >= len(train_labels)):
    raise ValueError(f"exclude must hold indices of the train split (0 … "
                     f"{len(train_labels) - 1}); got {excluded.dtype} values in "
                     f"[{excluded.min()}, {excluded.max()}]")
  # Labels: ±1 for two groups (first −1), else the group's index 0 … C−1 (as float32).
  values = np.array([-1.0, 1.0] if len(groups) == 2 else range(len(groups)), np.float32)
  # Per group: the training images drawn (none where the training set is given) and the
  # partition's.
  counts = ([n] * len(groups) if not given else
            [int(np.sum(given["labels"] == v)) for v in values])
  drawn = [0 if given else c for c in counts]
  rng = np.random.default_rng(data_config.seed)
  train_index, partition_index = [], []
  for group, k, count in zip(groups, drawn, counts):
    idx = np.flatnonzero(np.isin(train_labels, group))
    if excluded.size:
      idx = idx[~np.isin(idx, excluded)]
    if len(idx) < k + count:
      outside = f" outside the {excluded.size} excluded" if excluded.size else ""
      need = (f"{count}, as many as the given training set has, are needed (the "
              "partition)" if given else f"2 × n_per_class = {k + count} are needed "
              "(training set + distinct partition)")
      raise ValueError(f"class group {group} has {len(idx)} images in the train "
                       f"split{outside}; {need}")
    perm = rng.permutation(idx)
    train_index.append(perm[:k])
    partition_index.append(perm[k:k + count])
  train_index = np.concatenate(train_index).astype(np.int64)
  partition_index = np.concatenate(partition_index).astype(np.int64)
  pm = np.repeat(values, counts)
  test_keep = np.flatnonzero(np.isin(test_labels, sum(groups, ())))

  scale = lambda images: images.astype(np.float32) / np.float32(255.0)
  train = scale(data["train_images"][train_index])
  train_labels_out = pm
  if given:
    if given["images"].shape[1:] != data["train_images"].shape[1:]:
      raise ValueError(f"data.training_set ({data_config.training_set}): its images are "
                       f"{given['images'].shape[1:]} (H, W, C), the source "
                       f"{data_config.source!r} gives {data['train_images'].shape[1:]}")
    train, train_labels_out = given["images"], given["labels"]
    train_index = np.full(len(train), -1, np.int64)
  partition = scale(data["train_images"][partition_index])
  test = scale(data["test_images"][test_keep])
  mean = None
  if given and given["mean"] is not None:
    mean = given["mean"]
  elif data_config.subtract_mean:
    source = getattr(data_config, "mean_from", None) or "train"
    if source not in MEAN_FROM:
      raise ValueError(f"data.mean_from must be one of {MEAN_FROM}, got {source!r}")
    # "test": the test split's mean depends on no training image, so one training image's
    # presence moves no other input (what a DP guarantee on the training set needs).
    mean = (train if source == "train" else test).mean(axis=0, dtype=np.float64).astype(
        np.float32)
  if mean is not None:
    train, partition, test = train - mean, partition - mean, test - mean
  logging.info("%d-class task from %s: classes %s, %d train, %d partition, %d test "
               "images of shape %s", len(groups), data_config.source, " vs ".join(
                   map(str, groups)), len(train), len(partition), len(test), train.shape[1:])
  group_of = {c: g for g, group in enumerate(groups) for c in group}
  test_pm = values[[group_of[int(c)] for c in test_labels[test_keep]]]
  return Task(train_images=train, train_labels=train_labels_out, partition_images=partition,
                    partition_labels=pm.copy(), test_images=test, test_labels=test_pm,
                    mean=mean, train_index=train_index, partition_index=partition_index)


def default_data_config() -> ml_collections.ConfigDict:
  """The default data config: CIFAR-10 vehicles vs animals from the shipped sample.

  Fields: source "cifar10_sample"; path None and name None (string placeholders,
  so `--config.data.path=...` works on a locked config); classes
  ((0, 1, 8, 9), (2, 3, 4, 5, 6, 7)); n_per_class 250; seed 0; subtract_mean False;
  training_set None (a path: the user's exact training set, `read_training_set`).
  """
  return ml_collections.ConfigDict({
      "source": "cifar10_sample",
      "path": config_dict.placeholder(str),
      "name": config_dict.placeholder(str),
      "classes": CIFAR10_VEHICLES_VS_ANIMALS,
      "n_per_class": 250,
      "seed": 0,
      "subtract_mean": False,
      "training_set": config_dict.placeholder(str),
  })
