"""Section: the eq. 10 grid with the branch-free Newton–CG lower level against L-BFGS.

L-BFGS's zoom line search branches (`lax.cond`); vmapped, a branch runs both sides for
every grid point, which is why the bilevel grid runs one point at a time on CPU (section
grid). `trdr.victim.solver.minimize_newton_cg` has no branch. Timed in ``repeats`` alternating
rounds (median, min–max), ``steps`` outer steps from every start of the config's grid:
L-BFGS and Newton–CG, each in a Python loop over the grid points and as one `jax.vmap`
over all of them (L-BFGS vmapped: section grid, ~50× the loop). Printed: the times, the
L-BFGS loop's time over each, and the largest difference of the final images and of l
from the L-BFGS loop's (in float32 the two solvers agree to the lower-level tolerance).
"""

import copy

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from benchmarks import common, grid
from trdr.attacks import ATTACKS
from trdr.experiment import loop


def run(config: ml_collections.ConfigDict, steps: int, repeats: int) -> None:
  """Prints the section for the bilevel ``config``, in the config's precision."""
  with common.x64(config.float64):
    dtype = jnp.float64 if config.float64 else jnp.float32
    config = copy.deepcopy(config)
    config.attack.lower_level.method = "lbfgs"
    target, lbfgs, x0, key, labels = common.bilevel_grid(config, dtype)
    newton = copy.deepcopy(config.attack)
    newton.lower_level.method = "newton_cg"
    attacks = {"L-BFGS": lbfgs, "Newton–CG": ATTACKS["bilevel"](
        target, newton, labels, key=key, box=(0.0, 1.0))}
    g, n = x0.shape[:2]
    calls = {}
    for name, attack in attacks.items():
      states = jax.vmap(lambda x, a=attack: a.init(x, key))(x0)
      single = jax.jit(lambda x, a=attack: loop.run_steps(a.step, a.init(x, key), steps))
      calls[(name, "loop")] = lambda f=single: [f(x0[i]) for i in range(g)]
      if name != "L-BFGS":
        vmapped = jax.jit(lambda s, a=attack: loop.run_grid(  # laid out as a run would
            a.step, s, steps, g, loop.grid_layout(g)[0]))
        calls[(name, "vmap")] = lambda f=vmapped, s=states: f(s)
    times = common.timed_alternately(calls, repeats)
    reference = calls[("L-BFGS", "loop")]()
    t_ref = float(np.median(times[("L-BFGS", "loop")]))
    print(f"\n== eq. 10 grid, lower level L-BFGS vs Newton–CG (cg_iters "
          f"{newton.lower_level.cg_iters}): {g} initialisations x {n} images, {steps} outer "
          f"steps, tol {config.attack.lower_level.tol:g} "
          f"(backend={jax.default_backend()}) ==")
    print(f"{'':44s} {'median s':>9s} {'min–max s':>13s} {'L-BFGS loop / this':>19s} "
          f"{'max |Δ images| / rel. |Δ l|':>28s}")
    for (name, way), seconds in times.items():
      if (name, way) == ("L-BFGS", "loop"):
        delta = "(reference)"
      else:
        result = calls[(name, way)]()
        delta = grid.difference(_stacked(result) if way == "loop" else result, reference)
      how = "Python loop over grid points" if way == "loop" else f"jax.vmap over all {g}"
      t = float(np.median(seconds))
      print(f"{name + ', ' + how:44s} {t:9.3f} {min(seconds):6.2f}–{max(seconds):<6.2f} "
            f"{t_ref / t:18.2f}x {delta:>28s}")
    print(f"(median of {repeats} alternating rounds)")


def _stacked(results):
  """A loop's per-point (state, metrics) as one grid-shaped (state, metrics)."""
  return jax.tree.map(lambda *leaves: jnp.stack(leaves), *results)
