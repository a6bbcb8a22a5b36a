"""The lower-level L-BFGS solver: a tolerance sweep read off one run (Table 1's re-solves)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from trdr import models, solver, victim
from trdr.attacks import bilevel

_MODEL = models.Affine()
ENERGY = functools.partial(victim.energy, apply_fn=lambda p, x: _MODEL.apply({"params": p}, x),
                           weight_decay=1e-2)
# From loose to beyond what float64 reaches, and one that θ0 already meets.
TOLS = (1e6, 1e-1, 1e-3, 1e-5, 1e-7, 1e-9, 1e-30)


def _problem():
  """A small affine victim in float64: θ* trained on x, and a start θ0 ~ U(0, 1)."""
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.uniform(size=(8, 5, 5, 1)))
  labels = jnp.asarray(np.repeat([-1.0, 1.0], 4))
  energy = lambda p: ENERGY(p, x, labels)
  theta_star = victim.minimize_energy(energy, models.init_params(_MODEL, jax.random.key(0),
                                                                 (5, 5, 1), jnp.float64),
                                      max_iter=500, tol=1e-12)[0]
  theta0 = models.uniform_params(jax.random.key(1), theta_star)
  return energy, theta_star, theta0


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
      # iterate apart: the iterate before the stop is clearly above t.
      assert solve(t, int(info.num_iter) - 1)[1].grad_norm > t * (1 + 1e-6)
  # Every case is exercised: stopped at θ0, at a tolerance, at max_iter.
  assert stops[0] == 0 and 0 < min(stops[1:]) < max_iter and stops[-1] == max_iter
  # The same operations in another XLA program: at most reassociation rounding, ~1e-16
  # relative per operation, which the strongly convex (wd > 0) iteration does not amplify
  # over these ≤ 200 steps; 1e-9 relative leaves a factor of 1e6 to that.
  np.testing.assert_allclose(np.asarray(swept), np.asarray(separate), rtol=1e-9, atol=0)


def test_a_nan_observation_is_kept(x64):
  # A NaN observation (a diverged θ) is a value: observed at θ0 for t = 1e6, it must stay
  # NaN and not be taken for "not yet observed" and overwritten by a later iterate's.
  energy, theta_star, theta0 = _problem()
  nan_at_start = lambda theta: jnp.where(bilevel.param_distance(theta0, theta) == 0, jnp.nan,
                                         bilevel.param_distance(theta_star, theta))
  swept = np.asarray(solver.observe_at_tolerances(energy, theta0, nan_at_start,
                                                  tols=(1e6, 1e-5), max_iter=200))
  assert np.isnan(swept[0]) and np.isfinite(swept[1])
