r"""Privacy against what the adversary knows (`trdr.studies.knowledge`).

  python experiments/knowledge.py --config=configs/knowledge.py:cpu    # make knowledge
  python experiments/knowledge.py --config=configs/knowledge.py:smoke --workdir=DIR

The informed adversary (all training images but k known) on the affine, one-hidden and
Haim et al.'s victims, for each k and seed: WORKDIR/knowledge.json (rows, reused on a
rerun), knowledge.md and knowledge.{png,pdf} (default WORKDIR runs/knowledge_cpu).
"""

from trdr import cli

if __name__ == "__main__":
  cli.run(cli.knowledge_main)
