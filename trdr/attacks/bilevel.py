"""Bilevel reconstruction attack (Runkel et al. 2024, eq. 2 and 7).

Upper level:  min_x  l(x) = ||θ* − θ(x)||²   over images x (labels y known),
lower level:  θ(x) = argmin_θ E(x, y; θ)      (`trdr.victim.energy`, solved with optax L-BFGS).

The hypergradient follows from implicit differentiation of the lower-level optimality
condition ∇θE(θ(x), x) = 0:

    ∇x l = −(∂x ∇θE)ᵀ H⁻¹ ∇θ l,   H = ∇²θθ E(θ(x), x),

computed by `jaxopt.implicit_diff.root_vjp` with jax.grad(E) as optimality function and a
linear solve for H⁻¹v from `trdr.attacks.linear_solve` (conjugate gradient, eq. 7's
quasi-Newton H^{k+1}, or a truncated Neumann series).

For a non-convex lower level (the one-hidden network, eq. 9) H need not be invertible;
the weight decay in E keeps it so at a strict local minimum, and ``damping`` μ ≥ 0
replaces H by H + μI in every solve (see `make_lower_level`; μ = 0 is the exact
hypergradient).

`jaxopt.implicit_diff.custom_root` hands its ``solve`` only ``(matvec, b)``, so it cannot
reach the curvature pairs the solver produced; the small `jax.custom_vjp` below is what
``custom_root`` builds, with the solver state kept as a residual for the solve.
(tests/test_bilevel.py checks it against ``custom_root(jax.grad(E), solve=solve_cg)``.)

`build` returns the attack as a `trdr.attacks.protocol.Attack`.
"""

import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import optax
import optax.tree
from absl import logging
from jaxopt import implicit_diff

from trdr import models, victim
from trdr.attacks.linear_solve import LINEAR_SOLVES, damp_memory
from trdr.attacks.protocol import Attack
from trdr.victim import solver
from trdr.victim.objective import param_distance

Params = Any


def resolvable_loss(victim_tol: float, lower_tol: float, weight_decay: float) -> float:
  """The upper loss l = ||θ* − θ(x)||² below which l cannot be told from 0: the outer
  stopping rule's ``stop_loss`` for a strongly convex lower level (the upper level of
  `param_distance`).

  E is μ-strongly convex with μ ≥ ``weight_decay`` (the logistic loss is convex, the
  weight decay adds (wd/2)||θ||²), so any θ with ||∇θE(θ)|| ≤ tol lies within tol / μ of
  E's minimiser. θ* was trained to ``victim_tol`` and θ(x) is solved to ``lower_tol``, so
  at images x whose E has θ*'s minimiser (x_GT) they differ by at most
  (victim_tol + lower_tol) / μ, and l up to the square of that is the solves' rounding.

  Args:
    victim_tol, lower_tol: the ||∇θE|| tolerances of θ* and of the lower level, > 0.
    weight_decay: wd of E, > 0.
  Returns:
    ((victim_tol + lower_tol) / weight_decay)², in l's units (summed squared parameters).
  Raises:
    ValueError: a tolerance or the weight decay is not > 0 (no strong convexity: the
      bound does not hold, and no stop_loss follows from it).
  """
  if not (victim_tol > 0 and lower_tol > 0 and weight_decay > 0):
    raise ValueError(f"resolvable_loss needs tolerances and weight_decay > 0, got "
                     f"{victim_tol}, {lower_tol}, {weight_decay}")
  return float(((victim_tol + lower_tol) / weight_decay) ** 2)


class LowerLevelInfo(NamedTuple):
  """How well the lower level converged: ||∇θE|| at θ(x) (float[]), iterations (int32[])."""
  grad_norm: jax.Array
  num_iter: jax.Array


