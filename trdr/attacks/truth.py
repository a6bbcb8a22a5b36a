"""The truth diagnostic of a DecoReco run: does the attack's objective prefer the training set?

A DecoReco count of 0 is evidence of privacy only if the attack could have found the
training images. Two things can stop it: the search (from its starts it never reaches the
training images, though its objective is lowest there), or the objective itself (the
training images are not where it is lowest, or not a point its descent stays at). Where the
training set is known (a trdr-trained θ*, or a user's θ* with ``data.training_set``), this
module tells the two apart with the attack's OWN objective (`trdr.attacks.decoreco`):

  1. `truth_candidates`: the true training images laid out as the attack's m candidates
     (the same labels, so that the λ prior has as many terms as in the attack).
  2. `fit_lambdas`: λ* = argmin_λ L(x_true, λ), the attack's loss with x fixed at the truth
     (convex in λ: a quadratic residual plus the convex λ prior), by L-BFGS; the loss at
     the truth L(x_true, λ*) is then the least the attack's objective can be there.
  3. The truth-start run: the same attack (labels, settings, steps) started at
     (x_true, λ*) and run for the run's steps; how far its images move from their start
     (SSIM) and how many training images it still recovers (best buddies).
  4. `verdict`: "search" when the truth's loss is lower than what the attack reached from
     its starts AND the truth-start run keeps at least half the training images (the
     objective prefers the truth, the search failed to reach it), "objective" otherwise
     (the objective does not single out the truth: the count says little about privacy).

The loss L is the one the attack descends (`decoreco.make_loss_and_grad`): the victim's
ReLU replaced by `decoreco.relu_sigmoid_backward` (forward ReLU, derivative sigmoid(α z)),
the λ prior w_λ Σ relu(λ_min − λ)² with the run's λ_min and w_λ, and the pixel box prior.
It is NOT `trdr.victim.kkt.fit`'s premise fit (the run's "kkt_premise"), which fits λ ≥ 0 by
NNLS with the plain ReLU derivative and no λ_min prior on the n training images: a different
objective, whose floor is not comparable with the attack's loss.

`diagnose` is the whole diagnostic of one run (summary.json's "truth"), called by
`trdr.experiment` through `trdr.attacks.protocol.AttackKind.truth` after the attack.
"""

import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from trdr.attacks import decoreco
from trdr.victim import solver

# The truth-start run's directory inside the run directory: its checkpoint and metrics.jsonl
# (an interrupted run resumes there; the checkpoint is dropped once the run has finished).
TRUTH_DIR = "truth_start"
# The SSIM level at which a training image counts as recovered when the run's config names
# none (``eval.ssim_level``): the level of every count trdr reports (Haim et al.'s 0.4).
SSIM_LEVEL = 0.4
# Haim et al.'s SSIM window, at which "kept_w3" counts beside the run's own window.
HAIM_WINDOW = 3

# What the runner (`trdr.experiment`, a later stage than the attacks) lends `diagnose`:
#   RunFn:   (attack `trdr.attacks.protocol.Attack`, states with a leading grid axis of 1)
#            -> (final states, history {metric: float[1, steps]}), the run's checkpointed
#            loop for its steps (`trdr.experiment.loop.run` in its own directory);
#   ScoreFn: (images float[m, H, W, C], starts float[m, H, W, C], display) ->
#            {"ssim_to_start", "kept", "kept_w3", ...}, the run's evaluation of them
#            (`trdr.experiment.phases.truth_scores`).
RunFn = Callable[[Any, Any], tuple[Any, dict]]
ScoreFn = Callable[[np.ndarray, np.ndarray, str], dict]


def truth_candidates(train_images, train_labels, candidate_labels) -> np.ndarray:
  """The true training images laid out as the attack's m candidates.

  For each label value, the training images of that label (in their order) repeated
  cyclically to fill the candidates of that label, in the candidates' order. Under Haim et
  al.'s recipe (m = 2n, candidates labelled −1 then +1) every training image appears twice,
  so the λ prior has as many terms as in the attack and the two losses compare.

  Args:
    train_images: float[n, H, W, C], the training images (the victim's input space).
    train_labels: [n] labels (±1, or class indices).
    candidate_labels: [m] the attack's candidates' labels.
  Returns:
    float[m, H, W, C] (train_images' dtype).
  Raises:
    ValueError: a candidate label has no training image, or the shapes do not match.
  """
  images, labels = np.asarray(train_images), np.asarray(train_labels)
  wanted = np.asarray(candidate_labels)
  if images.ndim != 4 or labels.shape != (len(images),) or wanted.ndim != 1:
    raise ValueError(f"expected train_images [n, H, W, C], train_labels [n] and "
                     f"candidate_labels [m], got {images.shape}, {labels.shape} and "
                     f"{wanted.shape}")
  out = np.empty((len(wanted), *images.shape[1:]), images.dtype)
  for value in np.unique(wanted):
    slots = np.flatnonzero(wanted == value)
    pool = np.flatnonzero(labels == value)
    if not pool.size:
      raise ValueError(f"candidate label {value.item()!r} has no training image (training labels: "
                       f"{sorted(np.unique(labels).tolist())})")
    out[slots] = images[pool[np.arange(len(slots)) % len(pool)]]
  return out


