"""Section 2: the three hypergradient solves, printed as one Markdown table.

Conjugate gradient on exact Hessian-vector products, quasi-Newton from the lower-level
L-BFGS pairs (Runkel eq. 7) and the truncated Neumann series (Lorraine et al. 2020)
(`trdr.attacks.linear_solve`), on each victim config given (the affine and the one-hidden
victim), in float64, lower level started at θ*, at three attack iterates (noise,
partition, their 50/50 mixture): time per hypergradient (lower-level solve from θ* +
backward pass; the backward part is the difference to the lower-level solve timed alone),
and cosine / relative error against CG converged to tol 1e-10.
"""

import functools

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from benchmarks import common
from trdr import victim
from trdr.attacks import bilevel
from trdr.attacks import init as inits

ROWS = (  # (label, solve, settings overriding the config's hypergradient section)
    ("cg, reference (tol 1e-10)", "cg", {"cg_tol": 1e-10, "cg_maxiter": 20000}),
    ("cg (config)", "cg", {}),
    ("quasi_newton", "quasi_newton", {}),
    ("neumann (config)", "neumann", {}),
)


def table(config: ml_collections.ConfigDict, repeats: int) -> list[tuple]:
  """Per `ROWS` entry of one victim config, in float64 (needs ``jax_enable_x64``): (label,
  seconds per hypergradient, of them beyond the lower-level solve — the backward pass with
  its linear solve —, cosines float[3], relative errors float[3] to the first row)."""
  config = config.copy_and_resolve_references()
  config.float64 = True
  task, target = common.trained_victim(config)
  theta_star, dtype = target.params, jnp.float64
  labels = jnp.asarray(task.train_labels, dtype)
  x_rnd = inits.uniform(jax.random.key(config.seed), task.train_images.shape, task.mean, dtype)
  x_part = jnp.asarray(task.partition_images, dtype)
  batch = jnp.stack([x_rnd, x_part, 0.5 * (x_rnd + x_part)])
  energy_fn = functools.partial(victim.energy, apply_fn=target.apply,
                                weight_decay=target.config.weight_decay)
  ll, hg = config.attack.lower_level, config.attack.hypergradient
  lower_level = functools.partial(bilevel.make_lower_level, energy_fn, max_iter=ll.max_iter,
                                  tol=ll.tol, memory_size=ll.memory_size)
  forward_only = lower_level(solve="cg")
  forward_seconds, _ = _per_iterate(lambda x: forward_only(theta_star, x, labels)[0], batch,
                                    repeats)
  reference, rows = None, []
  for label, solve, overrides in ROWS:
    lower = lower_level(solve=solve, **{
        "cg_tol": hg.cg_tol, "cg_maxiter": hg.cg_maxiter, "damping": hg.damping,
        "neumann_alpha": hg.neumann_alpha, "neumann_steps": hg.neumann_steps, **overrides})
    seconds, grads = _per_iterate(_hypergradient(lower, theta_star, labels), batch, repeats)
    grads = np.asarray(grads).reshape(batch.shape[0], -1)
    if reference is None:
      reference = grads
    norms = np.linalg.norm(grads, axis=1) * np.linalg.norm(reference, axis=1)
    cos = np.sum(grads * reference, 1) / norms
    rel = np.linalg.norm(grads - reference, axis=1) / np.linalg.norm(reference, axis=1)
    rows.append((label, seconds, seconds - forward_seconds, cos, rel))
  return rows


def _hypergradient(lower, theta_star, labels):
  """x -> ∇x ||θ* − θ(x)||² (Runkel eq. 2), the lower level ``lower`` started at θ*."""
  distance = lambda x: bilevel.param_distance(theta_star, lower(theta_star, x, labels)[0])
  return jax.grad(distance)


def _per_iterate(fn, batch, repeats: int):
  """(median seconds per iterate, results) of ``fn`` jitted and mapped over ``batch``."""
  mapped = jax.jit(lambda xs: jax.lax.map(fn, xs))
  seconds = common.median_time(lambda: mapped(batch), repeats) / batch.shape[0]
  return seconds, mapped(batch)


def run(configs: list[ml_collections.ConfigDict], repeats: int) -> None:
  """Prints section 2 as one Markdown table over the victim ``configs``."""
  with common.x64(True):
    print("\n== hypergradient solves, float64, lower level started at θ*, iterates: noise, "
          f"partition, 50/50 mix (backend {jax.default_backend()}) ==\n")
    print("| victim | solve | ms / hypergradient | of which backward | cosine to reference "
          "(noise, partition, mix) | relative error (noise, partition, mix) |")
    print("|---|---|---:|---:|---|---|")
    for config in configs:
      v, hg = config.victim, config.attack.hypergradient
      size = (f"width {v.width}, {v.activation}, " if v.arch == "one_hidden" else "") + (
          f"n = {2 * config.data.n_per_class}")
      for label, seconds, backward, cos, rel in table(config, repeats):
        if label.startswith("cg (config)"):
          label = f"cg (tol {hg.cg_tol:g}, maxiter {hg.cg_maxiter})"
        elif label.startswith("neumann"):
          alpha = "1/(1.1 λ_max)" if hg.neumann_alpha == 0 else f"{hg.neumann_alpha:g}"
          label = f"neumann (K = {hg.neumann_steps}, α = {alpha})"
        print(f"| {v.arch} ({size}) | {label} | {1e3 * seconds:.1f} | {1e3 * backward:.1f} | "
              f"{', '.join(f'{c:.4f}' for c in cos)} | {', '.join(f'{r:.1e}' for r in rel)} |")
