"""The start images of every experiment mode (`trdr.experiment.MODES`), as `Starts`.

  landscape   the (λ1, λ2) grid of eq. 10 (Runkel et al.): G = len(λ1)·len(λ2) points
  attack      one start (G = 1) of ``config.init.kind`` (`trdr.attacks.init.INITS`)
  sweep       G = S settings of the attack's `trdr.attacks.protocol.Sweepable` (DecoReco's
              σ, lr, λ_min, α) drawn from ``sweep.ranges`` (`sample_settings`; Haim et al.'s),
              each with its own Gaussian start
  membership  G = len(init.kinds) · len(init.seeds): every start kind under each seed, one
              start per training image, with its label (`trdr.studies.membership`)

`STARTS[mode](config, attack_config, task, dtype)` builds them.
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from trdr.attacks import ATTACKS, Sweepable
from trdr.attacks import init as inits


class Starts(NamedTuple):
  """The start images of one run and what its mode records beside them.

  Attributes:
    images: x0 float[G, m, H, W, C], the victim's input space; G grid points of m images.
    labels: float[m], the labels of the m reconstructed images (±1, or 0 … C−1).
    init_keys: the keys of the attack's ``init``: key[G], one per grid point, or one key
      shared by all.
    build_key: the key the attack is built with (e.g. its U(0, 1) lower-level starts).
    extra: {name: array} saved in results.npz beside the images (a landscape's λ1, λ2
      and noise images; membership's start kinds, seeds and memberships).
    hparams: a sweep's settings (the attack's `Sweepable` settings), each field float[G];
      None in the other modes.
  """
  images: jax.Array
  labels: jax.Array
  init_keys: jax.Array
  build_key: jax.Array
  extra: dict[str, Any]
  hparams: tuple | None = None  # a NamedTuple


def sample_settings(key, num: int, ranges: ml_collections.ConfigDict, dtype,
                    sweep: Sweepable) -> tuple:
  """``num`` settings of ``sweep`` (an attack's `Sweepable`; DecoReco's from Haim et al.'s
  sweep ranges: σ and lr log-uniform, λ_min and α uniform), each over ``ranges.<name>`` =
  (low, high).

  Returns:
    ``sweep.settings`` of float[num] arrays.
  Raises:
    ValueError: a range with low > high or a non-positive log-uniform bound.
  """
  keys = jax.random.split(key, len(sweep.names))
  values = []
  for k, name in zip(keys, sweep.names):
    low, high = (float(v) for v in ranges[name])
    if low > high:
      raise ValueError(f"sweep range for {name} has low {low} > high {high}")
    log = name in sweep.log_uniform
    if log and low <= 0:
      raise ValueError(f"sweep range for {name} is log-uniform: bounds must be > 0, "
                       f"got ({low}, {high})")
    u = jax.random.uniform(k, (num,), dtype)
    values.append(jnp.exp(jnp.log(low) + u * (jnp.log(high) - jnp.log(low))) if log
                  else low + u * (high - low))
  return sweep.settings(*values)


def _with_included(sampled: tuple, include, num: int) -> tuple:
  """The settings ``include`` (one number per field of ``sampled``, e.g. DecoReco's
  published reference runs' (σ, lr, λ_min, α)) first, then the sampled ones (a NamedTuple
  of float[S] arrays).

  Raises:
    ValueError: more included settings than ``num``, or one of another length than the
      settings.
  """
  names = sampled._fields
  include = [tuple(map(float, s)) for s in include]
  if len(include) > num or any(len(s) != len(names) for s in include):
    raise ValueError(f"sweep.include must hold at most num_settings = {num} settings of "
                     f"{len(names)} numbers {names}, got {include}")
  if not include:
    return sampled
  fixed = jnp.asarray(include, sampled[0].dtype).T
  return type(sampled)(*(jnp.concatenate([f, s]) for f, s in zip(fixed, sampled)))


def landscape_starts(config, a, task, dtype) -> Starts:
  """The eq. 10 grid x0 = λ2(λ1 x_GT + (1 − λ1) x_part) + (1 − λ2) x_rnd of every
  (λ1, λ2) of ``config.init.lambda1`` × ``lambda2``, x_rnd ~ U(0, 1) (minus the mean);
  records lambda1, lambda2 float[G], grid_shape and noise_images."""
  del a
  grid = inits.make_grid(config.init.lambda1, config.init.lambda2)
  key_noise, key_attack = jax.random.split(jax.random.key(config.seed))
  x_gt = jnp.asarray(task.train_images, dtype)
  x_rnd = inits.uniform(key_noise, x_gt.shape, task.mean, dtype)
  x0 = jnp.asarray(inits.grid_images(grid, x_gt, jnp.asarray(task.partition_images, dtype),
                                     x_rnd))
  extra = {"lambda1": grid.lambda1, "lambda2": grid.lambda2,
           "grid_shape": np.asarray(grid.shape), "noise_images": np.asarray(x_rnd)}
  return Starts(x0, jnp.asarray(task.train_labels, dtype), key_attack, key_attack, extra)


def _init_scale(a):
  """σ of Gaussian starts: a setting of DecoReco's config only (the other attacks' starts
  never draw from N(0, σ²)); None where the attack has none."""
  return a.get("init_scale")


def attack_starts(config, a, task, dtype) -> Starts:
  """One start (G = 1) of ``config.init.kind``: ``attack.candidates_per_image`` candidates
  per training image (`trdr.attacks.init.candidates`)."""
  key_init, key_attack = jax.random.split(jax.random.key(config.seed))
  x0, labels = inits.candidates(
      config.init.kind, key_init, task, dtype, init_scale=_init_scale(a),
      m_per_image=a.candidates_per_image, lambda1=config.init.lambda1,
      lambda2=config.init.lambda2)
  return Starts(x0[None], labels, key_attack, key_attack, {})


def sweep_starts(config, a, task, dtype) -> Starts:
  """``sweep.num_settings`` settings of the attack's `Sweepable` (``sweep.include`` first,
  the rest drawn from ``sweep.ranges``), each with Gaussian candidates at its own σ
  (its ``init_scale``)."""
  key_settings, key_init = jax.random.split(jax.random.key(config.sweep.seed))
  settings = _with_included(sample_settings(
      key_settings, config.sweep.num_settings - len(config.sweep.include),
      config.sweep.ranges, dtype, ATTACKS[a.name].sweep), config.sweep.include,
      config.sweep.num_settings)
  m_per_image = a.candidates_per_image
  _, labels = inits.candidates("gaussian", key_init, task, dtype, init_scale=1.0,
                               m_per_image=m_per_image)
  keys = jax.random.split(key_init, config.sweep.num_settings)
  key_x, key_l = jax.vmap(jax.random.split, out_axes=1)(keys)
  x0 = jax.vmap(lambda k, s: inits.candidates("gaussian", k, task, dtype, init_scale=s,
                                              m_per_image=m_per_image)[0])(
                                                  key_x, settings.init_scale)
  return Starts(x0, labels, key_l, key_init, {}, settings)


def membership_starts(config, a, task, dtype) -> Starts:
  """Grid point g = s · K + k is start kind k of ``init.kinds`` under seed s of
  ``init.seeds``, one start per training image with its label; records start_kind str[G],
  start_seed int[G] and start_member int8[G, m] (`trdr.attacks.init.start_membership`).

  Raises:
    ValueError: no kinds or seeds, or a kind that does not give one start per training
      image labelled as it.
  """
  kinds, seeds = tuple(config.init.kinds), tuple(int(s) for s in config.init.seeds)
  if not kinds or not seeds:
    raise ValueError(f"membership needs init.kinds and init.seeds, got {kinds} and {seeds}")
  n = len(task.train_labels)
  x0, keys, member = [], [], []
  for seed in seeds:
    key_init, key_attack = jax.random.split(jax.random.key(seed))
    for k, kind in enumerate(kinds):
      key = jax.random.fold_in(key_init, k)
      x, labels = inits.candidates(kind, key, task, dtype, init_scale=_init_scale(a),
                                   m_per_image=1)
      if x.shape[0] != n or not np.array_equal(labels, task.train_labels):
        raise ValueError(f"init.kind {kind!r} gives {x.shape[0]} starts; membership needs "
                         f"one per training image, labelled as it ({n})")
      x0.append(x)
      keys.append(jax.random.fold_in(key_attack, k))
      member.append(inits.start_membership(kind, key, n))
  extra = {"start_kind": np.asarray(kinds * len(seeds)),
           "start_seed": np.repeat(np.asarray(seeds), len(kinds)),
           "start_member": np.stack(member)}
  return Starts(jnp.stack(x0), jnp.asarray(task.train_labels, dtype), jnp.stack(keys),
                keys[0], extra)


STARTS = {"landscape": landscape_starts, "attack": attack_starts, "sweep": sweep_starts,
          "membership": membership_starts}
