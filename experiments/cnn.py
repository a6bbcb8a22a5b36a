r"""DecoReco on a convolutional victim beside Haim et al.'s MLP (`trdr.studies.cnn`).

  python experiments/cnn.py --config=configs/cnn.py:cpu     # make cnn
  python experiments/cnn.py --config=configs/cnn.py:smoke --workdir=DIR

Per seed, the CNN of configs/decoreco_cnn.py and the MLP of configs/decoreco_cifar.py on
the same training images, attacked by DecoReco at the same size and settings:
WORKDIR/cnn.json (rows, reused on a rerun), cnn.md and cnn.{png,pdf} (default WORKDIR
runs/cnn_cpu).
"""

from trdr import cli

if __name__ == "__main__":
  cli.run(cli.cnn_main)