def fit_lambdas(loss_of_lambdas: Callable[[jax.Array], jax.Array], lambdas0, *,
                max_iter: int = 500, tol: float = 1e-9, memory_size: int = 20
                ) -> tuple[jax.Array, float, float]:
  """λ* = argmin_λ of the attack's loss with the images fixed, by L-BFGS.

  L(x, λ) is convex in λ for fixed x (a quadratic residual plus w_λ Σ relu(λ_min − λ)²
  and a λ-free pixel prior), so any start reaches the same minimum value. λ is
  unconstrained, as in the attack (which takes plain SGD steps on it; the prior pushes it
  above λ_min).

  Args:
    loss_of_lambdas: float[m] -> float[] (jittable), the attack's loss at fixed images.
    lambdas0: float[m], the start.
    max_iter: most L-BFGS iterations.
    tol: stop when ||∂L/∂λ|| < tol (absolute, in the loss's units per unit of λ).
    memory_size: L-BFGS curvature pairs kept (`trdr.victim.solver.minimize_energy`).
  Returns:
    (λ* float[m], L(λ*) as a float, ||∂L/∂λ|| at λ* as a float; compare it with ``tol``).
  """
  solve = jax.jit(lambda l0: solver.minimize_energy(loss_of_lambdas, l0, max_iter=max_iter,
                                                    tol=tol, memory_size=memory_size))
  lambdas, info = solve(jnp.asarray(lambdas0))
  return lambdas, float(jax.jit(loss_of_lambdas)(lambdas)), float(info.grad_norm)


def verdict(loss_at_truth: float, loss_reached: float, kept: int, n: int,
            truth_start_loss: float = float("nan")) -> dict:
  """The diagnostic's reading from its measurements.

  Args:
    loss_at_truth: the attack's loss at the true images with fitted λ (`fit_lambdas`).
    loss_reached: the loss the attack reached from its starts.
    kept: training images the truth-start run still recovers.
    n: training images.
    truth_start_loss: the loss the truth-start run ends at (NaN: not known).
  Returns:
    {"truth_lower": loss_at_truth < loss_reached (False when either is NaN),
     "stays": kept >= n / 2,
     "truth_start_lower": truth_start_loss < loss_reached and stays: the run from the
       truth ends lower than the search and still holds the training images, a lower point
       beside them that the search missed (False when either loss is NaN). It does not
       change the verdict, which compares the truth itself; the reading says it,
     "verdict": "search" (truth_lower and stays: the objective prefers the truth, the
       search failed to reach it) or "objective" (otherwise: the objective does not single
       out the truth),
     "reading": one sentence for users}.
  Raises:
    ValueError: n < 1 or kept outside [0, n].
  """
  if n < 1 or not 0 <= kept <= n:
    raise ValueError(f"need n >= 1 and 0 <= kept <= n, got kept {kept} of n {n}")
  lower = bool(loss_at_truth < loss_reached)
  stays = bool(kept >= n / 2)
  truth_start_lower = bool(stays and truth_start_loss < loss_reached)
  losses = (f"the attack's loss at the true training images ({loss_at_truth:.4g}, λ fitted) "
            f"is {'below' if lower else 'not below'} the loss it reached from its starts "
            f"({loss_reached:.4g})")
  start = f"started at them, the attack keeps {kept} of {n}"
  if lower and stays:
    reading = (f"Search failure: {losses}, and {start}: its objective prefers the training "
               "images, but the search from its starts did not reach them; other settings, "
               "steps or starts may recover more, so this count is a lower bound.")
  elif stays and truth_start_lower:
    reading = (f"The objective does not single out the training images: {losses}, though "
               f"{start} and ends lower ({truth_start_loss:.4g}) than from its starts: "
               "images beside the training images score better than what the search "
               "found, so the search fell short too, and a low count here is not evidence "
               "of privacy.")
  elif stays:
    reading = (f"The objective does not single out the training images: {losses}, though "
               f"{start}: other images score as well, so a low count here is not evidence "
               "of privacy.")
  elif lower:
    reading = (f"The objective does not keep the training images: {losses}, but {start}: "
               "its descent leaves the truth, so a low count here is not evidence of "
               "privacy.")
  else:
    reading = (f"The objective does not prefer the training images: {losses}, and {start}: "
               "a low count here is not evidence of privacy.")
  return {"truth_lower": lower, "stays": stays, "truth_start_lower": truth_start_lower,
          "verdict": "search" if lower and stays else "objective", "reading": reading}


