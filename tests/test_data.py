"""Tests for trdr.data: every source, every validation error, the binary task."""

import os
import pickle
import sys
import tarfile
import types

import numpy as np
import pytest

from trdr import data

SHARED_SAMPLE = "/work/shared/data/cifar10_sample.npz"


@pytest.fixture(scope="module")
def sample():
  return data.load_source("cifar10_sample")


def _config(**overrides):
  """The default data config with overrides, as a plain (type-unchecked) object."""
  return types.SimpleNamespace(**{**data.default_data_config().to_dict(), **overrides})


def _save_npz(path, **arrays):
  np.savez(path, **arrays)
  return str(path)


def _rgb_arrays(sample, n_train=6, n_test=4):
  return {
      "train_images": sample["train_images"][:n_train],
      "train_labels": sample["train_labels"][:n_train].astype(np.uint8),
      "test_images": sample["test_images"][:n_test],
      "test_labels": sample["test_labels"][:n_test].astype(np.int32),
  }


# ------------------------------------------------------------------ shipped sample --


def test_shipped_sample_shapes_and_class_counts(sample):
  assert set(sample) == {"train_images", "train_labels", "test_images", "test_labels"}
  assert sample["train_images"].shape == (1500, 32, 32, 3)
  assert sample["test_images"].shape == (500, 32, 32, 3)
  assert sample["train_images"].dtype == np.uint8
  assert sample["train_labels"].dtype == np.int64
  assert sample["test_labels"].dtype == np.int64
  np.testing.assert_array_equal(np.bincount(sample["train_labels"]), [150] * 10)
  np.testing.assert_array_equal(np.bincount(sample["test_labels"]), [50] * 10)
  assert sample["train_images"].std() > 30  # Real images, not blank.


def test_shipped_sample_keeps_provenance_keys():
  """The sample is reachable from Python (`trdr.assets.sample_path`: a regular package,
  not a namespace one whose __file__ is None) and keeps where each image came from."""
  from trdr import assets  # pylint: disable=g-import-not-at-top
  assert assets.__file__ is not None
  with np.load(assets.sample_path()) as npz:
    assert {"train_index", "label_names"} <= set(npz.files)
    assert npz["train_index"].shape == (1500, 2)
    assert list(npz["label_names"][[0, 9]]) == ["airplane", "truck"]


@pytest.mark.skipif(not os.path.exists(SHARED_SAMPLE), reason="no shared data")
def test_shipped_sample_is_first_150_per_class_of_shared_sample(sample):
  with np.load(SHARED_SAMPLE) as src:
    for split, per_class in (("train", 150), ("test", 50)):
      labels = src[f"{split}_labels"]
      keep = np.sort(np.concatenate(
          [np.flatnonzero(labels == c)[:per_class] for c in range(10)]))
      np.testing.assert_array_equal(sample[f"{split}_images"],
                                    src[f"{split}_images"][keep])
      np.testing.assert_array_equal(sample[f"{split}_labels"], labels[keep])


# ----------------------------------------------------------------------- npz source --


def test_npz_rgb_roundtrip(tmp_path, sample):
  arrays = _rgb_arrays(sample)
  out = data.load_source("npz", _save_npz(tmp_path / "rgb.npz", **arrays))
  for k, v in arrays.items():
    np.testing.assert_array_equal(out[k], v)
  assert out["train_labels"].dtype == np.int64
  assert out["test_labels"].dtype == np.int64


def test_npz_grayscale_gets_channel_axis(tmp_path):
  rng = np.random.default_rng(0)
  train = rng.integers(0, 256, (5, 28, 28), dtype=np.uint8)
  test = rng.integers(0, 256, (3, 28, 28), dtype=np.uint8)
  path = _save_npz(tmp_path / "gray.npz", train_images=train,
                   train_labels=np.arange(5, dtype=np.uint8), test_images=test,
                   test_labels=np.arange(3, dtype=np.uint8))
  out = data.load_source("npz", path)
  assert out["train_images"].shape == (5, 28, 28, 1)
  assert out["test_images"].shape == (3, 28, 28, 1)
  np.testing.assert_array_equal(out["train_images"][..., 0], train)
  np.testing.assert_array_equal(out["test_labels"], [0, 1, 2])


def test_unknown_source_lists_known_ones():
  with pytest.raises(ValueError, match=r"unknown data source 'mnist_web'.*cifar10_"
                     r"python, cifar10_sample, npz, tfds"):
    data.load_source("mnist_web")


def test_npz_needs_path():
  with pytest.raises(ValueError, match=r"source 'npz' needs a path"):
    data.load_source("npz")


