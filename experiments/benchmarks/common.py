"""What the benchmark sections share: timing, a float64 scope, a fresh victim, DecoReco starts."""

import contextlib
import tempfile
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from trdr import data, victim
from trdr.attacks import ATTACKS
from trdr.attacks import init as inits


def relative_differences(pairs: dict, dtype, rtol_eps: float, what: str, differs: str
                         ) -> dict[str, float]:
  """max |Δ| / scale of each pair of ``pairs``, name -> (array, array, scale: the magnitude
  the rounding errors are relative to; None: the first array's largest entry), gated at
  ``rtol_eps`` ε of ``dtype`` before anything is timed.

  Raises:
    ValueError: a pair differs by more than the gate, or is not finite ("{what} differ in
      NAME … not {differs}; nothing timed").
  """
  gate = rtol_eps * float(jnp.finfo(dtype).eps)
  out = {}
  for name, (ours, theirs, scale) in pairs.items():
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    scale = float(np.max(np.abs(ours))) if scale is None else float(scale)
    difference = float(np.max(np.abs(ours - theirs)))
    out[name] = difference / scale if scale else (0.0 if difference == 0 else float("inf"))
    if not out[name] <= gate:
      raise ValueError(f"{what} differ in {name}: max |Δ| / {scale:.1e} = {out[name]:.1e} > "
                       f"{gate:.1e} ({rtol_eps:g} ε of {jnp.dtype(dtype).name}): not "
                       f"{differs}; nothing timed")
  return out


def median_time(fn, repeats: int) -> float:
  """Median seconds of ``repeats`` calls of ``fn`` (until its result is ready), after one
  untimed call that compiles and warms up."""
  jax.block_until_ready(fn())
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - start)
  return float(np.median(times))


def timed_alternately(calls: dict, repeats: int) -> dict[str, list[float]]:
  """Seconds of each call over ``repeats`` rounds, the calls alternating within a round (so
  load from elsewhere hits every method alike), after one untimed warm-up call each."""
  for call in calls.values():
    jax.block_until_ready(call())
  times = {k: [] for k in calls}
  for _ in range(repeats):
    for k, call in calls.items():
      start = time.perf_counter()
      jax.block_until_ready(call())
      times[k].append(time.perf_counter() - start)
  return times


@contextlib.contextmanager
def x64(enabled: bool):
  """JAX's process-wide ``jax_enable_x64`` set to ``enabled`` inside the block, restored
  after it."""
  previous = jax.config.jax_enable_x64
  jax.config.update("jax_enable_x64", bool(enabled))
  try:
    yield
  finally:
    jax.config.update("jax_enable_x64", previous)


def trained_victim(config: ml_collections.ConfigDict) -> tuple[data.Task, victim.Victim]:
  """(task, victim) of the config's data and victim, θ* trained afresh in the config's
  precision (`trdr.victim.load_or_train` into a temporary directory: nothing is reused)."""
  task = data.make_task(config.data)
  with tempfile.TemporaryDirectory() as directory:
    return task, victim.load_or_train(config, task, directory)


def bilevel_grid(config: ml_collections.ConfigDict, dtype):
  """The bilevel attack of ``config`` against a freshly trained victim, and its eq. 10
  grid of starts x0 float[G, n, H, W, C] (`trained_victim`; call inside `x64`).

  Returns:
    (target, attack, x0, key of the attack, labels float[n]).
  """
  task, target = trained_victim(config)
  print(f"victim: {target.metadata['report']}")
  grid = inits.make_grid(config.init.lambda1, config.init.lambda2)
  key_noise, key_attack = jax.random.split(jax.random.key(config.seed))
  x_gt = jnp.asarray(task.train_images, dtype)
  x_rnd = inits.uniform(key_noise, x_gt.shape, task.mean, dtype)
  x0 = inits.grid_images(grid, x_gt, jnp.asarray(task.partition_images, dtype), x_rnd)
  labels = jnp.asarray(task.train_labels, dtype)
  attack = ATTACKS["bilevel"](target, config.attack, labels, key=key_attack, box=(0.0, 1.0))
  return target, attack, x0, key_attack, labels


def decoreco_candidates(key: jax.Array, m: int, shape, sigma, dtype
                        ) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Haim et al.'s start of m candidates (``sigma`` may be traced).

  Returns:
    (images float[m, *shape] ~ N(0, σ²), lambdas float[m] ~ U(0, 1), labels float[m]:
    −1 for the first m/2, +1 for the rest).
  """
  key_x, key_lambda = jax.random.split(key)
  return (inits.gaussian(key_x, (m, *shape), sigma, dtype),
          jax.random.uniform(key_lambda, (m,), dtype),
          inits.class_labels(m, dtype))
