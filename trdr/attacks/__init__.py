"""Reconstruction attacks, each a `protocol.Attack` built by ``ATTACKS[name]``.

  ATTACKS[name](target, attack_config, labels, *, key, box) -> Attack

with ``target`` a `trdr.victim.Victim`, ``labels`` float[m] in {−1, +1} (the labels of
the m reconstructed images) and ``box`` the pixel bounds. A new attack is one module here
and one entry below; `trdr.experiment` and `trdr.evaluation` serve it unchanged.
"""

from typing import Callable

from trdr.attacks import bilevel, decoreco
from trdr.attacks.protocol import Attack

ATTACKS: dict[str, Callable[..., Attack]] = {
    "bilevel": bilevel.build,    # Runkel et al. 2024, eq. 2 and 7
    "decoreco": decoreco.build,  # Haim et al. 2022 (KKT), Buzaglo et al. 2023, eq. 3 form
}

__all__ = ["ATTACKS", "Attack"]
