r"""Membership ambiguity measured as an adversary faces it (`trdr.studies.membership`).

  python experiments/membership.py --config=configs/membership.py:cpu    # make membership
  python experiments/membership.py --config=configs/membership.py:smoke --workdir=DIR

One run per attack (the bilevel attack on the affine and on the one-hidden victim, DecoReco
on Haim et al.'s MLP) and victim (configs/membership.py: five data draws of one recipe) from
noise, public and controlled mixed starts; then each image's scores (with offline LiRA's
shadow victims), their ROC AUC with its interval over victims, TPR at low FPR, both controls,
the verdict, WORKDIR/membership.md and membership.{png,pdf}. Finished runs and each victim's
scores are reused. Default WORKDIR runs/membership_<variant>; `make membership` writes to
runs/report_<SIZE>/membership, where `make figures` runs the same experiment, so that
either reuses what the other finished.
"""

from trdr import cli

if __name__ == "__main__":
  cli.run(cli.membership_main)
