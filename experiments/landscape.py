r"""Energy-landscape experiment: attack from every eq. 10 initialisation, evaluate, plot.

  python experiments/landscape.py --config=configs/bilevel_affine.py [--workdir=DIR]

Without --workdir, results go to runs/<config name>[_<variant>]. See trdr/landscape.py
for the files written.
"""

import os

from absl import app, flags
from ml_collections import config_flags

from trdr import landscape

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Where results are written "
                               "(default: runs/<config name>[_<variant>]).")
_OVERWRITE = flags.DEFINE_bool("overwrite", False, "Replace a finished run in --workdir.")
flags.mark_flags_as_required(["config"])


def default_workdir(config_arg: str, suffix: str = "") -> str:
  """runs/bilevel_affine for configs/bilevel_affine.py, runs/bilevel_affine_smoke for :smoke
  (then ``suffix``)."""
  path, _, variant = config_arg.partition(":")
  name = os.path.splitext(os.path.basename(path))[0]
  return os.path.join("runs", (f"{name}_{variant}" if variant else name) + suffix)


def main(argv):
  del argv
  workdir = _WORKDIR.value or default_workdir(
      config_flags.get_config_filename(flags.FLAGS["config"]))
  landscape.run(_CONFIG.value, workdir, overwrite=_OVERWRITE.value)


if __name__ == "__main__":
  app.run(main)
