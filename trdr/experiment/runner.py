"""One experiment, every attack and every mode: run(config, workdir, mode) → its files.

Every mode runs the same phases (`trdr.experiment.phases`):

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

Modes (`MODES`), one function each (`trdr.experiment.modes`):
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

import os
import shutil

import jax
import ml_collections
import numpy as np
from absl import logging

from trdr import victim
from trdr.attacks import ATTACKS, truth
from trdr.evaluation import evaluate
from trdr.experiment import modes
from trdr.experiment import results as results_npz
from trdr.experiment.phases import (BEST_FILE, FINISHED, LANDSCAPE_FILE, MEMBERSHIP_FILE, MODES,
                                    SUMMARY_FILE, SWEEP_FILE, Attacked, Finished, attack_config,
                                    prepare)
from trdr.experiment.results import RESULTS_FILE
from trdr.runtime import distributed, files, rundir

__all__ = ["BEST_FILE", "FINISHED", "Finished", "LANDSCAPE_FILE", "MEMBERSHIP_FILE", "MODES",
           "RESULTS_FILE", "SUMMARY_FILE", "SWEEP_FILE", "attack_config", "prepare",
           "reevaluate", "run", "run_or_reuse"]


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
    if os.path.isdir(truth_start := os.path.join(workdir, truth.TRUTH_DIR)):
      rundir.drop_checkpoints(truth_start)   # the truth diagnostic's own run
  return finished


def _run(config: ml_collections.ConfigDict, workdir: str, mode: str, overwrite: bool
         ) -> Finished:
  """`run` in its precision."""
  prepared = prepare(config, mode, None if overwrite else workdir)
  with rundir.locked(workdir):
    if not overwrite:
      return modes.RUN[mode](prepared, workdir)
    # --overwrite builds the new run beside the old one (θ* copied, reused if it still
    # fits) and swaps it in only once finished: a failed run leaves the old one intact.
    staging = rundir.staging_dir(workdir, keep=("victim",))
    try:
      out = modes.RUN[mode](prepared, staging)
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
    # An attack run's results drop the grid axis G = 1 (`modes.write_attack`): put it back.
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
        finished = (modes.write_landscape if mode == "landscape" else modes.write_attack)(
            run, attacked, building)
    except BaseException:
      shutil.rmtree(building, ignore_errors=True)
      raise
  os.rename(building, workdir)
  return finished._replace(workdir=workdir)


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
