r"""Bilevel attack on the one-hidden-layer ReLU network: Fig. 1(b), 2(b), 4 and Table 1.

The config lives in the package (trdr/configs/bilevel_one_hidden.py, importable as
`trdr.configs.bilevel_one_hidden`); this file is what --config names.

Command:
  python experiments/landscape.py --config=configs/bilevel_one_hidden.py      # paper size, GPU
  python experiments/landscape.py --config=configs/bilevel_one_hidden.py:cpu  # 2-core CPU
  python experiments/landscape.py --config=configs/bilevel_one_hidden.py:smoke
  make fig1 fig2 fig3 fig4 table1 [SIZE=paper]   # via configs/paper_figures.py
"""

from trdr.configs.bilevel_one_hidden import get_config  # noqa: F401
