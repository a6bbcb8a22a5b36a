"""Section: Table 1's tolerance sweep of ||θ* − θ(x)||², as trdr ran it before and now.

Runkel et al.'s Table 1 re-solves θ(x) from θ0 ~ U(0, 1); trdr sweeps the lower-level
tolerance t over `trdr.configs.paper_figures.TABLE1_TOLERANCES`. "loop": the definition,
one L-BFGS re-solve per tolerance in a Python loop; "vmapped": the same re-solves vmapped
over the tolerances (how trdr once computed the table: the batch runs in lockstep until the
tightest has finished, and batching changes float32 rounding, which L-BFGS's line search
amplifies); "one run": `trdr.victim.solver.observe_at_tolerances`, one re-solve to the
tightest tolerance read where each would have stopped (what
`trdr.evaluation.evaluate.param_distances` does). For each victim config, on its training
images (the ground-truth start), in alternating rounds (median, min–max), with the largest
relative difference of each to the loop.
"""

import functools

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from benchmarks import common
from trdr import models, victim
from trdr.attacks import bilevel
from trdr.configs.paper_figures import TABLE1_TOLERANCES
from trdr.victim import solver


def run(configs: list[ml_collections.ConfigDict], repeats: int) -> None:
  """Prints the section as one Markdown table over the victim ``configs``."""
  print(f"\n== Table 1's re-solves from θ0 ~ U(0, 1), tolerances {TABLE1_TOLERANCES} ==\n")
  print("| victim | loop s | vmapped s | one run s | loop / one run | vmapped / one run | "
        "max rel. |Δ| to the loop: vmapped, one run |")
  print("|---|---:|---:|---:|---:|---:|---|")
  for config in configs:
    with common.x64(config.float64):
      print(_row(config, repeats))
  print(f"(seconds: median (min–max) of {repeats} alternating rounds; re-solves to max_iter "
        f"{configs[0].eval.lower_level_max_iter})")


def _row(config: ml_collections.ConfigDict, repeats: int) -> str:
  task, target = common.trained_victim(config)
  energy_fn = functools.partial(victim.energy, apply_fn=target.apply,
                                weight_decay=target.config.weight_decay)
  theta0 = models.uniform_params(jax.random.key(config.seed), target.params)
  dtype = jax.tree.leaves(target.params)[0].dtype
  settings = dict(max_iter=config.eval.lower_level_max_iter,
                  memory_size=config.victim.memory_size)
  distance = lambda theta: bilevel.param_distance(target.params, theta)
  x, labels = (jnp.asarray(a, dtype) for a in (task.train_images, task.train_labels))

  @jax.jit
  def re_solve(x, labels, t):  # the definition: one re-solve stopped at ||∇θE|| < t
    return distance(victim.minimize_energy(lambda p: energy_fn(p, x, labels), theta0, tol=t,
                                           **settings)[0])

  vmapped = jax.jit(lambda x, labels: jax.vmap(lambda t: re_solve(x, labels, t))(
      jnp.asarray(TABLE1_TOLERANCES, dtype)))
  one_run = jax.jit(lambda x, labels: solver.observe_at_tolerances(
      lambda p: energy_fn(p, x, labels), theta0, distance, tols=TABLE1_TOLERANCES,
      **settings))
  calls = {"loop": lambda: jnp.stack([re_solve(x, labels, jnp.asarray(t, dtype))
                                      for t in TABLE1_TOLERANCES]),
           "vmapped": lambda: vmapped(x, labels), "one run": lambda: one_run(x, labels)}
  times = common.timed_alternately(calls, repeats)
  loop, *others = (np.asarray(call(), np.float64) for call in calls.values())
  med = {k: float(np.median(v)) for k, v in times.items()}
  cells = [f"{med[k]:.2f} ({min(times[k]):.2f}–{max(times[k]):.2f})" for k in calls]
  errors = ", ".join(f"{np.max(np.abs(o - loop) / np.abs(loop)):.1e}" for o in others)
  label = f"{config.victim.arch}, n = {2 * config.data.n_per_class}, {np.dtype(dtype).name}"
  return (f"| {label} | {' | '.join(cells)} | {med['loop'] / med['one run']:.2f}x | "
          f"{med['vmapped'] / med['one run']:.2f}x | {errors} |")
