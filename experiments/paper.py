r"""Paper artefacts (Figs. 1–12, Table 1) from their runs, run or reused.

  python experiments/paper.py --config=configs/report.py:cpu --workdir=runs/report_cpu \
      [--artefacts=fig1,fig5,table1]

Runs live in WORKDIR/paper_figures/<victim> and WORKDIR/decoreco_figures/<run>; finished
runs of the same config are reused. See trdr/report/artefacts.py for which run feeds which artefact.
"""

from absl import flags

from trdr import cli

if __name__ == "__main__":
  flags.mark_flags_as_required(["workdir"])
  cli.run(cli.paper_main)
