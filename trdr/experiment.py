"""One experiment runner for every attack and every mode (no plotting).

  run(config, workdir, mode) : task -> victim -> attack -> loop -> evaluation -> files

Modes (`MODES`):
  "landscape"  the (λ1, λ2) grid of eq. 10 starts (Runkel et al. Sec. 4.3, 4.5; Figs. 1–4, 10–12),
               G = len(λ1)·len(λ2) attacks on the n training labels; landscape.json
  "attack"     one attack (G = 1) from ``config.init.kind`` (`trdr.attacks.init.INITS`)
  "sweep"      DecoReco's hyperparameters (σ, lr, λ_min, α): S settings drawn from Haim et
               al.'s ranges, G = S, ranked by the in-run score; sweep.json, best.json
  "membership" every start kind of ``config.init.kinds`` under each of ``config.init.seeds``
               (one start per training image; `trdr.starts`), G = kinds · seeds, for
               `trdr.membership`; starts.json

Every mode writes into ``workdir``: config.json, victim/ (θ*, reused while the victim
config is unchanged), metrics.jsonl and checkpoint.msgpack (`trdr.loop`), results.npz,
summary.json, and last SHA256SUMS and its finished marker (`FINISHED`; `trdr.io.finish`:
a reader verifies them with `trdr.io.check_finished`). The landscape and attack modes
evaluate the start images x0 exactly as the reconstructions and save those numbers beside
them, prefixed `trdr.evaluate.START` (the verdicts' attack-free baseline). Figures are
drawn from these files by `trdr.plotting.run_figures`.
"""

import os
import shutil
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging

from trdr import (data, distributed, evaluate, io, loop, models, pretrained, records,
                  victim)
from trdr import starts as start_images
from trdr.attacks import ATTACKS, init as inits
from trdr.starts import HPARAM_NAMES

LANDSCAPE_FILE = "landscape.json"
RESULTS_FILE = "results.npz"
SUMMARY_FILE = "summary.json"
SWEEP_FILE = "sweep.json"
BEST_FILE = "best.json"
MEMBERSHIP_FILE = "starts.json"
FINISHED = {"landscape": LANDSCAPE_FILE, "attack": SUMMARY_FILE, "sweep": SUMMARY_FILE,
            "membership": MEMBERSHIP_FILE}
MODES = tuple(FINISHED)


def attack_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """``config.attack`` with DecoReco's (σ, lr, λ_min, α) from ``attack.hparams_file``
  (a sweep's best.json) when that is set, but those named in ``attack.hparams_keep``
  (e.g. ("init_scale",): Runkel et al.'s Fig. 5, σ = 1 with the tuned lr, λ_min, α).

  Raises:
    FileNotFoundError: hparams_file set but missing (run the sweep first).
    ValueError: the file lacks one of the four settings, or hparams_keep names another.
  """
  a = config.attack.copy_and_resolve_references()
  path = a.get("hparams_file")
  keep = tuple(a.get("hparams_keep", ()))
  if set(keep) - set(HPARAM_NAMES):
    raise ValueError(f"attack.hparams_keep {keep} may name only {HPARAM_NAMES}")
  if path:
    if not os.path.exists(path):
      raise FileNotFoundError(
          f"attack.hparams_file {path} does not exist: run the sweep that writes it first "
          "(experiments/sweep.py, or the Makefile target that depends on it)")
    best = io.read_json(path)
    missing = [k for k in HPARAM_NAMES if k not in best]
    if missing:
      raise ValueError(f"{path} lacks the setting(s) {missing}; expected {HPARAM_NAMES}")
    logging.info("Hyperparameters from %s: %s", path, {k: best[k] for k in HPARAM_NAMES})
    with a.unlocked():
      for k in HPARAM_NAMES:
        if k not in keep:
          a[k] = float(best[k])
  return a


