r"""Membership ambiguity measured as an adversary faces it (Runkel et al. 2024, Sec. 5).

The config lives in the package (trdr/configs/membership.py, importable as
`trdr.configs.membership`); this file is what --config names.

Command:
  make membership                    # ":cpu", into runs/report_cpu/membership (membership.md)
  python experiments/membership.py --config=configs/membership.py:smoke --workdir=DIR
"""

from trdr.configs.membership import get_config  # noqa: F401
