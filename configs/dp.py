r"""Privacy due to noise: the attacks on DP-SGD victims beside the ReRo bound
(`trdr.studies.dp`).

The config lives in the package (trdr/configs/dp.py, importable as `trdr.configs.dp`);
this file is what --config names.

Command:
  make dp                                          # ":cpu", into runs/dp_cpu (dp.md)
  python experiments/dp.py --config=configs/dp.py:smoke --workdir=DIR
"""

from trdr.configs.dp import get_config  # noqa: F401
