r"""The reproduction report: every figure 1–12 and Table 1, verdicts, membership ambiguity.

Command:
  make figures                      # ":cpu", into runs/report_cpu (report.md there)
  make figures SIZE=paper           # "", one GPU, into runs/report_paper
  make figures SIZE=smoke           # toy size, minutes on 2 CPU cores
  python experiments/report.py --config=configs/report.py:smoke --workdir=runs/report_smoke

Sections: paper (configs/paper_figures.py, same variant: Figs. 1–4 and Table 1, into
WORKDIR/paper_figures), decoreco (configs/decoreco_figures.py, same variant: Figs. 5–12,
into WORKDIR/decoreco_figures), membership (`trdr.membership`: the SSIM thresholds t of
"natural-looking", the t of the AUC table, the per-class count below which an AUC is
flagged uninformative). Finished runs are reused; see trdr/report.py for the verdict rules.

Runtime (measured 2026-11-21): ":cpu" on a fresh clone of this 2-core CPU, `make figures`
from scratch, 44 min (2,639 s; Figs. 1–4 runs 6 min, Figs. 5–12 runs 38 min, the report
about a minute); ":smoke" 2–3 min from scratch, ~30 s with finished runs. Paper size: not
run (no GPU was available).
"""

import ml_collections

from trdr.configs import decoreco_figures
from trdr.configs import paper_figures


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  variant = arg or ""
  if variant not in ("", "cpu", "smoke"):
    raise ValueError(f"unknown config variant {arg!r}; known: '' (paper size), 'cpu', 'smoke'")
  config = ml_collections.ConfigDict()
  config.variant = variant
  config.paper = paper_figures.get_config(variant)
  config.decoreco = decoreco_figures.get_config(variant)
  config.membership = ml_collections.ConfigDict({
      "thresholds": (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9),
      "auc_threshold": 0.4,
      "min_per_class": 10,
  })
  return config
