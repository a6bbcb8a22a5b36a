r"""The reproduction report: Figs. 1–12 and Table 1 regenerated, verdicts (and membership's,
read from WORKDIR/membership where `make membership` ran).

  python experiments/report.py --config=configs/report.py:cpu --workdir=runs/report_cpu

Finished runs under WORKDIR/paper_figures and WORKDIR/decoreco_figures are reused. Writes
WORKDIR/report.md (see trdr/report/__init__.py).
"""

from absl import flags

from trdr import cli

if __name__ == "__main__":
  flags.mark_flags_as_required(["workdir"])
  cli.run(cli.report_main)