def run(config: ml_collections.ConfigDict, workdir: str, mode: str = "landscape",
        overwrite: bool = False):
  """Runs one experiment of ``mode`` and writes its files into ``workdir``.

  Sets JAX's process-wide ``jax_enable_x64`` to ``config.float64`` (float64 needs it on
  before any array is made).

  Args:
    config: sections seed, float64, data, victim, attack (``attack.name`` a key of
      `trdr.attacks.ATTACKS`), init, eval (and sweep for "sweep"); see configs/.
    workdir: run directory (``~`` and environment variables expanded); a checkpoint of
      the same config there is resumed. Locked while the run writes (`trdr.io.locked`).
    mode: one of `MODES`.
    overwrite: replace a finished run (otherwise FileExistsError): the new run is built
      in ``workdir``.overwrite and replaces the old one only once it has finished.
  Returns:
    "landscape": the records of landscape.json; "attack" and "sweep": the summary; None
    in a process other than 0 of a run across processes (`trdr.distributed`), which
    writes only its own checkpoint into ``workdir``/process_<i>.
  Raises:
    FileExistsError: ``workdir`` holds a finished run or another config's run.
    RuntimeError: another run holds ``workdir``'s lock.
    FileNotFoundError: ``attack.hparams_file`` set but missing.
    ValueError: unknown mode or attack, bad data, model, init or attack settings, a θ*
      file (victim.load, `trdr.pretrained`) that does not fit, or a checkpoint or θ* file
      that is corrupted; all but the last before anything is written.
  """
  if mode not in MODES:
    raise ValueError(f"unknown mode {mode!r}; known: {MODES}")
  if config.attack.name not in ATTACKS:
    raise ValueError(f"unknown attack.name {config.attack.name!r}; known: {sorted(ATTACKS)}")
  if mode == "sweep" and config.attack.name != "decoreco":
    raise ValueError("the sweep tunes DecoReco's hyperparameters: attack.name must be "
                     f"'decoreco', got {config.attack.name!r}")
  # Everything is checked before the first write: the data, the attack's settings (by
  # building it on the untrained victim, which compiles nothing) and the loop's counts.
  jax.config.update("jax_enable_x64", bool(config.float64))
  dtype = jnp.float64 if config.float64 else jnp.float32
  task = data.make_binary_task(config.data)
  windows = (config.eval.get("ssim_window", evaluate.SSIM_WINDOW),
             *config.eval.get("count_windows", ()))
  if min(task.train_images.shape[1:3]) < max(windows):
    raise ValueError(f"images of {task.train_images.shape[1:3]} pixels are smaller than the "
                     f"SSIM window {max(windows)} (eval.ssim_window, eval.count_windows)")
  if overwrite and distributed.active():
    raise ValueError("--overwrite is not supported across processes: delete the run "
                     "directory instead")
  workdir = distributed.process_dir(
      os.path.abspath(os.path.expandvars(os.path.expanduser(workdir))))
  # A θ* from a file (victim.load) is read, checked and its architecture taken now.
  config, loaded = pretrained.prepare(config, task, None if overwrite else workdir)
  a = attack_config(config)
  x0, labels, init_key, extra, build_key, settings = start_images.make_starts(
      mode, config, a, task, dtype)
  box = inits.pixel_box(task.mean)
  models.check_labels(config.victim, task.train_labels)
  model = models.build_model(config.victim)
  untrained = models.init_params(model, jax.random.key(0), task.train_images.shape[1:], dtype)
  ATTACKS[a.name](loaded or victim.Victim(model, untrained, config.victim, {}), a, labels,
                  key=build_key, box=box)
  steps = config.sweep.steps if mode == "sweep" else a.steps
  if not (int(steps) >= 1 and int(a.log_every) >= 1 and a.get("checkpoint_every", 0) >= 0):
    raise ValueError(f"need attack steps >= 1, attack.log_every >= 1 and "
                     f"attack.checkpoint_every >= 0, got {steps}, {a.log_every} and "
                     f"{a.get('checkpoint_every', 0)}")
  starts = x0, labels, init_key, extra, build_key, settings, loaded
  with io.locked(workdir):
    if not overwrite:
      return _run(config, workdir, mode, task, a, dtype, starts, box)
    # --overwrite builds the new run beside the old one (θ* copied, reused if it still
    # fits) and swaps it in only once finished: a failed run leaves the old one intact.
    staging = io.staging_dir(workdir, keep=("victim",))
    try:
      out = _run(config, staging, mode, task, a, dtype, starts, box)
    except BaseException:
      shutil.rmtree(staging, ignore_errors=True)
      raise
    io.replace_dir(staging, workdir)
    return out


