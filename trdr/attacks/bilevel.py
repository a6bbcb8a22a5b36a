"""Bilevel reconstruction attack (Runkel et al. 2024, eq. 2 and 7).

Upper level:  min_x  l(x) = ||θ* − θ(x)||²   over images x (labels y known),
lower level:  θ(x) = argmin_θ E(x, y; θ)      (`trdr.victim.energy`, solved with optax L-BFGS).

The hypergradient follows from implicit differentiation of the lower-level optimality
condition ∇θE(θ(x), x) = 0:

    ∇x l = −(∂x ∇θE)ᵀ H⁻¹ ∇θ l,   H = ∇²θθ E(θ(x), x),

computed by `jaxopt.implicit_diff.root_vjp` with jax.grad(E) as optimality function and a
selectable linear solve for H⁻¹v:
  * ``"cg"``: conjugate gradient on exact Hessian-vector products (jaxopt.linear_solve);
  * ``"quasi_newton"``: the L-BFGS inverse-Hessian approximation built from the lower-level
    solver's own curvature pairs — the H^{k+1} of eq. 7 (Lorraine et al. 2020 use the
    same idea) — at the cost of a two-loop recursion, no Hessian-vector product;
  * ``"neumann"``: the truncated Neumann series H⁻¹b ≈ α Σ_{j<K} (I − αH)^j b of Lorraine
    et al. 2020 (the paper's reference [15]), K Hessian-vector products.

For a non-convex lower level (the one-hidden network, eq. 9) H need not be invertible;
the weight decay in E keeps it so at a strict local minimum, and ``damping`` μ ≥ 0
replaces H by H + μI in every solve (see `make_lower_level`; μ = 0 is the exact
hypergradient).

`jaxopt.implicit_diff.custom_root` hands its ``solve`` only ``(matvec, b)``, so it cannot
reach the curvature pairs the solver produced; the small `jax.custom_vjp` below is what
``custom_root`` builds, with the solver state kept as a residual for the solve.
(tests/test_bilevel.py checks it against ``custom_root(jax.grad(E), solve=solve_cg)``.)
"""

import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import optax
import optax.tree
from jaxopt import implicit_diff, linear_solve

from trdr import metrics, models, sharding, victim

Params = Any


def quasi_newton_inverse_hessian(memory: optax.ScaleByLBFGSState, v: Params) -> Params:
  """H⁻¹v ≈ L-BFGS two-loop recursion over the solver's curvature pairs (eq. 7's H^{k+1}).

  Nocedal & Wright, Algorithm 7.4, with the initial scaling γ = sᵀy / yᵀy of the latest
  pair. Empty memory slots (weight 0) leave the vector unchanged; with no pair at all the
  approximation is the identity.

  Args:
    memory: optax ``ScaleByLBFGSState`` after the lower-level solve. Its ring buffer holds
      the pair written by update k at slot (k − 1) mod m, and ``count`` updates were made.
    v: pytree like θ.
  Returns:
    Pytree like ``v``.
  """
  s_mem, y_mem, rho = memory.diff_params_memory, memory.diff_updates_memory, memory.weights_memory
  m = rho.shape[0]
  newest = (memory.count - 2) % m
  order = (memory.count - 1 + jnp.arange(m)) % m  # oldest ... newest
  pick = lambda tree, i: jax.tree.map(lambda leaf: leaf[i], tree)

  def backward(vec, i):
    alpha = rho[i] * optax.tree.vdot(pick(s_mem, i), vec)
    return optax.tree.add_scale(vec, -alpha, pick(y_mem, i)), alpha

  q, alphas = jax.lax.scan(backward, v, order, reverse=True)
  s_new, y_new = pick(s_mem, newest), pick(y_mem, newest)
  yy = optax.tree.vdot(y_new, y_new)
  gamma = jnp.where((memory.count > 1) & (yy > 0), optax.tree.vdot(s_new, y_new) / yy, 1.0)
  r = optax.tree.scale(gamma, q)

  def forward(vec, i_alpha):
    i, alpha = i_alpha
    beta = rho[i] * optax.tree.vdot(pick(y_mem, i), vec)
    return optax.tree.add_scale(vec, alpha - beta, pick(s_mem, i)), None

  r, _ = jax.lax.scan(forward, r, (order, alphas))
  return r


