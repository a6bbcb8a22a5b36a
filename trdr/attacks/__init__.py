"""Reconstruction attacks, each a `protocol.Attack` built by ``ATTACKS[name]``.

  ATTACKS[name](target, attack_config, labels, *, key, box) -> Attack

with ``target`` a `trdr.victim.Victim`, ``labels`` float[m] in {−1, +1} (the labels of
the m reconstructed images) and ``box`` the pixel bounds. A new attack is one module here
and one entry below; `trdr.experiment` and `trdr.evaluation` serve it unchanged. The
informed adversary also takes the points it knows, ``known=(images, labels)``.
"""

from typing import Callable

from trdr.attacks import bilevel, decoreco, informed
from trdr.attacks.protocol import Attack

ATTACKS: dict[str, Callable[..., Attack]] = {
    "bilevel": bilevel.build,    # Runkel et al. 2024, eq. 2 and 7
    "decoreco": decoreco.build,  # Haim et al. 2022 (KKT), Buzaglo et al. 2023, eq. 3 form
    "informed": informed.build,  # Balle et al. 2022: all training points but k known
}

__all__ = ["ATTACKS", "Attack"]
