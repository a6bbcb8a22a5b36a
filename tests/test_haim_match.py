"""Haim et al.'s match (trdr/evaluation/haim_match.py) against the same steps in PyTorch:
F.interpolate's bicubic ½ resolution, per-channel standardisation with torch.std, the squared
L2 distance divided by the dimension, and each training image's smallest-distance
reconstruction."""

import numpy as np
import pytest

from trdr.evaluation import haim_match


def _torch_reference(torch, queries, candidates):
  """Steps 1–3 of the module docstring in PyTorch (float64, NCHW), the reference's ops."""
  def prepare(x):
    t = torch.from_numpy(np.asarray(x, np.float64)).permute(0, 3, 1, 2)
    t = torch.nn.functional.interpolate(t, scale_factor=0.5, mode="bicubic")
    n, c = t.shape[:2]
    flat = t.reshape(n, c, -1)
    t = (flat - flat.mean(-1, keepdim=True)) / flat.std(-1, keepdim=True)
    return t.reshape(n, -1)
  q, c = prepare(queries), prepare(candidates)
  return (torch.cdist(q, c) ** 2 / q.shape[1]).numpy()


def test_haim_match_equals_the_pytorch_steps():
  torch = pytest.importorskip("torch")
  rng = np.random.default_rng(0)
  train = rng.uniform(0.0, 1.0, (6, 32, 32, 3)).astype(np.float32)
  # Reconstructions: noisy copies of training images 3, 3, 0 (two match one image: no
  # one-to-one constraint) and two unrelated images; an odd side (31) checks the border.
  recon = np.concatenate([
      train[[3, 3, 0]] + rng.normal(0.0, [[[[0.05]]], [[[0.2]]], [[[0.05]]]], (3, 32, 32, 3)),
      rng.uniform(0.0, 1.0, (2, 32, 32, 3))]).astype(np.float32)
  ours = np.asarray(haim_match.pairwise(recon, train))
  theirs = _torch_reference(torch, recon, train)
  # Error: ours is float32 and forms |q|² + |c|² − 2 q·c, each of D = 768 standardised
  # entries (|q|² = |c|² = C(P − 1) ≈ D): the sums' rounding is ≤ (D + 2)·2^-24·(|q| + |c|)²
  # ≈ 4·770·6e-8·D, divided by D: 1.9e-4; the downsampling and standardisation add a few
  # float32 ulps per entry (≲ 1e-6 relative, ≲ 2e-6 after D-term sums relative to 2).
  # The reference is float64. 5e-4 covers both with margin; the distances are ~0.01–2.
  np.testing.assert_allclose(ours, theirs, atol=5e-4)
  assert ours.shape == (5, 6)
  index, distance = haim_match.match(recon, train)
  np.testing.assert_array_equal(index, np.argmin(theirs.T, axis=1))
  # Training images 3 and 0 are matched by their copies: image 3's by the less noisy one
  # (index 0), image 0's by index 2; the others to whatever is nearest, possibly shared.
  assert index[3] == 0 and index[0] == 2
  np.testing.assert_allclose(distance, theirs.T.min(axis=1), atol=5e-4)
  # A 31-pixel side: ⌊31/2⌋ = 15 outputs, the last tap clamped to the border as in torch.
  odd = np.asarray(haim_match.downsample(train[:2, :31, :31]))
  t = torch.nn.functional.interpolate(torch.from_numpy(train[:2, :31, :31].astype(
      np.float64)).permute(0, 3, 1, 2), scale_factor=0.5, mode="bicubic")
  # float32 sums of 16 products of pixels in [0, 1] with weights |w| ≤ 0.6: ≤ 1e-6.
  np.testing.assert_allclose(odd, t.permute(0, 2, 3, 1).numpy(), atol=1e-6)