def test_npz_missing_file_names_path(tmp_path):
  missing = str(tmp_path / "nope.npz")
  with pytest.raises(ValueError, match=f"{missing} does not exist"):
    data.load_source("npz", missing)


def test_npz_not_an_npz(tmp_path):
  path = tmp_path / "junk.npz"
  path.write_bytes(b"this is not a zip file")
  with pytest.raises(ValueError, match=r"cannot read the file as \.npz"):
    data.load_source("npz", str(path))


def test_npz_with_pickled_objects_is_refused(tmp_path, sample):
  arrays = _rgb_arrays(sample)
  arrays["train_labels"] = np.array([object()] * 6)
  path = _save_npz(tmp_path / "obj.npz", **arrays)
  with pytest.raises(ValueError, match=r"cannot read the file as \.npz"):
    data.load_source("npz", path)


def test_npz_missing_key(tmp_path, sample):
  arrays = _rgb_arrays(sample)
  del arrays["test_labels"]
  path = _save_npz(tmp_path / "k.npz", **arrays)
  with pytest.raises(ValueError, match=r"missing key\(s\) \['test_labels'\]"):
    data.load_source("npz", path)


@pytest.mark.parametrize("key,value,message", [
    ("train_images", lambda a: a["train_images"].astype(np.float32),
     r"train_images must have dtype uint8.*got float32"),
    ("test_images", lambda a: a["test_images"][0, 0],
     r"test_images must have shape \(N, H, W\) or \(N, H, W, C\).*got \(32, 3\)"),
    ("train_images", lambda a: a["train_images"][None],
     r"train_images must have shape .* got \(1, 6, 32, 32, 3\)"),
    ("train_labels", lambda a: a["train_labels"].astype(np.float32),
     r"train_labels must be a 1-D integer array.*float32"),
    ("test_labels", lambda a: a["test_labels"][:, None],
     r"test_labels must be a 1-D integer array, got shape \(4, 1\)"),
    ("train_labels", lambda a: a["train_labels"][:5],
     r"train_labels has 5 entries but train_images has 6 images"),
    ("test_images", lambda a: a["test_images"][:, :16, :16],
     r"train and test images differ in shape.*\(32, 32, 3\) vs \(16, 16, 3\)"),
])
def test_npz_bad_arrays(tmp_path, sample, key, value, message):
  arrays = _rgb_arrays(sample)
  arrays[key] = value(arrays)
  path = _save_npz(tmp_path / "bad.npz", **arrays)
  with pytest.raises(ValueError, match=message):
    data.load_source("npz", path)


# ------------------------------------------------------------ cifar10_python source --


def _cifar10_batches(sample):
  """Six fake CIFAR-10 batches from real images: 2 train images each, 3 test."""
  images, labels = sample["train_images"], sample["train_labels"]
  batches = {}
  for i in range(5):
    sl = slice(2 * i, 2 * i + 2)
    batches[f"data_batch_{i + 1}"] = (images[sl], labels[sl])
  batches["test_batch"] = (sample["test_images"][:3], sample["test_labels"][:3])
  raw = {}
  for b, (x, y) in batches.items():
    planar = x.transpose(0, 3, 1, 2).reshape(len(x), 3072)  # Official CHW layout.
    raw[b] = pickle.dumps({b"batch_label": b.encode(), b"data": planar,
                           b"labels": [int(v) for v in y]})
  return raw


def _write_folder(root, raw, skip=()):
  folder = root / "cifar-10-batches-py"
  folder.mkdir()
  for b, blob in raw.items():
    if b not in skip:
      (folder / b).write_bytes(blob)
  return folder


def _write_tarball(root, raw, skip=()):
  (root / "src").mkdir()
  folder = _write_folder(root / "src", raw, skip)
  path = root / "cifar-10-python.tar.gz"
  with tarfile.open(path, "w:gz") as tar:
    tar.add(folder, arcname="cifar-10-batches-py")
  return str(path)


def _check_cifar10(out, sample):
  np.testing.assert_array_equal(out["train_images"], sample["train_images"][:10])
  np.testing.assert_array_equal(out["train_labels"], sample["train_labels"][:10])
  np.testing.assert_array_equal(out["test_images"], sample["test_images"][:3])
  np.testing.assert_array_equal(out["test_labels"], sample["test_labels"][:3])
  assert out["train_labels"].dtype == np.int64


