"""Haim et al.'s evaluation protocol (trdr/evaluation/haim_match.py `protocol`, `kornia_ssim`):
the window-3 SSIM against kornia's own ``kornia.metrics.ssim`` on the same images, and the
match and count on reconstructions built so that the answer is known."""

import numpy as np
import pytest
from test_metrics import _ssim_bound  # the float32 bound of dm-pix's SSIM (derived there)

from trdr import data
from trdr.evaluation import haim_match, metrics


def _sample(n, seed=0):
  """n real CIFAR-10 images from trdr's shipped sample, float32[n, 32, 32, 3] in [0, 1]."""
  images = data.load_source("cifar10_sample")["train_images"]
  pick = np.random.default_rng(seed).choice(len(images), n, replace=False)
  return (np.asarray(images)[pick] / 255.0).astype(np.float32)


def test_kornia_ssim_equals_kornias_own():
  torch = pytest.importorskip("torch")
  kornia = pytest.importorskip("kornia")
  rng = np.random.default_rng(1)
  x = _sample(8)
  # Perturbed copies: noise, a contrast change with a shift, another image, a flat image
  # (kornia's eps and dm-pix's clipping matter most where windows are flat).
  y = np.stack([
      *np.clip(x[:3] + rng.normal(0.0, 0.1, x[:3].shape), 0.0, 1.0),
      *(0.6 * x[3:5] + 0.3), *x[[6, 5]], np.full_like(x[7], 0.5)]).astype(np.float32)
  ours = np.asarray(haim_match.kornia_ssim(x, y), np.float64)
  as_torch = lambda a: torch.from_numpy(a.astype(np.float64)).permute(0, 3, 1, 2)
  theirs = kornia.metrics.ssim(as_torch(x), as_torch(y), window_size=3).reshape(
      len(x), -1).mean(dim=1).numpy()
  # Error: ours is dm-pix's SSIM (float32) of the reflect-padded images, which is kornia's
  # map in exact arithmetic except for kornia's eps in the denominator. Bound: dm-pix's
  # float32 rounding, derived per pair from the padded images' own statistics
  # (tests/test_metrics.py `_ssim_bound`, window 3), plus eps / (c1·c2) = 1e-12 / (1e-4·9e-4)
  # per map value (|S| ≤ 1, denominator ≥ c1·c2), plus kornia's float64 rounding (≲ 1e-12).
  padded = [np.pad(a, [(0, 0), (1, 1), (1, 1), (0, 0)], mode="reflect") for a in (x, y)]
  bound = _ssim_bound(*padded, k=3, engine="dm_pix") + 1e-12 / (1e-4 * 9e-4) + 1e-12
  assert np.all(np.abs(ours - theirs) <= bound), (ours - theirs, bound)
  # The padding matters: dm-pix's 'valid' window-3 SSIM misses kornia's by more than the
  # bound on some pair (the border positions it drops), so the check above can fail.
  valid = np.asarray(haim_match.ssim.ssim(x, y, filter_size=3), np.float64)
  assert np.any(np.abs(valid - theirs) > bound)


def _task(n=6, seed=2):
  """Training images in the victim's input space and their mean (as trdr's tasks hold them):
  image 0 rescaled to span exactly [0, 1] (so min–max scaling a positive affine copy of it
  gives it back) and image 1 its exact duplicate."""
  pixels = _sample(n, seed)
  pixels[0] = np.asarray(metrics.minmax_scale(pixels[0]))
  pixels[1] = pixels[0]
  mean = pixels.mean(axis=0)
  return pixels - mean, mean


