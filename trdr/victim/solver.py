"""The solvers of E: the victim's training and the bilevel attack's lower level.

Runkel et al. 2024 minimise E(x, y; θ) over θ both to train the victim (θ*) and, inside
the attack, to compute θ(x) = argmin_θ E (eq. 2's lower level). `minimize_energy` is that
solver: optax L-BFGS with its zoom line search, under `lax.while_loop`;
`observe_at_tolerances` reads one of its runs at several tolerances (Table 1).
`minimize_newton_cg` solves the strongly convex lower level by truncated Newton–CG
(``lower_level.method = "newton_cg"``), without branches: the main job's lower level
(faster there than L-BFGS: `make benchmark`, sections main_job and lower_level).
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


# Newton–CG's step sizes 1, 1/2, …, 2^-(BACKTRACKS-1), all evaluated at once.
BACKTRACKS = 12
ARMIJO = 1e-4  # sufficient decrease: f(θ + αd) ≤ f(θ) + ARMIJO α ∇fᵀd


def minimize_newton_cg(fun: EnergyFn, params0: Params, *, max_iter: int, tol: float,
                       cg_iters: int = 100) -> tuple[Params, jax.Array, jax.Array]:
  """Minimises a smooth function by truncated Newton–CG to ||∇f|| < tol, branch-free.

  The bilevel attack's lower level for a batched grid (`jax.vmap`): `minimize_energy`'s
  zoom line search branches (`lax.cond`), and a vmapped branch runs both sides for every
  member. Here every iteration is the same program for every member:
    * the Newton direction d ≈ −H⁻¹∇f by at most ``cg_iters`` conjugate-gradient steps
      on Hessian-vector products (`jax.jvp` of `jax.grad`), until the residual is below
      min(1/2, √||∇f||)·||∇f|| (the forcing term of inexact Newton: superlinear near the
      minimum) or the curvature pᵀHp ≤ 0 (then d is the CG iterate so far, or −∇f if
      there is none: a descent direction either way). Vmapped, a batch takes as many
      steps as its slowest member, the others masked;
    * the step size: ``f`` at θ + 2⁻ᵏd for k < `BACKTRACKS`, vmapped, and the largest
      that meets the Armijo condition; where none does, the full step if it makes
      ||∇f|| smaller (near the minimum the decrease in f can be below f's own rounding,
      e.g. in float32), else no step.
  Converges for a strongly convex f (the affine victim with weight decay; Nocedal &
  Wright, Thm. 7.2). On a non-convex f it can stop early: where no step size meets the
  Armijo condition (found: the one-hidden victim's E from θ0 ~ U(0, 1)) it stops with
  ||∇f|| ≥ tol, which callers count as not converged.

  Args:
    fun: params -> float[] scalar.
    params0: the starting point, a pytree of float arrays.
    max_iter: most Newton iterations (≥ 1).
    tol: stop when the Euclidean norm of ∇f over all leaves is below it (a NaN norm
      stops too, and is never below it).
    cg_iters: the most conjugate-gradient steps per Newton iteration (≥ 1).
  Returns:
    (params, grad_norm float[] at them, num_iter int32[]).
  Raises:
    ValueError: max_iter < 1 or cg_iters < 1.
  """
  if max_iter < 1 or cg_iters < 1:
    raise ValueError(f"need max_iter >= 1 and cg_iters >= 1, got {max_iter} and {cg_iters}")
  grad_fn = jax.grad(fun)
  steps = 2.0 ** -jnp.arange(BACKTRACKS)

  def direction(params, grad, grad_norm):
    hvp = lambda v: jax.jvp(grad_fn, (params,), (v,))[1]
    forcing = jnp.minimum(0.5, jnp.sqrt(grad_norm)) * grad_norm

    def cg_step(carry):
      d, r, p, rr, stopped, i = carry
      hp = hvp(p)
      curvature = optax.tree.vdot(p, hp)
      stopped = stopped | (curvature <= 0) | (jnp.sqrt(rr) < forcing)
      alpha = jnp.where(stopped, 0.0, rr / jnp.where(stopped, 1.0, curvature))
      d = optax.tree.add_scale(d, alpha, p)
      r = optax.tree.add_scale(r, -alpha, hp)
      rr_new = optax.tree.norm(r, squared=True)
      beta = jnp.where(stopped, 0.0, rr_new / jnp.where(stopped, 1.0, rr))
      p = jax.tree.map(lambda r_, p_: jnp.where(stopped, p_, r_ + beta * p_), r, p)
      return d, r, p, jnp.where(stopped, rr, rr_new), stopped, i + 1

    r0 = optax.tree.scale(-1.0, grad)  # the residual of H d = −∇f at d = 0
    init = (optax.tree.zeros_like(grad), r0, r0, optax.tree.norm(r0, squared=True),
            jnp.asarray(False), 0)
    d = jax.lax.while_loop(lambda c: ~c[4] & (c[5] < cg_iters), cg_step, init)[0]
    none = optax.tree.norm(d) == 0  # negative curvature at once: steepest descent
    return jax.tree.map(lambda d_, r_: jnp.where(none, r_, d_), d, r0)

  def step(carry):
    params, value, grad, grad_norm, i = carry
    d = direction(params, grad, grad_norm)
    slope = optax.tree.vdot(grad, d)
    trial = jax.vmap(lambda a: fun(optax.tree.add_scale(params, a, d)))(steps)
    ok = trial <= value + ARMIJO * steps * slope  # NaN trials fail
    # Near the minimum the decrease a step buys can be below the rounding of f itself
    # (float32: |f| · 2⁻²⁴ ≈ 2e-8 for the affine victim's E ≈ 0.3, against ‖∇f‖²/λ_max
    # for ‖∇f‖ ~ 1e-3): then no step passes Armijo's test, although the Newton step is
    # good. There the merit is ‖∇f‖, which rounding does not hide: the full step is taken
    # when it makes the gradient smaller (near the minimum of a strongly convex f, by the
    # Newton step's quadratic convergence; ‖∇f‖ falls at every such step, so they cannot
    # cycle).
    full_grad = grad_fn(optax.tree.add_scale(params, 1.0, d))
    rescue = ~jnp.any(ok) & (optax.tree.norm(full_grad) < grad_norm)
    alpha = jnp.where(jnp.any(ok), steps[jnp.argmax(ok)], jnp.where(rescue, 1.0, 0.0))
    params = optax.tree.add_scale(params, alpha, d)
    value, grad = jax.value_and_grad(fun)(params)
    grad_norm = optax.tree.norm(grad)
    # No acceptable step: stop (a NaN norm ends the loop and counts as not converged).
    return params, value, grad, jnp.where(alpha > 0, grad_norm, jnp.nan), i + 1

  def not_done(carry):
    *_, grad_norm, i = carry
    return (i < max_iter) & (grad_norm >= tol)

  value, grad = jax.value_and_grad(fun)(params0)
  init = (params0, value, grad, optax.tree.norm(grad), jnp.asarray(0, jnp.int32))
  params, _, grad, _, num_iter = jax.lax.while_loop(not_done, step, init)
  return params, optax.tree.norm(grad), num_iter
