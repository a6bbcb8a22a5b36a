r"""Figs. 5–12 of Runkel et al. 2024: DecoReco runs and the two energy landscapes.

The config lives in the package (trdr/configs/decoreco_figures.py, importable as
`trdr.configs.decoreco_figures`); this file is what --config names.

Command:
  make fig5 fig6 fig7 fig8 fig9 fig10 fig11 fig12   # ":cpu", runs/report_cpu/decoreco_figures
  make fig5 ... SIZE=paper                                   # "", one GPU
  python experiments/paper.py --config=configs/report.py:cpu --workdir=runs/report_cpu \
      --artefacts=fig5,fig8
"""

from trdr.configs.decoreco_figures import get_config  # noqa: F401
