r"""The reproduction report: every figure 1–12 and Table 1, verdicts, membership ambiguity.

The config lives in the package (trdr/configs/report.py, importable as
`trdr.configs.report`); this file is what --config names.

Command:
  make figures                      # ":cpu", into runs/report_cpu (report.md there)
  make figures SIZE=paper           # "", one GPU, into runs/report_paper
  make figures SIZE=smoke           # toy size, minutes on 2 CPU cores
  python experiments/report.py --config=configs/report.py:smoke --workdir=runs/report_smoke
"""

from trdr.configs.report import get_config  # noqa: F401
