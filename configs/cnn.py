r"""DecoReco on a convolutional victim beside Haim et al.'s MLP (`trdr.studies.cnn`).

The config lives in the package (trdr/configs/cnn.py, importable as `trdr.configs.cnn`);
this file is what --config names.

Command:
  make cnn                 # ":cpu", into runs/cnn_cpu (cnn.md, cnn.json, cnn.png)
  python experiments/cnn.py --config=configs/cnn.py:smoke --workdir=DIR
"""

from trdr.configs.cnn import get_config  # noqa: F401