def test_cifar10_python_folder(tmp_path, sample):
  raw = _cifar10_batches(sample)
  folder = _write_folder(tmp_path, raw)
  out = data.load_source("cifar10_python", str(folder))
  _check_cifar10(out, sample)
  # HWC order: pixel (0, 1) of image 0 is (R, G, B) = planar entries 1, 1025, 2049.
  planar = pickle.loads(raw["data_batch_1"])[b"data"]
  np.testing.assert_array_equal(out["train_images"][0, 0, 1],
                                planar[0, [1, 1025, 2049]])
  # The parent folder of cifar-10-batches-py works too.
  _check_cifar10(data.load_source("cifar10_python", str(tmp_path)), sample)


def test_cifar10_python_tarball(tmp_path, sample):
  path = _write_tarball(tmp_path, _cifar10_batches(sample))
  _check_cifar10(data.load_source("cifar10_python", path), sample)


def test_cifar10_python_missing_path(tmp_path):
  with pytest.raises(ValueError, match=r"source 'cifar10_python' needs a path"):
    data.load_source("cifar10_python")
  missing = str(tmp_path / "cifar-10-python.tar.gz")
  with pytest.raises(ValueError, match=f"{missing} does not exist"):
    data.load_source("cifar10_python", missing)


def test_cifar10_python_missing_batch_in_folder(tmp_path, sample):
  folder = _write_folder(tmp_path, _cifar10_batches(sample), skip=("data_batch_3",))
  with pytest.raises(ValueError, match=r"data_batch_3 is missing"):
    data.load_source("cifar10_python", str(folder))


def test_cifar10_python_missing_batch_in_tarball(tmp_path, sample):
  path = _write_tarball(tmp_path, _cifar10_batches(sample), skip=("test_batch",))
  with pytest.raises(ValueError, match=r"has no member cifar-10-batches-py/test_batch"):
    data.load_source("cifar10_python", path)


def test_cifar10_python_not_a_tarball(tmp_path):
  path = tmp_path / "cifar-10-python.tar.gz"
  path.write_bytes(b"garbage")
  with pytest.raises(ValueError, match=r"neither a folder nor a readable tarball"):
    data.load_source("cifar10_python", str(path))


def test_cifar10_python_bad_batch(tmp_path, sample):
  raw = _cifar10_batches(sample)
  raw["data_batch_2"] = pickle.dumps({b"data": np.zeros((2, 100), np.uint8),
                                      b"labels": [0, 1]})
  folder = _write_folder(tmp_path, raw)
  with pytest.raises(ValueError, match=r"data_batch_2: b'data' must have shape "
                     r"\(N, 3072\), got \(2, 100\)"):
    data.load_source("cifar10_python", str(folder))


# ------------------------------------------------------------------ the binary task --


def test_default_config():
  cfg = data.default_data_config()
  assert cfg.source == "cifar10_sample"
  assert cfg.path is None and cfg.name is None
  assert cfg.classes == ((0, 1, 8, 9), (2, 3, 4, 5, 6, 7))
  assert (cfg.n_per_class, cfg.seed, cfg.subtract_mean) == (250, 0, False)
  assert data.MNIST_EVEN_VS_ODD == ((0, 2, 4, 6, 8), (1, 3, 5, 7, 9))
  cfg.lock()
  cfg.path = "/some/file.npz"  # String placeholders accept overrides when locked.
  cfg.name = "mnist"
  assert (cfg.path, cfg.name) == ("/some/file.npz", "mnist")


def test_default_task(sample):
  task = data.make_task(data.default_data_config())
  n = 250
  assert task.train_images.shape == task.partition_images.shape == (2 * n, 32, 32, 3)
  assert task.train_images.dtype == np.float32
  assert task.mean is None
  for x in (task.train_images, task.partition_images, task.test_images):
    assert x.min() >= 0.0 and x.max() <= 1.0 and x.max() > 0.9
  expected = np.repeat([-1.0, 1.0], n).astype(np.float32)
  np.testing.assert_array_equal(task.train_labels, expected)
  np.testing.assert_array_equal(task.partition_labels, expected)
  assert task.train_labels.dtype == task.test_labels.dtype == np.float32
  # Disjoint, no repeats, and the right classes in the right order.
  assert task.train_index.dtype == task.partition_index.dtype == np.int64
  both = np.concatenate([task.train_index, task.partition_index])
  assert len(np.unique(both)) == 4 * n
  vehicles = np.isin(sample["train_labels"], (0, 1, 8, 9))
  for idx in (task.train_index, task.partition_index):
    assert vehicles[idx[:n]].all() and not vehicles[idx[n:]].any()
  # Pixels are the source's images at those indices, scaled to [0, 1].
  scale = np.float32(255)
  np.testing.assert_array_equal(task.train_images,
                                sample["train_images"][task.train_index] / scale)
  np.testing.assert_array_equal(task.partition_images,
                                sample["train_images"][task.partition_index] / scale)
  # Test set: every test image of both groups (all ten classes here), in order.
  assert task.test_images.shape == (500, 32, 32, 3)
  test_vehicles = np.isin(sample["test_labels"], (0, 1, 8, 9))
  np.testing.assert_array_equal(task.test_labels, np.where(test_vehicles, -1.0, 1.0))
  np.testing.assert_array_equal(task.test_images, sample["test_images"] / scale)


