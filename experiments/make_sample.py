"""Builds the offline default data set `trdr/assets/cifar10_sample.npz`.

Takes the first 150 train images of each of the 10 CIFAR-10 classes (in file order;
1500 train images) and the first 50 test images of each class (500 test images) from
the larger sample `/work/shared/data/cifar10_sample.npz` (real CIFAR-10 pixels, see
its README), and writes them with `np.savez_compressed`.

Run from the repository root:

    python experiments/make_sample.py \
        --src /work/shared/data/cifar10_sample.npz \
        --dst trdr/assets/cifar10_sample.npz

Keys written: train_images (1500, 32, 32, 3) uint8, train_labels (1500,) uint8,
train_index (1500, 2) int32 (batch number 1..5, index inside that batch),
test_images (500, 32, 32, 3) uint8, test_labels (500,) uint8, label_names (10,) str.
Within each split images stay in file order (classes interleaved as in the source).
"""

import argparse
import os

import numpy as np


def first_per_class(labels: np.ndarray, per_class: int) -> np.ndarray:
  """Indices (sorted, file order) of the first `per_class` items of every class."""
  keep = []
  for c in np.unique(labels):
    idx = np.flatnonzero(labels == c)
    if idx.size < per_class:
      raise ValueError(f"class {c} has only {idx.size} images; {per_class} needed")
    keep.append(idx[:per_class])
  return np.sort(np.concatenate(keep))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--src", default="/work/shared/data/cifar10_sample.npz")
  default_dst = os.path.join(
      os.path.dirname(os.path.abspath(__file__)), "..", "trdr", "assets",
      "cifar10_sample.npz")
  parser.add_argument("--dst", default=os.path.normpath(default_dst))
  parser.add_argument("--train_per_class", type=int, default=150)
  parser.add_argument("--test_per_class", type=int, default=50)
  args = parser.parse_args()

  with np.load(args.src) as src:
    src = {k: src[k] for k in src.files}
  tr = first_per_class(src["train_labels"], args.train_per_class)
  te = first_per_class(src["test_labels"], args.test_per_class)
  out = {
      "train_images": src["train_images"][tr],
      "train_labels": src["train_labels"][tr],
      "train_index": src["train_index"][tr],
      "test_images": src["test_images"][te],
      "test_labels": src["test_labels"][te],
      "label_names": src["label_names"],
  }
  os.makedirs(os.path.dirname(os.path.abspath(args.dst)), exist_ok=True)
  np.savez_compressed(args.dst, **out)
  for k, v in out.items():
    print(f"{k}: {v.shape} {v.dtype}")
  print(f"wrote {args.dst} ({os.path.getsize(args.dst) / 1e6:.2f} MB)")


if __name__ == "__main__":
  main()
