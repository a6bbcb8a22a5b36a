r"""DecoReco on 10-class CIFAR-10 (Buzaglo et al. 2023's multiclass form).

The config lives in the package (trdr/configs/decoreco_multiclass.py, importable as
`trdr.configs.decoreco_multiclass`); this file is what --config names.
"""

from trdr.configs.decoreco_multiclass import get_config  # noqa: F401
