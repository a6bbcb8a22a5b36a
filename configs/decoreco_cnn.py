r"""DecoReco on a convolutional victim (Buzaglo et al. 2023): configs/decoreco_cifar.py with
the victim `trdr.models.ConvNet`.

The config lives in the package (trdr/configs/decoreco_cnn.py, importable as
`trdr.configs.decoreco_cnn`); this file is what --config names.
"""

from trdr.configs.decoreco_cnn import get_config  # noqa: F401
