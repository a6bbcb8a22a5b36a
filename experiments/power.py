r"""DecoReco's power against the training-set size n (`trdr.studies.power`).

  python experiments/power.py --config=configs/power.py:cpu     # make power
  python experiments/power.py --config=configs/power.py:smoke --workdir=DIR

Per n and seed, Haim et al.'s MLP under the adopted recipe attacked by DecoReco at the
published settings and at settings tuned by trdr's sweep: WORKDIR/power_cells.json (rows,
reused on a rerun), power.json (the calibration table `trdr.evaluation.power` reads),
power.md and power.{png,pdf} (default WORKDIR runs/power_cpu).
"""

from trdr import cli

if __name__ == "__main__":
  cli.run(cli.power_main)
