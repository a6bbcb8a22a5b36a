"""The lower-level solvers: a tolerance sweep read off one L-BFGS run (Table 1's re-solves),
and the branch-free Newton–CG."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax.tree
import pytest

from trdr import models, victim
from trdr.attacks import bilevel
from trdr.victim import solver

_MODEL = models.Affine()
WD = 1e-2
ENERGY = functools.partial(victim.energy, apply_fn=lambda p, x: _MODEL.apply({"params": p}, x),
                           weight_decay=WD)
# From loose to beyond what float64 reaches, and one that θ0 already meets.
TOLS = (1e6, 1e-1, 1e-3, 1e-5, 1e-7, 1e-9, 1e-30)


@functools.cache
def _problem():
  """A small affine victim in float64: θ* trained on x, and a start θ0 ~ U(0, 1); built
  once for the module's tests (call under x64), θ* by one compiled program (op by op, its
  setup alone compiled about 60 programs)."""
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.uniform(size=(8, 5, 5, 1)))
  labels = jnp.asarray(np.repeat([-1.0, 1.0], 4))
  energy = lambda p: ENERGY(p, x, labels)
  theta_star = jax.jit(lambda p: victim.minimize_energy(energy, p, max_iter=500, tol=1e-12)[0])(
      models.init_params(_MODEL, jax.random.key(0), (5, 5, 1), jnp.float64))
  theta0 = models.uniform_params(jax.random.key(1), theta_star)
  return energy, theta_star, theta0


@pytest.mark.slow  # a minimize_energy program per tolerance and budget
@pytest.mark.parametrize("max_iter", [200, 18])
def test_one_run_observes_where_each_tolerance_would_stop(x64, max_iter):
  # Each entry must be what a separate minimize_energy(tol=t) run gives: the same L-BFGS
  # iterates, stopped at the first with ||∇E|| < t, at max_iter (18: half the tolerances are not
  # met), or at θ0 (t = 1e6). 1e-30 is never met (float64's floor is ~1e-16 ||∇E(θ0)||).
  energy, theta_star, theta0 = _problem()
  distance = lambda theta: bilevel.param_distance(theta_star, theta)
  swept = jax.jit(lambda t0: solver.observe_at_tolerances(
      energy, t0, distance, tols=TOLS, max_iter=max_iter))(theta0)
  solve = jax.jit(lambda t, n: victim.minimize_energy(energy, theta0, max_iter=n, tol=t))
  separate, stops = [], []
  for t in TOLS:
    theta, info = solve(t, max_iter)
    separate.append(distance(theta))
    stops.append(int(info.num_iter))
    if 0 < info.num_iter < max_iter:
      # The stopping test must not sit on a rounding edge, or two programs could stop one
      # iterate apart: the iterate before the stop is clearly above t. Another program's
      # iterate differs by δ ≲ 1e-12 (below), its gradient by ≤ λ_max·δ ≈ 7e-12 (λ_max ≤ wd
      # + 26/4), ≤ 1e-2 t for t ≥ 1e-9 (measured: ≥ 8% above t).
      assert solve(t, int(info.num_iter) - 1)[1].grad_norm > t * (1 + 1e-2)
  # Every case is exercised: stopped at θ0, at a tolerance, at max_iter.
  assert stops[0] == 0 and 0 < min(stops[1:]) < max_iter and stops[-1] == max_iter
  # The same operations in another XLA program: at most reassociation rounding, ~u||θ|| per
  # step (u = 1.1e-16, ||θ|| ≈ 5), which the strongly convex (wd > 0) iteration does not
  # amplify: δ ≤ 200·u||θ|| ≈ 1e-13 in θ, 1e-12 below. θ* is E's own minimiser, so at tight t
  # d = ||θ* − θ||² cancels and moves by ≤ (2√d + δ)δ; the rest is the 26-term sum's rounding
  # (rtol 1e-9 leaves 1e6). One iterate more or less moves d by O(d), far beyond both.
  swept, separate, delta = np.asarray(swept), np.asarray(separate), 1e-12
  assert np.all(np.abs(swept - separate) <= 1e-9 * separate
                + (2 * np.sqrt(separate) + delta) * delta), (swept, separate)


@pytest.mark.slow  # an observe_at_tolerances program
def test_a_nan_observation_is_kept(x64):
  # A NaN observation (a diverged θ) is a value: observed at θ0 for t = 1e6, it must stay
  # NaN and not be taken for "not yet observed" and overwritten by a later iterate's.
  energy, theta_star, theta0 = _problem()
  nan_at_start = lambda theta: jnp.where(bilevel.param_distance(theta0, theta) == 0, jnp.nan,
                                         bilevel.param_distance(theta_star, theta))
  swept = np.asarray(solver.observe_at_tolerances(energy, theta0, nan_at_start,
                                                  tols=(1e6, 1e-5), max_iter=200))
  assert np.isnan(swept[0]) and np.isfinite(swept[1])


# ------------------------------------------ Newton–CG, the branch-free lower level


def _strongly_convex_bound(energy, *thetas):
  """E = logistic loss + (wd/2)||θ||² is wd-strongly convex, so every θ lies within
  ||∇E(θ)|| / wd of the one minimiser, and two θ within the sum of theirs of each other."""
  return sum(float(optax.tree.norm(jax.grad(energy)(t))) for t in thetas) / WD


def test_newton_cg_reaches_the_minimiser_lbfgs_reaches(x64):
  energy, _, theta0 = _problem()
  tol = 1e-10
  lbfgs = jax.jit(lambda t: victim.minimize_energy(energy, t, max_iter=1000, tol=tol))(theta0)
  theta, grad_norm, num_iter = jax.jit(lambda t: solver.minimize_newton_cg(
      energy, t, max_iter=100, tol=tol, cg_iters=50))(theta0)
  assert lbfgs[1].grad_norm < tol and grad_norm < tol and 0 < num_iter < 100
  distance = float(bilevel.param_distance(theta, lbfgs[0])) ** 0.5
  assert distance <= _strongly_convex_bound(energy, theta, lbfgs[0])


@pytest.mark.slow  # vmapped and one-by-one Newton-CG programs
def test_newton_cg_has_no_branches_and_batches_as_one_by_one(x64):
  """No `lax.cond` in Newton–CG's program (L-BFGS's zoom line search has them, and a
  vmapped cond runs both branches for every member), and a vmapped batch of starts
  converges as each start alone does."""
  energy, theta_star, _ = _problem()
  starts = jax.vmap(lambda k: models.uniform_params(k, theta_star))(
      jax.random.split(jax.random.key(3), 3))
  solve = lambda t: solver.minimize_newton_cg(energy, t, max_iter=100, tol=1e-9)
  program = lambda f: str(jax.make_jaxpr(f)(jax.tree.map(lambda leaf: leaf[0], starts)))
  assert "cond[" in program(lambda t: victim.minimize_energy(energy, t, max_iter=9, tol=0.0))
  assert "cond[" not in program(solve)
  batched, grad_norms, _ = jax.jit(jax.vmap(solve))(starts)
  assert np.all(np.asarray(grad_norms) < 1e-9)
  pick = lambda tree, i: jax.tree.map(lambda leaf: leaf[i], tree)
  for i in range(3):
    alone, member = jax.jit(solve)(pick(starts, i))[0], pick(batched, i)
    assert float(bilevel.param_distance(member, alone)) ** 0.5 <= _strongly_convex_bound(
        energy, member, alone)


def test_newton_cg_takes_the_newton_step_where_fs_error_hides_its_decrease():
  """Near a minimum the decrease of f can be smaller than the error of f's value (float32
  rounding: with the main job's float32 E, some Newton–CG solves stopped short of the
  tolerance, seen in landscape.json's lower_level_grad_norm_max). Model: f = ½||θ||² plus a value
  error the gradient does not see (`stop_gradient`), η (1 − ||θ||²/||θ0||²) with
  η = ||θ0||². Along the Newton direction d = −θ0, f(θ0 + αd) − f(θ0) =
  (1 − (1 − α)²)(η − ½||θ0||²) > 0 for every α in (0, 1]: no step passes Armijo's test,
  however small. The gradient is exact, and the full step lands on the minimiser
  (∇f = 0), so the solver must take it (||∇f|| falls from ||θ0|| to 0) and converge."""
  theta0 = jnp.full((4,), 0.5, jnp.float32)
  eta = float(jnp.sum(theta0 ** 2))

  def fun(theta):
    quadratic = 0.5 * jnp.sum(theta ** 2)
    error = eta * (1.0 - jnp.sum(theta ** 2) / eta)
    return quadratic + jax.lax.stop_gradient(error)

  steps = 2.0 ** -np.arange(solver.BACKTRACKS)
  values = np.array([float(fun(theta0 - a * theta0)) for a in steps])
  assert np.all(values > float(fun(theta0)))  # no step size meets Armijo's condition
  theta, grad_norm, num_iter = jax.jit(lambda t: solver.minimize_newton_cg(
      fun, t, max_iter=5, tol=1e-6))(theta0)
  assert float(grad_norm) < 1e-6 and int(num_iter) == 1
  np.testing.assert_array_equal(np.asarray(theta), 0.0)


def test_newton_cg_refuses_an_empty_budget():
  with pytest.raises(ValueError, match="max_iter >= 1 and cg_iters >= 1"):
    solver.minimize_newton_cg(lambda p: p ** 2, 1.0, max_iter=0, tol=1e-3)
  with pytest.raises(ValueError, match="max_iter >= 1 and cg_iters >= 1"):
    solver.minimize_newton_cg(lambda p: p ** 2, 1.0, max_iter=5, tol=1e-3, cg_iters=0)