def damp_memory(memory: optax.ScaleByLBFGSState, damping) -> optax.ScaleByLBFGSState:
  """Curvature pairs of H + μI: every y_i ← y_i + μ s_i and ρ_i = 1 / (s_iᵀ y_i).

  The pairs (s_i, y_i) of the lower-level L-BFGS satisfy y_i ≈ H s_i, so (s_i, y_i + μ s_i)
  are pairs of H + μI and the two-loop recursion over them approximates (H + μI)⁻¹ — the
  quasi-Newton counterpart of damping the Hessian-vector product. Empty slots (ρ_i = 0)
  stay empty. μ = 0 returns the pairs unchanged.

  Args:
    memory: optax ``ScaleByLBFGSState``.
    damping: μ ≥ 0, float[].
  Returns:
    ``memory`` with ``diff_updates_memory`` and ``weights_memory`` replaced.
  """
  s_mem, y_mem, rho = memory.diff_params_memory, memory.diff_updates_memory, memory.weights_memory
  y_mem = jax.tree.map(lambda y, s: y + damping * s, y_mem, s_mem)
  sy = sum(jnp.sum(s * y, axis=tuple(range(1, s.ndim)))
           for s, y in zip(jax.tree.leaves(s_mem), jax.tree.leaves(y_mem)))
  rho = jnp.where(rho != 0, 1.0 / jnp.where(sy != 0, sy, 1.0), 0.0).astype(rho.dtype)
  return memory._replace(diff_updates_memory=y_mem, weights_memory=rho)


def neumann_inverse(matvec: Callable[[Params], Params], b: Params, *, alpha, steps: int
                    ) -> Params:
  """H⁻¹b ≈ α Σ_{j=0}^{K−1} (I − αH)^j b, the truncated Neumann series (Lorraine et al.
  2020, eq. 9; Runkel et al.'s reference [15]).

  The series converges to H⁻¹b for symmetric positive definite H when 0 < α < 2/λ_max(H);
  after K terms the error is (I − αH)^K H⁻¹b, i.e. it shrinks like (1 − αλ_min)^K, so an
  ill-conditioned H needs K ≫ λ_max/λ_min terms. Uses K − 1 products with H.

  Args:
    matvec: u -> Hu on pytrees like ``b``.
    b: pytree.
    alpha: step α > 0, float[].
    steps: K ≥ 1 terms.
  Returns:
    Pytree like ``b``.
  Raises:
    ValueError: steps < 1.
  """
  if steps < 1:
    raise ValueError(f"the Neumann series needs at least 1 term, got steps={steps}")

  def term(_, carry):
    power, total = carry  # (I − αH)^j b and the partial sum up to j
    power = optax.tree.add_scale(power, -alpha, matvec(power))
    return power, optax.tree.add(total, power)

  _, total = jax.lax.fori_loop(1, steps, term, (b, b))
  return optax.tree.scale(alpha, total)


def largest_eigenvalue(matvec: Callable[[Params], Params], v0: Params, *, steps: int = 20):
  """λ_max of a symmetric positive semi-definite operator by power iteration, float[].

  The Rayleigh quotient after ``steps`` products from ``v0``; it approaches λ_max from
  below, so callers wanting a safe step 1/λ_max should add a margin.
  """
  def body(_, v):
    w = matvec(v)
    return optax.tree.scale(1.0 / (optax.tree.norm(w) + 1e-30), w)

  v = jax.lax.fori_loop(0, steps, body, optax.tree.scale(1.0 / optax.tree.norm(v0), v0))
  return optax.tree.vdot(v, matvec(v))


def _solve_cg(matvec, b, memory, *, tol, maxiter, **unused):
  del memory, unused
  return linear_solve.solve_cg(matvec, b, tol=tol, maxiter=maxiter)


def _solve_quasi_newton(matvec, b, memory, **unused):
  del matvec, unused
  return quasi_newton_inverse_hessian(memory, b)


