"""results.npz as written and read back (`trdr.experiment.results`): a landscape's start
images regenerated and its duplicate grid points stored once, every array returned bit for
bit as the run computed it."""

import os

import numpy as np
import pytest

from trdr.attacks import init as inits
from trdr.experiment import results


def _landscape_arrays(dtype=np.float32):
  """A 3 × 3 eq. 10 grid of 4 images 2 × 2 × 3: the λ2 = 0 column repeats one start three
  times, so an attack gives those points the same final images (as `trdr.experiment.loop`)."""
  rng = np.random.default_rng(0)
  gt, part, rnd = (rng.uniform(size=(4, 2, 2, 3)).astype(dtype) for _ in range(3))
  grid = inits.make_grid((0.0, 0.5, 1.0), (0.0, 0.5, 1.0))
  x0 = inits.grid_images(grid, gt, part, rnd)
  final = np.stack([x0[g] * dtype(0.5) + dtype(0.1) * g * (grid.lambda2[g] > 0)
                    for g in range(len(x0))])
  return {"lambda1": grid.lambda1, "lambda2": grid.lambda2, "grid_shape": np.asarray(grid.shape),
          "train_images": gt, "partition_images": part, "noise_images": rnd,
          "initial_images": x0, "final_images": final, "labels": np.ones(4, dtype)}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_landscape_comes_back_bit_for_bit_from_less_disk(tmp_path, dtype):
  arrays = _landscape_arrays(dtype)
  path = str(tmp_path / results.RESULTS_FILE)
  results.save(path, arrays, landscape=True)
  with np.load(path) as stored:  # what is on disk
    assert results.REGENERATED not in stored.files and "final_images" not in stored.files
    assert stored["final_images" + results.DISTINCT_SUFFIX].shape[0] == 7  # 9 points, 3 alike
  with results.load(str(tmp_path)) as loaded:
    assert sorted(loaded) == sorted(arrays)
    for key, value in arrays.items():
      assert loaded[key].dtype == value.dtype
      np.testing.assert_array_equal(loaded[key], value, err_msg=key)
  # The two grid images the 9 points would take, less the 2 dropped duplicates, less x0.
  full = tmp_path / "full.npz"
  np.savez(full, **arrays)
  saved = arrays["final_images"][0].nbytes * (9 + 2)
  assert os.path.getsize(full) - os.path.getsize(path) == pytest.approx(saved, abs=4096)


def test_start_images_that_are_not_eq_10_are_kept_from_being_dropped(tmp_path):
  arrays = _landscape_arrays()
  arrays["initial_images"] = np.nextafter(arrays["initial_images"], np.float32(2))  # one ulp
  with pytest.raises(ValueError, match="not eq. 10"):
    results.save(str(tmp_path / "results.npz"), arrays, landscape=True)
  assert not os.listdir(tmp_path)  # nothing written


def test_other_modes_are_stored_as_they_are_and_a_missing_file_is_named(tmp_path):
  arrays = {"final_images": np.zeros((1, 2, 2, 2, 3), np.float32),
            "initial_images": np.ones((1, 2, 2, 2, 3), np.float32)}
  results.save(str(tmp_path / "results.npz"), arrays)
  with np.load(tmp_path / "results.npz") as stored:
    assert sorted(stored.files) == sorted(arrays)
  with results.load(str(tmp_path)) as loaded:
    assert sorted(loaded) == sorted(arrays)
    with pytest.raises(KeyError, match="no array 'labels'"):
      loaded["labels"]
  with pytest.raises(FileNotFoundError, match="elsewhere"):
    results.load(str(tmp_path / "elsewhere"))


def test_grid_images_are_elementwise_numpy_in_the_inputs_dtype():
  """The same bits as eq. 10 written out with each product and sum rounded once: no fused
  multiply-add, whatever the machine (so saved runs regenerate their starts anywhere)."""
  arrays = _landscape_arrays(np.float32)
  gt, part, rnd = (arrays[k] for k in ("train_images", "partition_images", "noise_images"))
  for g, (l1, l2) in enumerate(zip(arrays["lambda1"], arrays["lambda2"])):
    l1, l2 = np.float32(l1), np.float32(l2)
    inner = np.add(np.multiply(l1, gt), np.multiply(np.float32(1) - l1, part))
    expected = np.add(np.multiply(l2, inner), np.multiply(np.float32(1) - l2, rnd))
    np.testing.assert_array_equal(arrays["initial_images"][g], expected)
    assert arrays["initial_images"].dtype == np.float32
