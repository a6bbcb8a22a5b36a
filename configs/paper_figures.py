r"""Figs. 1–4 and Table 1 of Runkel et al. 2024: both victims from the pure initialisations.

The config lives in the package (trdr/configs/paper_figures.py, importable as
`trdr.configs.paper_figures`); this file is what --config names.

Command:
  make fig1 fig2 fig3 fig4 table1                # ":cpu", into runs/report_cpu/paper_figures
  make fig1 fig2 fig3 fig4 table1 SIZE=paper     # "", into runs/report_paper/paper_figures
  python experiments/paper.py --config=configs/report.py:cpu --workdir=runs/report_cpu \
      --artefacts=fig1,table1
"""

from trdr.configs.paper_figures import get_config  # noqa: F401