def test_task_deterministic_under_seed():
  cfg = _config(n_per_class=20)
  a, b = data.make_task(cfg), data.make_task(cfg)
  np.testing.assert_array_equal(a.train_index, b.train_index)
  np.testing.assert_array_equal(a.partition_index, b.partition_index)
  np.testing.assert_array_equal(a.train_images, b.train_images)
  c = data.make_task(_config(n_per_class=20, seed=1))
  assert not np.array_equal(a.train_index, c.train_index)
  assert not np.array_equal(a.partition_index, c.partition_index)


def test_mean_subtraction():
  task = data.make_task(_config(n_per_class=30, subtract_mean=True))
  plain = data.make_task(_config(n_per_class=30))
  assert task.mean.shape == (32, 32, 3) and task.mean.dtype == np.float32
  # Means in float64 (a float32 mean of 60 values could be off by ~60u, u = 2^-24): the
  # stored float32 mean, in [0, 1], is the float64 one rounded: <= 2^-25. The mean of the
  # rounded differences: <= 2^-25 (their rounding) + 2^-25 (the stored mean's) = 2^-24.
  # A mean of other images (e.g. the partition) is off by ~1e-2.
  mean64 = plain.train_images.mean(0, dtype=np.float64)
  np.testing.assert_allclose(task.mean, mean64, rtol=0, atol=2.0**-25)
  np.testing.assert_allclose(task.train_images.mean(0, dtype=np.float64), 0.0, atol=2.0**-24)
  # fl(fl(x - m) + m): two roundings, of a value in (-1, 1) (<= 2^-25) and of one < 2
  # (<= 2^-24): <= 2^-23 in all.
  for name in ("train_images", "partition_images", "test_images"):
    np.testing.assert_allclose(task.to_pixels(getattr(task, name)),
                               getattr(plain, name), rtol=0, atol=2.0**-23)
    np.testing.assert_allclose(data.to_pixels(getattr(task, name), task.mean),
                               getattr(plain, name), rtol=0, atol=2.0**-23)
  assert data.to_pixels(plain.train_images, None) is plain.train_images


def test_classes_as_lists_or_string():
  ref = data.make_task(_config(n_per_class=5, classes=((0, 2), (1, 3))))
  numpy_ints = (tuple(np.array([0, 2])), (1, 3))
  for classes in ([[0, 2], [1, 3]], "((0, 2), (1, 3))", numpy_ints):
    task = data.make_task(_config(n_per_class=5, classes=classes))
    np.testing.assert_array_equal(task.train_index, ref.train_index)


def test_non_32x32_grayscale_task(tmp_path):
  rng = np.random.default_rng(0)
  labels = np.tile(np.arange(10, dtype=np.uint8), 4)  # 4 per class, 20 per group.
  path = _save_npz(
      tmp_path / "mnist_like.npz",
      train_images=rng.integers(0, 256, (40, 28, 28), dtype=np.uint8),
      train_labels=labels,
      test_images=rng.integers(0, 256, (10, 28, 28), dtype=np.uint8),
      test_labels=np.arange(10, dtype=np.uint8))
  cfg = _config(source="npz", path=path, classes=data.MNIST_EVEN_VS_ODD, n_per_class=10,
                subtract_mean=True)
  task = data.make_task(cfg)
  assert task.train_images.shape == task.partition_images.shape == (20, 28, 28, 1)
  assert task.mean.shape == (28, 28, 1)
  np.testing.assert_array_equal(labels[task.train_index] % 2, np.repeat([0, 1], 10))
  np.testing.assert_array_equal(task.test_labels, np.tile([-1.0, 1.0], 5))
  # 20 images per group, all used: training set and partition cover each group.
  assert set(task.train_index) | set(task.partition_index) == set(range(40))


def test_too_few_images_in_group():
  with pytest.raises(ValueError, match=r"class group \(0, 1, 8, 9\) has 600 images in "
                     r"the train split; 2 × n_per_class = 1000 are needed \(training "
                     r"set \+ distinct partition\)"):
    data.make_task(_config(n_per_class=500))


