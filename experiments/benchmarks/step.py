"""Section: where one outer step of the bilevel attack spends its time.

One step of `trdr.attacks.bilevel` (eq. 7) at one grid point is: the lower-level solve
θ(x) = argmin_θ E(θ, x, y) from the previous step's θ (Newton–CG, the main job's), the
hypergradient ∇x l by the implicit function theorem (a linear solve with the Hessian of E
at θ(x), then a vector–Jacobian product with ∂x ∇θE), and the optimiser's update. This
section times, for a few grid points of ``config``, at the start and after ``warm_steps``
steps (the lower level then starts next to its solution), side by side in alternating
rounds (the fastest of each), each as its own compiled program on one grid point (as the
main job runs its grid, one point at a time per CPU device):

* "step": the whole outer step (`Attack.step`);
* "lower level": the forward solve alone;
* "l and ∇x l": the forward solve and the hypergradient (`jax.value_and_grad` of l);

so that the hypergradient's share is "l and ∇x l" − "lower level", and the update's
"step" − "l and ∇x l". The lower level's Newton iterations at that state are printed beside
them (the Newton–CG lower level is vmapped branch-free: every grid point runs
``lower_level.max_iter`` masked iterations unless all have stopped).
"""

import functools

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from benchmarks import common
from trdr import victim
from trdr.attacks import bilevel
from trdr.attacks import init as inits
from trdr.experiment import loop


def run(config: ml_collections.ConfigDict, repeats: int, warm_steps: int = 100) -> None:
  """Prints the section for the bilevel ``config`` (float32; its lower-level start must be
  "previous", the main job's)."""
  ll, hg = config.attack.lower_level, config.attack.hypergradient
  if ll.start != "previous":
    raise ValueError(f"the step section profiles the lower-level start 'previous' (the main "
                     f"job's), got {ll.start!r}")
  target, attack, x0, key, labels = common.bilevel_grid(config, jnp.float32)
  energy_fn = functools.partial(victim.energy, apply_fn=target.apply,
                                weight_decay=target.config.weight_decay)
  lower = bilevel.make_lower_level(  # as bilevel.build makes it
      energy_fn, max_iter=ll.max_iter, tol=ll.tol, memory_size=ll.memory_size,
      solve=hg.solve, cg_tol=hg.cg_tol, cg_maxiter=hg.cg_maxiter, damping=hg.damping,
      neumann_alpha=hg.neumann_alpha, neumann_steps=hg.neumann_steps, method=ll.method,
      cg_iters=ll.cg_iters)
  loss = lambda x, theta: bilevel.param_distance(target.params, lower(theta, x, labels)[0])
  step = jax.jit(attack.step)
  forward = jax.jit(lambda s: lower(s.theta, s.images, labels))
  value_and_grad = jax.jit(lambda s: jax.value_and_grad(loss)(s.images, s.theta))
  warm = jax.jit(lambda s: loop.run_steps(attack.step, s, warm_steps)[0])
  grid = inits.make_grid(config.init.lambda1, config.init.lambda2)
  g = x0.shape[0]
  rounds = max(repeats, 7)
  points = sorted({0, g // 2, g - 1})  # the noise start, the middle and the ground truth
  print(f"\n== one outer step of the bilevel attack ({ll.method} lower level to tol "
        f"{ll.tol:g}, max {ll.max_iter} iterations of {ll.cg_iters} CG steps; hypergradient "
        f"{hg.solve} to tol {hg.cg_tol:g}), one grid point of {x0.shape[1]} images, ms ==")
  print(f"{'(λ1, λ2), after':26s} {'Newton it.':>10s} {'step':>8s} {'lower level':>12s} "
        f"{'hypergradient':>14s} {'update':>8s}")
  for point in points:
    state = attack.init(x0[point], key)
    for done, s in ((0, state), (warm_steps, warm(state))):
      iters = int(forward(s)[1].num_iter)
      calls = {"step": lambda s=s: step(s), "lower level": lambda s=s: forward(s),
               "l and grad": lambda s=s: value_and_grad(s)}
      t = {k: 1e3 * float(np.min(v))  # fixed computations: load only slows them down
           for k, v in common.timed_alternately(calls, rounds).items()}
      backward, update = t["l and grad"] - t["lower level"], t["step"] - t["l and grad"]
      where = f"({grid.lambda1[point]:.2f}, {grid.lambda2[point]:.2f}), {done} steps"
      print(f"{where:26s} {iters:10d} {t['step']:8.1f} "
            f"{t['lower level']:7.1f} ({t['lower level'] / t['step']:3.0%}) "
            f"{backward:8.1f} ({backward / t['step']:3.0%}) {update:8.1f}")
  print(f"(fastest of {rounds} alternating rounds; one program per column, so the "
        "hypergradient and the update are differences of two programs' times, as exact as "
        "those; the shares are of the step's time)")
