r"""Figs. 5–12 (DecoReco and both energy landscapes) from their runs, run or reused.

  python experiments/decoreco_figures.py --config=configs/decoreco_figures.py:cpu \
      --workdir=runs/report_cpu/decoreco_figures [--artefacts=fig5,fig8]

See trdr/decoreco_figures.py for the runs and figures.
"""

from absl import app, flags
from ml_collections import config_flags

from trdr import decoreco_figures

_CONFIG = config_flags.DEFINE_config_file("config", None, "Figures config.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Work directory of the runs and figures.")
_ARTEFACTS = flags.DEFINE_list("artefacts", list(decoreco_figures.ARTEFACTS),
                               f"Subset of {', '.join(decoreco_figures.ARTEFACTS)}.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  del argv
  decoreco_figures.run(_CONFIG.value, _WORKDIR.value, _ARTEFACTS.value)


if __name__ == "__main__":
  app.run(main)
