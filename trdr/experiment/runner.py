"""One experiment, every attack and every mode: run(config, workdir, mode) → its files.

Every mode runs the same phases:

  prepare   everything checked before the first write: the data, the attack's settings
            (by building it on the untrained victim, which compiles nothing), the loop's
            counts; the start images of the mode (`trdr.experiment.starts`)
  attack    θ* trained, reused or read from a file (`trdr.victim`), the attack built on it
            (`trdr.attacks.ATTACKS`) and its starts attacked in the checkpointed loop
            (`trdr.experiment.loop`)
  evaluate  the reconstructions and, as the verdicts' attack-free baseline, the start
            images x0 evaluated alike (`trdr.evaluation.evaluate`; the start images'
            numbers prefixed `trdr.evaluation.evaluate.START`)
  write     results.npz (`trdr.experiment.results`; read it back with its `load`),
            summary.json, the mode's own files, and last SHA256SUMS and the finished
            marker (`FINISHED`; `trdr.runtime.rundir.finish`)

Modes (`MODES`), one function each:
  "landscape"  the (λ1, λ2) grid of eq. 10 starts (Runkel et al. Sec. 4.3, 4.5; Figs. 1–4,
               10–12), G = len(λ1)·len(λ2) attacks on the n training labels; landscape.json
  "attack"     one attack (G = 1) from ``config.init.kind`` (`trdr.attacks.init.INITS`)
  "sweep"      an attack's sweepable settings (`trdr.attacks.protocol.Sweepable`; DecoReco's
               σ, lr, λ_min, α): S settings drawn from ``sweep.ranges`` (Haim et al.'s),
               G = S, ranked by the in-run score; sweep.json, best.json
  "membership" every start kind of ``config.init.kinds`` under each of ``config.init.seeds``
               (one start per training image), G = kinds · seeds, for
               `trdr.studies.membership`; starts.json

`reevaluate` runs the evaluate and write phases of a finished landscape or attack run again
for other reconstructions (the report's control attacks, `trdr.report.controls`).

A run directory also holds config.json, victim/ (θ*, reused while the victim config is
unchanged), metrics.jsonl and checkpoint.msgpack (`trdr.experiment.loop`). Figures are
drawn from these files by `trdr.plotting.run_figures`.
"""

import collections
import hashlib
import math
import os
import shutil
import time
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging

from trdr import data, models, victim
from trdr.attacks import ATTACKS, Attack
from trdr.attacks import init as inits
from trdr.evaluation import evaluate, records, registry
from trdr.experiment import loop
from trdr.experiment import results as results_npz
from trdr.experiment.results import RESULTS_FILE
from trdr.experiment.starts import STARTS, Starts
from trdr.runtime import distributed, files, rundir
from trdr.victim import pretrained

LANDSCAPE_FILE = "landscape.json"
SUMMARY_FILE = "summary.json"
SWEEP_FILE = "sweep.json"
BEST_FILE = "best.json"
MEMBERSHIP_FILE = "starts.json"
# Each mode's finished marker: the file whose presence means the run finished.
FINISHED = {"landscape": LANDSCAPE_FILE, "attack": SUMMARY_FILE, "sweep": SUMMARY_FILE,
            "membership": MEMBERSHIP_FILE}
MODES = tuple(FINISHED)


class Finished(NamedTuple):
  """What a finished run wrote, as `run` returns it.

  Attributes:
    workdir: the run directory.
    summary: summary.json (starts.json for "membership": the same dict); in a process
      other than 0 of a run across processes, its shard marker {"process", "processes"}.
    records: landscape.json's records, one per grid point ("landscape"); None otherwise.
  """
  workdir: str
  summary: dict
  records: list[dict] | None = None


class Prepared(NamedTuple):
  """A run after its checks, before anything is written (`prepare`)."""
  mode: str
  config: ml_collections.ConfigDict  # with a θ* file's architecture (victim.load) resolved
  attack_config: ml_collections.ConfigDict  # `attack_config`: tuned settings applied
  task: data.Task
  dtype: Any
  starts: Starts
  box: tuple  # the pixel bounds of the attack's projection (`trdr.attacks.init.pixel_box`)
  loaded: victim.Victim | None  # θ* read from ``victim.load``, None to train or reuse
  steps: int  # attack steps per start


