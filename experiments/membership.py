r"""Membership ambiguity measured as an adversary faces it (`trdr.report.membership`).

  python experiments/membership.py --config=configs/membership.py:cpu    # make membership
  python experiments/membership.py --config=configs/membership.py:smoke --workdir=DIR

One run per attack (bilevel on the affine victim, DecoReco on Haim et al.'s MLP) from
noise, public and controlled mixed starts under three seeds; then the per-image scores'
ROC AUC with bootstrap CIs, TPR at 1 % and 10 % FPR, the verdict, WORKDIR/membership.md
and membership.{png,pdf}. Finished runs are reused (default WORKDIR runs/membership_cpu).
"""

from trdr import cli

if __name__ == "__main__":
  cli.run(cli.membership_main)
