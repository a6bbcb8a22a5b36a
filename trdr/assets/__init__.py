"""The data shipped inside the package: the CIFAR-10 sample behind the default data source.

`sample_path` gives its file (`cifar10_sample.npz`: 1,500 train and 500 test images, uint8
NHWC with integer labels, the layout of a user's .npz; rebuilt by
experiments/make_sample.py), so that it can be opened from Python as any .npz.
"""

import os

SAMPLE_FILE = "cifar10_sample.npz"


def sample_path() -> str:
  """The shipped CIFAR-10 sample's path (data source "cifar10_sample", `trdr.data`).

  Raises:
    FileNotFoundError: the file is missing from the installation (reinstall trdr or
      rebuild it with experiments/make_sample.py).
  """
  path = os.path.join(os.path.dirname(os.path.abspath(__file__)), SAMPLE_FILE)
  if not os.path.exists(path):
    raise FileNotFoundError(f"the shipped data set {path} is missing; reinstall trdr or "
                            "rebuild it with experiments/make_sample.py")
  return path
