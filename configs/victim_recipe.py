r"""DecoReco's victim recipe, ablated (`trdr.studies.victim_recipe`).

The config lives in the package (trdr/configs/victim_recipe.py, importable as
`trdr.configs.victim_recipe`); this file is what --config names.

Command:
  make victim-recipe                 # ":cpu", into runs/victim_recipe_cpu (victim_recipe.md)
  python experiments/victim_recipe.py --config=configs/victim_recipe.py:smoke --workdir=DIR
"""

from trdr.configs.victim_recipe import get_config  # noqa: F401
