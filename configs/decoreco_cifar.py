r"""DecoReco (Haim et al. 2022) on binary CIFAR-10: victim, attack, sweep (Runkel et al. Sec. 4.4).

The config lives in the package (trdr/configs/decoreco_cifar.py, importable as
`trdr.configs.decoreco_cifar`); this file is what --config names.
"""

from trdr.configs.decoreco_cifar import get_config  # noqa: F401
