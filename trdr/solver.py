"""The L-BFGS solver of E: the victim's training and the bilevel attack's lower level.

Runkel et al. 2024 minimise E(x, y; θ) over θ both to train the victim (θ*) and, inside
the attack, to compute θ(x) = argmin_θ E (eq. 2's lower level). `minimize_energy` is that
solver: optax L-BFGS with its zoom line search, under `lax.while_loop`.
"""

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax
import optax.tree

Params = Any
EnergyFn = Callable[[Params], jax.Array]


class MinimizeInfo(NamedTuple):
  """Diagnostics of one L-BFGS solve.

  Attributes:
    grad_norm: float[] ||∇θE|| at the returned θ.
    num_iter: int32[] iterations taken.
    memory: the L-BFGS curvature pairs (optax ``ScaleByLBFGSState``); `count` is the
      number of updates made, pairs sit in a ring buffer (see `trdr.attacks.bilevel`).
  """
  grad_norm: jax.Array
  num_iter: jax.Array
  memory: optax.ScaleByLBFGSState


def minimize_energy(fun: EnergyFn, params0: Params, *, max_iter: int, tol: float,
                    memory_size: int = 10) -> tuple[Params, MinimizeInfo]:
  """Minimises a smooth function with optax L-BFGS (zoom line search) to ||∇f|| < tol.

  A `lax.while_loop`, so it is jittable and vmappable (a vmapped batch runs until every
  member has converged or reached ``max_iter``).

  Args:
    fun: params -> float[] scalar.
    params0: starting point, pytree of float arrays.
    max_iter: most iterations.
    tol: stop when the Euclidean norm of the gradient over all leaves is below this. A
      NaN norm (a diverged solve) also stops the loop, but is never below ``tol``: the
      callers' convergence tests (``grad_norm < tol``) count it as not converged.
    memory_size: number of L-BFGS curvature pairs kept.
  Returns:
    (params, MinimizeInfo).
  """
  params, state, grad_norm, num_iter, _ = _lbfgs(fun, params0, max_iter=max_iter, tol=tol,
                                                 memory_size=memory_size)
  return params, MinimizeInfo(grad_norm, num_iter, state[0])


def observe_at_tolerances(fun: EnergyFn, params0: Params, observe: Callable[[Params], jax.Array],
                          *, tols, max_iter: int, memory_size: int = 10) -> jax.Array:
  """``observe(θ_t)`` for each tolerance t, θ_t where ``minimize_energy(tol=t)`` stops.

  A tolerance changes only where L-BFGS stops, not its iterates, so one run to the
  smallest tolerance passes through every θ_t: the first iterate (θ0 included) with
  ||∇f|| < t, or the last one if the run ends first (``max_iter`` or a NaN gradient
  norm), exactly where a run with that ``tol`` would have stopped. One run instead of
  len(tols) (vmapped, those ran in lockstep until the tightest had finished).

  Args:
    fun, params0, max_iter, memory_size: as `minimize_energy`.
    observe: params -> float[] (e.g. ||θ* − θ||²), evaluated at each iterate.
    tols: float[T] tolerances, any order.
  Returns:
    float[T], in the order of ``tols``.
  """
  # In the gradient norm's dtype, as minimize_energy compares its float tol.
  tols = jnp.asarray(tols, jax.tree.leaves(params0)[0].dtype)
  # (observations, met): a NaN observation is a value (a diverged θ), not "unset".
  unset = (jnp.zeros(tols.shape, jax.eval_shape(observe, params0).dtype),
           jnp.zeros(tols.shape, bool))

  def record(seen, params, grad_norm):
    values, met = seen
    now = ~met & (grad_norm < tols)  # tolerances met for the first time at this iterate
    return jnp.where(now, observe(params), values), met | now

  params, _, _, _, (values, met) = _lbfgs(fun, params0, max_iter=max_iter,
                                          tol=jnp.min(tols), memory_size=memory_size,
                                          record=record, seen=unset)
  # Tolerances the run never met stop where it stopped.
  return jnp.where(met, values, observe(params))


def _lbfgs(fun, params0, *, max_iter, tol, memory_size, record=None, seen=()):
  """The L-BFGS loop of `minimize_energy`; ``record(seen, params, grad_norm) -> seen``
  (if given) is applied to θ0 and to every iterate. Returns (params, optax state,
  grad_norm, num_iter, seen)."""
  opt = optax.lbfgs(memory_size=memory_size)
  value_and_grad = optax.value_and_grad_from_state(fun)
  keep = record or (lambda seen, params, grad_norm: seen)

  def step(carry):
    params, state, _, i, seen = carry
    value, grad = value_and_grad(params, state=state)
    updates, state = opt.update(grad, state, params, value=value, grad=grad, value_fn=fun)
    params = optax.apply_updates(params, updates)
    # The line search caches the gradient at the new point: no extra evaluation.
    grad_norm = optax.tree.norm(optax.tree.get(state, "grad"))
    return params, state, grad_norm, i + 1, keep(seen, params, grad_norm)

  def not_done(carry):
    _, _, grad_norm, i, _ = carry
    return (i < max_iter) & (grad_norm >= tol)

  grad_norm0 = optax.tree.norm(jax.grad(fun)(params0))
  init = (params0, opt.init(params0), grad_norm0, jnp.asarray(0, jnp.int32),
          keep(seen, params0, grad_norm0))
  return jax.lax.while_loop(not_done, step, init)
