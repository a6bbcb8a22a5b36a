"""Reconstruction attacks, each a `protocol.Attack` built by ``ATTACKS[name]``.

  ATTACKS[name](target, attack_config, labels, *, key, box) -> Attack

with ``target`` a `trdr.victim.Victim`, ``labels`` float[m] in {−1, +1} (the labels of
the m reconstructed images) and ``box`` the pixel bounds. Each entry is a
`protocol.AttackKind`: the build function and its optional parts (its premise on θ*, its
sweepable settings, its settings on a user's θ*, its truth diagnostic), which
`trdr.experiment` asks for. A new
attack is one module here and one entry below (with a config and a test);
`trdr.experiment` and `trdr.evaluation` serve it unchanged. The informed adversary also
takes the points it knows, ``known=(images, labels)``.
"""

from trdr.attacks import bilevel, decoreco, informed, truth
from trdr.attacks.protocol import Attack, AttackKind, Sweepable

ATTACKS: dict[str, AttackKind] = {
    # Runkel et al. 2024, eq. 2 and 7
    "bilevel": AttackKind(bilevel.build, "bilevel", premise=bilevel.premise),
    # Haim et al. 2022 (KKT), Buzaglo et al. 2023, eq. 3 form; Haim et al.'s sweep
    "decoreco": AttackKind(decoreco.build, "DecoReco", premise=decoreco.premise, sweep=Sweepable(
        decoreco.Hyperparameters, log_uniform=("init_scale", "lr")), own_model=decoreco.own_model,
        truth=truth.diagnose),
    # Balle et al. 2022: all training points but k known
    "informed": AttackKind(informed.build, "the informed adversary"),
}

__all__ = ["ATTACKS", "Attack", "AttackKind", "Sweepable"]