def make_lower_level(energy_fn: Callable, *, max_iter: int, tol: float, memory_size: int,
                     solve: str, cg_tol: float = 1e-10, cg_maxiter: int | None = None,
                     damping: float = 0.0, neumann_alpha: float = 0.0,
                     neumann_steps: int = 100, method: str = "lbfgs", cg_iters: int = 100):
  """θ(x) = argmin_θ E(θ, x, y) as a function differentiable in (x, y) by implicit diff.

  The backward pass solves (H + μI) v = ∇θ l with H = ∇²θθ E(θ(x), x) and returns
  −(∂x ∇θE)ᵀ v. With μ = ``damping`` > 0 this is the damped (biased, better-conditioned)
  hypergradient: CG and Neumann use the product (H + μI)u = Hu + μu, quasi-Newton the
  damped curvature pairs of `damp_memory`.

  Args:
    energy_fn: E(params, images, labels) -> float[].
    max_iter, tol, memory_size: lower-level L-BFGS settings (`trdr.victim.minimize_energy`).
    method: the lower-level solver, a name in `LOWER_LEVEL_METHODS`: "lbfgs"
      (`trdr.victim.solver.minimize_energy`) or "newton_cg"
      (`trdr.victim.solver.minimize_newton_cg`,
      branch-free when vmapped over a grid; max_iter counts its Newton iterations,
      memory_size is unused).
    cg_iters: Newton–CG's conjugate-gradient steps per iteration (``method="newton_cg"``).
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
    ValueError: unknown ``solve`` or ``method``, negative damping or neumann_alpha,
      neumann_steps < 1, or the quasi-Newton solve without L-BFGS (it needs its pairs).
  """
  if method not in LOWER_LEVEL_METHODS:
    raise ValueError(f"unknown lower-level method {method!r}; known: {list(LOWER_LEVEL_METHODS)}")
  if solve == "quasi_newton" and method != "lbfgs":
    raise ValueError("the quasi_newton hypergradient solve uses the lower-level L-BFGS "
                     f"curvature pairs: it needs lower_level.method 'lbfgs', not {method!r}")
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
    if method == "newton_cg":
      theta, grad_norm, num_iter = solver.minimize_newton_cg(
          fun, theta_init, max_iter=max_iter, tol=tol, cg_iters=cg_iters)
      return (theta, LowerLevelInfo(grad_norm, num_iter)), None
    theta, info = victim.minimize_energy(fun, theta_init, max_iter=max_iter, tol=tol,
                                         memory_size=memory_size)
    return (theta, LowerLevelInfo(info.grad_norm, info.num_iter)), info.memory

  def damped(matvec):
    if damping == 0:
      return matvec
    return lambda u: optax.tree.add_scale(matvec(u), damping, u)

  def damped_memory(memory):
    return memory if damping == 0 or memory is None else damp_memory(memory, damping)

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
  """Per outer step: upper loss l (float[]), the lower level's convergence, and whether
  the outer stopping rule held the images (int32[] 0 or 1: the step was not taken)."""
  upper_loss: jax.Array
  grad_norm: jax.Array
  num_iter: jax.Array
  stopped: jax.Array


# Where each lower-level solve starts (the readings of Runkel et al.'s "initialising θ by
# drawing every weight independently from a standard Uniform distribution",
# `trdr.studies.readings`): a fresh θ0 ~ U(0, 1) at every outer step ("uniform", reading a);
# the θ0 the victim's own training started from ("victim_theta0", reading b: the adversary
# knows the initialisation; with victim.init "uniform" it is a U(0, 1) draw); one U(0, 1)
# draw for the whole attack ("uniform_once", reading c: θ(x) one deterministic function of
# x); the previous outer step's θ(x), the first solve from U(0, 1) ("previous_uniform",
# reading d) or from θ* ("previous"); θ* at every step ("theta_star", reading e).
LOWER_LEVEL_STARTS = ("theta_star", "previous", "previous_uniform", "uniform", "uniform_once",
                      "victim_theta0")
# The lower-level solvers (`make_lower_level`'s ``method``).
LOWER_LEVEL_METHODS = ("lbfgs", "newton_cg")


LR_SCHEDULES = ("constant", "cosine")
OPTIMIZERS = ("adam", "sgd", "sgd_linesearch")