def _solve_neumann(matvec, b, memory, *, neumann_alpha, neumann_steps, **unused):
  """``neumann_alpha`` > 0 is α; 0 sets α = 1 / (1.1 λ_max) from 20 power iterations."""
  del memory, unused
  if neumann_alpha > 0:
    alpha = neumann_alpha
  else:
    alpha = 1.0 / (1.1 * largest_eigenvalue(matvec, b))
  return neumann_inverse(matvec, b, alpha=alpha, steps=neumann_steps)


# solve(matvec, b, memory, **settings) -> H⁻¹ b, where matvec(u) = Hu and memory the L-BFGS
# pairs; settings are cg_tol -> tol, cg_maxiter -> maxiter, neumann_alpha, neumann_steps
# (every solve ignores the settings of the others).
LINEAR_SOLVES: dict[str, Callable] = {"cg": _solve_cg, "quasi_newton": _solve_quasi_newton,
                                      "neumann": _solve_neumann}


class LowerLevelInfo(NamedTuple):
  """How well the lower level converged: ||∇θE|| at θ(x) (float[]), iterations (int32[])."""
  grad_norm: jax.Array
  num_iter: jax.Array


def make_lower_level(energy_fn: Callable, *, max_iter: int, tol: float, memory_size: int,
                     solve: str, cg_tol: float = 1e-10, cg_maxiter: int | None = None,
                     damping: float = 0.0, neumann_alpha: float = 0.0,
                     neumann_steps: int = 100):
  """θ(x) = argmin_θ E(θ, x, y) as a function differentiable in (x, y) by implicit diff.

  The backward pass solves (H + μI) v = ∇θ l with H = ∇²θθ E(θ(x), x) and returns
  −(∂x ∇θE)ᵀ v. With μ = ``damping`` > 0 this is the damped (biased, better-conditioned)
  hypergradient: CG and Neumann use the product (H + μI)u = Hu + μu, quasi-Newton the
  damped curvature pairs of `damp_memory`.

  Args:
    energy_fn: E(params, images, labels) -> float[].
    max_iter, tol, memory_size: lower-level L-BFGS settings (`trdr.victim.minimize_energy`).
    solve: name in `LINEAR_SOLVES` for the hypergradient's linear system.
    cg_tol, cg_maxiter: conjugate-gradient settings (``solve="cg"``).
    damping: μ ≥ 0 added to the Hessian in every solve.
    neumann_alpha, neumann_steps: α (0: 1/(1.1 λ_max) by power iteration) and number of
      terms K of the Neumann series (``solve="neumann"``).
  Returns:
    ``solution(theta_init, images, labels) -> (theta, LowerLevelInfo)``; differentiating
    ``theta`` with respect to images or labels applies the implicit function theorem
    (the result does not depend on theta_init, whose cotangent is zero).
  Raises:
    ValueError: unknown ``solve``, negative damping or neumann_alpha, neumann_steps < 1.
  """
  if solve not in LINEAR_SOLVES:
    raise ValueError(f"unknown hypergradient solve {solve!r}; known: {sorted(LINEAR_SOLVES)}")
  if damping < 0 or neumann_alpha < 0 or neumann_steps < 1:
    raise ValueError(f"need damping >= 0, neumann_alpha >= 0 and neumann_steps >= 1; got "
                     f"{damping}, {neumann_alpha}, {neumann_steps}")
  solve_fn = functools.partial(LINEAR_SOLVES[solve], tol=cg_tol, maxiter=cg_maxiter,
                               neumann_alpha=neumann_alpha, neumann_steps=neumann_steps)
  optimality_fn = jax.grad(energy_fn)  # ∇θE(θ, x, y) = 0 at the lower-level solution

  def forward(theta_init, images, labels):
    fun = lambda p: energy_fn(p, images, labels)
    theta, info = victim.minimize_energy(fun, theta_init, max_iter=max_iter, tol=tol,
                                         memory_size=memory_size)
    return (theta, LowerLevelInfo(info.grad_norm, info.num_iter)), info.memory

  def damped(matvec):
    if damping == 0:
      return matvec
    return lambda u: optax.tree.add_scale(matvec(u), damping, u)

  def damped_memory(memory):
    return memory if damping == 0 else damp_memory(memory, damping)

  @jax.custom_vjp
  def solution(theta_init, images, labels):
    return forward(theta_init, images, labels)[0]

  def solution_fwd(theta_init, images, labels):
    out, memory = forward(theta_init, images, labels)
    return out, (out[0], images, labels, memory)

  def solution_bwd(residuals, cotangent):
    theta, images, labels, memory = residuals
    d_theta = cotangent[0]
    d_images, d_labels = implicit_diff.root_vjp(
        optimality_fn, theta, (images, labels), d_theta,
        solve=lambda matvec, b: solve_fn(damped(matvec), b, damped_memory(memory)))
    return optax.tree.zeros_like(theta), d_images, d_labels

  solution.defvjp(solution_fwd, solution_bwd)
  return solution


