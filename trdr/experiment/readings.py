"""Which θ0 did the paper's lower level start from? Table 1's distance under each reading.

Runkel et al. (Sec. 4, bilevel experiments) solve the lower level "initialising θ by
drawing every weight independently from a standard Uniform distribution". The sentence
admits several readings, and which one the paper ran decides whether the training images
are a minimiser of the upper level l(x) = ||θ* − θ(x)||² at all (`READINGS`, each a
lower-level start of `trdr.attacks.bilevel`):

  (a) "uniform"           a fresh θ0 ~ U(0, 1) for every solve;
  (b) "victim_theta0"     the victim trained from θ0 ~ U(0, 1) (``victim.init`` "uniform"),
                          every solve restarting from that same θ0 (the adversary knows
                          the initialisation);
  (c) "uniform_once"      one θ0 ~ U(0, 1), shared by every solve;
  (d) "previous_uniform"  warm start from the previous outer iterate, the first from
                          U(0, 1): at fixed images (no attack) it is (c)'s solve, so it
                          has no row of its own here;
  (e) "theta_star"        every solve from θ* (as trdr's main job's first solve).

`table1_readings` measures, for each reading, l at the training images x_GT, at the
distinct partition and at U(0, 1) noise images (Table 1's three starts, before any
attack), with the ||∇θE|| each re-solve reached, on the one-hidden victim (the network of eq. 9)
with ReLU and softplus over several seeds. Under a reading where l(x_GT) is not the
smallest of the three, the training set is not even a minimiser of what the attack
minimises, and what the attack returns says nothing about privacy.
"""

import dataclasses
import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging

from trdr import data, models, victim
from trdr.attacks import bilevel

# reading -> (the lower-level start of `trdr.attacks.bilevel`, the victim's θ0, in words)
READINGS = {
    "a": ("uniform", "default", "a fresh θ0 ~ U(0, 1) for every solve"),
    "b": ("victim_theta0", "uniform",
          "the victim trained from θ0 ~ U(0, 1), every solve from that θ0"),
    "c": ("uniform_once", "default", "one θ0 ~ U(0, 1) shared by every solve"),
    "e": ("theta_star", "default", "every solve from θ*"),
}
IMAGE_SETS = ("ground_truth", "partition", "noise")  # Table 1's starts, before the attack


@dataclasses.dataclass(frozen=True)
class Solve:
  """One lower-level re-solve θ(x) for one image set: l = ||θ* − θ(x)||² (summed over the
  P parameters), the gradient norm ||∇θE(θ(x))|| it reached and its L-BFGS iterations."""
  distance: float
  grad_norm: float
  num_iter: int


def _victim(config: ml_collections.ConfigDict, task, init: str, directory: str):
  c = config.copy_and_resolve_references()
  c.victim.init = init
  return victim.load_or_train(c, task, os.path.join(directory, f"victim_{init}"))


def _resolver(target, labels, ll):
  """jit(x, θ0 -> (l, ||∇θE||, iterations)): θ(x) re-solved by L-BFGS from θ0."""
  def resolve(x, theta0):
    energy = lambda p: victim.energy(p, x, labels, apply_fn=target.apply,
                                     weight_decay=target.config.weight_decay)
    theta, info = victim.minimize_energy(energy, theta0, max_iter=ll.max_iter, tol=ll.tol,
                                         memory_size=ll.memory_size)
    return bilevel.param_distance(target.params, theta), info.grad_norm, info.num_iter
  return jax.jit(resolve)


def solves(config: ml_collections.ConfigDict, directory: str,
           order: tuple[str, ...] = tuple(READINGS), on_solve=None) -> dict:
  """Every reading's re-solves for one victim config (one seed, one activation).

  Args:
    config: a bilevel experiment config (configs/bilevel_one_hidden.py): its victim, data,
      seed (the U(0, 1) draws of θ0 and of the noise images) and lower level (max_iter,
      tol, memory_size; the L-BFGS solver).
    directory: where the two victims (default and U(0, 1) θ0) are cached.
    order: the readings (keys of `READINGS`), solved in this order (a run stopped early,
      e.g. `experiments/gpu_check.py` at its time limit, holds the first ones).
    on_solve: called with the result so far (the dict returned below) after the victims
      are trained and after every re-solve, so that a caller can keep it; None: not called.
  Returns:
    {"readings": {reading: {image set: `Solve` as a dict}}, "victims": {init: training
     report}, "parameters": P}.
  Raises:
    ValueError: ``order`` names a reading not in `READINGS` (before any work).
  """
  unknown = set(order) - set(READINGS)
  if unknown:
    raise ValueError(f"unknown readings {sorted(unknown)}; known: {list(READINGS)}")
  dtype = jnp.float64 if config.float64 else jnp.float32
  task = data.make_task(config.data)
  labels = jnp.asarray(task.train_labels, dtype)
  key = jax.random.key(config.seed)
  images = {"ground_truth": task.train_images, "partition": task.partition_images,
            "noise": np.asarray(jax.random.uniform(jax.random.fold_in(key, 1),
                                                   task.train_images.shape))}
  ll = config.attack.lower_level
  victims = {init: _victim(config, task, init, directory) for init in ("default", "uniform")}
  out = {"readings": {}, "victims": {}, "parameters": int(sum(
      leaf.size for leaf in jax.tree.leaves(victims["default"].params)))}
  for init, v in victims.items():
    out["victims"][init] = {k: v.metadata["report"][k] for k in v.metadata["report"]
                            if np.isscalar(v.metadata["report"][k])}
  if on_solve is not None:
    on_solve(out)
  for reading in order:
    start, init, _ = READINGS[reading]
    target = victims[init]
    resolve = _resolver(target, labels, ll)
    once = models.uniform_params(jax.random.fold_in(key, 2), target.params)
    out["readings"][reading] = {}
    for i, name in enumerate(IMAGE_SETS):
      if start == "uniform":
        theta0 = models.uniform_params(jax.random.fold_in(key, 10 + i), target.params)
      elif start == "victim_theta0":
        theta0 = target.initial_params(task.train_images.shape[1:])
      else:
        theta0 = once if start == "uniform_once" else target.params
      distance, grad_norm, num_iter = resolve(jnp.asarray(images[name], dtype), theta0)
      out["readings"][reading][name] = dataclasses.asdict(Solve(
          float(distance), float(grad_norm), int(num_iter)))
      logging.info("reading (%s), %s: l = %.4e, ||∇θE|| = %.2e after %d iterations",
                   reading, name, float(distance), float(grad_norm), int(num_iter))
      if on_solve is not None:
        on_solve(out)
  return out


def minimiser_readings(per_reading: dict, tol_distance: float) -> list[str]:
  """The readings under which x_GT is a minimiser of l: l(x_GT) ≤ ``tol_distance`` (l ≥ 0,
  so that is a global minimum up to the re-solve's tolerance) and below l at the other
  image sets.

  Args:
    per_reading: `solves`' "readings".
    tol_distance: what l(x_GT) may be and still count as 0.
  """
  return [r for r, sets in per_reading.items()
          if sets["ground_truth"]["distance"] <= tol_distance
          and all(sets["ground_truth"]["distance"] < sets[s]["distance"]
                  for s in IMAGE_SETS[1:])]
