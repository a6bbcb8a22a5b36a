"""Linear solves H⁻¹v for the implicit hypergradient of the bilevel attack.

Runkel et al. 2024, eq. 7, needs (∇²θθE)⁻¹ applied to ∇θ l at the lower-level solution.
`LINEAR_SOLVES` holds three ways, each ``solve(matvec, b, memory, **settings)``:

  * ``"cg"``: conjugate gradient on exact Hessian-vector products (jaxopt.linear_solve);
  * ``"quasi_newton"``: the L-BFGS inverse-Hessian approximation built from the lower-level
    solver's own curvature pairs — the H^{k+1} of eq. 7 (Lorraine et al. 2020 use the
    same idea) — a two-loop recursion, no Hessian-vector product;
  * ``"neumann"``: the truncated Neumann series H⁻¹b ≈ α Σ_{j<K} (I − αH)^j b of Lorraine
    et al. 2020 (the paper's reference [15]), K Hessian-vector products; with α from
    `largest_eigenvalue` (power iteration) when not given.

`damp_memory` makes the quasi-Newton pairs those of H + μI (the damped hypergradient).
"""

from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
import optax.tree
from jaxopt import linear_solve as jaxopt_linear_solve

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
  return jaxopt_linear_solve.solve_cg(matvec, b, tol=tol, maxiter=maxiter)


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
