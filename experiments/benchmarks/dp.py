"""Section: DP-SGD's clipped sum one example at a time vs all n vmapped.

What `trdr.victim.dp_sgd.MICROBATCH_SIZE` is for, measured: the sum Σ_i ḡ_i of the per-example
gradients each clipped to C (`trdr.victim.dp_sgd.clipped_sum`, jax-privacy's
``clipping.clipped_grad``), the part of a DP-SGD step whose cost grows with n, for each
victim of ``config`` (configs/dp.py:cpu: the affine victim of eq. 8, n = 100, float64, and
Haim et al.'s MLP of widths (256, 256), n = 100, float32), as the DP study builds them
(`trdr.studies.dp.victim_config` at its first privacy level, seed 0; θ as initialised:
the cost does not depend on its values), the whole batch sampled (q = 1, the config's
recipe), C = ``config.dp[victim].clip_norm``. Two ways, each one jitted call:

  * ``microbatch_size=1`` (trdr's): a `jax.lax.map` of single-example gradients, each
    clipped and added to the running sum;
  * ``microbatch_size=None``: all n per-example gradients vmapped at once (n copies of θ),
    clipped, then summed.

Before anything is timed, the two sums are checked to agree to the rounding of the dtype,
at the config's C and at C = the median per-example norm (half the examples clipped), and
so are the per-example norms (`check_agreement`, gate `RTOL_EPS`); a larger difference
raises. Then both are timed alternately (`common.timed_alternately`: load hits both
alike), each after one call that compiles; the table gives the median milliseconds per
call and the ratio vmapped / one at a time.
"""

import functools
import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from benchmarks import common
from trdr import data, models
from trdr.studies import dp as dp_study
from trdr.victim import cache, dp_sgd
from trdr.victim.objective import GD_LOSSES

# Agreement gate, in units of the dtype's ε times the scale of `check_agreement`. The two
# ways add the same n clipped gradients in another order (the running sum vs one reduction
# over the vmapped axis: a rounding error of at most (n − 1) ε, typically √n ε, of
# Σ_i |ḡ_i|, n = 100) and compute each ḡ_i by other kernels (a single-example backward
# pass vs a batched one: dot products of up to 3,072 terms, and the norm's sum over all of
# θ in the clipping factor, typically √L ε each). So a few hundred ε at most; a wrong sum
# (an example dropped, counted twice or left unclipped) moves some entry by about one
# term, ~1/n = 10⁻² of the scale, far above the gate in float32 (1024 ε ≈ 1.2·10⁻⁴).
RTOL_EPS = 1024


def check_agreement(pairs: dict, dtype) -> dict[str, float]:
  """max |Δ| / scale of each pair of ``pairs``, name -> (one at a time's array, vmapped's
  array, scale: the magnitude the rounding errors are relative to).

  Raises:
    ValueError: a pair differs by more than `RTOL_EPS` ε of ``dtype`` times its scale, or
      is not finite.
  """
  return common.relative_differences(pairs, dtype, RTOL_EPS, "the clipped sums", "the same sum")


def _flat(tree) -> np.ndarray:
  return np.concatenate([np.ravel(np.asarray(t)) for t in jax.tree.leaves(tree)])


def _victim(config: ml_collections.ConfigDict, name: str):
  """(apply_fn, loss, θ0, images, labels, C, dtype) of victim ``name`` of the DP ``config``
  at its first privacy level, seed 0 (call inside `common.x64` of its float64)."""
  c = dp_study.victim_config(config, name, next(iter(dp_study.levels(config))), 0)
  dtype = jnp.float64 if c.float64 else jnp.float32
  task = data.make_task(c.data)
  model = models.build_model(c.victim)
  images = jnp.asarray(task.train_images, dtype)
  params = cache.initial_params(c.victim, model, images.shape[1:], dtype)
  loss = GD_LOSSES[dp_sgd.loss_name(c.victim)]
  apply_fn = lambda p, x: model.apply({"params": p}, x)
  return (apply_fn, loss, params, images, jnp.asarray(task.train_labels, dtype),
          float(c.victim.dp.clip_norm), dtype)


