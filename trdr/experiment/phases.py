"""The phases every experiment mode runs (`trdr.experiment.runner`), and what they pass on.

  prepare         everything checked before the first write: the data, the attack's settings
                  (`attack_config`: a sweep's best settings applied; the attack built on the
                  untrained victim, which compiles nothing), the loop's counts; the start
                  images of the mode (`trdr.experiment.starts`) -> `Prepared`
  attack_phase    θ* trained, reused or read from a file (`trdr.victim`), the attack's premise
                  on it (`trdr.attacks.protocol.AttackKind.premise`), the attack built on it
                  (`trdr.attacks.ATTACKS`) and its starts attacked in the checkpointed loop
                  (`trdr.experiment.loop`) -> `Attacked`
  truth_phase     (mode "attack", DecoReco) whether the attack's own objective prefers θ*'s
                  training set, where it is known (`trdr.attacks.protocol.AttackKind.truth`,
                  `trdr.attacks.truth`): summary.json's "truth"
  evaluate_phase  the reconstructions and, as the verdicts' attack-free baseline, the start
                  images x0 evaluated alike (`trdr.evaluation.evaluate`, with the metrics of
                  ``eval.metrics`` at the ``eval.nearest``-nearest images; the start images'
                  numbers prefixed `trdr.evaluation.evaluate.START`), and ||θ* − θ(x)||² for
                  an attack with a lower level
  results_arrays  results.npz's arrays; `phase_done` the seconds of a phase

The file names of a run (`FINISHED`: each mode's finished marker) are here too.
"""

import collections
import hashlib
import math
import os
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging

from trdr import data, models, victim
from trdr.attacks import ATTACKS, Attack
from trdr.attacks import init as inits
from trdr.attacks import truth
from trdr.evaluation import evaluate, power, registry, ssim
from trdr.experiment import loop
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
  """A run after its attack phase (`attack_phase`)."""
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
  own_model = ATTACKS[config.attack.name].own_model
  if loaded is not None and own_model is not None:  # the attack's settings for this θ*
    config, chosen = own_model(config)
    loaded.metadata["report"].update(chosen)
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


def attack_phase(run: Prepared, workdir: str, stop_on_divergence: bool) -> Attacked | Finished:
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
  if "kkt_premise" in premise and (warning := power.premise_warning(premise["kkt_premise"])):
    logging.warning("%s", warning)   # at the threshold `make power` derived (docs/power.md)
    premise["kkt_premise"]["warning"] = warning
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
      stop_on_divergence=stop_on_divergence, checkpoint_every=a.checkpoint_every,
      checkpoint_minutes=a.get("checkpoint_minutes", loop.CHECKPOINT_MINUTES))
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


def truth_phase(run: Prepared, attacked: Attacked, workdir: str) -> None:
  """The attack's truth diagnostic (`trdr.attacks.protocol.AttackKind.truth`) into
  ``attacked.summary`` (its key, e.g. "truth", and phase_seconds "truth"), for an attack
  that has one, with ``attack.truth_diagnostic`` set (a config without the key: set), when
  the task holds θ*'s exact training set (`trdr.attacks.truth.training_set_known`) and the
  run is in one process; otherwise a log line says why it was not measured. It lends the
  attack the run's checkpointed loop, in ``workdir``/`trdr.attacks.truth.TRUTH_DIR` (an
  interrupted run resumes there), and the run's evaluation (`truth_scores`)."""
  a = run.attack_config
  kind = ATTACKS[a.name]
  if kind.truth is None or not a.get("truth_diagnostic", True):
    return
  why = ("θ* was read from a file without its exact training set (data.training_set)"
         if not truth.training_set_known(run.config) else
         "the run spans several processes" if distributed.active() else None)
  if why is not None:
    logging.info("Truth diagnostic not measured: %s", why)
    return
  began = time.time()
  directory = os.path.join(workdir, truth.TRUTH_DIR)

  def attack_loop(attack, states):
    os.makedirs(directory, exist_ok=True)
    states, history, _ = loop.run(
        attack, states, steps=run.steps, log_every=a.log_every,
        grid_batch_size=a.grid_batch_size, workdir=directory,
        resume=os.path.exists(os.path.join(directory, rundir.CHECKPOINT_FILE)),
        stop_on_divergence=False, checkpoint_every=a.checkpoint_every,
      checkpoint_minutes=a.get("checkpoint_minutes", loop.CHECKPOINT_MINUTES))
    return states, history

  def score(images, starts, display):
    return truth_scores(images, starts, run.task, display=display, e=run.config.eval)

  attacked.summary.update(kind.truth(
      attacked.target, a, run.starts.labels, run.task, history=attacked.history,
      images=attacked.images, dtype=run.dtype, run=attack_loop, score=score,
      key=run.starts.build_key))
  phase_done(attacked.summary, "truth", began)


