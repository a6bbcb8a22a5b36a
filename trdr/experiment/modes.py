"""The experiment modes (`trdr.experiment.runner.MODES`), one function each over the shared
phases (`trdr.experiment.phases`), and the writers of their files:

  landscape      the (λ1, λ2) grid of eq. 10 starts; landscape.json (`write_landscape`)
  single_attack  one attack (G = 1); summary.json with the counts (`write_attack`)
  sweep          an attack's sweepable settings ranked by the in-run score; sweep.json, best.json
  membership     every start kind under every seed; starts.json

`RUN` maps each mode to its function.
"""

import os
import time
from typing import Callable

import jax.numpy as jnp
import numpy as np
from absl import logging

from trdr.attacks import init as inits
from trdr.attacks import truth
from trdr.evaluation import evaluate, haim_match, power, records, registry
from trdr.experiment import results as results_npz
from trdr.experiment.phases import (BEST_FILE, LANDSCAPE_FILE, MEMBERSHIP_FILE, SUMMARY_FILE,
                                    SWEEP_FILE, Attacked, Finished, Prepared, attack_phase,
                                    evaluate_phase, phase_done, results_arrays,
                                    truth_phase)
from trdr.experiment.results import RESULTS_FILE
from trdr.runtime import files, rundir


def landscape(run: Prepared, workdir: str) -> Finished:
  """The eq. 10 grid: results.npz, summary.json (with the lower level's convergence) and
  landscape.json's records (`records.grid_records`)."""
  attacked = attack_phase(run, workdir, stop_on_divergence=True)
  if isinstance(attacked, Finished):
    return attacked
  return write_landscape(run, attacked, workdir)


def write_landscape(run: Prepared, attacked: Attacked, workdir: str) -> Finished:
  """A landscape's evaluation and files, from its attacked grid."""
  began = time.time()
  extra, config = run.starts.extra, run.config
  # The starts of a landscape shown as pixels are eq. 10 mixtures of the three sets,
  # searched as such (`evaluate.with_starts`).
  weights = (inits.mixture_weights(extra["lambda1"], extra["lambda2"])
             if attacked.attack.display == "pixels" else None)
  evaluation = evaluate_phase(run, attacked, weights)
  results = results_arrays(run, attacked, evaluation)
  grid_records = records.grid_records(
      extra["lambda1"], extra["lambda2"], attacked.history, evaluation,
      config.eval.ssim_thresholds, config.eval.uniform_start_tols)
  results_npz.save(os.path.join(workdir, RESULTS_FILE), results, landscape=True)
  summary = attacked.summary
  phase_done(summary, "evaluation", began)
  if attacked.attack.energy is not None:  # an attack with a lower level: how it converged
    ll = run.attack_config.lower_level
    summary.update(lower_level_start=ll.start, hypergradient=run.attack_config.hypergradient,
                   lower_level=records.lower_level_summary(attacked.history, ll.tol))
    converged = summary["lower_level"].get("fraction_converged", 1.0)
    if not converged == 1.0:  # NaN (a diverged solve) warns too
      logging.warning("The lower level reached ||∇θE|| < %g in only %.1f%% of its solves "
                      "(max_iter %d): θ(x) and the hypergradient are approximate there",
                      ll.tol, 100 * converged, ll.max_iter)
  files.write_json(os.path.join(workdir, SUMMARY_FILE), summary)
  rundir.finish(workdir, LANDSCAPE_FILE, grid_records)
  logging.info("Wrote %s", os.path.join(workdir, LANDSCAPE_FILE))
  return Finished(workdir, summary, grid_records)


def single_attack(run: Prepared, workdir: str) -> Finished:
  """One attack: results.npz (grid axis G = 1 dropped, with Φ(x_i) of the training
  images) and summary.json (counts of reconstructed training images, the in-run score,
  and the attack's truth diagnostic where it has one: `truth_phase`)."""
  attacked = attack_phase(run, workdir, stop_on_divergence=True)
  if isinstance(attacked, Finished):
    return attacked
  truth_phase(run, attacked, workdir)
  return write_attack(run, attacked, workdir)