class AttackState(NamedTuple):
  """State of the outer loop for one initialisation.

  Attributes:
    images: float[n, H, W, C] current reconstruction x^k.
    opt_state: optax state of the outer optimiser.
    theta: θ(x^k) from the latest lower-level solve (the "previous" warm start).
    step: int32[] outer steps done.
  """
  images: jax.Array
  opt_state: Any
  theta: Params
  step: jax.Array


class StepMetrics(NamedTuple):
  """Per outer step: upper loss l (float[]), and the lower level's convergence."""
  upper_loss: jax.Array
  grad_norm: jax.Array
  num_iter: jax.Array


LOWER_LEVEL_STARTS = ("theta_star", "previous", "random")


LR_SCHEDULES = ("constant", "cosine")


def make_optimizer(attack_config: ml_collections.ConfigDict) -> optax.GradientTransformation:
  """Outer optimiser: ``"sgd"`` is eq. 7's x ← x − η∇x l; ``"adam"`` is optax Adam.

  The step size η is ``attack_config.lr``, constant or decayed by a cosine to 1% of it
  over ``attack_config.steps`` outer steps (``lr_schedule``).
  """
  name, schedule = attack_config.optimizer, attack_config.lr_schedule
  if schedule == "constant":
    lr = attack_config.lr
  elif schedule == "cosine":
    lr = optax.cosine_decay_schedule(attack_config.lr, attack_config.steps, alpha=0.01)
  else:
    raise ValueError(f"unknown lr_schedule {schedule!r}; known: {list(LR_SCHEDULES)}")
  if name == "sgd":
    return optax.sgd(lr)
  if name == "adam":
    return optax.adam(lr)
  raise ValueError(f"unknown outer optimizer {name!r}; known: ['adam', 'sgd']")


class BilevelAttack(NamedTuple):
  """The attack bound to one victim: pure functions over `AttackState` (vmappable)."""
  init: Callable[[jax.Array], AttackState]
  step: Callable[[AttackState], tuple[AttackState, StepMetrics]]
  lower_level: Callable
  upper_loss: Callable


