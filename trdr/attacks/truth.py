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

import os
import time
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from trdr import data
from trdr.attacks import decoreco
from trdr.evaluation import evaluate, ssim
from trdr.runtime import rundir
from trdr.victim import solver

# The truth-start run's directory inside the run directory: its checkpoint and metrics.jsonl
# (an interrupted run resumes there; the checkpoint is dropped once the run has finished).
TRUTH_DIR = "truth_start"
# The SSIM level at which a training image counts as recovered when the run's config names
# none (``eval.ssim_level``): the level of every count trdr reports (Haim et al.'s 0.4).
SSIM_LEVEL = 0.4
# Haim et al.'s SSIM window, at which "kept_w3" counts beside the run's own window.
HAIM_WINDOW = 3


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
      raise ValueError(f"candidate label {value!r} has no training image (training labels: "
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


def verdict(loss_at_truth: float, loss_reached: float, kept: int, n: int) -> dict:
  """The diagnostic's reading from its two measurements.

  Args:
    loss_at_truth: the attack's loss at the true images with fitted λ (`fit_lambdas`).
    loss_reached: the loss the attack reached from its starts.
    kept: training images the truth-start run still recovers.
    n: training images.
  Returns:
    {"truth_lower": loss_at_truth < loss_reached (False when either is NaN),
     "stays": kept >= n / 2,
     "verdict": "search" (both: the objective prefers the truth, the search failed to
       reach it) or "objective" (otherwise: the objective does not single out the truth),
     "reading": one sentence for users}.
  Raises:
    ValueError: n < 1 or kept outside [0, n].
  """
  if n < 1 or not 0 <= kept <= n:
    raise ValueError(f"need n >= 1 and 0 <= kept <= n, got kept {kept} of n {n}")
  lower = bool(loss_at_truth < loss_reached)
  stays = bool(kept >= n / 2)
  losses = (f"the attack's loss at the true training images ({loss_at_truth:.4g}, λ fitted) "
            f"is {'below' if lower else 'not below'} the loss it reached from its starts "
            f"({loss_reached:.4g})")
  start = f"started at them, the attack keeps {kept} of {n}"
  if lower and stays:
    reading = (f"Search failure: {losses}, and {start}: its objective prefers the training "
               "images, but the search from its starts did not reach them; other settings, "
               "steps or starts may recover more, so this count is a lower bound.")
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
  return {"truth_lower": lower, "stays": stays,
          "verdict": "search" if lower and stays else "objective", "reading": reading}


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


def loss_at(target, attack_config, labels, images, *, max_iter: int = 500,
            tol: float = 1e-9) -> dict:
  """The attack's loss at fixed ``images`` float[m, H, W, C] with λ fitted (`fit_lambdas`
  from λ = 1/2, the mean of the attack's U(0, 1) draw).

  Returns:
    {"loss": L(x, λ*), "residual": its residual term alone (L minus the pixel and λ
    priors), "lambda_fit_grad_norm": ||∂L/∂λ|| at λ*, "lambdas": λ* float[m] (an array)}.
  """
  loss, prior = _attack_loss(target, attack_config, labels)
  images = jnp.asarray(images)
  lambdas, value, grad_norm = fit_lambdas(lambda lam: loss(images, lam),
                                          jnp.full(images.shape[:1], 0.5, images.dtype),
                                          max_iter=max_iter, tol=tol)
  residual = value - float(prior(images, lambdas))
  return {"loss": value, "residual": residual, "lambda_fit_grad_norm": grad_norm,
          "lambdas": lambdas}


def diagnose(target, attack_config, labels, task, *, history: dict, images, steps: int,
             eval_config, workdir: str, dtype, key=None) -> dict:
  """The truth diagnostic of one DecoReco run (module docstring), logged in one line.

  Args:
    target: θ*, the `trdr.victim.Victim` the run attacked.
    attack_config: the run's attack section, as the attack was built from (its settings
      applied: `trdr.experiment.attack_config`).
    labels: float[m] (±1) or int[m], the attack's candidates' labels.
    task: the run's `trdr.data.Task`; its training set is θ*'s (the caller checks).
    history: the run's loss history {metric: float[G, steps]} (`trdr.experiment.loop.run`;
      the first metric is the attack's objective before each step).
    images: float[G, m, H, W, C], the attack's final images (victim input space).
    steps: the run's attack steps, run again from the truth.
    eval_config: the run's eval section: ssim_window, ssim_chunk_size and, if set,
      ssim_level (else `SSIM_LEVEL`).
    workdir: the truth-start run's directory (created; a checkpoint there of this same
      run is resumed: the caller's run directory holds one config only).
    dtype: the run's float dtype.
    key: the key of the attack's λ draw; unused (the truth start takes λ* instead).
  Returns:
    {"truth": {"loss_at_truth", "residual_at_truth", "lambda_fit_grad_norm",
    "loss_reached" (the attack's objective before its last step, the history's last
    value, at its own λ; the minimum over G starts), "loss_reached_lambda_fitted" (the
    attack's loss at its final images with λ fitted as at the truth; the first start's),
    "truth_start": {"loss" (its objective before its last step), "ssim_to_start" (mean over
    the candidates of the SSIM of each final image to its start, both as the run displays
    them, the run's SSIM window), "kept", "kept_w3" (training images that are best buddies
    with a final image at SSIM ≥ the level, the run's window and window 3), "n",
    "diverged"}, "ssim_level", "seconds", and `verdict`'s keys}}. The verdict compares the
    truth's loss with the lower of loss_reached and loss_reached_lambda_fitted, so that
    both sides have λ at its best.
  """
  del key
  began = time.time()
  a = attack_config
  labels = jnp.asarray(labels)
  x_true = jnp.asarray(truth_candidates(task.train_images, task.train_labels, labels), dtype)
  at_truth = loss_at(target, a, labels, x_true)
  objective = np.asarray(history[next(iter(history))], np.float64)
  finite = objective[:, -1][np.isfinite(objective[:, -1])]
  loss_reached = float(np.min(finite)) if finite.size else float("nan")
  at_reached = loss_at(target, a, labels, jnp.asarray(np.asarray(images)[0], dtype))
  logging.info("Truth diagnostic: the attack's loss at the true training images %.6g "
               "(residual %.6g, λ fitted to ||∂L/∂λ|| %.3g), reached from its starts %.6g "
               "(%.6g with λ fitted); running the attack from the truth for %d steps...",
               at_truth["loss"], at_truth["residual"], at_truth["lambda_fit_grad_norm"],
               loss_reached, at_reached["loss"], steps)
  start = truth_start(target, a, labels, x_true, at_truth["lambdas"], steps=steps,
                      workdir=workdir)
  level = float(eval_config.get("ssim_level", SSIM_LEVEL))
  kept = kept_counts(start["images"], x_true, task, display=start["display"], level=level,
                     window=int(eval_config.ssim_window),
                     chunk_size=int(eval_config.ssim_chunk_size))
  n = int(len(task.train_images))
  truth_start_summary = {"loss": start["loss"], **kept, "n": n, "diverged": start["diverged"]}
  out = {"loss_at_truth": at_truth["loss"], "residual_at_truth": at_truth["residual"],
         "lambda_fit_grad_norm": at_truth["lambda_fit_grad_norm"],
         "loss_reached": loss_reached, "loss_reached_lambda_fitted": at_reached["loss"],
         "truth_start": truth_start_summary, "ssim_level": level,
         **verdict(at_truth["loss"], float(np.nanmin([loss_reached, at_reached["loss"]])),
                   kept["kept"], n)}
  out["seconds"] = time.time() - began
  logging.info("Truth diagnostic: %s (%s)", out["verdict"], headline(out))
  return {"truth": out}


def headline(truth: dict) -> str:
  """One line of summary.json's "truth": the verdict's reading and the truth-start run's
  SSIM to its start."""
  t = truth["truth_start"]
  return (f"{truth['reading']} Truth start after the run's steps: mean SSIM to its start "
          f"{t['ssim_to_start']:.3f}, kept {t['kept']} of {t['n']} (window 3: "
          f"{t['kept_w3']}).")


def truth_start(target, attack_config, labels, x_true, lambdas, *, steps: int,
                workdir: str) -> dict:
  """The attack (`decoreco.build`, the run's settings) started at (x_true, λ) and run for
  ``steps`` steps in the checkpointed loop (`trdr.experiment.loop.run`) in ``workdir``.

  Returns:
    {"images": float[m, H, W, C] final images, "loss": the objective before the last step,
    "diverged": whether it is not finite, "display": the attack's display}.
  """
  from trdr.experiment import loop  # noqa: PLC0415  (trdr.experiment imports the attacks)
  a = attack_config
  attack = decoreco.build(target, a, labels)
  state = attack.init(x_true, jax.random.key(0))
  state = state._replace(attack=decoreco.init_state(x_true, jnp.asarray(lambdas, x_true.dtype)))
  states = jax.tree.map(lambda v: v[None], state)
  os.makedirs(workdir, exist_ok=True)
  resume = os.path.exists(os.path.join(workdir, rundir.CHECKPOINT_FILE))
  states, history, _ = loop.run(attack, states, steps=steps, log_every=a.log_every,
                                grid_batch_size=a.grid_batch_size, workdir=workdir,
                                resume=resume, stop_on_divergence=False,
                                checkpoint_every=a.checkpoint_every)
  loss = float(np.asarray(history[next(iter(history))])[0, -1])
  return {"images": np.asarray(attack.images(states))[0], "loss": loss,
          "diverged": not np.isfinite(loss), "display": attack.display}


def kept_counts(images, starts, task, *, display: str, level: float, window: int,
                chunk_size: int = 500) -> dict:
  """How the truth-start run's ``images`` float[m, H, W, C] compare with their ``starts``
  (the true images as candidates) and the training set.

  Returns:
    {"ssim_to_start": mean over candidates of SSIM(image, its start), both displayed as
    the run displays ("minmax" for DecoReco), window ``window``; "kept", "kept_w3":
    training images that are best buddies (Haim et al.'s NCC matching) with an image at
    SSIM ≥ ``level``, windows ``window`` and `HAIM_WINDOW`, as the run's counts
    "reconstructed_best_buddies" are computed (`trdr.evaluation.evaluate.reconstructions`)}.
  """
  mean = task.mean if np.size(task.mean) else None
  shown = evaluate.to_display(np.asarray(images), mean, display)
  shown_start = evaluate.to_display(np.asarray(starts), mean, display)
  to_start = float(np.mean(np.asarray(ssim.ssim(shown, shown_start, filter_size=window))))
  train = np.asarray(data.to_pixels(task.train_images, mean))
  ev = evaluate.reconstructions(images, mean, {"train": train}, display=display,
                                thresholds=(level,), chunk_size=chunk_size,
                                ssim_window=window, count_windows=(HAIM_WINDOW,))
  kept = int(ev["count_best_buddies_ssim_ge"][0])
  kept_w3 = int(ev.get(f"count_best_buddies_ssim_ge_w{HAIM_WINDOW}",
                       ev["count_best_buddies_ssim_ge"])[0])
  return {"ssim_to_start": to_start, "kept": kept, "kept_w3": kept_w3}


def training_set_known(config) -> bool:
  """Whether the run's task holds θ*'s exact training set: θ* trained by trdr (no
  ``victim.load``), or a θ* file with the user's training set (``data.training_set``)."""
  return not config.victim.get("load") or bool(config.data.get("training_set"))


__all__ = ["SSIM_LEVEL", "TRUTH_DIR", "diagnose", "fit_lambdas", "headline", "kept_counts",
           "loss_at", "training_set_known", "truth_candidates", "truth_start", "verdict"]