def write_attack(run: Prepared, attacked: Attacked, workdir: str) -> Finished:
  """One attack's evaluation and files, from its attacked start (G = 1)."""
  began = time.time()
  config, task = run.config, run.task
  results = results_arrays(run, attacked, evaluate_phase(run, attacked))
  per_point = ("best_ssim_per_train", "best_index_per_train", "count_ssim_ge",
               "best_buddy_ssim_per_train", "count_best_buddies_ssim_ge",
               "param_distance", "param_distance_uniform")
  grid_keys = {"initial_images", "final_images", *attacked.outputs} | {
      k for k in results if k.startswith("history_")
      or k.endswith(("_index", *registry.suffixes()))
      or (k.startswith("trace_") and k != "trace_step")
      or k.removeprefix(evaluate.START).startswith(per_point)}
  results = {k: v[0] if k in grid_keys else v for k, v in results.items()}
  target = attacked.target
  phi = np.asarray(target.apply(target.params, jnp.asarray(task.train_images, run.dtype)))
  if phi.ndim == 2:  # C = 2 logits: Φ = Φ_1 − Φ_0, the binary logit's counterpart
    phi = phi[:, 1] - phi[:, 0]
  files.save_npz(os.path.join(workdir, RESULTS_FILE), **results, phi_train=phi)
  objective = next(k for k in results if k.startswith("history_"))
  best = results.get("best_ssim_per_train")
  thresholds = config.eval.ssim_thresholds
  summary = attacked.summary
  summary.update({
      "init": config.init.kind, "candidates": int(results["final_images"].shape[0]),
      "n_train": int(task.train_images.shape[0]), "steps": int(config.attack.steps),
      "final_loss": float(results[objective][-1]),
      "score": float(evaluate.in_run_score(results["final_images"], task.train_images,
                                           config.eval.score_k))})
  if best is not None:
    # reconstructed[_best_buddies][_w{w}]: counts at the run's SSIM window and, suffixed,
    # at each further window of eval.count_windows; the start images' twins prefixed.
    for key in results:
      for kind, name in (("count_ssim_ge", "reconstructed"),
                         ("count_best_buddies_ssim_ge", "reconstructed_best_buddies")):
        prefix, _, suffix = key.partition(kind)
        if _ and prefix in ("", evaluate.START):
          summary[prefix + name + suffix] = records.counts(results[key], thresholds)
    summary.update(records.per_class_counts(results, task.train_labels, thresholds))
    summary.update(ssim_window=config.eval.ssim_window, mean_best_ssim=float(np.mean(best)),
                   **{"fraction_ssim_ge_0.4": float(np.mean(best >= 0.4))})
  if config.eval.get("haim_protocol", False):
    summary.update(haim_protocol_counts(results, thresholds))
  if attacked.attack.name == power.ATTACK:   # the count beside the attack's measured power
    summary["power"] = power.run_statement(target.params, summary)
  phase_done(summary, "evaluation", began)
  rundir.finish(workdir, SUMMARY_FILE, summary)
  logging.info("Attack: %s", summary.get("reconstructed"))
  if "power" in summary:
    logging.info("Attack: %s", summary["power"])
  if "reconstructed_haim" in summary:
    logging.info("Haim et al.'s protocol: %s (start images: %s)", summary["reconstructed_haim"],
                 summary[evaluate.START + "reconstructed_haim"])
  if "truth" in summary:   # the truth diagnostic's verdict beside the count it qualifies
    logging.info("Truth diagnostic: %s. %s", summary["truth"]["verdict"],
                 truth.headline(summary["truth"]))
  return Finished(workdir, summary)