class Attacked(NamedTuple):
  """A run after its attack phase (`_attack`)."""
  target: victim.Victim
  attack: Attack
  history: dict[str, np.ndarray]  # metric -> float[G, steps] (`loop.run`)
  trace: dict[str, np.ndarray]  # the Fig. 9 trace ({} when none is recorded)
  images: np.ndarray  # the reconstructions float[G, m, H, W, C], victim input space
  outputs: dict[str, np.ndarray]  # the attack's own arrays (`Attack.outputs`), axis G first
  sets: dict[str, np.ndarray]  # `evaluate.comparison_sets`
  summary: dict  # summary.json so far: victim, attack, seconds per phase


def attack_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """``config.attack``, for an attack with sweepable settings (`ATTACKS`' ``sweep``, e.g.
  DecoReco's σ, lr, λ_min, α) with them from the file its ``best_file`` key names (e.g.
  ``attack.hparams_file``, a sweep's best.json) when that is set, but those named in
  ``attack.hparams_keep`` (e.g. ("init_scale",): Runkel et al.'s Fig. 5, σ = 1 with the
  tuned lr, λ_min, α). Other attacks' sections are returned as they are.

  Raises:
    FileNotFoundError: hparams_file set but missing (run the sweep first).
    ValueError: the file lacks one of the four settings, or hparams_keep names another.
  """
  a = config.attack.copy_and_resolve_references()
  sweep = ATTACKS[a.name].sweep if a.name in ATTACKS else None
  if sweep is None:
    return a
  names = sweep.names
  keep = tuple(a.hparams_keep)
  if set(keep) - set(names):
    raise ValueError(f"attack.hparams_keep {keep} may name only {names}")
  path = a[sweep.best_file]
  if path:
    if not os.path.exists(path):
      raise FileNotFoundError(
          f"attack.{sweep.best_file} {path} does not exist: run the sweep that writes it "
          "first (experiments/sweep.py, or the Makefile target that depends on it)")
    best = files.read_json(path)
    missing = [k for k in names if k not in best]
    if missing:
      raise ValueError(f"{path} lacks the setting(s) {missing}; expected {names}")
    logging.info("Hyperparameters from %s: %s", path, {k: best[k] for k in names})
    with a.unlocked():
      for k in names:
        if k not in keep:
          a[k] = float(best[k])
  return a


def run(config: ml_collections.ConfigDict, workdir: str, mode: str = "landscape",
        overwrite: bool = False, keep_checkpoint: bool = False) -> Finished:
  """Runs one experiment of ``mode`` and writes its files into ``workdir``.

  The run computes in float64 exactly when ``config.float64`` (JAX's x64 mode as a
  context, `jax.enable_x64`: the process's own setting is left as it was).

  Args:
    config: sections seed, float64, data, victim, attack (``attack.name`` a key of
      `trdr.attacks.ATTACKS`), init, eval (and sweep for "sweep"); see configs/.
    workdir: run directory (``~`` and environment variables expanded); a checkpoint of
      the same config there is resumed. Locked while the run writes (`rundir.locked`).
    mode: one of `MODES`.
    overwrite: replace a finished run (otherwise FileExistsError): the new run is built
      in ``workdir``.overwrite and replaces the old one only once it has finished.
    keep_checkpoint: keep the attack's last checkpoint once the run has finished (by
      default it is removed: `trdr.runtime.rundir.drop_checkpoints`).
  Returns:
    `Finished`: the run's summary and, for "landscape", its records. In a process other
    than 0 of a run across processes (`trdr.runtime.distributed`), which writes only its own
    checkpoint into ``workdir``/process_<i>, its shard marker.
  Raises:
    FileExistsError: ``workdir`` holds a finished run or another config's run.
    RuntimeError: another run holds ``workdir``'s lock.
    FileNotFoundError: ``attack.hparams_file`` set but missing.
    ValueError: unknown mode or attack, bad data, model, init or attack settings, a θ*
      file (victim.load, `pretrained`) that does not fit, or a checkpoint or θ* file that
      is corrupted; all but the last before anything is written.
  """
  if mode not in MODES:
    raise ValueError(f"unknown mode {mode!r}; known: {MODES}")
  if overwrite and distributed.active():
    raise ValueError("--overwrite is not supported across processes: delete the run "
                     "directory instead")
  workdir = distributed.process_dir(
      os.path.abspath(os.path.expandvars(os.path.expanduser(workdir))))
  with jax.enable_x64(bool(config.float64)):
    finished = _run(config, workdir, mode, overwrite)
  if not keep_checkpoint:
    rundir.drop_checkpoints(workdir)
  return finished


