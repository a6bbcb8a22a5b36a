r"""DecoReco's power against the training-set size n (`trdr.studies.power`).

The config lives in the package (trdr/configs/power.py, importable as `trdr.configs.power`);
this file is what --config names.

Command:
  make power                 # ":cpu", into runs/power_cpu (power.md, power.json, power.png)
  python experiments/power.py --config=configs/power.py:smoke --workdir=DIR
"""

from trdr.configs.power import get_config  # noqa: F401
