"""A small float64 landscape grid computed by whatever devices JAX sees (helper, not a test).

Run as a script by tests/test_sharding.py, twice side by side, on one device and on 8
emulated CPU devices (the flag must be set before JAX is imported, hence a process each):

  XLA_FLAGS=--xla_force_host_platform_device_count=8 python tests/sharded_grid.py OUT.npz

Writes every array of `compute` into OUT.npz."""

import sys

import jax
import jax.numpy as jnp
import numpy as np

from trdr import data, models, victim
from trdr.attacks import bilevel
from trdr.attacks import init as inits
from trdr.configs import bilevel_affine
from trdr.evaluation import evaluate
from trdr.experiment import loop
from trdr.runtime import sharding

STEPS = 3
# Per device. 1 runs every point through the same program on 8 devices as on one, so
# the results must be bitwise equal. (Batches of 3 group points differently there, 3 + 1
# per device against 8 × 3 + 1, and a vmapped L-BFGS may then stop a few iterations
# earlier or later: measured max |Δ image| 7.9e-8 in float64. The toy grid covers such
# batches, and each batch size here costs a compilation of the attack.)
BATCH_SIZES = (1,)
TOY_GRID = 25         # not a multiple of 8: grid_map pads to 32


def toy(x):
  """A toy grid function with a NamedTuple in and a dict of NamedTuples out."""
  state, scale = x
  return {"state": state._replace(images=jnp.sin(state.images) * scale,
                                  step=state.step + 1),
          "total": jnp.sum(state.images) * scale}


def toy_inputs():
  images = jnp.arange(TOY_GRID * 6, dtype=jnp.float64).reshape(TOY_GRID, 2, 3)
  state = bilevel.AttackState(images, (), {"w": images[:, 0]},
                              jnp.arange(TOY_GRID, dtype=jnp.int32))
  return state, jnp.linspace(0.5, 1.5, TOY_GRID)


def config():
  """The :smoke config on 5 + 5 images, a 5 × 5 grid and tight float64 tolerances."""
  cfg = bilevel_affine.get_config("smoke")
  cfg.float64 = True
  cfg.data.n_per_class = 5
  cfg.victim.tol = 1e-10
  cfg.attack.lower_level.tol = 1e-10
  cfg.attack.hypergradient.cg_tol = 1e-12
  cfg.init.lambda1 = cfg.init.lambda2 = (0.0, 0.25, 0.5, 0.75, 1.0)
  cfg.eval.lower_level_tol = 1e-10
  return cfg


def compute() -> dict[str, np.ndarray]:
  """The toy `grid_map` for several batch sizes (and at batch 1 left sharded, gathered
  to the host: `grid_map`'s ``replicate=False``), `loop.run_grid` over the 25-point grid
  for `BATCH_SIZES`, the same grid through `loop.run`'s chunk of one start at a time
  (one start per device on 2 CPU devices) and the evaluation of its result
  (`evaluate.param_distances` and `evaluate.reconstructions`), as numpy arrays.

  Needs ``jax_enable_x64`` on.
  """
  if not jax.config.jax_enable_x64:
    raise ValueError("compute() needs jax_enable_x64 on")
  out = {"num_devices": np.asarray(sharding.num_shards())}
  xs = toy_inputs()
  for batch in (1, 3, 4, 100):
    tree = jax.jit(lambda x: sharding.grid_map(toy, x, batch))(xs)  # noqa: B023
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
      out[f"toy_b{batch}{jax.tree_util.keystr(path)}"] = np.asarray(leaf)
  # Left sharded (padded to 32 on 8 devices), then gathered to the host.
  split = jax.jit(lambda x: sharding.grid_map(toy, x, 1, replicate=False))(xs)
  for path, leaf in jax.tree_util.tree_flatten_with_path(
      sharding.gather(split, TOY_GRID))[0]:
    out[f"toy_split{jax.tree_util.keystr(path)}"] = leaf

  cfg = config()
  task = data.make_task(cfg.data)
  model = models.build_model(cfg.victim)
  theta0 = models.init_params(model, jax.random.key(0), task.train_images.shape[1:],
                              jnp.float64)
  theta_star, _ = victim.train(model, theta0, task, cfg.victim)
  target = victim.Victim(model, theta_star, cfg.victim, {})
  labels = jnp.asarray(task.train_labels, jnp.float64)
  grid = inits.make_grid(cfg.init.lambda1, cfg.init.lambda2)
  x_rnd = inits.uniform(jax.random.key(1), task.train_images.shape, dtype=jnp.float64)
  x0 = inits.grid_images(grid, jnp.asarray(task.train_images, jnp.float64),
                         jnp.asarray(task.partition_images, jnp.float64), x_rnd)
  attack = bilevel.build(target, cfg.attack, labels, key=jax.random.key(2))
  states = jax.vmap(attack.init)(x0)
  for batch in BATCH_SIZES:
    state, step_metrics = jax.jit(
        lambda s: loop.run_grid(attack.step, s, STEPS, batch))(states)  # noqa: B023
    out[f"images_b{batch}"] = np.asarray(state.images)
    out[f"step_b{batch}"] = np.asarray(state.step)
    for name in step_metrics._fields:
      out[f"{name}_b{batch}"] = np.asarray(getattr(step_metrics, name))
  # trdr.experiment.loop.run's chunks on CPU: one jitted call per start, one per device at once
  # (k = 2 of the 8: each device compiles the attack once; 2 show the crossing), the
  # second chunk queued behind the first.
  chunk = loop._chunk(attack.step, 1, jax.local_devices()[:2], STEPS - 1)
  state, first = chunk(states, STEPS - 1, 1)
  state, last = chunk(state, 1)
  out["images_loop"] = np.asarray(state.images)
  out["upper_loss_loop"] = np.concatenate([first.upper_loss, last.upper_loss], axis=1)
  images = out[f"images_b{BATCH_SIZES[0]}"]
  # The SSIM searches in two chunks (on devices 0 and 1 at once: `sharding.round_robin`):
  # the reconstructions' (D distinct points x 10 images: 2 chunks of ceil(10 D / 2)),
  # and the starts' as eq. 10 mixtures (G distinct points: blocks of ceil(4 (G + 1) / G)
  # = 5 of the 10 indices), each with the per-training-image counts (`pairwise_ssim`
  # and its mixtures').
  sets = evaluate.comparison_sets(task, x_rnd)
  distinct = len(sharding.distinct_points(images)[0])
  evaluation = evaluate.reconstructions(images, task.mean, sets, thresholds=(0.3,),
                                        chunk_size=-(-distinct * images.shape[1] // 2))
  starts = np.asarray(x0)
  distinct = len(sharding.distinct_points(starts)[0])
  weights = inits.mixture_weights(grid.lambda1, grid.lambda2).T
  evaluation.update({f"start_{k}": v for k, v in evaluate.reconstructions(
      starts, task.mean, sets, thresholds=(0.3,), chunk_size=distinct + 1,
      mixture=dict(zip(("train", "partition", "noise"), weights))).items()})
  evaluation["param_distance"] = evaluate.param_distances(
      attack.energy, theta_star, images, labels, tol=cfg.eval.lower_level_tol,
      max_iter=cfg.eval.lower_level_max_iter, memory_size=cfg.victim.memory_size,
      batch=loop.batch_size(cfg.attack.grid_batch_size, images.shape[0], False))
  out.update({f"eval_{k}": v for k, v in evaluation.items()})
  return out


if __name__ == "__main__":
  jax.config.update("jax_enable_x64", True)
  np.savez(sys.argv[1], **compute())
