r"""DecoReco's victim recipe, ablated (`trdr.studies.victim_recipe`).

  python experiments/victim_recipe.py --config=configs/victim_recipe.py:cpu   # make victim-recipe
  python experiments/victim_recipe.py --config=configs/victim_recipe.py:smoke --workdir=DIR

Haim et al.'s MLP under each initialisation of its later layers and each training time,
per seed: the KKT premise of θ* and what DecoReco recovers. WORKDIR/victim_recipe.json
(cells, reused on a rerun) and victim_recipe.md (default WORKDIR runs/victim_recipe_cpu).
"""

from trdr import cli

if __name__ == "__main__":
  cli.run(cli.victim_recipe_main)