def haim_protocol_counts(results: dict, thresholds) -> dict[str, dict]:
  """Haim et al.'s evaluation protocol (`trdr.evaluation.haim_match.protocol`) of one run's
  final and (the baseline) start images, counted at each SSIM threshold: {"reconstructed_haim":
  {"ssim_ge_0.4": count, ...}, "start_reconstructed_haim": {...}} (``eval.haim_protocol``)."""
  out = {}
  for prefix, key in (("", "final_images"), (evaluate.START, "initial_images")):
    if not np.all(np.isfinite(results[key])):  # their NCC and scaling have no value there
      logging.warning("eval.haim_protocol: %s has non-finite pixels; not counted", key)
      out[prefix + "reconstructed_haim"] = None
      continue
    found = haim_match.protocol(results[key], results["train_images"], results["mean"])
    out[prefix + "reconstructed_haim"] = {f"ssim_ge_{t:g}": int(np.sum(found.ssim >= t))
                                          for t in thresholds}
  return out


def sweep(run: Prepared, workdir: str) -> Finished:
  """An attack's sweepable settings side by side: sweep.json (every setting, ranked by the in-run
  score), best.json (the first) and summary.json. A diverged setting is recorded (score
  +inf), not raised."""
  attacked = attack_phase(run, workdir, stop_on_divergence=False)
  if isinstance(attacked, Finished):
    return attacked
  began = time.time()
  config, task, images = run.config, run.task, attacked.images
  scores = np.asarray(evaluate.in_run_score(images, task.train_images, config.eval.score_k))
  sets = {"train": attacked.sets["train"]}
  counts = np.stack([
      evaluate.reconstructions(images[s], task.mean, sets, display="minmax", thresholds=(0.4,),
                               chunk_size=config.eval.ssim_chunk_size)["count_ssim_ge"][0]
      for s in range(config.sweep.num_settings)])
  objective = attacked.history[next(iter(attacked.history))]
  order = np.argsort(scores, kind="stable")
  settings = run.starts.hparams
  rows = [{**{k: float(getattr(settings, k)[s]) for k in settings._fields},
           "score": float(scores[s]), "final_loss": float(objective[s, -1]),
           "ssim_ge_0.4": int(counts[s]), "rank": int(r + 1)} for r, s in enumerate(order)]
  files.write_json(os.path.join(workdir, SWEEP_FILE), rows)
  files.write_json(os.path.join(workdir, BEST_FILE), rows[0])
  summary = attacked.summary
  summary.pop("hyperparameters", None)  # each setting's own are in sweep.json
  summary.update(num_settings=config.sweep.num_settings, steps=config.sweep.steps,
                 seconds=summary.pop("attack_seconds"), best=rows[0],
                 diverged=int(np.sum(~np.isfinite(scores))))
  phase_done(summary, "evaluation", began)
  rundir.finish(workdir, SUMMARY_FILE, summary)
  logging.info("Best setting: %s", rows[0])
  return Finished(workdir, summary)


def membership(run: Prepared, workdir: str) -> Finished:
  """Every start kind under every seed: results.npz with the start kinds, seeds and
  memberships (`starts.membership_starts`) for `trdr.studies.membership`; starts.json."""
  attacked = attack_phase(run, workdir, stop_on_divergence=True)
  if isinstance(attacked, Finished):
    return attacked
  began = time.time()
  config = run.config
  results = results_arrays(run, attacked, evaluate_phase(run, attacked))
  files.save_npz(os.path.join(workdir, RESULTS_FILE), **results)
  summary = attacked.summary
  phase_done(summary, "evaluation", began)
  summary.update(kinds=list(config.init.kinds), seeds=[int(s) for s in config.init.seeds])
  rundir.finish(workdir, MEMBERSHIP_FILE, summary)
  return Finished(workdir, summary)


RUN: dict[str, Callable[[Prepared, str], Finished]] = {
    "landscape": landscape, "attack": single_attack, "sweep": sweep,
    "membership": membership}