def make_optimizer(attack_config: ml_collections.ConfigDict
                   ) -> optax.GradientTransformationExtraArgs:
  """Outer optimiser: ``"sgd"`` is eq. 7's x ← x − η∇x l; ``"sgd_linesearch"`` the same
  direction with optax's backtracking (Armijo) line search on l, the step at most η, so
  that l never increases; ``"adam"`` is optax Adam. Each takes the line search's extra
  arguments (value, grad, value_fn), which the others ignore.

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
    return optax.with_extra_args_support(optax.sgd(lr))
  if name == "sgd_linesearch":
    return optax.chain(optax.sgd(lr), optax.scale_by_backtracking_linesearch(
        max_backtracking_steps=15, max_learning_rate=1.0))
  if name == "adam":
    return optax.with_extra_args_support(optax.adam(lr))
  raise ValueError(f"unknown outer optimizer {name!r}; known: {list(OPTIMIZERS)}")


def build(target: victim.Victim, attack_config: ml_collections.ConfigDict,
          labels: jax.Array, *, key: jax.Array, box: tuple[Any, Any] | None = (0.0, 1.0)
          ) -> Attack:
  """The bilevel attack against θ* (Runkel eq. 7: the hypergradient step of eq. 2).

  Args:
    target: the victim (its model and θ*; ``target.config.weight_decay`` is the wd of the
      E that θ* minimises).
    attack_config: lower_level.{start, max_iter, tol, memory_size, method, cg_iters},
      hypergradient.{solve, cg_tol, cg_maxiter, damping, neumann_alpha, neumann_steps},
      optimizer, lr, lr_schedule, steps, project, and the outer stopping rule
      stop_loss and stop_grad_norm (configs/bilevel_affine.py: a step is not taken while
      l ≤ stop_loss or ‖∇x l‖ ≤ stop_grad_norm; 0 turns each off; a stationary point stays
      where it is under Adam too, whose normalised step does not shrink there).
    labels: float[n] in {−1, +1}, the known labels of the unknown images.
    key: PRNG key for the U(0, 1) lower-level starts: folded with the step number
      (``"uniform"``), or used as it is (``"uniform_once"``, and the first solve of
      ``"previous_uniform"``).
    box: (low, high) pixel bounds for the projection, broadcastable to the images.
  Returns:
    The `Attack`; its state is an `AttackState`, its metrics `StepMetrics` (the first,
    ``upper_loss``, is l before the step), its ``energy`` the victim's E.
  Raises:
    ValueError: unknown lower-level start, method, solve, optimizer or schedule; max_iter
      < 1 or tol <= 0; Newton–CG for a lower level that is not strongly convex; the start
      "victim_theta0" for a victim loaded from a file (its θ0 is unknown).
  """
  ll = attack_config.lower_level
  if ll.start not in LOWER_LEVEL_STARTS:
    raise ValueError(f"unknown lower-level start {ll.start!r}; known: {list(LOWER_LEVEL_STARTS)}")
  if not (int(ll.max_iter) >= 1 and float(ll.tol) > 0):  # max_iter 0 would report l = 0
    raise ValueError(f"need lower_level.max_iter >= 1 and lower_level.tol > 0, got "
                     f"{ll.max_iter} and {ll.tol}")
  method = ll.method
  if method == "newton_cg" and not (target.config.arch == "affine"
                                    and target.config.weight_decay > 0):
    raise ValueError(
        "lower_level.method 'newton_cg' is for a strongly convex lower level (victim arch "
        f"'affine' with weight_decay > 0), not arch {target.config.arch!r} with "
        f"weight_decay {target.config.weight_decay}: on a non-convex E it stops where no "
        "Armijo step exists (use 'lbfgs')")
  if ll.start == "victim_theta0" and target.config.get("load"):
    target.initial_params(())  # raises: the θ0 of a loaded θ* is unknown
  hg = attack_config.hypergradient
  theta_star = target.params
  energy_fn = functools.partial(victim.energy, apply_fn=target.apply,
                                weight_decay=target.config.weight_decay)
  lower_level = make_lower_level(energy_fn, max_iter=ll.max_iter, tol=ll.tol,
                                 memory_size=ll.memory_size, solve=hg.solve,
                                 cg_tol=hg.cg_tol, cg_maxiter=hg.cg_maxiter,
                                 damping=hg.damping, neumann_alpha=hg.neumann_alpha,
                                 neumann_steps=hg.neumann_steps,
                                 method=method,
                                 cg_iters=ll.cg_iters)
  optimizer = make_optimizer(attack_config)
  attack_key = key

  def upper_loss(images, theta_init):
    theta, info = lower_level(theta_init, images, labels)
    return param_distance(theta_star, theta), (theta, info)

  def init(images, key=None):
    del key  # the bilevel start is deterministic given the images
    previous = (models.uniform_params(attack_key, theta_star) if ll.start == "previous_uniform"
                else theta_star)
    return AttackState(images, optimizer.init(images), previous, jnp.asarray(0, jnp.int32))

  def start_point(state):
    if ll.start == "theta_star":
      return theta_star
    if ll.start in ("previous", "previous_uniform"):
      return state.theta
    if ll.start == "uniform_once":
      return models.uniform_params(attack_key, theta_star)
    if ll.start == "victim_theta0":
      return target.initial_params(state.images.shape[-3:])
    return models.uniform_params(jax.random.fold_in(attack_key, state.step), theta_star)

  stop_loss = float(attack_config.get("stop_loss", 0.0))
  stop_grad_norm = float(attack_config.get("stop_grad_norm", 0.0))
  stopping = stop_loss > 0 or stop_grad_norm > 0

  def step(state):
    start = start_point(state)
    (loss, (theta, info)), grad = jax.value_and_grad(upper_loss, has_aux=True)(
        state.images, start)
    # The outer stopping rule: at a point where l or its gradient is small enough the
    # images (and the optimiser's state) stay; the step count and θ(x) move on. Decided
    # before the update, which a held step skips (`lax.cond`): it would be discarded, and
    # the line search's trial points are lower-level solves each. (Vmapped, as a batched
    # grid on GPU/TPU, the cond computes both sides and selects: the same result.)
    stopped = jnp.asarray(False)
    if stop_loss > 0:
      stopped |= loss <= stop_loss
    if stop_grad_norm > 0:
      stopped |= optax.tree.norm(grad) <= stop_grad_norm

    def update(_):
      updates, opt_state = optimizer.update(
          grad, state.opt_state, state.images, value=loss, grad=grad,
          value_fn=lambda x: upper_loss(x, start)[0])
      images = optax.apply_updates(state.images, updates)
      if attack_config.project:
        images = jnp.clip(images, box[0], box[1])
      return images, opt_state

    hold = lambda _: (state.images, state.opt_state)
    images, opt_state = jax.lax.cond(stopped, hold, update, None) if stopping else update(None)
    new_state = AttackState(images, opt_state, theta, state.step + 1)
    return new_state, StepMetrics(loss, info.grad_norm, info.num_iter,
                                  stopped.astype(jnp.int32))

  return Attack(name="bilevel", init=init, step=step, images=lambda s: s.images,
                batches_well=False, display="pixels", energy=energy_fn)


# ------------------------------------------------------------------ premise

# The bilevel attack's premise at the training images (`training_images_distance`): l(x_GT)
# above this (the ||θ* − θ||² Table 1's verdict calls small) is warned about.
X_GT_WARNING = 1e-2


def training_images_distance(target: victim.Victim, attack_config: ml_collections.ConfigDict,
                             task, dtype, key: jax.Array) -> dict:
  """The bilevel attack's premise at the task's training images x_GT: the upper level
  l(x_GT) = ||θ* − θ(x_GT)||², θ(x_GT) re-solved from the attack's own first lower-level
  start (θ* for "theta_star" and "previous"; the θ0 the victim's training started from for
  "victim_theta0"; a U(0, 1) draw of the attack's key otherwise) by the attack's own
  lower-level solve (`make_lower_level` with ``lower_level.method``) to its tolerance. The
  training images are the attack's target only where this is ~0 (the paper's upper level; the
  readings of trdr/studies/readings.py); logged, with a warning above `X_GT_WARNING`.

  Returns:
    {"l_training_images": float (summed over θ's entries), "start": the lower-level
    start, "grad_norm": ||∇θE|| the re-solve reached, "num_iter"}.
  """
  ll = attack_config.lower_level
  x = jnp.asarray(task.train_images, dtype)
  y = jnp.asarray(task.train_labels, dtype)
  energy = functools.partial(victim.energy, apply_fn=target.apply,
                             weight_decay=target.config.weight_decay)
  if ll.start in ("theta_star", "previous"):
    start = target.params
  elif ll.start == "victim_theta0":
    start = target.initial_params(task.train_images.shape[1:])
  else:
    start = models.uniform_params(key, target.params)
  # The attack's own lower-level solve (its method and budget; no derivative is taken, so
  # the hypergradient's linear solve is never called), as one program (eagerly, the solver's
  # set-up and the distance would compile op by op).
  lower_level = make_lower_level(energy, max_iter=ll.max_iter, tol=ll.tol,
                                 memory_size=ll.memory_size, solve="cg",
                                 method=ll.get("method", "lbfgs"),
                                 cg_iters=ll.get("cg_iters", 100))

  @jax.jit
  def resolve(start, x, y, theta_star):
    theta, info = lower_level(start, x, y)
    return victim.param_distance(theta_star, theta), info
  distance, info = resolve(start, x, y, target.params)
  distance = float(distance)
  out = {"l_training_images": distance, "start": ll.start,
         "grad_norm": float(info.grad_norm), "num_iter": int(info.num_iter)}
  logging.info("Bilevel premise: l(x_GT) = ||θ* − θ(x_GT)||² = %.3g at the training images, "
               "θ(x_GT) from the lower level's start %r (||∇θE|| %.2g after %d iterations)",
               distance, ll.start, out["grad_norm"], out["num_iter"])
  if distance > X_GT_WARNING:
    logging.warning("The bilevel attack's premise does not hold here: l(x_GT) = %.3g > %g at "
                    "the training images under the lower-level start %r, so they are not a "
                    "minimiser of what the attack minimises, and its reconstructions say "
                    "little about privacy (docs/paper.md: the readings of the paper's θ0)",
                    distance, X_GT_WARNING, ll.start)
  return out


def premise(target: victim.Victim, attack_config: ml_collections.ConfigDict, task, dtype,
            key: jax.Array) -> dict:
  """The bilevel attack's premise for the run's summary (`trdr.attacks.protocol.AttackKind`):
  {"bilevel_premise": `training_images_distance`} (logged, warned above `X_GT_WARNING`)."""
  return {"bilevel_premise": training_images_distance(target, attack_config, task, dtype, key)}
