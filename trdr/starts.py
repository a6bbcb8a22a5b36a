"""The start images of every experiment mode (`trdr.experiment.MODES`) and DecoReco's
sampled sweep settings.

  make_starts      x0 float[G, m, H, W, C] and what each mode records beside it
  sample_settings  S DecoReco settings (σ, lr, λ_min, α) from Haim et al.'s sweep ranges

Modes: "landscape" (the (λ1, λ2) grid of eq. 10), "attack" (G = 1, ``config.init.kind``),
"sweep" (G = S settings), "membership" (G = len(init.kinds) · len(init.seeds): every start
kind of `trdr.attacks.init.INITS` under each seed, one start per training image, with its
label; `trdr.membership`).
"""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from trdr.attacks import decoreco, init as inits

HPARAM_NAMES = decoreco.Hyperparameters._fields


def sample_settings(key, num: int, ranges: ml_collections.ConfigDict, dtype
                    ) -> decoreco.Hyperparameters:
  """``num`` DecoReco settings from Haim et al.'s sweep ranges: σ and lr log-uniform,
  λ_min and α uniform, each over ``ranges.<name>`` = (low, high).

  Returns:
    Hyperparameters of float[num] arrays.
  Raises:
    ValueError: a range with low > high or a non-positive log-uniform bound.
  """
  keys = jax.random.split(key, len(HPARAM_NAMES))
  values = []
  for k, name in zip(keys, HPARAM_NAMES):
    low, high = (float(v) for v in ranges[name])
    if low > high:
      raise ValueError(f"sweep range for {name} has low {low} > high {high}")
    log = name in ("init_scale", "lr")
    if log and low <= 0:
      raise ValueError(f"sweep range for {name} is log-uniform: bounds must be > 0, "
                       f"got ({low}, {high})")
    u = jax.random.uniform(k, (num,), dtype)
    values.append(jnp.exp(jnp.log(low) + u * (jnp.log(high) - jnp.log(low))) if log
                  else low + u * (high - low))
  return decoreco.Hyperparameters(*values)


def _with_included(sampled: decoreco.Hyperparameters, include, num: int
                   ) -> decoreco.Hyperparameters:
  """The settings ``include`` ((σ, lr, λ_min, α) each, e.g. the published reference runs)
  first, then the sampled ones.

  Raises:
    ValueError: more included settings than ``num``, or one that is not 4 numbers.
  """
  include = [tuple(map(float, s)) for s in include]
  if len(include) > num or any(len(s) != len(HPARAM_NAMES) for s in include):
    raise ValueError(f"sweep.include must hold at most num_settings = {num} settings of "
                     f"{len(HPARAM_NAMES)} numbers {HPARAM_NAMES}, got {include}")
  if not include:
    return sampled
  fixed = jnp.asarray(include, sampled.init_scale.dtype).T
  return decoreco.Hyperparameters(*(jnp.concatenate([f, s]) for f, s in zip(fixed, sampled)))


def make_starts(mode, config, a, task, dtype):
  """(x0 float[G, m, H, W, C], labels float[m], init keys [G] or one key, extra results,
  build key, hparams [G] or None) of each mode; see the module docstring.

  "membership" records extra start_kind str[G], start_seed int[G] and start_member
  int8[G, m] (`trdr.attacks.init.start_membership`).

  Raises:
    ValueError: a bad init kind, or membership start kinds whose labels differ.
  """
  if mode == "membership":
    return _membership_starts(config, a, task, dtype)
  if mode == "landscape":
    grid = inits.make_grid(config.init.lambda1, config.init.lambda2)
    key_noise, key_attack = jax.random.split(jax.random.key(config.seed))
    x_gt = jnp.asarray(task.train_images, dtype)
    x_rnd = inits.uniform(key_noise, x_gt.shape, task.mean, dtype)
    x0 = inits.grid_images(grid, x_gt, jnp.asarray(task.partition_images, dtype), x_rnd)
    extra = {"lambda1": grid.lambda1, "lambda2": grid.lambda2,
             "grid_shape": np.asarray(grid.shape), "noise_images": np.asarray(x_rnd)}
    return x0, jnp.asarray(task.train_labels, dtype), key_attack, extra, key_attack, None
  if mode == "attack":
    key_init, key_attack = jax.random.split(jax.random.key(config.seed))
    x0, labels = inits.candidates(
        config.init.kind, key_init, task, dtype, init_scale=a.get("init_scale"),
        m_per_image=a.get("candidates_per_image", 2), lambda1=config.init.get("lambda1", 1.0),
        lambda2=config.init.get("lambda2", 1.0))
    return x0[None], labels, key_attack, {}, key_attack, None
  key_settings, key_init = jax.random.split(jax.random.key(config.sweep.seed))
  settings = _with_included(sample_settings(
      key_settings, config.sweep.num_settings - len(config.sweep.get("include", ())),
      config.sweep.ranges, dtype), config.sweep.get("include", ()), config.sweep.num_settings)
  m_per_image = a.candidates_per_image
  _, labels = inits.candidates("gaussian", key_init, task, dtype, init_scale=1.0,
                               m_per_image=m_per_image)
  keys = jax.random.split(key_init, config.sweep.num_settings)
  key_x, key_l = jax.vmap(jax.random.split, out_axes=1)(keys)
  x0 = jax.vmap(lambda k, s: inits.candidates("gaussian", k, task, dtype, init_scale=s,
                                              m_per_image=m_per_image)[0])(
                                                  key_x, settings.init_scale)
  return x0, labels, key_l, {}, key_init, settings


def _membership_starts(config, a, task, dtype):
  """`make_starts` of mode "membership": grid point g = s · K + k is kind k under seed s."""
  kinds, seeds = tuple(config.init.kinds), tuple(int(s) for s in config.init.seeds)
  if not kinds or not seeds:
    raise ValueError(f"membership needs init.kinds and init.seeds, got {kinds} and {seeds}")
  n = len(task.train_labels)
  x0, keys, member = [], [], []
  for seed in seeds:
    key_init, key_attack = jax.random.split(jax.random.key(seed))
    for k, kind in enumerate(kinds):
      key = jax.random.fold_in(key_init, k)
      x, labels = inits.candidates(kind, key, task, dtype, init_scale=a.get("init_scale"),
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
  return (jnp.stack(x0), jnp.asarray(task.train_labels, dtype), jnp.stack(keys), extra,
          keys[0], None)
