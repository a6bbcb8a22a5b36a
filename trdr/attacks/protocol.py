"""The protocol every attack implements, so that one loop, one evaluation and one
experiment runner serve them all.

An attack is built against one victim (`trdr.victim.Victim`) from its config section and
is then a bundle of pure, vmappable functions over its own state pytree:

  init(x0, key) -> state            x0 float[m, H, W, C], the starting images (one start)
  step(state) -> (state, metrics)   one iteration; metrics a NamedTuple of float[] scalars
                                    whose FIRST field is the attack's objective
  images(state) -> float[m, H, W, C] the current reconstruction

`trdr.experiment.loop.run` maps ``step`` over a grid of starts under `lax.scan`; `trdr.experiment`
builds the attack through the `trdr.attacks.ATTACKS` registry, whose entries are
`AttackKind`s: the build function and the optional parts that the runner asks for instead
of naming the attack (its premise on θ*, its sweepable settings).
"""

from typing import Any, Callable, NamedTuple

import jax


class Attack(NamedTuple):
  """A reconstruction attack bound to one victim.

  Attributes:
    name: its key in `trdr.attacks.ATTACKS`.
    init: (x0 float[m, H, W, C], key) -> state.
    step: state -> (state, metrics NamedTuple of float[]; the first field is the
      objective that the attack minimises).
    images: state -> float[m, H, W, C], the current reconstruction (the victim's input
      space, i.e. mean-subtracted when the task is).
    batches_well: True when a vmapped batch of starts does the same work as a loop over
      them (no data-dependent loops, e.g. DecoReco's fixed-length step); False when a
      batched start runs every member's branches (the bilevel lower level's L-BFGS line
      search), which makes vmapping on CPU slower than a sequential map. The loop's
      `trdr.experiment.loop.batch_size` policy reads it.
    display: how the evaluation shows and scores its images: "pixels" (the mean added
      back) or "minmax" (the mean added back, then each image min-max scaled to [0, 1],
      as Haim et al. show DecoReco's reconstructions).
    energy: for an attack with a lower level (the bilevel attack), the victim's training
      objective E(params, images float[n, H, W, C], labels float[n]) -> float[] whose
      minimiser θ(x) it compares with θ*: the evaluation then re-solves θ(x) of the
      reconstructions and reports ||θ* − θ(x)||² (Runkel et al. Table 1). None otherwise.
    hyperparameters: the attack's tunable settings as configured (a NamedTuple of
      floats, e.g. DecoReco's (σ, lr, λ_min, α)), recorded in the run's summary; None
      when it has none.
    outputs: state -> {name: float[...]}, arrays beside the images that the run saves
      in results.npz (e.g. DecoReco's final λ); None for none.
  """
  name: str
  init: Callable[[jax.Array, jax.Array], Any]
  step: Callable[[Any], tuple[Any, NamedTuple]]
  images: Callable[[Any], jax.Array]
  batches_well: bool
  display: str
  energy: Callable[..., jax.Array] | None = None
  hyperparameters: tuple | None = None  # a NamedTuple
  outputs: Callable[[Any], dict[str, jax.Array]] | None = None


class Sweepable(NamedTuple):
  """The settings of an attack that the sweep (`trdr.experiment` mode "sweep") tunes.

  Attributes:
    settings: a NamedTuple class whose fields are float keys of the attack's config section
      (e.g. DecoReco's (σ, lr, λ_min, α)); the attack's ``init`` puts them into its state
      as ``state.hparams``, which the sweep replaces by one setting per grid point. A field
      named ``init_scale`` is also the σ of the sweep's Gaussian starts.
    log_uniform: the fields drawn log-uniformly over their ``sweep.ranges``; the others are
      drawn uniformly.
    best_file: the config key of the attack section that names a sweep's best.json whose
      settings the attack then takes (all but those listed in ``hparams_keep``).
  """
  settings: type
  log_uniform: tuple[str, ...] = ()
  best_file: str = "hparams_file"

  @property
  def names(self) -> tuple[str, ...]:
    """The settings' names, in their order."""
    return self.settings._fields


class AttackKind(NamedTuple):
  """One entry of `trdr.attacks.ATTACKS`: how to build an attack and what else it offers.

  Called as its ``build``: ``ATTACKS[name](target, attack_config, labels, *, key, box)``.

  Attributes:
    build: (target, attack_config, labels, *, key, box, ...) -> `Attack`.
    title: how the report names the attack in its sentences (e.g. "DecoReco").
    premise: None, or (target `trdr.victim.Victim`, attack_config, task `trdr.data.Task`,
      dtype, key) -> {summary key: JSON-able dict}: whether θ* meets what the attack
      assumes, measured once per run on θ* and its training images, logged, and written into
      the run's summary.json (DecoReco: how near θ* is to a KKT point; bilevel: l(x_GT)).
    sweep: None, or the `Sweepable` settings: the attack can then be swept and can take a
      sweep's best settings.
    own_model: None, or config -> (config, {summary key: JSON-able}): the run's config
      with the attack's settings chosen for a θ* read from a user's file (`victim.load`),
      and where they came from, for the run's summary (DecoReco: never its untuned
      defaults).
    truth: None, or (target, attack_config, labels, task, *, history, images, steps,
      eval_config, workdir, dtype, key) -> {summary key: JSON-able dict}: whether the
      attack's own objective prefers θ*'s training set, measured after the attack in mode
      "attack" where the training set is known and ``attack.truth_diagnostic`` is set
      (``history``: the run's {metric: float[G, steps]}; ``images``: its final images
      float[G, m, H, W, C]; ``workdir``: a directory of its own for a checkpointed run),
      logged and written into the run's summary.json (DecoReco: `trdr.attacks.truth`).
  """
  build: Callable[..., Attack]
  title: str
  premise: Callable[..., dict] | None = None
  sweep: Sweepable | None = None
  own_model: Callable[..., tuple[Any, dict]] | None = None
  truth: Callable[..., dict] | None = None

  def __call__(self, *args, **kwargs) -> Attack:
    return self.build(*args, **kwargs)
