r"""Privacy against what the adversary knows (`trdr.studies.knowledge`).

The config lives in the package (trdr/configs/knowledge.py, importable as
`trdr.configs.knowledge`); this file is what --config names.

Command:
  make knowledge                     # ":cpu", into runs/knowledge_cpu (knowledge.md)
  python experiments/knowledge.py --config=configs/knowledge.py:smoke --workdir=DIR
"""

from trdr.configs.knowledge import get_config  # noqa: F401
