r"""Bilevel attack (Runkel et al. eq. 2 and 7) on a convolutional victim (`trdr.models.ConvNet`).

The config lives in the package (trdr/configs/bilevel_cnn.py, importable as
`trdr.configs.bilevel_cnn`); this file is what --config names.

Command:
  python experiments/landscape.py --config=configs/bilevel_cnn.py:cpu     # 2-core CPU
  python experiments/landscape.py --config=configs/bilevel_cnn.py:smoke   # seconds, tests
"""

from trdr.configs.bilevel_cnn import get_config  # noqa: F401
