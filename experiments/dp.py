r"""Privacy due to noise: the attacks on DP-SGD victims beside the ReRo bound
(`trdr.studies.dp`).

  python experiments/dp.py --config=configs/dp.py:cpu    # make dp
  python experiments/dp.py --config=configs/dp.py:smoke --workdir=DIR

The affine victim and Haim et al.'s MLP trained by DP-SGD at noise multipliers spanning
ε ≈ 1 to 100, without noise and non-privately, each attacked by the informed adversary,
DecoReco and the bilevel attack, and by the prior-aware attack of Hayes et al. 2023 on
the released trajectory (K = 2 and 10 candidates, κ = 1/K), beside the bound DP puts on
any attack:
WORKDIR/dp.json (rows, reused on a rerun), dp.md and dp.{png,pdf} (default WORKDIR
runs/dp_cpu).
"""

from trdr import cli

if __name__ == "__main__":
  cli.run(cli.dp_main)
