r"""The DecoReco energy landscape: Fig. 10(b), 11(b), 12(b) of Runkel et al. 2024.

The config lives in the package (trdr/configs/decoreco_landscape.py, importable as
`trdr.configs.decoreco_landscape`); this file is what --config names.

Command:
  python experiments/landscape.py --config=configs/decoreco_landscape.py:cpu \
      [--config.attack.hparams_file=runs/decoreco_cifar_cpu_sweep/best.json]
  make fig10 fig11 fig12          # both panels, bilevel (a) and DecoReco (b)
"""

from trdr.configs.decoreco_landscape import get_config  # noqa: F401