def _run(config, workdir, mode, task, a, dtype, starts, box):
  """`run` after its checks, holding the work dir's lock."""
  x0, labels, init_key, extra, build_key, settings, loaded = starts
  resume = io.prepare_workdir(
      workdir, config, FINISHED[mode] if distributed.is_main() else distributed.SHARD_FILE)
  logging.info("Task: %d training, %d partition, %d test images of shape %s",
               len(task.train_images), len(task.partition_images), len(task.test_images),
               task.train_images.shape[1:])
  began = time.time()
  target = pretrained.keep(loaded, workdir) if loaded else victim.load_or_train(
      config, task, config.victim.checkpoint_dir or os.path.join(workdir, "victim"))
  victim_seconds = time.time() - began
  if distributed.active():  # every process attacks process 0's θ*
    target = target._replace(params=distributed.broadcast(target.params))
  attack = ATTACKS[a.name](target, a, labels, key=build_key, box=box)
  key_axis = 0 if init_key.ndim else None
  states = jax.vmap(attack.init, in_axes=(0, key_axis))(x0, init_key)
  if settings is not None:
    states = states._replace(hparams=settings)
  steps = config.sweep.steps if mode == "sweep" else a.steps
  started = time.time()
  # Runkel et al. Fig. 9's question along the attack: the partition starts' distances to
  # the training set, the partition and their start at every logged step.
  sets = evaluate.comparison_sets(task, extra.get("noise_images"),
                                  public=config.eval.get("public_set", False))
  traced = _partition_starts(mode, config, extra)
  trace = (evaluate.trajectory(x0, task.mean, sets, traced, attack.display)
           if len(traced) else None)
  states, history, trajectory = loop.run(
      attack, states, steps=steps, log_every=a.log_every, grid_batch_size=a.grid_batch_size,
      workdir=workdir, resume=resume, trace=trace, stop_on_divergence=mode != "sweep",
      checkpoint_every=a.get("checkpoint_every", 0))
  seconds = time.time() - started
  if not distributed.is_main():  # process 0 evaluates and writes the merged results
    io.finish(workdir, distributed.SHARD_FILE, {"process": jax.process_index(),
                                                "processes": jax.process_count()})
    return None
  images = attack.images(states)
  summary = {"victim": target.metadata["report"], "attack": attack.name,
             "attack_seconds": seconds,
             # This process's wall time per phase (a resumed run: since its resume).
             "phase_seconds": {"victim": victim_seconds, "attack": seconds}}
  evaluated = time.time()
  if "hyperparameters" in attack.parts:
    summary["hyperparameters"] = dict(zip(HPARAM_NAMES, map(float, attack.parts[
        "hyperparameters"])))
  if mode == "sweep":
    return _finish_sweep(config, workdir, task, images, history, settings, summary, evaluated)
  thresholds = tuple(config.eval.get("ssim_thresholds", ()))
  batch = loop.batch_size(a.grid_batch_size, x0.shape[0], attack.batches_well)

  def evaluation_of(x, mixture=None):
    return evaluate.reconstructions(
        x, task.mean, sets, display=attack.display, thresholds=thresholds,
        chunk_size=config.eval.ssim_chunk_size,
        ssim_window=config.eval.get("ssim_window", evaluate.SSIM_WINDOW),
        count_windows=tuple(config.eval.get("count_windows", ())), mixture=mixture)

  # The same evaluation of the start images: the attack-free baseline of every verdict.
  evaluation = evaluate.with_starts(evaluation_of, images, x0, inits.mixture_weights(
      extra["lambda1"], extra["lambda2"]) if mode == "landscape" and attack.display ==
      "pixels" else None)
  uniform_tols = tuple(config.eval.get("uniform_start_tols", ()))
  if "energy" in attack.parts:
    evaluation.update(_param_distances(config, attack, target, images, x0, labels, batch,
                                       uniform_tols))
  outputs = attack.parts.get("outputs", lambda s: {})(states)
  results = {**extra, "initial_images": np.asarray(x0), "final_images": np.asarray(images),
             **{k: np.asarray(v) for k, v in outputs.items()},
             "labels": np.asarray(labels), "train_images": task.train_images,
             "train_labels": task.train_labels, "partition_images": task.partition_images,
             "mean": np.zeros(0) if task.mean is None else task.mean,
             "display": np.asarray(attack.display),
             **{f"history_{k}": v for k, v in history.items()},
             **{f"trace_{k}": v for k, v in trajectory.items()}, **evaluation}
  if mode == "attack":
    return _finish_attack(config, workdir, task, target, dtype, results, thresholds, summary,
                          evaluated)
  if mode == "membership":
    io.save_npz(os.path.join(workdir, RESULTS_FILE), **results)
    _phase_done(summary, "evaluation", evaluated)
    summary.update(kinds=list(config.init.kinds), seeds=[int(s) for s in config.init.seeds])
    io.finish(workdir, MEMBERSHIP_FILE, summary)
    return summary
  grid_records = records.grid_records(extra["lambda1"], extra["lambda2"], history,
                                      evaluation, thresholds, uniform_tols)
  io.save_npz(os.path.join(workdir, RESULTS_FILE), **results)
  _phase_done(summary, "evaluation", evaluated)
  if "lower_level" in a:
    summary.update(lower_level_start=a.lower_level.start, hypergradient=a.hypergradient,
                   lower_level=records.lower_level_summary(history, a.lower_level.tol))
    converged = summary["lower_level"].get("fraction_converged", 1.0)
    if not converged == 1.0:  # NaN (a diverged solve) warns too
      logging.warning("The lower level reached ||∇θE|| < %g in only %.1f%% of its solves "
                      "(max_iter %d): θ(x) and the hypergradient are approximate there",
                      a.lower_level.tol, 100 * converged, a.lower_level.max_iter)
  io.write_json(os.path.join(workdir, SUMMARY_FILE), summary)
  io.finish(workdir, LANDSCAPE_FILE, grid_records)
  logging.info("Victim: %s", target.metadata["report"])
  logging.info("Wrote %s", os.path.join(workdir, LANDSCAPE_FILE))
  return grid_records