def _measure(config: ml_collections.ConfigDict, name: str, repeats: int) -> dict:
  """The row of victim ``name``: sizes, clipped fraction, agreement and medians in ms."""
  apply_fn, loss, params, images, labels, clip, dtype = _victim(config, name)
  n = images.shape[0]
  weights = jnp.ones((n,), dtype)
  ways = {size: jax.jit(functools.partial(dp_sgd.clipped_sum, apply_fn, loss,
                                          microbatch_size=size))
          for size in (dp_sgd.MICROBATCH_SIZE, None)}
  one, vmapped = ways.values()
  norms = np.asarray(one(params, images, labels, weights, jnp.asarray(clip, dtype))[1])
  differences = {}
  for label, c in ((f"C = {clip:g}", clip), ("C = median norm", float(np.median(norms)))):
    c = jnp.asarray(c, dtype)
    (s1, n1), (s2, n2) = one(params, images, labels, weights, c), vmapped(
        params, images, labels, weights, c)
    each = dp_sgd.clipped_each(apply_fn, loss, params, images, labels, c)
    # Σ_i |ḡ_ij|, the largest over the entries j: what the sum's rounding is relative to.
    scale = float(np.max(_flat(jax.tree.map(lambda g: jnp.sum(jnp.abs(g), axis=0), each))))
    differences |= {f"{k} ({label})": d for k, d in check_agreement(
        {"sum": (_flat(s1), _flat(s2), scale),
         "norms": (n1, n2, float(np.max(np.asarray(n1))))}, dtype).items()}
  c = jnp.asarray(clip, dtype)
  times = common.timed_alternately(
      {size: (lambda way=way: way(params, images, labels, weights, c))
       for size, way in ways.items()}, repeats)
  ms = {size: 1e3 * float(np.median(t)) for size, t in times.items()}
  return {"victim": name, "n": n, "p": _flat(params).size, "dtype": jnp.dtype(dtype).name,
          "C": clip, "clipped": float(np.mean(norms > clip)), "one": ms[dp_sgd.MICROBATCH_SIZE],
          "vmapped": ms[None], "differences": differences}


def run(config: ml_collections.ConfigDict, repeats: int) -> None:
  """Prints the section for every victim of the DP study's ``config`` (``config.victims``),
  the median of ``repeats`` rounds."""
  rows = []
  for name in config.victims:
    with common.x64(bool(config.victims[name].float64)):
      rows.append(_measure(config, name, repeats))
  print(f"\n## DP-SGD's clipped sum Σ ḡ_i (`dp_sgd.clipped_sum`): one example at a time "
        f"(microbatch_size={dp_sgd.MICROBATCH_SIZE}) vs all n vmapped (None), q = 1, θ0, "
        f"median of {repeats} (backend {jax.default_backend()}, {os.cpu_count()} CPUs, load "
        f"average {os.getloadavg()[0]:.1f})\n")
  print("| victim | n | parameters | dtype | C | clipped at θ0 | one at a time, ms / call | "
        "vmapped, ms / call | vmapped / one at a time |\n"
        "|---|---:|---:|---|---:|---:|---:|---:|---:|")
  for r in rows:
    print(f"| {r['victim']} | {r['n']} | {r['p']:,} | {r['dtype']} | {r['C']:g} | "
          f"{r['clipped']:.0%} | {r['one']:.4g} | {r['vmapped']:.4g} | "
          f"{r['vmapped'] / r['one']:.2f}× |")
  print(f"\nThe same sum: max |Δ| / scale, vmapped vs one at a time (scale: max over θ's "
        f"entries of Σ_i |ḡ_i| for the sum, the largest norm for the norms; gate {RTOL_EPS} "
        "ε of each dtype): " + "; ".join(
            f"{r['victim']}: " + ", ".join(f"{k} {d:.1e}" for k, d in r["differences"].items())
            for r in rows))