def _run(config: ml_collections.ConfigDict, workdir: str, mode: str, overwrite: bool
         ) -> Finished:
  """`run` in its precision."""
  prepared = prepare(config, mode, None if overwrite else workdir)
  with rundir.locked(workdir):
    if not overwrite:
      return _MODES[mode](prepared, workdir)
    # --overwrite builds the new run beside the old one (θ* copied, reused if it still
    # fits) and swaps it in only once finished: a failed run leaves the old one intact.
    staging = rundir.staging_dir(workdir, keep=("victim",))
    try:
      out = _MODES[mode](prepared, staging)
    except BaseException:
      shutil.rmtree(staging, ignore_errors=True)
      raise
    rundir.replace_dir(staging, workdir)
    return out._replace(workdir=workdir) if distributed.is_main() else out


def reevaluate(run_dir: str, images: np.ndarray, workdir: str) -> Finished:
  """What a finished run would have written had its attack returned ``images``: the same
  victim, start images, loss history and attack outputs, its evaluation phase and files
  computed again for ``images`` into a new run directory. The report's control attacks
  (`trdr.report.controls`) are built so; given the run's own final images it writes the
  run's own numbers.

  Args:
    run_dir: a finished run of mode "landscape" or "attack".
    images: the reconstructions in the victim's input space, as the run's final_images:
      float[G, m, H, W, C] for a landscape, float[m, H, W, C] for an attack.
    workdir: the new run directory; it must not exist. Built beside it and renamed once
      finished, so a failed call leaves nothing there. Its config.json is the run's, with
      ``victim.checkpoint_dir`` naming the run's θ* (a θ* file, ``victim.load``, is read
      again).
  Returns:
    `Finished`, as `run`'s.
  Raises:
    FileNotFoundError: ``run_dir`` holds no finished run.
    FileExistsError: ``workdir`` exists.
    ValueError: the run is of another mode, or ``images`` has another shape than its
      final images.
  """
  marker = next((m for m in (LANDSCAPE_FILE, SWEEP_FILE, MEMBERSHIP_FILE, SUMMARY_FILE)
                 if os.path.exists(os.path.join(run_dir, m))), None)
  if marker is None:
    raise FileNotFoundError(f"{run_dir} holds no finished run")
  mode = {LANDSCAPE_FILE: "landscape", SUMMARY_FILE: "attack"}.get(marker)
  if mode is None:
    raise ValueError(f"{run_dir} is a {marker} run: only landscape and attack runs are "
                     "re-evaluated")
  if os.path.exists(workdir):
    raise FileExistsError(f"{workdir} exists: re-evaluate into a new directory")
  config = ml_collections.ConfigDict(files.read_json(os.path.join(run_dir, rundir.CONFIG_FILE)))
  if not config.victim.get("load"):
    config.victim.checkpoint_dir = os.path.abspath(
        config.victim.get("checkpoint_dir") or os.path.join(run_dir, "victim"))
  summary = files.read_json(os.path.join(run_dir, SUMMARY_FILE))
  with jax.enable_x64(bool(config.float64)):
    run = prepare(config, mode, None)
    with results_npz.load(run_dir) as saved:
      saved = {k: np.asarray(saved[k]) for k in saved}
    images = np.asarray(images)
    if images.shape != saved["final_images"].shape:
      raise ValueError(f"images of shape {images.shape}; the run's final images are "
                       f"{saved['final_images'].shape}")
    target = run.loaded or victim.load_saved(config, config.victim.checkpoint_dir,
                                             run.task.train_images.shape[1:])
    starts = run.starts
    attack = ATTACKS[run.attack_config.name](target, run.attack_config, starts.labels,
                                             key=starts.build_key, box=run.box)
    outputs = () if attack.outputs is None else jax.eval_shape(lambda: attack.outputs(
        jax.vmap(attack.init, in_axes=(0, 0 if starts.init_keys.ndim else None))(
            starts.images, starts.init_keys)))
    # An attack run's results drop the grid axis G = 1 (`_write_attack`): put it back.
    grid = (lambda v: v[None]) if mode == "attack" else (lambda v: v)
    attacked = Attacked(
        target, attack,
        {k.removeprefix("history_"): grid(v) for k, v in saved.items()
         if k.startswith("history_")},
        {k.removeprefix("trace_"): v if k == "trace_step" else grid(v)
         for k, v in saved.items() if k.startswith("trace_")},
        grid(images), {k: grid(saved[k]) for k in outputs},
        evaluate.comparison_sets(run.task, starts.extra.get("noise_images"),
                                 public=config.eval.public_set),
        {**{k: summary[k] for k in ("victim", "attack", "attack_seconds", "kkt_premise",
                                    "phase_seconds", "hyperparameters") if k in summary},
         "reevaluated": os.path.abspath(run_dir)})
    building = workdir.rstrip(os.sep) + ".reevaluating"
    shutil.rmtree(building, ignore_errors=True)   # a failed call's leftover
    try:
      with rundir.locked(building):
        rundir.prepare_workdir(building, config, FINISHED[mode])
        finished = (_write_landscape if mode == "landscape" else _write_attack)(
            run, attacked, building)
    except BaseException:
      shutil.rmtree(building, ignore_errors=True)
      raise
  os.rename(building, workdir)
  return finished._replace(workdir=workdir)


