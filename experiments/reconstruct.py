r"""One DecoReco attack (Haim et al. 2022) against a gradient-descent victim, evaluated.

  python experiments/reconstruct.py --config=configs/decoreco_cifar.py:cpu [--workdir=DIR]

Without --workdir, results go to runs/<config name>[_<variant>]. See trdr/reconstruct.py
for the files written. The flags (--config, --workdir, --overwrite) are those of
experiments/landscape.py.
"""

import os
import sys

from absl import app, flags
from ml_collections import config_flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import landscape as landscape_cli  # noqa: E402  (defines --config, --workdir, --overwrite)

from trdr import reconstruct  # noqa: E402

default_workdir = landscape_cli.default_workdir


def main(argv):
  del argv
  workdir = landscape_cli._WORKDIR.value or default_workdir(
      config_flags.get_config_filename(flags.FLAGS["config"]))
  reconstruct.run(landscape_cli._CONFIG.value, workdir, overwrite=landscape_cli._OVERWRITE.value)


if __name__ == "__main__":
  app.run(main)