def start_lower(diagnosis: dict) -> bool:
  """`verdict`'s truth_start_lower from a stored diagnosis (summary.json "truth", which runs
  written before the field existed lack): the truth-start run ends below the loss the
  verdict compares (the lower of "loss_reached" and "loss_reached_lambda_fitted") and keeps
  at least half the images. False where a number is missing or not finite."""
  if "truth_start_lower" in diagnosis:
    return bool(diagnosis["truth_start_lower"])
  ts = diagnosis.get("truth_start") or {}
  reached = [v for v in (diagnosis.get("loss_reached"),
                         diagnosis.get("loss_reached_lambda_fitted"))
             if v is not None and np.isfinite(v)]
  if "loss" not in ts or "kept" not in ts or "n" not in ts or not reached:
    return False
  return bool(ts["kept"] >= ts["n"] / 2 and ts["loss"] < min(reached))


def _attack_loss(target, attack_config, labels) -> tuple[Callable, Callable]:
  """(loss(images, λ) -> float[], prior(images, λ) -> float[]): the attack's own loss at the
  configured settings (α, λ_min) and its prior terms alone."""
  a = attack_config
  hp = decoreco.Hyperparameters(*(float(a[k]) for k in decoreco.Hyperparameters._fields))
  loss_and_grad = decoreco.make_loss_and_grad(target, a, labels)
  weight = 0.0 if a.form == "gradient_norm" else float(a.lambda_weight)  # λ unused there

  def loss(images, lambdas):
    return loss_and_grad(images, lambdas, jnp.asarray(hp.alpha, images.dtype),
                         jnp.asarray(hp.lambda_min, images.dtype))[0]

  def prior(images, lambdas):
    return decoreco.prior_penalty(images, lambdas, x_min=a.x_min, x_max=a.x_max,
                                  lambda_min=hp.lambda_min, lambda_weight=weight)
  return loss, prior


def loss_at(target, attack_config, labels, *images, max_iter: int = 500,
            tol: float = 1e-9) -> list[dict]:
  """The attack's loss at each of the fixed ``images`` (each float[m, H, W, C]) with λ
  fitted as `fit_lambdas` fits it (from λ = 1/2, the mean of the attack's U(0, 1) draw);
  one compiled solve for all of them (the images are its argument, not constants).

  Returns:
    One dict per image set: {"loss": L(x, λ*), "residual": its residual term alone (L minus
    the pixel and λ priors), "lambda_fit_grad_norm": ||∂L/∂λ|| at λ*,
    "lambda_fit_iterations": the L-BFGS iterations it took, "lambdas": λ*
    float[m] (an array)}.
  """
  loss, prior = _attack_loss(target, attack_config, labels)

  @jax.jit
  def fit(x):
    lambdas, info = solver.minimize_energy(lambda lam: loss(x, lam),
                                           jnp.full(x.shape[:1], 0.5, x.dtype),
                                           max_iter=max_iter, tol=tol, memory_size=20)
    return lambdas, loss(x, lambdas), prior(x, lambdas), info.grad_norm, info.num_iter

  out = []
  for x in images:
    lambdas, value, penalty, grad_norm, iterations = fit(jnp.asarray(x))
    out.append({"loss": float(value), "residual": float(value - penalty),
                "lambda_fit_grad_norm": float(grad_norm),
                "lambda_fit_iterations": int(iterations), "lambdas": lambdas})
  return out