def prepare(config: ml_collections.ConfigDict, mode: str, workdir: str | None) -> Prepared:
  """Everything a run of ``mode`` checks before its first write (`run`'s ValueErrors),
  and its start images, in the current precision (`run` sets it from ``config.float64``).
  ``workdir``: the run directory to be resumed, None for a fresh one (a θ* file's run is
  refused there if the file changed since)."""
  if config.attack.name not in ATTACKS:
    raise ValueError(f"unknown attack.name {config.attack.name!r}; known: {sorted(ATTACKS)}")
  if mode == "sweep" and ATTACKS[config.attack.name].sweep is None:
    raise ValueError("the sweep tunes an attack's sweepable settings: attack.name must be "
                     f"one of {sorted(k for k, v in ATTACKS.items() if v.sweep)}, got "
                     f"{config.attack.name!r}")
  dtype = jnp.float64 if config.float64 else jnp.float32
  task = data.make_task(config.data)
  eval_metrics(config.eval)
  windows = (config.eval.ssim_window, *config.eval.count_windows)
  if min(task.train_images.shape[1:3]) < max(windows):
    raise ValueError(f"images of {task.train_images.shape[1:3]} pixels are smaller than the "
                     f"SSIM window {max(windows)} (eval.ssim_window, eval.count_windows)")
  # A θ* from a file (victim.load) is read, checked and its architecture taken now.
  config, loaded = pretrained.prepare(config, task, workdir)
  a = attack_config(config)
  starts = STARTS[mode](config, a, task, dtype)
  box = inits.pixel_box(task.mean)
  models.check_labels(config.victim, task.train_labels)
  model = models.build_model(config.victim)
  untrained = models.init_params(model, jax.random.key(0), task.train_images.shape[1:], dtype)
  ATTACKS[a.name](loaded or victim.Victim(model, untrained, config.victim, {}), a,
                  starts.labels, key=starts.build_key, box=box)
  steps = int(config.sweep.steps if mode == "sweep" else a.steps)
  if not (steps >= 1 and a.log_every >= 1 and a.checkpoint_every >= 0):
    raise ValueError(f"need attack steps >= 1, attack.log_every >= 1 and "
                     f"attack.checkpoint_every >= 0, got {steps}, {a.log_every} and "
                     f"{a.checkpoint_every}")
  return Prepared(mode, config, a, task, dtype, starts, box, loaded, steps)


# ------------------------------------------------------------------------------ modes


def _landscape(run: Prepared, workdir: str) -> Finished:
  """The eq. 10 grid: results.npz, summary.json (with the lower level's convergence) and
  landscape.json's records (`records.grid_records`)."""
  attacked = _attack(run, workdir, stop_on_divergence=True)
  if isinstance(attacked, Finished):
    return attacked
  return _write_landscape(run, attacked, workdir)


