r"""Energy-landscape experiment: attack from every eq. 10 initialisation, evaluate, plot.

  python experiments/landscape.py --config=configs/bilevel_affine.py [--workdir=DIR]
  python experiments/landscape.py --config=configs/decoreco_landscape.py:cpu

Without --workdir, results go to runs/<config name>[_<variant>]. See trdr/experiment/runner.py
for the files written and trdr/plotting.py for the figures.
"""

from trdr import cli

if __name__ == "__main__":
  cli.run(cli.experiment_main("landscape"))
