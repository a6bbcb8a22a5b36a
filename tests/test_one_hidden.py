"""One-hidden-layer victim (eq. 9): its hypergradient, the three linear solves, damping."""

import functools

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import optax.tree
import pytest
from jax.flatten_util import ravel_pytree

from trdr import models, victim
from trdr.attacks import bilevel, linear_solve

WD = 0.1


@pytest.fixture(scope="module")
def problem(x64_module):
  """The softplus victim of `_problem`, trained once for the module's float64 tests."""
  return _problem("softplus")


def _problem(activation="softplus", n=6, shape=(4, 4, 1), width=8, seed=0, tol=1e-12):
  """A small one-hidden victim in float64: θ* trained on x_true, and an attack iterate x."""
  rng = np.random.default_rng(seed)
  x_true = jnp.asarray(rng.uniform(size=(n, *shape)))
  labels = jnp.asarray(np.repeat([-1.0, 1.0], n // 2))
  model = models.build_model(ml_collections.ConfigDict(
      {"arch": "one_hidden", "width": width, "activation": activation}))
  apply_fn = lambda p, x: model.apply({"params": p}, x)
  energy_fn = functools.partial(victim.energy, apply_fn=apply_fn, weight_decay=WD)
  theta0 = models.init_params(model, jax.random.key(seed), shape, jnp.float64)
  theta_star, info = jax.jit(lambda p: victim.minimize_energy(
      lambda q: energy_fn(q, x_true, labels), p, max_iter=2000, tol=tol))(theta0)
  assert info.grad_norm < tol
  x = jnp.clip(x_true + 0.1 * jnp.asarray(rng.normal(size=x_true.shape)), 0.0, 1.0)
  return x, labels, theta_star, energy_fn


@functools.cache
def _hypergradient_program(solve, energy_fn, **kw):
  """(x, labels, θ*) ↦ ∇x ||θ* − θ(x)||², the lower level warm-started from θ*; jitted once
  per setting (jit caches by function identity), so tests that share one compile once."""
  lower_level = bilevel.make_lower_level(energy_fn, max_iter=2000, tol=1e-12, memory_size=10,
                                         solve=solve, **kw)
  loss = lambda z, labels, theta_star: bilevel.param_distance(
      theta_star, lower_level(theta_star, z, labels)[0])
  return jax.jit(jax.grad(loss))


def _hypergradient(solve, x, labels, theta_star, energy_fn, **kw):
  return _hypergradient_program(solve, energy_fn, **kw)(x, labels, theta_star)


def _rel_err(a, b):
  return float(jnp.linalg.norm((a - b).ravel()) / jnp.linalg.norm(b.ravel()))


def _cosine(a, b):
  a, b = a.ravel(), b.ravel()
  return float(jnp.vdot(a, b) / (jnp.linalg.norm(a) * jnp.linalg.norm(b)))


@functools.partial(jax.jit, static_argnums=(3,))
def _dense_hypergradient(x, labels, theta_star, energy_fn, damping):
  """−(∂x∇θE)ᵀ (H + μI)⁻¹ ∇θ l with every matrix formed densely (a few hundred entries);
  also H, M = ∂x∇θE [P, x.size] and b = ∇θ l."""
  theta, _ = victim.minimize_energy(lambda p: energy_fn(p, x, labels), theta_star,
                                    max_iter=2000, tol=1e-13)
  flat, unravel = ravel_pytree(theta)
  grad_theta = lambda f, z: ravel_pytree(jax.grad(energy_fn)(unravel(f), z, labels))[0]
  hessian = jax.jacfwd(grad_theta)(flat, x)                       # [P, P]
  mixed = jax.jacfwd(grad_theta, argnums=1)(flat, x).reshape(flat.size, -1)  # [P, x.size]
  d_theta = 2.0 * (flat - ravel_pytree(theta_star)[0])           # ∇θ ||θ* − θ||²
  v = jnp.linalg.solve(hessian + damping * jnp.eye(flat.size), d_theta)
  return -(mixed.T @ v).reshape(x.shape), hessian, mixed, d_theta


def test_one_hidden_module_shapes_and_checks():
  model = models.build_model(ml_collections.ConfigDict(
      {"arch": "one_hidden", "width": 5, "activation": "relu"}))
  params = models.init_params(model, jax.random.key(0), (2, 3, 1))
  assert jax.tree.map(jnp.shape, params) == {
      "hidden": {"kernel": (6, 5), "bias": (5,)}, "output": {"kernel": (5, 1), "bias": (1,)}}
  x = jax.random.uniform(jax.random.key(1), (4, 2, 3, 1))
  # Φ(x) = σ(x W1ᵀ + b1) W2ᵀ + b2 with σ = ReLU (eq. 9).
  h = jax.nn.relu(x.reshape(4, -1) @ params["hidden"]["kernel"] + params["hidden"]["bias"])
  expected = (h @ params["output"]["kernel"])[:, 0] + params["output"]["bias"][0]
  # Float32 (x64 off): each evaluation rounds sums of 6 + 1 and 5 + 1 terms, so it is within
  # ~13u·S of the exact Φ (u = 2^-24, S = (|x||W1| + |b1|)|W2| + |b2|, ReLU 1-Lipschitz);
  # the logits cancel (|Φ| down to S/300 here), so the bound is absolute. A wrong
  # activation or a missing layer gives O(S).
  a = lambda t: np.abs(np.asarray(t, np.float64))
  scale = (a(x.reshape(4, -1)) @ a(params["hidden"]["kernel"]) + a(params["hidden"]["bias"])
           ) @ a(params["output"]["kernel"])[:, 0] + a(params["output"]["bias"][0])
  gap = np.abs(np.asarray(model.apply({"params": params}, x), np.float64)
               - np.asarray(expected, np.float64))
  assert np.all(gap <= 2 * 13 * np.finfo(np.asarray(expected).dtype).eps / 2 * scale), gap
  with pytest.raises(ValueError, match="unknown activation 'tanh'"):
    models.OneHidden(width=3, activation="tanh").init(jax.random.key(0), x)


# Slow: the one-hidden lower level solved to 1e-12, hypergradient programs of each solve.
@pytest.mark.slow
def test_hypergradient_matches_central_finite_differences(problem):
  """CG hypergradient of the non-convex one-hidden lower level against central differences
  over every pixel, float64, activation softplus.

  A smooth activation because eq. 7 needs E twice differentiable, which ReLU is not (its
  ∇²θθE ignores the kinks; a finite difference across a kink is not a derivative); GELU
  passes the same test (checked by hand, left out for time). The lower level is
  warm-started from θ* both in the hypergradient and in the finite differences, so both
  follow the same local minimum.
  """
  activation = "softplus"
  x, labels, theta_star, energy_fn = problem
  grad = _hypergradient("cg", x, labels, theta_star, energy_fn, cg_tol=1e-14)

  def loss(z):
    theta, _ = victim.minimize_energy(lambda p: energy_fn(p, z.reshape(x.shape), labels),
                                      theta_star, max_iter=2000, tol=1e-13)
    return bilevel.param_distance(theta_star, theta)

  eps = 1e-5
  flat = jnp.asarray(x).ravel()
  shifts = eps * jnp.eye(flat.size)
  losses = jax.jit(lambda zs: jax.lax.map(loss, zs))(
      jnp.concatenate([flat + shifts, flat - shifts]))
  fd = (losses[:flat.size] - losses[flat.size:]) / (2 * eps)
  err = _rel_err(grad.ravel(), jnp.asarray(fd))
  # Truncation ~eps²|∂³l| and rounding ~u·l/eps are < 1e-10 per entry. Near this strict
  # minimum (λ_min(H) ≈ 0.021, next test) a re-solve stopped at ||∇E|| < 1e-13 is ~5e-12 from
  # θ(x), moving l ≈ 0.34 by ≤ 2√l·5e-12: ≤ 6e-7 per entry after /(2 eps), 6e-6 over the 96,
  # 3e-6 of ||∇l|| ≈ 2 (the hypergradient's own solves, see below: ~1e-9). Wrong terms: O(1).
  assert err < 1e-4, f"{activation}: relative error to central differences {err:.2e}"


# Slow: the one-hidden lower level solved to 1e-12, hypergradient programs of each solve.
@pytest.mark.slow
def test_cg_neumann_and_quasi_newton_agree(problem):
  """The three solves on the same one-hidden problem, against the dense exact solution.

  Error argument. λ(H) ∈ [0.021, 4.0] (the non-convex term pulls λ_min below wd = 0.1),
  κ ≈ 190. The hypergradient is −Mᵀv, v = H⁻¹b: an error e in v moves it by ||Mᵀe|| ≤
  A||Mᵀv|| ||e||/||v||, A = ||M|| ||v||/||Mᵀv|| (≈ 10, computed below). CG stops at
  relative residual 1e-14: ||e|| ≤ κ·1e-14||v||, A·κ·1e-14 ≈ 2e-11. The lower levels (tol
  1e-12 here, 1e-13 in the dense one) lie within ~1.1e-12/λ_min ≈ 5e-11 of each other,
  1e-10 of ||θ(x) − θ*|| ≈ 0.58, ~1e-9 after A: so CG < 1e-8. Neumann, K = 3000 terms,
  α = 1/(1.1 λ_est) with λ_est ≤ λ_max (power iteration): ||e|| = ||(I − αH)^K v|| ≤
  (1 − λ_min/(1.1 λ_max))^K ||v|| ≈ 7e-7||v||, so A times that, plus CG's 1e-8 (measured
  4e-7). Quasi-Newton (10 L-BFGS pairs from the lower-level solve, no Hessian product) is
  an approximation, not a rounding error: its cosine to the exact hypergradient must beat
  the direction without curvature (v = b, the pairs unused: 0.88 here; measured 0.95) and
  exceed 0.7 (0.81 on another seed).
  """
  x, labels, theta_star, energy_fn = problem
  exact, hessian, mixed, d_theta = _dense_hypergradient(x, labels, theta_star, energy_fn,
                                                        damping=0.0)
  eigenvalues = np.linalg.eigvalsh(hessian)
  assert eigenvalues.min() > 0  # a strict local minimum: H invertible (weight decay)
  cg = _hypergradient("cg", x, labels, theta_star, energy_fn, cg_tol=1e-14)
  neumann = _hypergradient("neumann", x, labels, theta_star, energy_fn, neumann_steps=3000)
  qn = _hypergradient("quasi_newton", x, labels, theta_star, energy_fn)
  print(f"λ(H) in [{eigenvalues.min():.3g}, {eigenvalues.max():.3g}]; rel. error to exact: "
        f"cg {_rel_err(cg, exact):.1e}, neumann {_rel_err(neumann, exact):.1e}, quasi-Newton "
        f"{_rel_err(qn, exact):.1e} (cosine {_cosine(qn, exact):.4f})")
  alpha = 1.0 / (1.1 * eigenvalues.max())
  v = np.linalg.solve(hessian, d_theta)
  amplification = np.linalg.norm(mixed, 2) * np.linalg.norm(v) / np.linalg.norm(mixed.T @ v)
  bound = amplification * (1.0 - alpha * eigenvalues.min()) ** 3000
  assert _rel_err(cg, exact) < 1e-8
  assert _rel_err(neumann, exact) < bound + 1e-8
  assert _rel_err(neumann, cg) < bound + 2e-8
  no_curvature = -(mixed.T @ d_theta).reshape(x.shape)
  assert _cosine(qn, exact) > 0.7 and _cosine(qn, exact) > _cosine(no_curvature, exact)


# Slow: the one-hidden lower level solved to 1e-12, hypergradient programs of each solve.
@pytest.mark.slow
def test_damping_solves_the_shifted_system(problem):
  """With μ > 0 every solve targets (H + μI)⁻¹: CG and Neumann match the dense damped
  hypergradient, which differs from the undamped one."""
  x, labels, theta_star, energy_fn = problem
  mu = 0.5
  exact_damped = _dense_hypergradient(x, labels, theta_star, energy_fn, damping=mu)[0]
  exact = _dense_hypergradient(x, labels, theta_star, energy_fn, damping=0.0)[0]
  assert _rel_err(exact_damped, exact) > 1e-2  # the damping is not negligible here
  cg = _hypergradient("cg", x, labels, theta_star, energy_fn, cg_tol=1e-14, damping=mu)
  neumann = _hypergradient("neumann", x, labels, theta_star, energy_fn, damping=mu,
                           neumann_steps=1000)
  # As in the test above, with κ(H + μI) ≤ 4.5/0.52 ≈ 9: CG's 1e-14 residual gives ~1e-12,
  # the lower levels' ≲ 1e-9. Neumann's K = 1000 terms contract by (1 − 0.52/(1.1·4.5))^K
  # ≈ e^-110, so only those remain (rounding over K terms: ~K·u·κ ≈ 1e-12).
  assert _rel_err(cg, exact_damped) < 1e-8
  assert _rel_err(neumann, exact_damped) < 1e-8


# Slow: the one-hidden lower level solved to 1e-12, hypergradient programs of each solve.
@pytest.mark.slow
def test_damped_quasi_newton_pairs_satisfy_the_shifted_secant_equation(problem):
  """After `damp_memory`, the two-loop recursion maps y_k + μ s_k to s_k exactly: it is an
  inverse-Hessian approximation of H + μI."""
  x, labels, theta_star, energy_fn = problem
  _, info = jax.jit(lambda t: victim.minimize_energy(
      lambda p: energy_fn(p, x, labels), t, max_iter=6, tol=0.0, memory_size=4))(theta_star)
  mu = 0.3
  damped = jax.jit(linear_solve.damp_memory)(info.memory, mu)
  newest = (int(info.memory.count) - 2) % 4
  pick = lambda tree: jax.tree.map(lambda leaf: leaf[newest], tree)
  s, y = pick(info.memory.diff_params_memory), pick(info.memory.diff_updates_memory)
  hy = jax.jit(linear_solve.quasi_newton_inverse_hessian)(damped, optax.tree.add_scale(y, mu, s))
  # Float64 rounding as in test_bilevel's secant test: ≲ P·u·κ(1 + κ)||s||, P = 145, u =
  # 1.1e-16, κ ≈ 4.3/0.32 ≈ 13 for the pairs of H + μI near θ* (λ(H) ∈ [0.021, 4.0], μ = 0.3):
  # ≈ 3e-12 ||s||. A pair left undamped, or a wrong slot or weight, gives O(μ) or O(1).
  assert optax.tree.norm(optax.tree.sub(hy, s)) < 1e-10 * optax.tree.norm(s)
  # Empty slots stay empty; μ = 0 leaves the pairs as they were.
  assert np.array_equal(np.asarray(damped.weights_memory) == 0,
                        np.asarray(info.memory.weights_memory) == 0)
  # With μ = 0, y + 0·s = y exactly; ρ = 1/(sᵀy) is summed in another order than optax's, each
  # sum within P·u·Σ|s∘y| of the exact one (relative: P·u·c, c = Σ|s∘y|/|sᵀy|), plus the
  # division's u, twice.
  undamped = linear_solve.damp_memory(info.memory, 0.0)
  jax.tree.map(np.testing.assert_array_equal, undamped.diff_updates_memory,
               info.memory.diff_updates_memory)
  flat = lambda mem: np.concatenate([np.asarray(leaf).reshape(4, -1)
                                     for leaf in jax.tree.leaves(mem)], axis=1)
  sy = flat(info.memory.diff_params_memory) * flat(info.memory.diff_updates_memory)
  c = np.max(np.abs(sy).sum(1) / np.maximum(np.abs(sy.sum(1)), np.finfo(np.float64).tiny))
  u = np.finfo(np.float64).eps / 2
  np.testing.assert_allclose(undamped.weights_memory, info.memory.weights_memory,
                             rtol=2 * (sy.shape[1] * u * c + u))


def test_neumann_series_on_a_well_conditioned_matrix(x64):
  """K terms give exactly (I − (I − αA)^K) A⁻¹ b, which tends to A⁻¹ b (cond(A) = 10)."""
  rng = np.random.default_rng(0)
  q, _ = np.linalg.qr(rng.normal(size=(20, 20)))
  a = q @ np.diag(np.linspace(1.0, 10.0, 20)) @ q.T
  b = {"u": jnp.asarray(rng.normal(size=12)), "v": jnp.asarray(rng.normal(size=(2, 4)))}
  flat_b, unravel = ravel_pytree(b)
  matvec = lambda t: unravel(jnp.asarray(a) @ ravel_pytree(t)[0])
  alpha = 1.0 / 11.0
  for steps in (1, 5, 300):
    approx = ravel_pytree(linear_solve.neumann_inverse(matvec, b, alpha=alpha, steps=steps))[0]
    truncated = (np.eye(20) - np.linalg.matrix_power(np.eye(20) - alpha * a, steps)
                 ) @ np.linalg.solve(a, flat_b)
    # Both exact but for float64 rounding: each term's 20-term products err by ~20u, and
    # (I − αA), norm 10/11, contracts what came before: ≲ α·11²·20u||b|| ≈ 3e-14||b|| ≈ 1e-13
    # (||b|| ≈ 4.5; the reference's matrix power and solve, cond 10: less). K ± 1 terms at
    # K = 1 or 5 move the result by ~(10/11)^K, O(0.1).
    np.testing.assert_allclose(approx, truncated, rtol=1e-10, atol=1e-12)
  # Truncation (10/11)^300 ≈ 4e-13 relative, plus the rounding above (≤ 1e-13/||A⁻¹b||,
  # ||A⁻¹b|| ≥ ||b||/10): ≲ 7e-13 relative in norm.
  exact = np.linalg.solve(a, flat_b)
  assert np.linalg.norm(approx - exact) < 1e-11 * np.linalg.norm(exact)
  # The power iteration behind the default α finds λ_max = 10 from below: the Rayleigh
  # quotient is ≤ λ_max but for rounding (~20u·10 ≈ 2e-14) and after 200 products from b
  # is off by ≲ 10·tan²∠(b, q_max)·(λ2/λ1)^400 ≈ 4e-8·tan² (λ2 ≈ 9.53): 9.9 allows tan² ~ 1e6.
  lam = float(linear_solve.largest_eigenvalue(matvec, b, steps=200))
  assert 9.9 < lam <= 10.0 + 1e-9
  with pytest.raises(ValueError, match="at least 1 term"):
    linear_solve.neumann_inverse(matvec, b, alpha=alpha, steps=0)


def test_bad_damping_or_neumann_settings_are_rejected():
  for kw in ({"damping": -1.0}, {"neumann_alpha": -0.1}, {"neumann_steps": 0}):
    with pytest.raises(ValueError, match="need damping >= 0"):
      bilevel.make_lower_level(lambda p, x, y: 0.0, max_iter=1, tol=0.0, memory_size=1,
                               solve="neumann", **kw)