def _write_landscape(run: Prepared, attacked: Attacked, workdir: str) -> Finished:
  """A landscape's evaluation and files, from its attacked grid."""
  began = time.time()
  extra, config = run.starts.extra, run.config
  # The starts of a landscape shown as pixels are eq. 10 mixtures of the three sets,
  # searched as such (`evaluate.with_starts`).
  weights = (inits.mixture_weights(extra["lambda1"], extra["lambda2"])
             if attacked.attack.display == "pixels" else None)
  evaluation = _evaluate(run, attacked, weights)
  results = _results(run, attacked, evaluation)
  grid_records = records.grid_records(
      extra["lambda1"], extra["lambda2"], attacked.history, evaluation,
      config.eval.ssim_thresholds, config.eval.uniform_start_tols)
  results_npz.save(os.path.join(workdir, RESULTS_FILE), results, landscape=True)
  summary = attacked.summary
  _phase_done(summary, "evaluation", began)
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


def _single_attack(run: Prepared, workdir: str) -> Finished:
  """One attack: results.npz (grid axis G = 1 dropped, with Φ(x_i) of the training
  images) and summary.json (counts of reconstructed training images, the in-run score)."""
  attacked = _attack(run, workdir, stop_on_divergence=True)
  if isinstance(attacked, Finished):
    return attacked
  return _write_attack(run, attacked, workdir)


def _write_attack(run: Prepared, attacked: Attacked, workdir: str) -> Finished:
  """One attack's evaluation and files, from its attacked start (G = 1)."""
  began = time.time()
  config, task = run.config, run.task
  results = _results(run, attacked, _evaluate(run, attacked))
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
  _phase_done(summary, "evaluation", began)
  rundir.finish(workdir, SUMMARY_FILE, summary)
  logging.info("Attack: %s", summary.get("reconstructed"))
  return Finished(workdir, summary)


def _sweep(run: Prepared, workdir: str) -> Finished:
  """An attack's sweepable settings side by side: sweep.json (every setting, ranked by the in-run
  score), best.json (the first) and summary.json. A diverged setting is recorded (score
  +inf), not raised."""
  attacked = _attack(run, workdir, stop_on_divergence=False)
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
  _phase_done(summary, "evaluation", began)
  rundir.finish(workdir, SUMMARY_FILE, summary)
  logging.info("Best setting: %s", rows[0])
  return Finished(workdir, summary)


def _membership(run: Prepared, workdir: str) -> Finished:
  """Every start kind under every seed: results.npz with the start kinds, seeds and
  memberships (`starts.membership_starts`) for `trdr.studies.membership`; starts.json."""
  attacked = _attack(run, workdir, stop_on_divergence=True)
  if isinstance(attacked, Finished):
    return attacked
  began = time.time()
  config = run.config
  results = _results(run, attacked, _evaluate(run, attacked))
  files.save_npz(os.path.join(workdir, RESULTS_FILE), **results)
  summary = attacked.summary
  _phase_done(summary, "evaluation", began)
  summary.update(kinds=list(config.init.kinds), seeds=[int(s) for s in config.init.seeds])
  rundir.finish(workdir, MEMBERSHIP_FILE, summary)
  return Finished(workdir, summary)


_MODES: dict[str, Callable[[Prepared, str], Finished]] = {
    "landscape": _landscape, "attack": _single_attack, "sweep": _sweep,
    "membership": _membership}


# ----------------------------------------------------------------------------- phases