def diagnose(target, attack_config, labels, task, *, history: dict, images, dtype,
             run: RunFn, score: ScoreFn, key=None) -> dict:
  """The truth diagnostic of one DecoReco run (module docstring), logged in one line.

  Args:
    target: θ*, the `trdr.victim.Victim` the run attacked.
    attack_config: the run's attack section, as the attack was built from (its settings
      applied: `trdr.experiment.attack_config`).
    labels: float[m] (±1) or int[m], the attack's candidates' labels.
    task: the run's `trdr.data.Task`; its training set is θ*'s (the caller checks:
      `training_set_known`).
    history: the run's loss history {metric: float[G, steps]} (`trdr.experiment.loop.run`;
      the first metric is the attack's objective before each step).
    images: float[G, m, H, W, C], the attack's final images (victim input space).
    dtype: the run's float dtype.
    run: `RunFn`, the run's loop for its steps (the truth-start run).
    score: `ScoreFn`, the run's evaluation of the truth-start run's images.
    key: the key of the attack's λ draw; unused (the truth start takes λ* instead).
  Returns:
    {"truth": {"loss_at_truth", "residual_at_truth", "lambda_fit_grad_norm",
    "lambda_fit_iterations",
    "loss_reached" (the attack's objective before its last step, the history's last
    value, at its own λ; the minimum over G starts), "loss_reached_lambda_fitted" (the
    attack's loss at its final images with λ fitted as at the truth; the first start's),
    "truth_start": {"loss" (its objective before its last step), "ssim_to_start",
    "kept", "kept_w3" (`ScoreFn`), "n", "diverged"}, "seconds", and `verdict`'s keys}}. The
    verdict compares the truth's loss with the lower of loss_reached and
    loss_reached_lambda_fitted, so that both sides have λ at its best (a non-finite one
    left out; both: +inf, a search that diverged is lower than nothing).
  """
  del key
  began = time.time()
  a = attack_config
  labels = jnp.asarray(labels)
  x_true = jnp.asarray(truth_candidates(task.train_images, task.train_labels, labels), dtype)
  reached_images = jnp.asarray(np.asarray(images)[0], dtype)
  at_truth, at_reached = loss_at(target, a, labels, x_true, reached_images)
  objective = np.asarray(history[next(iter(history))], np.float64)
  finite = objective[:, -1][np.isfinite(objective[:, -1])]
  loss_reached = float(np.min(finite)) if finite.size else float("nan")
  logging.info("Truth diagnostic: the attack's loss at the true training images %.6g "
               "(residual %.6g, λ fitted to ||∂L/∂λ|| %.3g), reached from its starts %.6g "
               "(%.6g with λ fitted); running the attack from the truth...",
               at_truth["loss"], at_truth["residual"], at_truth["lambda_fit_grad_norm"],
               loss_reached, at_reached["loss"])
  attack = decoreco.build(target, a, labels)
  state = attack.init(x_true, jax.random.key(0))   # the λ drawn here is replaced by λ*
  state = state._replace(attack=decoreco.init_state(
      x_true, jnp.asarray(at_truth["lambdas"], x_true.dtype)))
  states, start_history = run(attack, jax.tree.map(lambda v: v[None], state))
  start_loss = float(np.asarray(start_history[next(iter(start_history))])[0, -1])
  kept = score(np.asarray(attack.images(states))[0], np.asarray(x_true), attack.display)
  n = int(len(task.train_images))
  out = {"loss_at_truth": at_truth["loss"], "residual_at_truth": at_truth["residual"],
         "lambda_fit_grad_norm": at_truth["lambda_fit_grad_norm"],
         "lambda_fit_iterations": at_truth["lambda_fit_iterations"],
         "loss_reached": loss_reached, "loss_reached_lambda_fitted": at_reached["loss"],
         "truth_start": {"loss": start_loss, **kept, "n": n,
                         "diverged": not np.isfinite(start_loss)},
         **verdict(at_truth["loss"], _lower(loss_reached, at_reached["loss"]), kept["kept"], n,
                  start_loss)}
  out["seconds"] = time.time() - began
  logging.info("Truth diagnostic: %s (%s)", out["verdict"], headline(out))
  return {"truth": out}


def _lower(*losses: float) -> float:
  """The least finite loss; +inf when none is (a search that diverged reached nothing)."""
  finite = [v for v in losses if np.isfinite(v)]
  return min(finite) if finite else float("inf")


def headline(truth: dict) -> str:
  """One line of summary.json's "truth": the verdict's reading and the truth-start run's
  SSIM to its start."""
  t = truth["truth_start"]
  return (f"{truth['reading']} Truth start after the run's steps: mean SSIM to its start "
          f"{t['ssim_to_start']:.3f}, kept {t['kept']} of {t['n']} (window 3: "
          f"{t['kept_w3']}).")


def training_set_known(config) -> bool:
  """Whether the run's task holds θ*'s exact training set: θ* trained by trdr (no
  ``victim.load``), or a θ* file with the user's training set (``data.training_set``)."""
  return not config.victim.get("load") or bool(config.data.get("training_set"))


__all__ = ["HAIM_WINDOW", "SSIM_LEVEL", "TRUTH_DIR", "RunFn", "ScoreFn", "diagnose",
           "fit_lambdas", "headline", "loss_at", "training_set_known", "truth_candidates",
           "verdict"]
