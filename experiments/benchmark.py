r"""Benchmarks, measured side by side in one run (ratios, not absolute promises).

  python experiments/benchmark.py [--config=configs/bilevel_affine.py] [--steps=10]

1. The eq. 10 grid attacked as one vmapped computation (`jax.vmap` over all grid points),
   as one computation mapped over the grid in vmapped batches (`bilevel.run_grid` with the
   config's batch size), and one by one in a Python loop (each jitted once): the times,
   their ratios, and the largest difference of the final images and of l from the loop's
   (in float32 they agree to the lower-level tolerance; tests/test_landscape.py checks
   equality in float64 at tight tolerances).
2. The three hypergradient solves — conjugate gradient on exact Hessian-vector products,
   quasi-Newton from the lower-level L-BFGS pairs (eq. 7), truncated Neumann series
   (Lorraine et al. 2020) — on the affine victim (--config) and the one-hidden victim
   (--one_hidden_config), in float64, lower level started at θ*, at three attack iterates
   (noise, partition, their 50/50 mixture): time per hypergradient (lower-level solve
   from θ* + backward pass; the backward part is the difference to the lower-level solve
   timed alone), and cosine / relative error against CG converged to tol 1e-10. Printed
   as a Markdown table.

  python experiments/benchmark.py --sections=solvers   # section 2 only
"""

import functools
import importlib.util
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags
from ml_collections import config_flags

from trdr import data, metrics, models, victim
from trdr.attacks import bilevel, init as inits

_CONFIG = config_flags.DEFINE_config_file("config", "configs/bilevel_affine.py",
                                          "Experiment config.", lock_config=True)
_STEPS = flags.DEFINE_integer("steps", 3, "Outer steps timed per initialisation.")
_REPEATS = flags.DEFINE_integer("repeats", 2, "Timed repetitions (median reported).")
_SECTIONS = flags.DEFINE_list("sections", ["grid", "solvers"],
                              "grid: section 1; solvers: section 2.")
_ONE_HIDDEN_CONFIG = flags.DEFINE_string(
    "one_hidden_config", "configs/bilevel_one_hidden.py:cpu",
    "Config (path[:variant]) of the one-hidden victim for section 2.")


def load_config(spec: str):
  """get_config(variant) of the config file ``path[:variant]``."""
  path, _, variant = spec.partition(":")
  module_spec = importlib.util.spec_from_file_location(
      os.path.splitext(os.path.basename(path))[0], path)
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  return module.get_config(variant or None)


SOLVER_ROWS = (  # (label, solve, settings overriding the config's hypergradient section)
    ("cg, reference (tol 1e-10)", "cg", {"cg_tol": 1e-10, "cg_maxiter": 20000}),
    ("cg (config)", "cg", {}),
    ("quasi_newton", "quasi_newton", {}),
    ("neumann (config)", "neumann", {}),
)


def trained_victim(config, dtype):
  """(task, apply_fn, θ*, training report) for the config's data and victim."""
  task = data.make_binary_task(config.data)
  model = models.build_model(config.victim)
  apply_fn = lambda p, x: model.apply({"params": p}, x)
  theta0 = models.init_params(model, jax.random.key(config.victim.seed),
                              task.train_images.shape[1:], dtype)
  theta_star, report = victim.train(model, theta0, task, config.victim)
  return task, apply_fn, theta_star, report


def solver_table(config, repeats: int) -> list[tuple]:
  """Section 2 for one victim config, in float64.

  Returns rows (label, seconds per hypergradient, seconds of it beyond the lower-level
  solve — the backward pass with its linear solve —, cosines, relative errors).

  The lower level is started at θ* and solved to the config's tolerance; the three
  iterates are x_rnd, x_part and (x_rnd + x_part)/2.
  """
  dtype = jnp.float64
  task, apply_fn, theta_star, _ = trained_victim(config, dtype)
  labels = jnp.asarray(task.train_labels, dtype)
  x_rnd = inits.uniform(jax.random.key(config.seed), task.train_images.shape, task.mean, dtype)
  x_part = jnp.asarray(task.partition_images, dtype)
  batch = jnp.stack([x_rnd, x_part, 0.5 * (x_rnd + x_part)])
  energy_fn = functools.partial(victim.energy, apply_fn=apply_fn,
                                weight_decay=config.victim.weight_decay)
  ll, hg = config.attack.lower_level, config.attack.hypergradient
  forward_only = bilevel.make_lower_level(energy_fn, max_iter=ll.max_iter, tol=ll.tol,
                                          memory_size=ll.memory_size, solve="cg")
  forward = jax.jit(lambda xs: jax.lax.map(
      lambda x: forward_only(theta_star, x, labels)[0], xs))
  forward_seconds = _median_time(lambda: forward(batch), repeats) / batch.shape[0]
  reference, rows = None, []
  for label, solve, overrides in SOLVER_ROWS:
    settings = {"cg_tol": hg.cg_tol, "cg_maxiter": hg.cg_maxiter, "damping": hg.damping,
                "neumann_alpha": hg.neumann_alpha, "neumann_steps": hg.neumann_steps,
                **overrides}
    lower = bilevel.make_lower_level(energy_fn, max_iter=ll.max_iter, tol=ll.tol,
                                     memory_size=ll.memory_size, solve=solve, **settings)
    one = jax.grad(lambda x: metrics.param_distance(theta_star, lower(theta_star, x, labels)[0]))
    hypergrad = jax.jit(lambda xs: jax.lax.map(one, xs))
    seconds = _median_time(lambda: hypergrad(batch), repeats) / batch.shape[0]
    grads = np.asarray(hypergrad(batch)).reshape(batch.shape[0], -1)
    if reference is None:
      reference = grads
    norms = np.linalg.norm(grads, axis=1) * np.linalg.norm(reference, axis=1)
    cos = np.sum(grads * reference, 1) / norms
    rel = np.linalg.norm(grads - reference, axis=1) / np.linalg.norm(reference, axis=1)
    rows.append((label, seconds, seconds - forward_seconds, cos, rel))
  return rows