def _attack(run: Prepared, workdir: str, stop_on_divergence: bool) -> Attacked | Finished:
  """The attack phase: the run directory prepared (a checkpoint of the same config
  resumed), θ* trained, reused or copied from its file, the attack built on it and every
  start attacked for ``run.steps`` steps (`loop.run`). In a process other than 0 of a run
  across processes, which evaluates nothing, the `Finished` of its shard instead."""
  config, a, task, starts = run.config, run.attack_config, run.task, run.starts
  resume = rundir.prepare_workdir(
      workdir, config, FINISHED[run.mode] if distributed.is_main() else distributed.SHARD_FILE)
  logging.info("Task: %d training, %d partition, %d test images of shape %s",
               len(task.train_images), len(task.partition_images), len(task.test_images),
               task.train_images.shape[1:])
  began = time.time()
  target = pretrained.keep(run.loaded, workdir) if run.loaded else victim.load_or_train(
      config, task, config.victim.checkpoint_dir or os.path.join(workdir, "victim"))
  victim_seconds = time.time() - began
  # Every mode, trained or loaded θ*: its accuracy (and a loaded file's name) before the
  # attack, beside the premise below.
  logging.info("Victim: %s%s", victim.report_line(target.metadata["report"]),
               f"; θ* loaded from {config.victim.load}" if run.loaded else "")
  # The attack's premise on θ*, once: process 0 writes the summary that holds it.
  kind = ATTACKS[a.name]
  premise = (kind.premise(target, a, task, run.dtype, starts.build_key)
             if kind.premise is not None and distributed.is_main() else {})
  if distributed.active():  # every process attacks process 0's θ*
    target = target._replace(params=distributed.broadcast(target.params))
  attack = ATTACKS[a.name](target, a, starts.labels, key=starts.build_key, box=run.box)
  key_axis = 0 if starts.init_keys.ndim else None
  states = jax.vmap(attack.init, in_axes=(0, key_axis))(starts.images, starts.init_keys)
  if starts.hparams is not None:  # a sweep: each grid point its own settings
    states = states._replace(hparams=starts.hparams)
  started = time.time()
  sets = evaluate.comparison_sets(task, starts.extra.get("noise_images"),
                                  public=config.eval.public_set)
  # Runkel et al. Fig. 9's question along the attack: the partition starts' distances to
  # the training set, the partition and their start at every logged step.
  traced = _partition_starts(run)
  trace = (evaluate.trajectory(starts.images, task.mean, sets, traced, attack.display)
           if len(traced) else None)
  states, history, trajectory = loop.run(
      attack, states, steps=run.steps, log_every=a.log_every,
      grid_batch_size=a.grid_batch_size, workdir=workdir, resume=resume, trace=trace,
      stop_on_divergence=stop_on_divergence, checkpoint_every=a.checkpoint_every)
  seconds = time.time() - started
  if not distributed.is_main():  # process 0 evaluates and writes the merged results
    shard = {"process": jax.process_index(), "processes": jax.process_count()}
    rundir.finish(workdir, distributed.SHARD_FILE, shard)
    return Finished(workdir, shard)
  summary = {"victim": target.metadata["report"], "attack": attack.name,
             "attack_seconds": seconds,
             **premise,
             # This process's wall time per phase (a resumed run: since its resume).
             "phase_seconds": {"victim": victim_seconds, "attack": seconds}}
  if attack.hyperparameters is not None:
    summary["hyperparameters"] = {k: float(v) for k, v in
                                  attack.hyperparameters._asdict().items()}
  outputs = attack.outputs(states) if attack.outputs is not None else {}
  return Attacked(target, attack, history, trajectory, attack.images(states),
                  {k: np.asarray(v) for k, v in outputs.items()}, sets, summary)


def _partition_starts(run: Prepared) -> np.ndarray:
  """The grid points that start from the distinct partition: λ1 = 0, λ2 = 1 (eq. 10) of a
  landscape, or an attack with init.kind "partition"; none in the other modes."""
  if run.mode == "landscape":
    extra = run.starts.extra
    return np.flatnonzero(np.isclose(extra["lambda1"], 0.0) & np.isclose(extra["lambda2"], 1.0))
  if run.mode == "attack" and run.config.init.kind == "partition":
    return np.arange(1)
  return np.arange(0)