def _partition_starts(mode, config, extra) -> np.ndarray:
  """The grid points that start from the distinct partition: λ1 = 0, λ2 = 1 (eq. 10) of a
  landscape, or an attack with init.kind "partition"; none for a sweep."""
  if mode == "landscape":
    return np.flatnonzero(np.isclose(extra["lambda1"], 0.0) & np.isclose(extra["lambda2"], 1.0))
  return np.arange(1) if mode == "attack" and config.init.kind == "partition" else (
      np.arange(0))


def _param_distances(config, attack, target, images, x0, labels, batch, uniform_tols):
  """||θ* − θ(x)||² of the reconstructions and of the start images (one program for both):
  re-solved from θ* at ``config.eval.lower_level_tol`` ("param_distance"), and, for
  ``uniform_tols``, from θ0 ~ U(0, 1) at each of them ("param_distance_uniform" [G, T]:
  Runkel et al.'s Table 1 setting, with its tolerance sweep)."""
  grid = x0.shape[0]
  both = jnp.concatenate([jnp.asarray(images), jnp.asarray(x0)])
  settings = dict(max_iter=config.eval.lower_level_max_iter,
                  memory_size=config.victim.memory_size, batch=batch,
                  # as the attack's grid; across processes process 0 evaluates alone
                  devices=None if distributed.active() else loop.grid_layout(batch)[0])
  distances = {"param_distance": evaluate.param_distances(
      attack.parts["energy"], target.params, both, labels, tol=config.eval.lower_level_tol,
      **settings)}
  if uniform_tols:
    # Its own stream: the seed's key folded with a constant the run's other draws never use.
    theta0 = models.uniform_params(jax.random.fold_in(jax.random.key(config.seed), 7),
                                   target.params)
    distances["param_distance_uniform"] = evaluate.param_distances(
        attack.parts["energy"], target.params, both, labels, tol=uniform_tols,
        theta_init=theta0, **settings)
  return {**{k: v[:grid] for k, v in distances.items()},
          **{evaluate.START + k: v[grid:] for k, v in distances.items()}}


