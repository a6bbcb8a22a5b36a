r"""The reproduction report: Figs. 1–12 and Table 1 regenerated, verdicts, membership.

  python experiments/report.py --config=configs/report.py:cpu --workdir=runs/report_cpu

Finished runs under WORKDIR/paper_figures and WORKDIR/decoreco_figures are reused. Writes
WORKDIR/report.md (see trdr/report.py).
"""

import os

from absl import app, flags
from ml_collections import config_flags

from trdr import report

_CONFIG = config_flags.DEFINE_config_file("config", None, "configs/report.py[:variant]",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Where the runs, figures and report go.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  del argv
  for name, v in report.run(_CONFIG.value, _WORKDIR.value).items():
    print(f"{name}: {v['verdict']}")
  print(f"Wrote {os.path.join(_WORKDIR.value, 'report.md')}")


if __name__ == "__main__":
  app.run(main)