def test_protocol_matches_a_scaled_copy_and_shares_it():
  train, mean = _task()
  rng = np.random.default_rng(3)
  # Reconstructions in the victim's input space (as an attack returns them): noise, image 0
  # shifted by 0.3, image 2 scaled by 2.5, noise.
  noise = rng.normal(0.0, 0.3, (2,) + train.shape[1:])
  recon = np.stack([noise[0], train[0] + 0.3, 2.5 * train[2], noise[1]]).astype(np.float32)
  found = haim_match.protocol(recon, train, mean)
  # The match is made on the mean-subtracted images, and its NCC ignores a positive scale
  # and shift per channel: images 0 and 1 (equal) both match the shifted copy, image 2 the
  # scaled one, each at distance 0 up to float32 rounding (≤ 1.9e-4, derived in
  # tests/test_haim_match.py; 5e-4 as there), where the noise lies near 2. No one-to-one
  # constraint: both duplicates keep the same reconstruction.
  np.testing.assert_array_equal(found.index[:3], [1, 1, 2])
  assert np.all(found.distance[:3] < 5e-4)
  # Step 5: the shifted copy plus the mean, min–max scaled, is image 0's pixels again (they
  # span [0, 1]), up to float32 rounding of a few ulps per pixel; its SSIM with image 0 is
  # then 1 within dm-pix's float32 bound (`_ssim_bound` of the reflect-padded pair) and
  # kornia's eps term, and the pixels' rounding moves it by second order only (S is at its
  # maximum 1 for equal images): counted at 0.4 for both duplicates.
  pixel = np.pad(train[0] + mean, [(1, 1), (1, 1), (0, 0)], mode="reflect")
  tol = _ssim_bound(pixel, pixel, k=3, engine="dm_pix") + 1e-12 / (1e-4 * 9e-4)
  assert np.all(found.ssim[:2] >= 1 - tol), (found.ssim[:2], tol)
  # The SSIM recorded is the window-3 kornia-convention SSIM of the scaled pair, and the
  # count is the number at or above the level.
  scaled = np.asarray(metrics.minmax_scale(recon[found.index] + mean))
  np.testing.assert_array_equal(found.ssim, np.asarray(haim_match.kornia_ssim(scaled,
                                                                              train + mean)))
  assert found.count == int(np.sum(found.ssim >= 0.4)) and found.count >= 2
  assert haim_match.protocol(recon, train, mean, level=1.5).count == 0
  # Without a mean (images already in pixels; an empty array or None), a positive affine
  # copy of image 0's pixels is min–max scaled back to them.
  pixels = train + mean
  for none in (None, np.zeros(0)):
    again = haim_match.protocol(2.5 * pixels[[0]] - 0.7, pixels, none)
    assert again.index[0] == 0 and again.ssim[0] >= 1 - tol


def test_protocol_rejects_bad_input():
  train, mean = _task()
  bad = train[:2].copy()
  bad[0, 0, 0, 0] = np.nan
  with pytest.raises(ValueError, match="non-finite"):
    haim_match.protocol(bad, train, mean)
  with pytest.raises(ValueError, match="image shape"):
    haim_match.protocol(train[:, :16], train, mean)
  with pytest.raises(ValueError, match="mean"):
    haim_match.protocol(train, train, mean[:16])
  with pytest.raises(ValueError, match="no image"):
    haim_match.protocol(train[:0], train, mean)


def test_summary_counts_the_final_and_the_start_images():
  """eval.haim_protocol's summary.json entries (`modes.haim_protocol_counts`): `protocol`'s
  count at each threshold, for the reconstructions and (the baseline) the start images; a
  saved config without the key is the same run as one with it off."""
  from trdr.experiment import modes  # pylint: disable=g-import-not-at-top
  from trdr.runtime import rundir  # pylint: disable=g-import-not-at-top
  train, mean = _task()
  rng = np.random.default_rng(4)
  starts = rng.normal(0.0, 0.3, (3,) + train.shape[1:]).astype(np.float32)
  finals = np.stack([starts[0], train[0] + 0.3, 2.5 * train[2]]).astype(np.float32)
  results = {"final_images": finals, "initial_images": starts, "train_images": train,
             "mean": mean}
  out = modes.haim_protocol_counts(results, (0.3, 0.4, 0.5))
  for key, images in (("reconstructed_haim", finals), ("start_reconstructed_haim", starts)):
    sims = haim_match.protocol(images, train, mean).ssim
    assert out[key] == {f"ssim_ge_{t:g}": int(np.sum(sims >= t)) for t in (0.3, 0.4, 0.5)}
  assert out["reconstructed_haim"]["ssim_ge_0.4"] >= 2  # the duplicates' shifted copy
  diverged = dict(results, final_images=np.full_like(finals, np.nan))
  assert modes.haim_protocol_counts(diverged, (0.4,))["reconstructed_haim"] is None
  assert rundir.config_change({"eval": {}}, {"eval": {"haim_protocol": False}}) == ""
  assert rundir.config_change({"eval": {}}, {"eval": {"haim_protocol": True}}) != ""
  # The report's counts table carries the protocol's row, its start count beside.
  from trdr.report import evidence, markdown  # pylint: disable=g-import-not-at-top
  zero = {f"ssim_ge_{t:g}": 0 for t in (0.3, 0.4, 0.5)}
  summary = {"n_train": len(train), "reconstructed": zero, "start_reconstructed": zero, **out}
  rows = evidence.counts({"run": summary})
  haim = [r for r in rows if r["matching"].startswith("Haim et al.'s protocol")]
  assert len(haim) == 1 and haim[0]["window"] == 3
  assert haim[0]["counts"] == out["reconstructed_haim"]
  assert haim[0]["start"] == out["start_reconstructed_haim"]
  assert any("Haim et al.'s protocol" in line for line in markdown.counts_markdown(rows))
