r"""Benchmarks, measured side by side in one run (ratios, not absolute promises).

  python experiments/benchmark.py [--config=configs/bilevel_affine.py] [--steps=10]

1. The eq. 10 grid attacked as one vmapped computation (`jax.vmap` over all grid points),
   as one computation mapped over the grid in vmapped batches (`bilevel.run_grid` with the
   config's batch size), and one by one in a Python loop (each jitted once): the times,
   their ratios, and whether the results agree (allclose).
2. Hypergradient solves on the affine victim at the grid's first outer step: time per
   hypergradient and cosine similarity / relative error of the quasi-Newton solve against
   a tightly converged conjugate-gradient reference.
"""

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags
from ml_collections import config_flags

from trdr import data, landscape, metrics, models, victim
from trdr.attacks import bilevel, init as inits

_CONFIG = config_flags.DEFINE_config_file("config", "configs/bilevel_affine.py",
                                          "Experiment config.", lock_config=True)
_STEPS = flags.DEFINE_integer("steps", 3, "Outer steps timed per initialisation.")
_REPEATS = flags.DEFINE_integer("repeats", 2, "Timed repetitions (median reported).")


def _median_time(fn, repeats):
  jax.block_until_ready(fn())  # compile and warm up
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - start)
  return float(np.median(times))


def main(argv):
  del argv
  config = _CONFIG.value
  jax.config.update("jax_enable_x64", bool(config.float64))
  dtype = jnp.float64 if config.float64 else jnp.float32
  task = data.make_binary_task(config.data)
  model = models.build_model(config.victim)
  apply_fn = lambda p, x: model.apply({"params": p}, x)
  theta0 = models.init_params(model, jax.random.key(config.victim.seed),
                              task.train_images.shape[1:], dtype)
  theta_star, report = victim.train(model, theta0, task, config.victim)
  print(f"victim: {report}")

  grid = inits.make_grid(config.init.lambda1, config.init.lambda2)
  key_noise, key_attack = jax.random.split(jax.random.key(config.seed))
  x_gt = jnp.asarray(task.train_images, dtype)
  x_rnd = inits.uniform(key_noise, x_gt.shape, task.mean, dtype)
  x0 = inits.grid_images(grid, x_gt, jnp.asarray(task.partition_images, dtype), x_rnd)
  labels = jnp.asarray(task.train_labels, dtype)
  attack = bilevel.make_attack(apply_fn, theta_star, labels, config.victim, config.attack,
                               key_attack)
  steps = _STEPS.value
  run = lambda s: bilevel.run_steps(attack.step, s, steps)
  g, n = x0.shape[:2]
  batch = bilevel.grid_batch_size(config.attack.grid_batch_size, g)
  states = jax.vmap(attack.init)(x0)
  vmapped = jax.jit(lambda s: bilevel.run_grid(attack.step, s, steps, g))
  mapped = jax.jit(lambda s: bilevel.run_grid(attack.step, s, steps, batch))
  single = jax.jit(lambda x: run(attack.init(x)))
  loop = lambda: [single(x0[i]) for i in range(g)]

  t_vmap = _median_time(lambda: vmapped(states), _REPEATS.value)
  t_map = _median_time(lambda: mapped(states), _REPEATS.value)
  t_loop = _median_time(loop, _REPEATS.value)
  looped = loop()

  def agree(result):
    state, step_metrics = result
    return (all(np.allclose(state.images[i], looped[i][0].images, atol=1e-4) for i in range(g))
            and all(np.allclose(step_metrics.upper_loss[i], looped[i][1].upper_loss,
                                rtol=1e-3, atol=1e-6) for i in range(g)))

  print(f"\n== eq. 10 grid: {g} initialisations x {n} images, {steps} outer steps "
        f"(solve={config.attack.hypergradient.solve}, backend={jax.default_backend()}) ==")
  print(f"{'':44s} {'seconds':>9s} {'loop / this':>12s} {'allclose to loop':>17s}")
  for name, seconds, result in (
      (f"jax.vmap over all {g} grid points", t_vmap, vmapped(states)),
      (f"one computation, vmapped batches of {batch}", t_map, mapped(states)),
      ("Python loop over grid points", t_loop, None)):
    print(f"{name:44s} {seconds:9.3f} {t_loop / seconds:11.2f}x "
          f"{'(reference)' if result is None else str(agree(result)):>17s}")

  energy_fn = functools.partial(victim.energy, apply_fn=apply_fn,
                                weight_decay=config.victim.weight_decay)
  ll = config.attack.lower_level
  print(f"\n== hypergradient at the first outer step (lower level started at θ*), "
        f"affine victim, n = {n} ==")
  reference = None
  rows = []
  for name, solve, kw in (("cg (reference, tol 1e-10)", "cg", {"cg_tol": 1e-10, "cg_maxiter": 5000}),
                          ("cg (config)", "cg", {"cg_tol": config.attack.hypergradient.cg_tol,
                                                 "cg_maxiter": config.attack.hypergradient.cg_maxiter}),
                          ("quasi_newton", "quasi_newton", {})):
    lower = bilevel.make_lower_level(energy_fn, max_iter=ll.max_iter, tol=ll.tol,
                                     memory_size=ll.memory_size, solve=solve, **kw)
    one = jax.grad(lambda x: metrics.param_distance(theta_star, lower(theta_star, x, labels)[0]))
    hypergrad = jax.jit(lambda xs: jax.lax.map(one, xs))
    batch = x0[np.array([grid.index(0.0, 0.0), grid.index(0.0, 1.0), grid.index(0.5, 0.5)])]
    seconds = _median_time(lambda: hypergrad(batch), _REPEATS.value) / batch.shape[0]
    grads = np.asarray(hypergrad(batch)).reshape(batch.shape[0], -1)
    if reference is None:
      reference = grads
    cos = np.sum(grads * reference, 1) / (np.linalg.norm(grads, axis=1) * np.linalg.norm(reference, axis=1))
    rel = np.linalg.norm(grads - reference, axis=1) / np.linalg.norm(reference, axis=1)
    rows.append((name, seconds, cos, rel))
  print(f"{'solve':28s} {'s / hypergradient':>18s} {'cosine to ref (noise, partition, mix)':>40s} {'rel. error':>24s}")
  for name, seconds, cos, rel in rows:
    print(f"{name:28s} {seconds:18.4f} {np.array2string(cos, precision=4):>40s} "
          f"{np.array2string(rel, precision=2):>24s}")


if __name__ == "__main__":
  app.run(main)