def _evaluate(run: Prepared, attacked: Attacked, weights=None) -> dict[str, np.ndarray]:
  """The evaluation of the reconstructions and of the start images (prefix START), as
  `evaluate.with_starts` (``weights``: a landscape's eq. 10 weights, float[G, 3]), and for
  an attack with a lower level ||θ* − θ(x)||² of both (`_param_distances`)."""
  e = run.config.eval
  metric_names, nearest = eval_metrics(e)
  sets = ", ".join(f"{len(v)} {k}" for k, v in attacked.sets.items())

  def evaluation_of(x, mixture=None):
    if mixture is not None:  # the start images: what an earlier run of this process found
      key = _start_key(x, mixture, run.task.mean, attacked, e)
      if key in _START_EVALUATIONS:
        logging.info("Evaluation: the %d start images as an earlier run of this process "
                     "found them (the same starts, sets and settings)",
                     math.prod(x.shape[:-3]))
        _START_EVALUATIONS.move_to_end(key)
        return {k: v.copy() for k, v in _START_EVALUATIONS[key].items()}
    began = time.time()
    what = "start images" if mixture is not None else "reconstructions"
    logging.info("Evaluation: the %s-nearest of %d %s among %s images (exact search; "
                 "identical grid points once)...", registry.get(nearest).label,
                 math.prod(x.shape[:-3]), what, sets)
    out = evaluate.reconstructions(
        x, run.task.mean, attacked.sets, display=attacked.attack.display,
        thresholds=e.ssim_thresholds, chunk_size=e.ssim_chunk_size,
        ssim_window=e.ssim_window, count_windows=e.count_windows, mixture=mixture,
        progress=_search_progress(f"the {what}", began), metric_names=metric_names,
        nearest=nearest)
    logging.info("Evaluation: ... %.1f s", time.time() - began)
    if mixture is not None:
      _START_EVALUATIONS[key] = {k: np.array(v) for k, v in out.items()}
      while len(_START_EVALUATIONS) > _START_EVALUATIONS_KEPT:
        _START_EVALUATIONS.popitem(last=False)
    return out

  evaluation = evaluate.with_starts(evaluation_of, attacked.images, run.starts.images, weights)
  if attacked.attack.energy is not None:
    began = time.time()
    logging.info("Evaluation: ||θ* − θ(x)||² re-solved for the reconstructions and the "
                 "start images...")
    evaluation.update(_param_distances(run, attacked))
    logging.info("Evaluation: ... %.1f s", time.time() - began)
  return evaluation


# The start images' evaluation (`_evaluate`) of the landscape runs this process made, by
# `_start_key`: the report runs the affine victim's pure starts again and again (the outer
# steps: the same seed's data, starts and comparison sets, another optimiser), and their
# SSIM search, seconds each, depends on nothing the runs change. The latest few are kept.
_START_EVALUATIONS: collections.OrderedDict[str, dict[str, np.ndarray]] = (
    collections.OrderedDict())
_START_EVALUATIONS_KEPT = 4


def _start_key(x, mixture, mean, attacked: Attacked, e) -> str:
  """A digest of everything `evaluate.reconstructions` reads for the start images: their
  pixels and eq. 10 weights, the comparison sets, the task mean, the display and the
  evaluation settings."""
  digest = hashlib.sha256()
  arrays = [("x", x), *sorted(mixture.items()), ("mean", mean),
            *sorted(attacked.sets.items())]
  for name, a in arrays:
    a = np.ascontiguousarray(np.asarray(a if a is not None else np.zeros(0)))
    digest.update(f"{name}:{a.dtype}:{a.shape};".encode())
    digest.update(a.tobytes())
  digest.update(repr((attacked.attack.display, tuple(e.ssim_thresholds), e.ssim_chunk_size,
                      e.ssim_window, tuple(e.count_windows), eval_metrics(e),
                      jax.config.jax_enable_x64)).encode())
  return digest.hexdigest()


def eval_metrics(e: ml_collections.ConfigDict) -> tuple[tuple[str, ...], str]:
  """(``eval.metrics``, ``eval.nearest``) of a config's eval section, checked
  (`registry.check`); a config written before they existed: today's defaults.

  Raises:
    ValueError: an unknown metric, or a ``nearest`` that cannot drive the search.
  """
  nearest = e.get("nearest", registry.DEFAULT_NEAREST)
  return registry.check(e.get("metrics", registry.DEFAULT_METRICS), nearest), nearest


def _search_progress(what: str, began: float, every: float = 10.0):
  """`evaluate.reconstructions`' ``progress``: logs the share of ``what``'s search done and
  the time left at its pace so far (from ``began``, `time.time`), at most every ``every``
  seconds (not at the end: the caller logs the total)."""
  logged = began

  def progress(done: int, total: int) -> None:
    nonlocal logged
    now = time.time()
    if done >= total or now - logged < every:
      return
    logged = now
    logging.info("Evaluation: %s, %.0f%% searched (about %.0f s left)", what,
                 100 * done / total, (now - began) * (total - done) / done)
  return progress


