"""Hypergradient of the bilevel attack: finite differences, jaxopt, unrolling, quasi-Newton."""

import functools
import warnings

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

with warnings.catch_warnings():
  warnings.simplefilter("ignore", DeprecationWarning)
  from jaxopt import implicit_diff, linear_solve

from trdr import models, victim
from trdr.attacks import bilevel
from trdr.attacks import linear_solve as solves
from trdr.configs import bilevel_affine
from trdr.experiment import loop

WD = 0.1


_MODEL = models.Affine()
# One energy for the module (apply_fn included): jit caches programs by function identity,
# so the programs below compile once per shape and dtype, not once per test.
ENERGY = functools.partial(victim.energy, apply_fn=lambda p, x: _MODEL.apply({"params": p}, x),
                           weight_decay=WD)


@functools.partial(jax.jit, static_argnames="tol")
def _train(theta0, x_true, labels, tol):
  return victim.minimize_energy(lambda q: ENERGY(q, x_true, labels), theta0, max_iter=500,
                                tol=tol)


def _problem(n=6, shape=(4, 4, 1), seed=0, dtype=jnp.float64, tol=1e-12):
  """A small affine victim: θ* trained on x_true; returns what the attack needs."""
  rng = np.random.default_rng(seed)
  x_true = jnp.asarray(rng.uniform(size=(n, *shape)), dtype)
  labels = jnp.asarray(np.repeat([-1.0, 1.0], n // 2), dtype)
  theta0 = models.init_params(_MODEL, jax.random.key(seed), shape, dtype)
  theta_star, info = _train(theta0, x_true, labels, tol)
  assert info.grad_norm < tol
  x = jnp.asarray(rng.uniform(size=(n, *shape)), dtype)  # the attack's current iterate
  return x, x_true, labels, theta_star, ENERGY


@functools.cache
def _hypergradient_program(solve, **kw):
  """x ↦ ∇x ||θ* − θ(x)||² by `bilevel.make_lower_level`, jitted once per setting."""
  lower_level = bilevel.make_lower_level(ENERGY, max_iter=500, tol=1e-12, memory_size=10,
                                         solve=solve, **kw)
  loss = lambda x, labels, theta_star, theta_init: bilevel.param_distance(
      theta_star, lower_level(theta_init, x, labels)[0])
  return jax.jit(jax.grad(loss))


def _hypergradient(solve, x, labels, theta_star, theta_init, **kw):
  return _hypergradient_program(solve, **kw)(x, labels, theta_star, theta_init)


def _upper_loss(x, labels, theta_star, energy_fn):
  theta, _ = victim.minimize_energy(lambda p: energy_fn(p, x, labels), theta_star,
                                    max_iter=500, tol=1e-13)
  return bilevel.param_distance(theta_star, theta)


def _rel_err(a, b):
  return float(jnp.linalg.norm((a - b).ravel()) / jnp.linalg.norm(b.ravel()))


def _cosine(a, b):
  return float(jnp.vdot(a, b) / (jnp.linalg.norm(a.ravel()) * jnp.linalg.norm(b.ravel())))


def test_cg_hypergradient_matches_central_finite_differences(x64):
  x, _, labels, theta_star, energy_fn = _problem()
  grad = _hypergradient("cg", x, labels, theta_star, theta_star, cg_tol=1e-14)
  eps = 1e-5
  flat = np.asarray(x).ravel()
  fd = np.zeros_like(flat)
  loss = jax.jit(lambda z: _upper_loss(z.reshape(x.shape), labels, theta_star, energy_fn))
  for i in range(flat.size):
    e = np.zeros_like(flat)
    e[i] = eps
    fd[i] = (loss(flat + e) - loss(flat - e)) / (2 * eps)
  err = _rel_err(grad.ravel(), jnp.asarray(fd))
  # Truncation ~eps²|l'''| and rounding ~u·l/eps (u = 1.1e-16, l ≈ 4) are < 1e-10 per entry.
  # Each re-solve stops at ||∇E|| < 1e-13, within 1e-13/wd = 1e-12 of θ(x), so l moves by
  # ≤ 2√l·1e-12 ≈ 4e-12: ≤ 4e-7 per entry after /(2 eps), 4e-6 over the 96, ~1e-6 of
  # ||∇l|| ≈ 3.7 (CG at 1e-14 adds ~1e-12). A wrong sign or a missing term gives O(1).
  assert err < 1e-5, f"relative error to central differences {err:.2e}"


def test_matches_jaxopt_custom_root(x64):
  """Our custom_vjp is what jaxopt's custom_root(jax.grad(E), solve=solve_cg) computes."""
  x, _, labels, theta_star, energy_fn = _problem(seed=1)

  @implicit_diff.custom_root(jax.grad(energy_fn),
                             solve=functools.partial(linear_solve.solve_cg, tol=1e-14))
  def solver(theta_init, images, labels):
    return victim.minimize_energy(lambda p: energy_fn(p, images, labels), theta_init,
                                  max_iter=500, tol=1e-12)[0]

  reference = jax.jit(jax.grad(
      lambda z: bilevel.param_distance(theta_star, solver(theta_star, z, labels))))(x)
  ours = _hypergradient("cg", x, labels, theta_star, theta_star, cg_tol=1e-14)
  # Both forward solves stop at ||∇E|| < 1e-12: θ within 2e-12/wd = 2e-11 of each other,
  # ~1e-11 of ||θ − θ*|| ≈ 2 (the hypergradient's relative change, a few times that with
  # the curvature terms); both CG solves stop at relative residual 1e-14, error ≤ κ(H)·1e-14
  # with κ ≤ 1 + (D + 1)/(4 wd) ≈ 44. So ≲ 3e-11; a wrong transpose or sign gives O(1).
  assert _rel_err(ours, reference) < 1e-10


def test_cg_hypergradient_matches_unrolled_lower_level_solver(x64):
  """Forward-mode differentiation through the L-BFGS iterations themselves."""
  x, _, labels, theta_star, energy_fn = _problem(seed=2)
  unrolled = jax.jit(jax.jacfwd(lambda z: _upper_loss(z, labels, theta_star, energy_fn)))(x)
  implicit = _hypergradient("cg", x, labels, theta_star, theta_star, cg_tol=1e-14)
  err = _rel_err(implicit, unrolled)
  # The unrolled Jacobian is the last iterate's; its error H⁻¹·d/dx[∇E(θ_K(x), x)] decays
  # with ∇E (Gilbert 1992) but lags it (a linear rate ρ gives Kρ^K against ρ^K, and the line
  # search's step sizes are differentiated too): ||∇E|| falls 0.36 → < 1e-13 (×3e-13) here,
  # measured 1e-9; 1e-6 leaves 1e3 more lag. A missing term or sign gives O(1).
  assert err < 1e-6, f"relative error to unrolled differentiation {err:.2e}"


def test_quasi_newton_inverse_hessian_satisfies_secant_equation(x64):
  """L-BFGS's inverse-Hessian approximation maps the newest gradient change to the newest
  step exactly (H⁻¹ y_k = s_k), whatever the older pairs."""
  x, _, labels, theta_star, energy_fn = _problem(seed=3)
  theta0 = jax.tree.map(jnp.zeros_like, theta_star)
  _, info = jax.jit(lambda t: victim.minimize_energy(
      lambda p: energy_fn(p, x, labels), t, max_iter=7, tol=0.0, memory_size=4))(theta0)
  memory = info.memory
  newest = (int(memory.count) - 2) % 4
  pick = lambda tree: jax.tree.map(lambda leaf: leaf[newest], tree)
  s, y = pick(memory.diff_params_memory), pick(memory.diff_updates_memory)
  hy = jax.jit(solves.quasi_newton_inverse_hessian)(memory, y)
  # Float64 rounding: the first backward step leaves q = (1 − ρ sᵀy)y ~ P·u||y|| (P = 17,
  # u = 1.1e-16); the rest maps it through H_{k−1} (norm ≲ 1/wd) and I − ρ s yᵀ (≤ 1 + κ,
  # κ ≤ 1 + (D + 1)/(4 wd) ≈ 44), ||y|| ≤ κ·wd||s||: ≲ P·u·κ(1 + κ)||s|| ≈ 4e-12 ||s||.
  # A wrong slot, order or weight gives O(1).
  assert optax.tree.norm(optax.tree.sub(hy, s)) < 1e-10 * optax.tree.norm(s)


# Slow: three hypergradient programs; the fast tier has
# test_cg_hypergradient_matches_central_finite_differences.
@pytest.mark.slow
def test_quasi_newton_hypergradient_against_cg(x64):
  """The quasi-Newton hypergradient is an approximation: report its cosine to CG's.

  Started from θ* (as the attack's first step), the solve builds curvature pairs along the
  path to θ(x); the approximation must point the same way as the exact hypergradient.
  """
  x, _, labels, theta_star, energy_fn = _problem(n=20, shape=(6, 6, 1), seed=4)
  cg = _hypergradient("cg", x, labels, theta_star, theta_star, cg_tol=1e-14)
  qn = _hypergradient("quasi_newton", x, labels, theta_star, theta_star)
  cosine = _cosine(qn, cg)
  # Not a rounding tolerance: the approximation's quality. The bar is the direction without
  # curvature (v = ∇θl: the two-loop's start γI, the pairs unused; cosine 0.97 here), which
  # pairs dropped or misapplied fall to; measured 0.997. Rounding moves both by ~1e-12 (the
  # pairs shift by one if a solve stops an iteration apart: the gap absorbs that).
  no_curvature = _cosine(_hypergradient("neumann", x, labels, theta_star, theta_star,
                                        neumann_alpha=1.0, neumann_steps=1), cg)
  print(f"quasi-Newton vs CG hypergradient: cosine {cosine:.4f} (no curvature "
        f"{no_curvature:.4f}), relative error {_rel_err(qn, cg):.3e}")
  assert cosine > 0.9 and cosine > no_curvature


@pytest.mark.slow  # two hypergradient programs; fast tier: test_solver.py's Newton-CG test
def test_newton_cg_lower_level_gives_lbfgs_hypergradient(x64):
  """``lower_level.method="newton_cg"``: the CG hypergradient is L-BFGS's (θ(x) itself is
  checked against L-BFGS's in tests/test_solver.py).

  Both solves stop at ||∇E|| < 1e-12, so with E wd-strongly convex each θ(x) lies within
  1e-12/wd = 1e-11 of the minimiser. The hypergradient is −(∂x∇θE)ᵀH⁻¹∇θl evaluated at
  θ(x): a smooth function of θ whose relative change is of the order of ||Δθ|| times the
  curvature terms over ||θ* − θ(x)||, here O(1) for data in [0, 1]; CG at 1e-14. So the two
  agree to ~1e-10 relative (measured: 2e-12); 1e-7 leaves three orders of magnitude to
  those constants. (The L-BFGS program is the one of the quasi-Newton test above.)"""
  x, _, labels, theta_star, _ = _problem(n=20, shape=(6, 6, 1), seed=4)
  lbfgs = _hypergradient("cg", x, labels, theta_star, theta_star, cg_tol=1e-14)
  newton = _hypergradient("cg", x, labels, theta_star, theta_star, cg_tol=1e-14,
                          method="newton_cg")
  assert _rel_err(newton, lbfgs) < 1e-7
  with pytest.raises(ValueError, match="quasi_newton hypergradient solve .* 'newton_cg'"):
    bilevel.make_lower_level(ENERGY, max_iter=5, tol=1e-6, memory_size=10,
                             solve="quasi_newton", method="newton_cg")


def _attack_config(lower_level, hypergradient, **attack):
  """bilevel_affine.py's attack section (every key the attack reads, L-BFGS lower level)
  with these settings."""
  config = bilevel_affine.get_config("smoke").attack
  config.lower_level.method = "lbfgs"
  config.lower_level.update(lower_level)
  config.hypergradient.update(hypergradient)
  config.update(attack)
  return config


def test_ground_truth_is_a_fixed_point_of_the_attack():
  """At x = x_true the lower level returns θ*, so l = 0 and the hypergradient vanishes."""
  _, x_true, labels, theta_star, _ = _problem(seed=5, dtype=jnp.float32, tol=1e-5)
  model = models.Affine()
  config = _attack_config(
      {"start": "previous", "max_iter": 100, "tol": 1e-5, "memory_size": 10},
      {"solve": "cg", "cg_tol": 1e-6, "cg_maxiter": 100},
      optimizer="adam", lr=1e-2, lr_schedule="constant", steps=3, project=True)
  target = victim.Victim(model, theta_star, ml_collections.ConfigDict({"weight_decay": WD}), {})
  attack = bilevel.build(target, config, labels, key=jax.random.key(0))
  state, step_metrics = loop.run_steps(attack.step, attack.init(x_true), 3)
  # θ* already meets ||∇E|| < 1e-5 (2.3e-6; recomputed in another program to float32
  # rounding, ~1e-3 relative), so the lower level takes no step: θ = θ*, l = 0, CG on b = 0
  # returns 0 and Adam's update of a zero gradient is 0, all exactly. Any step would show:
  # l ≈ ||Δθ||² (6e-10 from a uniform start), pixels moved by ~lr = 1e-2 whatever the gradient.
  assert np.all(step_metrics.num_iter == 0)
  np.testing.assert_allclose(step_metrics.upper_loss, 0.0, atol=1e-10)
  np.testing.assert_allclose(state.images, x_true, atol=1e-6)


@pytest.mark.slow  # an attack step per start mode
@pytest.mark.parametrize("start", ["uniform", "uniform_once"])
def test_uniform_once_draws_one_theta0_for_the_whole_attack(x64, start):
  """"uniform_once" starts every outer step's lower level from one θ0 ~ U(0, 1), so l is a
  function of x alone; "uniform" draws θ0 anew at every step. With 3 lower-level
  iterations (far from converged), θ(x) still depends on its start: the same images at
  steps 0 and 5 give bitwise the same l (one start, the same program and inputs) or
  another l (another start: O(||θ0 − θ0'||²) ≫ rounding)."""
  x, _, labels, theta_star, _ = _problem(seed=6)
  config = _attack_config(
      {"start": start, "max_iter": 3, "tol": 1e-12, "memory_size": 10},
      {"solve": "cg", "cg_tol": 1e-10, "cg_maxiter": 100},
      optimizer="adam", lr=1e-2, lr_schedule="constant", steps=6, project=True)
  target = victim.Victim(_MODEL, theta_star, ml_collections.ConfigDict({"weight_decay": WD}),
                         {})
  attack = bilevel.build(target, config, labels, key=jax.random.key(0))
  step = jax.jit(attack.step)
  first = attack.init(x)
  later = first._replace(step=jnp.asarray(5, jnp.int32))
  l0, l5 = step(first)[1].upper_loss, step(later)[1].upper_loss
  assert (l0 == l5) == (start == "uniform_once"), (float(l0), float(l5))


def test_unknown_solve_is_rejected():
  with pytest.raises(ValueError, match="unknown hypergradient solve 'lu'"):
    bilevel.make_lower_level(lambda p, x, y: 0.0, max_iter=1, tol=0.0, memory_size=1, solve="lu")


# ------------------------------------------ the upper-level loss, ||θ_a − θ_b||²


def test_param_distance():
  a = {"dense": {"kernel": jnp.ones((3, 2)), "bias": jnp.zeros(2)}, "scale": jnp.array(2.0)}
  b = {"dense": {"kernel": jnp.zeros((3, 2)), "bias": jnp.full(2, 3.0)}, "scale": jnp.array(0.5)}
  np.testing.assert_allclose(bilevel.param_distance(a, b), 6 * 1 + 2 * 9 + 1.5**2)
  np.testing.assert_allclose(bilevel.param_distance(a, a), 0.0)
  np.testing.assert_allclose(bilevel.param_distance(a, b), bilevel.param_distance(b, a))
  assert bilevel.param_distance(a, b).shape == ()
  # float16 leaves are promoted: 2 * 300^2 overflows float16 but not float32.
  half = bilevel.param_distance([np.full(2, 300, np.float16)], [np.zeros(2, np.float16)])
  np.testing.assert_allclose(half, 2 * 300.0**2)


def test_param_distance_mismatch_errors():
  a = {"w": jnp.ones((3, 2)), "b": jnp.zeros(2)}
  with pytest.raises(ValueError, match="structures differ"):
    bilevel.param_distance(a, {"w": jnp.ones((3, 2))})
  with pytest.raises(ValueError, match=r"\['w'\].*\(3, 2\).*\(2, 3\)"):
    bilevel.param_distance(a, {"w": jnp.ones((2, 3)), "b": jnp.zeros(2)})