def make_attack(apply_fn, theta_star: Params, labels: jax.Array,
                victim_config: ml_collections.ConfigDict,
                attack_config: ml_collections.ConfigDict, key: jax.Array,
                box: tuple[Any, Any] | None = (0.0, 1.0)) -> BilevelAttack:
  """Builds the bilevel attack against θ* (eq. 2, 7).

  Args:
    apply_fn: (params, images) -> logits float[n].
    theta_star: the victim's trained parameters θ*.
    labels: float[n] in {−1, +1}, the known labels of the unknown images.
    victim_config: weight_decay (the E that θ* minimises).
    attack_config: lower_level.{start, max_iter, tol, memory_size},
      hypergradient.{solve, cg_tol, cg_maxiter, and optionally damping (default 0),
      neumann_alpha (0), neumann_steps (100)}, optimizer, lr, project.
    key: PRNG key for the ``"random"`` lower-level start (folded with the step number).
    box: (low, high) pixel bounds for the projection, broadcastable to the images.
  Raises:
    ValueError: unknown lower-level start, solve or optimizer.
  """
  ll = attack_config.lower_level
  if ll.start not in LOWER_LEVEL_STARTS:
    raise ValueError(f"unknown lower-level start {ll.start!r}; known: {list(LOWER_LEVEL_STARTS)}")
  hg = attack_config.hypergradient
  energy_fn = functools.partial(victim.energy, apply_fn=apply_fn,
                                weight_decay=victim_config.weight_decay)
  lower_level = make_lower_level(energy_fn, max_iter=ll.max_iter, tol=ll.tol,
                                 memory_size=ll.memory_size, solve=hg.solve,
                                 cg_tol=hg.cg_tol, cg_maxiter=hg.cg_maxiter,
                                 damping=hg.get("damping", 0.0),
                                 neumann_alpha=hg.get("neumann_alpha", 0.0),
                                 neumann_steps=hg.get("neumann_steps", 100))
  optimizer = make_optimizer(attack_config)

  def upper_loss(images, theta_init):
    theta, info = lower_level(theta_init, images, labels)
    return metrics.param_distance(theta_star, theta), (theta, info)

  def init(images):
    return AttackState(images, optimizer.init(images), theta_star,
                       jnp.asarray(0, jnp.int32))

  def start_point(state):
    if ll.start == "theta_star":
      return theta_star
    if ll.start == "previous":
      return state.theta
    return models.uniform_params(jax.random.fold_in(key, state.step), theta_star)

  def step(state):
    (loss, (theta, info)), grad = jax.value_and_grad(upper_loss, has_aux=True)(
        state.images, start_point(state))
    updates, opt_state = optimizer.update(grad, state.opt_state, state.images)
    images = optax.apply_updates(state.images, updates)
    if attack_config.project:
      images = jnp.clip(images, box[0], box[1])
    new_state = AttackState(images, opt_state, theta, state.step + 1)
    return new_state, StepMetrics(loss, info.grad_norm, info.num_iter)

  return BilevelAttack(init, step, lower_level, upper_loss)


def run_steps(step_fn, state: AttackState, num_steps: int):
  """``num_steps`` outer steps under `lax.scan`; returns (state, StepMetrics per step)."""
  return jax.lax.scan(lambda s, _: step_fn(s), state, None, length=num_steps)


def grid_batch_size(requested: int, grid_size: int) -> int:
  """How many grid points one vmapped batch holds, on each device.

  The grid is sharded over all local devices first (`trdr.sharding.grid_map`: ⌈G/k⌉
  points on each of k devices), and every device maps over its share in batches of this
  size; a batch size ≥ a device's share vmaps that share at once.

  ``requested`` > 0 is used as given (capped at the grid size). 0 chooses by backend: the
  whole share in one vmap on GPU/TPU; one point at a time on CPU, where the vmapped
  lower-level L-BFGS (its line search's nested loops and branches run for every member,
  and the grid's data leaves the cache) is slower than a sequential map — see
  experiments/benchmark.py for the measured ratio.

  Raises:
    ValueError: ``requested`` < 0.
  """
  if requested < 0:
    raise ValueError(f"grid_batch_size must be >= 0 (0: by backend), got {requested}")
  if requested == 0:
    requested = 1 if jax.default_backend() == "cpu" else grid_size
  return min(requested, grid_size)


def run_grid(step_fn, states: AttackState, num_steps: int, batch_size: int,
             devices=None):
  """`run_steps` for every grid point of ``states`` (leading axis G) in ONE computation.

  The grid is sharded over ``devices`` (default: all local devices) and, on each device,
  vmapped in batches of ``batch_size`` (``jax.lax.map``); see `trdr.sharding.grid_map`.
  On one device ``batch_size >= G`` is a single `jax.vmap` over the whole grid. Grid
  points are independent, so results do not depend on the sharding, and on the batching
  only through the solvers' tolerances.

  Args:
    step_fn: one outer step, `AttackState` -> (AttackState, StepMetrics), unbatched.
    states: `AttackState` with a leading grid axis G on every leaf.
    num_steps: outer steps per grid point (static).
    batch_size: grid points per vmapped batch on each device, ≥ 1.
    devices: sequence of `jax.Device`; None: `jax.local_devices()`.
  Returns:
    (AttackState [G, ...], StepMetrics [G, num_steps]).
  """
  run = lambda s: run_steps(step_fn, s, num_steps)
  return sharding.grid_map(run, states, batch_size, devices)