def _phase_done(summary: dict, phase: str, began: float) -> None:
  """Records the seconds since ``began`` as ``summary["phase_seconds"][phase]`` and logs every
  phase's seconds so far."""
  summary["phase_seconds"][phase] = time.time() - began
  logging.info("Seconds: %s", ", ".join(f"{k} {v:.1f}" for k, v in
                                          summary["phase_seconds"].items()))


def _finish_attack(config, workdir, task, target, dtype, results, thresholds, summary,
                   evaluated: float) -> dict:
  """results.npz and summary.json of one attack (grid axis G = 1 dropped)."""
  per_point = ("best_ssim_per_train", "best_index_per_train", "count_ssim_ge",
               "best_buddy_ssim_per_train", "count_best_buddies_ssim_ge",
               "param_distance", "param_distance_uniform")
  grid_keys = {"initial_images", "final_images", "final_lambdas"} | {
      k for k in results if k.startswith("history_") or k.endswith(("_index", "_ssim", "_l2"))
      or (k.startswith("trace_") and k != "trace_step")
      or k.removeprefix(evaluate.START).startswith(per_point)}
  results = {k: v[0] if k in grid_keys else v for k, v in results.items()}
  phi = np.asarray(target.apply(target.params, jnp.asarray(task.train_images, dtype)))
  if phi.ndim == 2:  # C = 2 logits: Φ = Φ_1 − Φ_0, the binary logit's counterpart
    phi = phi[:, 1] - phi[:, 0]
  io.save_npz(os.path.join(workdir, RESULTS_FILE), **results, phi_train=phi)
  objective = next(k for k in results if k.startswith("history_"))
  best = results.get("best_ssim_per_train")
  summary.update({
      "init": config.init.kind, "candidates": int(results["final_images"].shape[0]),
      "n_train": int(task.train_images.shape[0]), "steps": int(config.attack.steps),
      "final_loss": float(results[objective][-1]),
      "score": float(evaluate.in_run_score(results["final_images"], task.train_images,
                                           config.eval.get("score_k", 10)))})
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
    summary.update(ssim_window=config.eval.get("ssim_window", evaluate.SSIM_WINDOW),
                   mean_best_ssim=float(np.mean(best)),
                   **{"fraction_ssim_ge_0.4": float(np.mean(best >= 0.4))})
  _phase_done(summary, "evaluation", evaluated)
  io.finish(workdir, SUMMARY_FILE, summary)
  logging.info("Attack: %s", summary.get("reconstructed"))
  return summary


def _finish_sweep(config, workdir, task, images, history, settings, summary,
                  evaluated: float) -> dict:
  """sweep.json (every setting, ranked by the in-run score), best.json, summary.json."""
  scores = np.asarray(evaluate.in_run_score(images, task.train_images, config.eval.score_k))
  sets = {"train": evaluate.comparison_sets(task)["train"]}
  counts = np.stack([
      evaluate.reconstructions(images[s], task.mean, sets, display="minmax", thresholds=(0.4,),
                               chunk_size=config.eval.ssim_chunk_size)["count_ssim_ge"][0]
      for s in range(config.sweep.num_settings)])
  objective = history[next(iter(history))]
  order = np.argsort(scores, kind="stable")
  rows = [{**{k: float(getattr(settings, k)[s]) for k in HPARAM_NAMES},
           "score": float(scores[s]), "final_loss": float(objective[s, -1]),
           "ssim_ge_0.4": int(counts[s]), "rank": int(r + 1)} for r, s in enumerate(order)]
  io.write_json(os.path.join(workdir, SWEEP_FILE), rows)
  io.write_json(os.path.join(workdir, BEST_FILE), rows[0])
  summary.pop("hyperparameters", None)
  summary.update(num_settings=config.sweep.num_settings, steps=config.sweep.steps,
                 seconds=summary.pop("attack_seconds"), best=rows[0],
                 diverged=int(np.sum(~np.isfinite(scores))))
  _phase_done(summary, "evaluation", evaluated)
  io.finish(workdir, SUMMARY_FILE, summary)
  logging.info("Best setting: %s", rows[0])
  return summary
