r"""Figs. 1–4 and Table 1: attack both victims from the pure initialisations, assemble.

  python experiments/paper_figures.py --config=configs/paper_figures.py:cpu \
      --workdir=runs/report_cpu/paper_figures [--artefacts=fig1,fig2,fig3,fig4,table1]

Finished victim runs in WORKDIR/affine and WORKDIR/one_hidden are reused. See
trdr/figures.py for what is written.
"""

from absl import app, flags
from ml_collections import config_flags

from trdr import figures

_CONFIG = config_flags.DEFINE_config_file("config", None, "configs/paper_figures.py[:variant]",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Where the runs and artefacts are written.")
_ARTEFACTS = flags.DEFINE_list("artefacts", list(figures.ARTEFACTS),
                               f"Which of {list(figures.ARTEFACTS)} to write.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  del argv
  for name, paths in figures.run(_CONFIG.value, _WORKDIR.value, _ARTEFACTS.value).items():
    print(f"{name}: {', '.join(paths)}")


if __name__ == "__main__":
  app.run(main)
