r"""DecoReco (Haim et al. 2022; Buzaglo et al. 2023) on a convolutional victim, binary CIFAR-10.

Command:
  python experiments/reconstruct.py --config=configs/decoreco_cnn.py:cpu

Everything as configs/decoreco_cifar.py (task, training recipe, attack, sweep, sizes) but
the victim: `trdr.models.ConvNet`, 3 × 3 convolutions (padding 1) with ReLU, each followed
by 2 × 2 average pooling, then a linear head; a bias on the first layer only (the network
stays positively homogeneous after it, as DecoReco's KKT premise wants); the first layer
N(0, 1e-8), the later layers at PyTorch's nn.Conv2d / nn.Linear default (`later_init`),
as Haim et al. initialise their MLP. The attack's KKT term and its gradients are computed by
the fused `trdr.attacks.kkt_cnn` (as `kkt_mlp` for the MLP; with ``attack.fused`` False by
autodiff over the CNN, forward-over-reverse, `attack.autodiff_order`), and every run fits the
premise as for the MLP (`trdr.victim.kkt`).

Variants: "" channels (32, 64); "cpu" (16, 32); "smoke" (4, 8), seconds, for tests.
Expected runtime: ":smoke" about 20 s; ":cpu" a few minutes more than the MLP's on 2 cores.
"""

import ml_collections

from trdr.configs import decoreco_cifar, sizes


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  variant = sizes.variant(arg)
  config = decoreco_cifar.get_config(variant)
  config.victim.arch = "cnn"
  del config.victim["widths"]   # the MLP's
  config.victim.channels = {"": (32, 64), "cpu": (16, 32), "smoke": (4, 8)}[variant]
  config.victim.pool = True
  # With attack.fused False (kkt_cnn otherwise): ∇x as a VJP of a JVP in θ, fewer passes
  # through the convolutions than reverse mode twice (`make benchmark-conv` measures both),
  # the same gradients to rounding
  config.attack.autodiff_order = "forward_over_reverse"
  return config
