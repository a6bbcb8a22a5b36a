r"""The reproduction report: every figure 1–12 and Table 1 with verdicts (and membership's).

Command:
  make figures                      # ":cpu", into runs/report_cpu (report.md there)
  make figures SIZE=paper           # "", one GPU, into runs/report_paper
  make figures SIZE=smoke           # toy size, minutes on 2 CPU cores
  python experiments/report.py --config=configs/report.py:smoke --workdir=runs/report_smoke

Sections: paper (configs/paper_figures.py, same variant: Figs. 1–4 and Table 1, into
WORKDIR/paper_figures), decoreco (configs/decoreco_figures.py, same variant: Figs. 5–12,
into WORKDIR/decoreco_figures), membership (configs/membership.py, same variant: the
configuration the membership experiment must have run under; the report reads its
WORKDIR/membership/membership.json where `make membership` wrote one, and does not run it:
about an hour at ":cpu"), repeat_seeds / repeat_runs
(the repeats over seeds, into WORKDIR/seeds/seed_{s}). Finished runs are reused; see
trdr/report/claims.py and trdr/report/verdicts.py for the rules.

Expected runtime: ":cpu" about 57 minutes on a 2-core CPU (AVX2, compilation cache warm);
":smoke" about 2–5 minutes;
paper size several hours on one GPU (not yet run).
"""

import ml_collections

from trdr.configs import decoreco_figures, membership, paper_figures, sizes


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  variant = sizes.variant(arg)
  config = ml_collections.ConfigDict()
  config.variant = variant
  # Seeds of the repeats beside the main runs' seed 0 (data draw, victim initialisation and
  # attack start) and the runs repeated (`trdr.report.evidence.SEED_RUNS`): Figs. 1–9 and
  # Table 1 as mean ± std over seeds. ":smoke" repeats only the bilevel runs once (Figs.
  # 1–4, Table 1; a DecoReco repeat there is mostly compilation).
  config.repeat_seeds = (1,) if variant == "smoke" else (1, 2)
  config.repeat_runs = (("affine", "one_hidden") if variant == "smoke" else
                        ("affine", "one_hidden", "untuned", "tuned", "partition"))
  config.paper = paper_figures.get_config(variant)
  config.decoreco = decoreco_figures.get_config(variant)
  config.membership = membership.get_config(variant)
  return config
