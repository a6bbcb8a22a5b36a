r"""One attack from ``config.init.kind`` (e.g. DecoReco, Haim et al. 2022), evaluated.

  python experiments/reconstruct.py --config=configs/decoreco_cifar.py:cpu [--workdir=DIR]

Without --workdir, results go to runs/<config name>[_<variant>]. See trdr/experiment/runner.py
for the files written.
"""

from trdr import cli

if __name__ == "__main__":
  cli.run(cli.experiment_main("attack"))