def test_excluded_indices_are_never_drawn_and_no_exclusion_is_the_plain_draw():
  """`make_task(exclude=)`, the shadow victims' data (`membership.shadow_victims`)."""
  plain = data.make_task(_config(n_per_class=50))
  np.testing.assert_array_equal(data.make_task(_config(n_per_class=50), exclude=()).train_index,
                                plain.train_index)
  taken = np.concatenate([plain.train_index, plain.partition_index])
  other = data.make_task(_config(n_per_class=50, seed=7), exclude=taken)
  assert not set(taken.tolist()) & (set(other.train_index.tolist())
                                    | set(other.partition_index.tolist()))
  # The groups keep their sizes and labels.
  np.testing.assert_array_equal(other.train_labels, plain.train_labels)
  with pytest.raises(ValueError, match=r"has 100 images in the train split outside the 500 "
                     r"excluded; 2 × n_per_class = 200"):
    data.make_task(_config(n_per_class=100), exclude=np.flatnonzero(np.isin(
        data.load_source("cifar10_sample")["train_labels"], (0, 1, 8, 9)))[:500])
  for bad in ([-1], [10**6], [0.5]):
    with pytest.raises(ValueError, match="exclude must hold indices of the train split"):
      data.make_task(_config(), exclude=bad)


def test_overlapping_groups():
  with pytest.raises(ValueError, match=r"overlap in \[1, 8\]"):
    data.make_task(_config(classes=((0, 1, 8), (1, 2, 8))))


def test_absent_class_id():
  with pytest.raises(ValueError, match=r"class id\(s\) \[10\] do not occur in the "
                     r"train split of 'cifar10_sample'"):
    data.make_task(_config(n_per_class=5, classes=((0, 10), (1,))))


@pytest.mark.parametrize("classes", [
    ((0, 1, 2),), ((), (1, 2)), ((0, 1), 2), ((0.5,), (1,)), "(0, 1)", 7,
])
def test_malformed_classes(classes):
  """(Three or more groups are a C-class task: tests/test_multiclass.py.)"""
  with pytest.raises(ValueError, match=r"classes must be two or more non-empty tuples"):
    data.make_task(_config(classes=classes))


def test_unparsable_classes_string():
  with pytest.raises(ValueError, match=r"is not a Python literal"):
    data.make_task(_config(classes="vehicles vs animals"))


@pytest.mark.parametrize("n", [0, -3, 2.5, True])
def test_bad_n_per_class(n):
  with pytest.raises(ValueError, match=r"n_per_class must be a positive integer"):
    data.make_task(_config(n_per_class=n))


def test_plain_object_config():
  cfg = types.SimpleNamespace(source="cifar10_sample", classes=((0,), (1,)),
                              n_per_class=3, seed=0, subtract_mean=False)  # No path.
  task = data.make_task(cfg)
  assert task.train_images.shape == (6, 32, 32, 3)


# ---------------------------------------------------------------------- tfds source --


def test_tfds_needs_name():
  with pytest.raises(ValueError, match=r"source 'tfds' needs a data set name"):
    data.load_source("tfds")


def test_tfds_missing_says_install_extra(monkeypatch):
  monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)  # Import fails.
  with pytest.raises(ImportError, match=r"install the tfds extra"):
    data.load_source("tfds", name="mnist")


@pytest.mark.slow  # imports TensorFlow (seconds per process)
def test_tfds_mock_mnist_and_cifar10():
  tfds = pytest.importorskip("tensorflow_datasets")
  with tfds.testing.mock_data(num_examples=60):
    mnist = data.load_source("tfds", name="mnist")
    cifar = data.load_source("tfds", name="cifar10")
    task = data.make_task(_config(source="tfds", name="mnist", n_per_class=3,
                                         classes=data.MNIST_EVEN_VS_ODD))
  assert mnist["train_images"].shape == (60, 28, 28, 1)
  assert mnist["test_images"].shape == (60, 28, 28, 1)
  assert cifar["train_images"].shape == (60, 32, 32, 3)
  assert cifar["test_images"].shape == (60, 32, 32, 3)
  for d in (mnist, cifar):
    assert d["train_images"].dtype == np.uint8
    assert d["train_labels"].dtype == d["test_labels"].dtype == np.int64
    assert d["train_labels"].shape == (60,)
    assert 0 <= d["train_labels"].min() and d["train_labels"].max() <= 9
  assert task.train_images.shape == (6, 28, 28, 1)
  np.testing.assert_array_equal(mnist["train_labels"][task.train_index] % 2,
                                [0, 0, 0, 1, 1, 1])

