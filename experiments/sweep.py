r"""Vmapped DecoReco hyperparameter sweep: S settings of (σ, lr, λ_min, α) as ONE computation.

  python experiments/sweep.py --config=configs/decoreco_cifar.py:cpu [--workdir=DIR]

Replaces Haim et al.'s W&B cluster sweep: the settings are drawn from ``config.sweep``,
attacked side by side against one victim and ranked by the in-run score; best.json in the
work directory (default runs/<config name>[_<variant>]_sweep) is what the figure configs
read through ``--config.attack.hparams_file``.
"""

from trdr import cli

if __name__ == "__main__":
  cli.run(cli.experiment_main("sweep"))