def _param_distances(run: Prepared, attacked: Attacked) -> dict[str, np.ndarray]:
  """||θ* − θ(x)||² of the reconstructions and of the start images (one program for both):
  re-solved from θ* at ``config.eval.lower_level_tol`` ("param_distance"), and, for
  ``eval.uniform_start_tols``, from θ0 ~ U(0, 1) at each of them ("param_distance_uniform"
  [G, T]: Runkel et al.'s Table 1 setting, with its tolerance sweep)."""
  config, attack, target = run.config, attacked.attack, attacked.target
  x0 = run.starts.images
  grid = x0.shape[0]
  both = jnp.concatenate([jnp.asarray(attacked.images), jnp.asarray(x0)])
  batch = loop.batch_size(run.attack_config.grid_batch_size, grid, attack.batches_well)
  settings = dict(max_iter=config.eval.lower_level_max_iter,
                  memory_size=config.victim.memory_size, batch=batch,
                  # as the attack's grid; across processes process 0 evaluates alone
                  devices=None if distributed.active() else loop.grid_layout(batch)[0])
  labels = run.starts.labels
  distances = {"param_distance": evaluate.param_distances(
      attack.energy, target.params, both, labels, tol=config.eval.lower_level_tol,
      **settings)}
  if config.eval.uniform_start_tols:
    # Its own stream: the seed's key folded with a constant the run's other draws never use.
    theta0 = models.uniform_params(jax.random.fold_in(jax.random.key(config.seed), 7),
                                   target.params)
    distances["param_distance_uniform"] = evaluate.param_distances(
        attack.energy, target.params, both, labels, tol=tuple(config.eval.uniform_start_tols),
        theta_init=theta0, **settings)
  return {**{k: v[:grid] for k, v in distances.items()},
          **{evaluate.START + k: v[grid:] for k, v in distances.items()}}


def _results(run: Prepared, attacked: Attacked, evaluation: dict) -> dict[str, np.ndarray]:
  """results.npz's arrays: the start and final images, the attack's own outputs, the
  labels and real images, the loss history, the trace and the evaluation."""
  task, attack = run.task, attacked.attack
  return {**run.starts.extra, "initial_images": np.asarray(run.starts.images),
          "final_images": np.asarray(attacked.images), **attacked.outputs,
          "labels": np.asarray(run.starts.labels), "train_images": task.train_images,
          "train_labels": task.train_labels, "partition_images": task.partition_images,
          "mean": np.zeros(0) if task.mean is None else task.mean,
          "display": np.asarray(attack.display),
          **{f"history_{k}": v for k, v in attacked.history.items()},
          **{f"trace_{k}": v for k, v in attacked.trace.items()}, **evaluation}


def _phase_done(summary: dict, phase: str, began: float) -> None:
  """Records the seconds since ``began`` as ``summary["phase_seconds"][phase]`` and logs every
  phase's seconds so far."""
  summary["phase_seconds"][phase] = time.time() - began
  logging.info("Seconds: %s", ", ".join(f"{k} {v:.1f}" for k, v in
                                          summary["phase_seconds"].items()))


def run_or_reuse(mode: str, config: ml_collections.ConfigDict, directory: str) -> None:
  """`experiment.run` of ``mode`` into ``directory``, unless it finished there with this
  same config; an unfinished run of the same config is resumed. A run's figures are
  `plotting.run_figures` away.

  Raises:
    FileExistsError: ``directory`` holds a finished run of a different config (finished
      results are never replaced silently: remove the folder to recompute).
    ValueError: a finished run's files fail their SHA256SUMS
      (`trdr.runtime.rundir.check_finished`).
  """
  if os.path.exists(os.path.join(directory, FINISHED[mode])):
    rundir.check_finished(directory, FINISHED[mode])
    saved = files.read_json(os.path.join(directory, rundir.CONFIG_FILE))
    if change := rundir.config_change(saved, config):
      raise FileExistsError(f"{directory} holds a finished run of a different config "
                            f"({change}); remove it or use another --workdir")
    logging.info("Reusing the finished run %s", directory)
    return
  run(config, directory, mode)
