r"""Bilevel attack on the affine classifier: the energy landscape, Fig. 10(a), 11(a), 12(a).

The config lives in the package (trdr/configs/bilevel_affine.py, importable as
`trdr.configs.bilevel_affine`); this file is what --config names.

Command:
  python experiments/landscape.py --config=configs/bilevel_affine.py [--workdir=DIR]
  python experiments/landscape.py --config=configs/bilevel_affine.py:smoke   # seconds
  make landscape-affine
"""

from trdr.configs.bilevel_affine import get_config  # noqa: F401