def print_solver_tables(configs: dict, repeats: int) -> None:
  """Section 2 as one Markdown table over the victims in ``configs`` (name -> config)."""
  previous = jax.config.jax_enable_x64
  jax.config.update("jax_enable_x64", True)
  print("\n== hypergradient solves, float64, lower level started at θ*, iterates: noise, "
        f"partition, 50/50 mix (backend {jax.default_backend()}) ==\n")
  print("| victim | solve | ms / hypergradient | of which backward | cosine to reference "
        "(noise, partition, mix) | relative error (noise, partition, mix) |")
  print("|---|---|---:|---:|---|---|")
  for name, config in configs.items():
    v, hg = config.victim, config.attack.hypergradient
    size = (f"width {v.width}, {v.activation}, " if v.arch == "one_hidden" else "") + (
        f"n = {2 * config.data.n_per_class}")
    for label, seconds, backward, cos, rel in solver_table(config, repeats):
      if label.startswith("cg (config)"):
        label = f"cg (tol {hg.cg_tol:g}, maxiter {hg.cg_maxiter})"
      elif label.startswith("neumann"):
        alpha = "1/(1.1 λ_max)" if hg.neumann_alpha == 0 else f"{hg.neumann_alpha:g}"
        label = f"neumann (K = {hg.neumann_steps}, α = {alpha})"
      print(f"| {v.arch} ({size}) | {label} | {1e3 * seconds:.1f} | {1e3 * backward:.1f} | "
            f"{', '.join(f'{c:.4f}' for c in cos)} | {', '.join(f'{r:.1e}' for r in rel)} |")
  jax.config.update("jax_enable_x64", previous)


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
  if "grid" in _SECTIONS.value:
    grid_section(_CONFIG.value)
  if "solvers" in _SECTIONS.value:
    print_solver_tables({"affine": _CONFIG.value,
                         "one_hidden": load_config(_ONE_HIDDEN_CONFIG.value)}, _REPEATS.value)


def grid_section(config):
  """Section 1, in the config's precision."""
  jax.config.update("jax_enable_x64", bool(config.float64))
  dtype = jnp.float64 if config.float64 else jnp.float32
  task, apply_fn, theta_star, report = trained_victim(config, dtype)
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

  def difference(result):
    """Largest |Δ| of the final images and largest relative |Δ| of l, against the loop."""
    state, step_metrics = result
    images = max(float(np.abs(state.images[i] - looped[i][0].images).max()) for i in range(g))
    loss = max(float(np.max(np.abs(step_metrics.upper_loss[i] - looped[i][1].upper_loss)
                            / np.maximum(np.abs(looped[i][1].upper_loss), 1e-12)))
               for i in range(g))
    return f"{images:.1e} / {loss:.1e}"

  print(f"\n== eq. 10 grid: {g} initialisations x {n} images, {steps} outer steps "
        f"(solve={config.attack.hypergradient.solve}, backend={jax.default_backend()}) ==")
  print(f"{'':44s} {'seconds':>9s} {'loop / this':>12s} {'max |Δ images| / rel. |Δ l| vs loop':>36s}")
  for name, seconds, result in (
      (f"jax.vmap over all {g} grid points", t_vmap, vmapped(states)),
      (f"one computation, vmapped batches of {batch}", t_map, mapped(states)),
      ("Python loop over grid points", t_loop, None)):
    print(f"{name:44s} {seconds:9.3f} {t_loop / seconds:11.2f}x "
          f"{'(reference)' if result is None else difference(result):>36s}")

if __name__ == "__main__":
  app.run(main)
