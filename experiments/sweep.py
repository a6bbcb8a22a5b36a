r"""Vmapped DecoReco hyperparameter sweep: S settings of (σ, lr, λ_min, α) as ONE computation.

  python experiments/sweep.py --config=configs/decoreco_cifar.py:cpu [--workdir=DIR]

Replaces Haim et al.'s W&B cluster sweep: the settings are drawn from ``config.sweep``,
attacked side by side against one victim and ranked by the in-run score; best.json in the
work directory (default runs/<config name>[_<variant>]_sweep) is what the figure configs
read through ``--config.attack.hparams_file``.
"""

import os
import sys

from absl import app, flags
from ml_collections import config_flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import landscape as cli  # noqa: E402  (flags --config, --workdir, --overwrite)

from trdr import reconstruct  # noqa: E402


def main(argv):
  del argv
  workdir = cli._WORKDIR.value or cli.default_workdir(
      config_flags.get_config_filename(flags.FLAGS["config"]), "_sweep")
  reconstruct.sweep(cli._CONFIG.value, workdir,
                    overwrite=cli._OVERWRITE.value)


if __name__ == "__main__":
  app.run(main)