def truth_scores(images, starts, task: data.Task, *, display: str, e) -> dict:
  """How a run from the true images ended (`trdr.attacks.truth.ScoreFn`): its ``images``
  float[m, H, W, C] against their ``starts`` (the true images as candidates) and the
  training set, both shown as the run shows them (``display``).

  Args:
    e: the run's eval section: ssim_window, ssim_chunk_size and, where set, ssim_level
      (else `trdr.attacks.truth.SSIM_LEVEL`).
  Returns:
    {"ssim_to_start": mean over the candidates of SSIM(image, its start) at window
    ``e.ssim_window``; "kept", "kept_w3": training images that are best buddies (each
    the other's nearest by the run's ``eval.nearest``, SSIM by default) with an image at SSIM
    ≥ the level, at the run's window and at
    `trdr.attacks.truth.HAIM_WINDOW`, as the run's "reconstructed_best_buddies" counts
    (`evaluate.reconstructions`); "ssim_level"}.
  """
  mean = task.mean if np.size(task.mean) else None
  level = float(e.get("ssim_level", truth.SSIM_LEVEL))
  shown, shown_start = (evaluate.to_display(np.asarray(x), mean, display)
                        for x in (images, starts))
  to_start = float(np.mean(np.asarray(ssim.ssim(shown, shown_start,
                                                filter_size=e.ssim_window))))
  train = np.asarray(data.to_pixels(task.train_images, mean))
  out = evaluate.reconstructions(images, mean, {"train": train}, display=display,
                                 thresholds=(level,), chunk_size=e.ssim_chunk_size,
                                 ssim_window=e.ssim_window,
                                 count_windows=(truth.HAIM_WINDOW,))
  counts = out["count_best_buddies_ssim_ge"]
  return {"ssim_to_start": to_start, "kept": int(counts[0]),
          "kept_w3": int(out.get(f"count_best_buddies_ssim_ge_w{truth.HAIM_WINDOW}",
                                 counts)[0]), "ssim_level": level}


def _partition_starts(run: Prepared) -> np.ndarray:
  """The grid points that start from the distinct partition: λ1 = 0, λ2 = 1 (eq. 10) of a
  landscape, or an attack with init.kind "partition"; none in the other modes."""
  if run.mode == "landscape":
    extra = run.starts.extra
    return np.flatnonzero(np.isclose(extra["lambda1"], 0.0) & np.isclose(extra["lambda2"], 1.0))
  if run.mode == "attack" and run.config.init.kind == "partition":
    return np.arange(1)
  return np.arange(0)


def evaluate_phase(run: Prepared, attacked: Attacked, weights=None) -> dict[str, np.ndarray]:
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


# The start images' evaluation (`evaluate_phase`) of the landscape runs this process made, by
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


def results_arrays(run: Prepared, attacked: Attacked, evaluation: dict) -> dict[str, np.ndarray]:
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


def phase_done(summary: dict, phase: str, began: float) -> None:
  """Records the seconds since ``began`` as ``summary["phase_seconds"][phase]`` and logs every
  phase's seconds so far."""
  summary["phase_seconds"][phase] = time.time() - began
  logging.info("Seconds: %s", ", ".join(f"{k} {v:.1f}" for k, v in
                                          summary["phase_seconds"].items()))
