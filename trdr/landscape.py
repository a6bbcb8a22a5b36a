"""The energy-landscape experiment (Runkel et al. 2024, Sec. 4.3 and 4.5; Fig. 10–12).

Train (or reload) the victim, attack it from every eq. 10 initialisation of the (λ1, λ2)
grid as ONE jitted computation, sharded over all local devices and vmapped over each
device's share of the grid (in batches of ``attack.grid_batch_size``: the whole share on
GPU/TPU, see `bilevel.grid_batch_size` and `trdr.sharding.grid_map`), then evaluate each
reconstruction against the training set, the distinct partition and the noise set x_rnd. `run` writes into a work directory:

  config.json       the full config
  victim/           θ* and its metadata (reused when the victim config is unchanged)
  metrics.jsonl     one JSON line per logged chunk of outer steps
  checkpoint.msgpack the attack state after the latest chunk (resumed after a crash)
  landscape.json    one record per grid point (see `GRID_RECORD_KEYS`)
  summary.json      the run's lower-level start, hypergradient settings, victim report
                    and lower-level convergence over all outer steps (`lower_level_summary`)
  results.npz       initial and final images, nearest-neighbour indices, SSIM and L2
  fig10_heatmaps, fig11_lambda2_eq_1, fig12_lambda1_eq_1, reconstructions_{noise,
  ground_truth,partition} (beside the nearest training image) and
  reconstructions_partition_vs_partition: PNG and PDF.
"""

import json
import os
import time
from typing import Any

import flax.serialization
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging

from trdr import data, io, metrics, models, plotting, sharding, victim
from trdr.attacks import bilevel, init as inits

LANDSCAPE_FILE = "landscape.json"
RESULTS_FILE = "results.npz"
SUMMARY_FILE = "summary.json"
GRID_RECORD_KEYS = (
    "lambda1", "lambda2", "param_distance", "upper_loss", "l2_to_train", "l2_to_partition",
    "l2_to_noise", "ssim_to_train", "ssim_to_partition", "ssim_to_noise",
    "lower_level_grad_norm_max", "lower_level_iters_mean")
# The three pure initialisations of eq. 10, as (λ1, λ2).
PURE_INITS = {"noise": (0.0, 0.0), "ground_truth": (1.0, 1.0), "partition": (0.0, 1.0)}


def victim_metadata(config: ml_collections.ConfigDict, image_shape) -> dict:
  """Everything that determines θ*: compared to decide whether a saved θ* is reusable."""
  model_fields = {k: config.victim[k] for k in models.MODEL_FIELDS.get(config.victim.arch, ())}
  if config.victim.get("training", "lbfgs") == "gd":
    training = {"training": "gd", **{k: config.victim[k] for k in (
        "loss", "lr", "weight_decay", "max_epochs", "loss_threshold")}}
  else:
    training = {"loss": "logistic", **{k: config.victim[k] for k in (
        "weight_decay", "tol", "max_iter", "memory_size")}}
  return io.to_jsonable({
      "arch": config.victim.arch, **model_fields, **training, "seed": config.victim.seed,
      "float64": config.float64, "data": config.data, "image_shape": list(image_shape)})


def load_or_train_victim(config, task, model, directory: str) -> tuple[Any, dict]:
  """θ* from ``directory`` if it was saved for this same victim config, else trained.

  ``config.victim.training`` chooses the training: "lbfgs" (default; `victim.train`, to
  ||∇θE|| < tol) or "gd" (`victim.train_gd`, Haim et al.'s full-batch gradient descent
  to a train-loss threshold).

  Returns:
    (θ*, metadata) where metadata["report"] holds train/test accuracy and the final
    gradient norm (and, for "gd", the loss and epochs).
  """
  dtype = jnp.float64 if config.float64 else jnp.float32
  meta = victim_metadata(config, task.train_images.shape[1:])
  template = models.init_params(model, jax.random.key(config.victim.seed),
                                task.train_images.shape[1:], dtype)
  saved = victim.load_metadata(directory)
  if saved is not None and saved.get("config") == meta:
    logging.info("Reusing θ* saved in %s", directory)
    return victim.load(directory, template), saved
  if saved is not None:
    logging.info("Victim config changed: retraining θ* into %s", directory)
  start = time.time()
  if config.victim.get("training", "lbfgs") == "gd":
    task = task._replace(train_images=task.train_images.astype(dtype),
                         test_images=task.test_images.astype(dtype))
    theta_star, report = victim.train_gd(
        model, template, task, config.victim,
        log_fn=lambda r: logging.info("victim epoch %d: train loss %.3e, accuracy %.3f",
                                      r["epoch"], r["train_loss"], r["train_accuracy"]))
    report = report._asdict()
  else:
    theta_star, report = victim.train(model, template, task, config.victim)
    report = report.__dict__
  metadata = {"config": meta, "report": io.to_jsonable(report),
              "train_seconds": time.time() - start}
  victim.save(directory, theta_star, metadata)
  logging.info("Trained θ* in %.1fs: %s", metadata["train_seconds"], report)
  return theta_star, metadata


def _run_attack(attack, x0, config, workdir: str, resume: bool):
  """The outer loop over the whole grid, in jitted chunks of `lax.scan`; checkpointed.

  After every chunk the checkpoint (state, history and the metrics records so far) is
  written first, atomically, and only then the chunk's line appended to metrics.jsonl.
  A resumed run continues from the checkpoint and rewrites metrics.jsonl from the records
  in it, so a run killed at any moment (even between the two writes, or half-way through
  the append) ends with one line per chunk, and with the uninterrupted run's numbers:
  the chunks are the same jitted computations on the same inputs.

  Returns:
    (final AttackState with leading grid axis, history dict of float[G, steps] arrays).
  """
  steps, chunk = config.attack.steps, config.attack.log_every
  state = jax.vmap(attack.init)(x0)
  history = {name: np.zeros((x0.shape[0], 0)) for name in bilevel.StepMetrics._fields}
  records = []
  if resume:
    saved = io.load_checkpoint(workdir)
    state = flax.serialization.from_state_dict(state, saved["state"])
    history = {k: np.asarray(v) for k, v in saved["history"].items()}
    done = int(np.max(state.step))
    if "metrics" in saved:
      records = json.loads(saved["metrics"])
    else:  # a checkpoint written before the records were kept in it
      records = [r for r in io.read_metrics(workdir) if r["step"] <= done]
    logging.info("Resuming from step %d", done)
  io.write_metrics(workdir, records)  # no line for a chunk that is not in the checkpoint
  batch = bilevel.grid_batch_size(config.attack.grid_batch_size, x0.shape[0])
  logging.info("Attack: %s", sharding.describe(x0.shape[0], batch))
  run_chunk = jax.jit(lambda s, n: bilevel.run_grid(attack.step, s, n, batch),
                      static_argnums=1)
  state = sharding.replicate(state)  # as run_chunk returns it: one compilation, not two
  done = int(np.max(state.step))
  while done < steps:
    n = min(chunk, steps - done)
    start = time.time()
    state, step_metrics = run_chunk(state, n)
    jax.block_until_ready(state)
    seconds = (time.time() - start) / n
    history = {k: np.concatenate([history[k], np.asarray(getattr(step_metrics, k))], axis=1)
               for k in history}
    done += n
    loss = history["upper_loss"][:, -1]
    record = {"step": done, "upper_loss_mean": float(loss.mean()),
              "upper_loss_min": float(loss.min()), "upper_loss_max": float(loss.max()),
              "lower_level_grad_norm_max": float(history["grad_norm"][:, -n:].max()),
              "seconds_per_step": seconds}
    records.append(record)
    io.save_checkpoint(workdir, {"state": state, "history": history,
                                 "metrics": json.dumps(io.to_jsonable(records))})
    io.append_metrics(workdir, record)
    logging.info("outer step %d/%d  l: mean %.4e  min %.4e  max %.4e  (%.3fs/step)",
                 done, steps, record["upper_loss_mean"], record["upper_loss_min"],
                 record["upper_loss_max"], seconds)
  return state, history


def evaluate(theta_star, final_images, task, x_rnd, energy_fn, config) -> dict[str, np.ndarray]:
  """Per-grid-point evaluation of the reconstructions.

  ||θ* − θ(x)||² is measured with a fresh lower-level solve started at θ* and converged to
  ``config.eval.lower_level_tol``, independent of the attack's warm starts. Images are
  compared in pixel space (the task's mean added back).

  Args:
    final_images: float[G, n, H, W, C] reconstructions.
  Returns:
    Dict of arrays: param_distance [G]; for each of train/partition/noise the nearest
    neighbour by SSIM: index, ssim, l2 (each [G, n]).
  """
  labels = jnp.asarray(task.train_labels)

  def theta_of(images):
    fun = lambda p: energy_fn(p, images, labels)
    return victim.minimize_energy(fun, theta_star, max_iter=config.eval.lower_level_max_iter,
                                  tol=config.eval.lower_level_tol,
                                  memory_size=config.victim.memory_size)[0]

  batch = bilevel.grid_batch_size(config.attack.grid_batch_size, final_images.shape[0])
  distance = jax.jit(lambda xs: sharding.grid_map(
      lambda x: metrics.param_distance(theta_star, theta_of(x)), xs, batch))
  out = {"param_distance": np.asarray(distance(final_images))}
  recon = np.asarray(data.to_pixels(np.asarray(final_images), task.mean))
  sets = {"train": data.to_pixels(task.train_images, task.mean),
          "partition": data.to_pixels(task.partition_images, task.mean),
          "noise": data.to_pixels(np.asarray(x_rnd), task.mean)}
  for name, candidates in sets.items():
    start = time.time()
    nn = metrics.nearest_neighbours(recon, np.asarray(candidates),
                                    chunk_size=config.eval.ssim_chunk_size)
    logging.info("Nearest neighbours in the %s set: %.1fs", name, time.time() - start)
    for field in nn._fields:
      out[f"{name}_{field}"] = np.asarray(getattr(nn, field))
  return out


def grid_records(grid: inits.Grid, history, evaluation) -> list[dict]:
  """One record per grid point: the numbers behind Fig. 10–12 (averaged over images)."""
  records = []
  for g in range(grid.lambda1.size):
    records.append({
        "lambda1": float(grid.lambda1[g]), "lambda2": float(grid.lambda2[g]),
        "param_distance": float(evaluation["param_distance"][g]),
        "upper_loss": float(history["upper_loss"][g, -1]),
        **{f"l2_to_{s}": float(evaluation[f"{s}_l2"][g].mean())
           for s in ("train", "partition", "noise")},
        **{f"ssim_to_{s}": float(evaluation[f"{s}_ssim"][g].mean())
           for s in ("train", "partition", "noise")},
        "lower_level_grad_norm_max": float(history["grad_norm"][g].max()),
        "lower_level_iters_mean": float(history["num_iter"][g].mean()),
    })
  return records


def lower_level_summary(history, tol: float) -> dict:
  """How well the lower level converged over the whole run, from the per-step history.

  Args:
    history: dict with grad_norm and num_iter, float[G, steps] each (||∇θE|| at θ(x^k) at
      the end of every outer step k, and the L-BFGS iterations it took).
    tol: the lower level's target ||∇θE||.
  Returns:
    Plain-number dict: grad_norm_{max, median, final_max}, fraction_converged (steps that
    reached ``tol``), iters_mean, iters_max.
  """
  grad, iters = np.asarray(history["grad_norm"]), np.asarray(history["num_iter"])
  if grad.size == 0:
    return {}
  return {"grad_norm_max": float(grad.max()), "grad_norm_median": float(np.median(grad)),
          "grad_norm_final_max": float(grad[:, -1].max()),
          "fraction_converged": float(np.mean(grad < tol)),
          "iters_mean": float(iters.mean()), "iters_max": int(iters.max())}


def run(config: ml_collections.ConfigDict, workdir: str, overwrite: bool = False) -> list[dict]:
  """Runs the whole landscape experiment and writes its files into ``workdir``.

  With ``config.attack.name == "decoreco"`` this is the DecoReco landscape
  (`trdr.reconstruct.landscape`, configs/decoreco_landscape.py).

  Args:
    config: see configs/bilevel_affine.py (sections seed, float64, data, victim, attack,
      init, eval).
    workdir: run directory; a checkpoint of the same config there is resumed.
    overwrite: replace a finished run (otherwise FileExistsError).
  Returns:
    The records written to landscape.json.

  Sets JAX's process-wide ``jax_enable_x64`` to ``config.float64`` (float64 needs it on
  before any array is made).

  Raises:
    FileExistsError: ``workdir`` holds a finished run or another config's run.
    ValueError: bad data, model or attack settings (from the modules that check them).
  """
  if config.attack.name == "decoreco":
    from trdr import reconstruct  # imports this module
    return reconstruct.landscape(config, workdir, overwrite)
  resume = io.prepare_workdir(workdir, config, LANDSCAPE_FILE, overwrite)
  jax.config.update("jax_enable_x64", bool(config.float64))
  dtype = jnp.float64 if config.float64 else jnp.float32
  grid = inits.make_grid(config.init.lambda1, config.init.lambda2)
  task = data.make_binary_task(config.data)
  logging.info("Task: %d training, %d partition, %d test images of shape %s",
               len(task.train_images), len(task.partition_images), len(task.test_images),
               task.train_images.shape[1:])

  model = models.build_model(config.victim)
  apply_fn = lambda p, x: model.apply({"params": p}, x)
  victim_dir = config.victim.checkpoint_dir or os.path.join(workdir, "victim")
  theta_star, victim_meta = load_or_train_victim(config, task, model, victim_dir)

  key_noise, key_attack = jax.random.split(jax.random.key(config.seed))
  x_gt = jnp.asarray(task.train_images, dtype)
  x_part = jnp.asarray(task.partition_images, dtype)
  x_rnd = inits.uniform(key_noise, x_gt.shape, task.mean, dtype)
  x0 = inits.grid_images(grid, x_gt, x_part, x_rnd)
  box = (0.0, 1.0) if task.mean is None else (-task.mean, 1.0 - task.mean)
  attack = bilevel.make_attack(apply_fn, theta_star, jnp.asarray(task.train_labels, dtype),
                               config.victim, config.attack, key_attack, box)
  logging.info("Attacking %d initialisations × %d images as one computation",
               grid.lambda1.size, x_gt.shape[0])
  state, history = _run_attack(attack, x0, config, workdir, resume)

  energy_fn = lambda p, x, y: victim.energy(p, x, y, apply_fn=apply_fn,
                                            weight_decay=config.victim.weight_decay)
  evaluation = evaluate(theta_star, state.images, task, x_rnd, energy_fn, config)
  records = grid_records(grid, history, evaluation)
  io.save_npz(os.path.join(workdir, RESULTS_FILE),
              lambda1=grid.lambda1, lambda2=grid.lambda2, grid_shape=np.asarray(grid.shape),
              initial_images=np.asarray(x0), final_images=np.asarray(state.images),
              train_images=task.train_images, partition_images=task.partition_images,
              noise_images=np.asarray(x_rnd), mean=np.zeros(0) if task.mean is None else task.mean,
              **{f"history_{k}": v for k, v in history.items()}, **evaluation)
  for name, fig in plotting.landscape_figures(records, grid.shape).items():
    io.save_figure(fig, workdir, name)
  results = np.load(os.path.join(workdir, RESULTS_FILE))
  shown = [(name, "train") for name in PURE_INITS] + [("partition", "partition")]
  for name, reference in shown:
    l1, l2 = PURE_INITS[name]
    if np.any(np.isclose(grid.lambda1, l1) & np.isclose(grid.lambda2, l2)):
      fig = plotting.reconstruction_grid(results, grid.index(l1, l2), reference,
                                         n_show=config.eval.n_show,
                                         title=f"{name.replace('_', ' ')} initialisation")
      suffix = "" if reference == "train" else f"_vs_{reference}"
      io.save_figure(fig, workdir, f"reconstructions_{name}{suffix}")
  io.write_json(os.path.join(workdir, SUMMARY_FILE), {
      "victim": victim_meta["report"], "lower_level_start": config.attack.lower_level.start,
      "hypergradient": config.attack.hypergradient,
      "lower_level": lower_level_summary(history, config.attack.lower_level.tol)})
  io.write_json(os.path.join(workdir, LANDSCAPE_FILE), records)
  logging.info("Victim: %s", victim_meta["report"])
  logging.info("Wrote %s", os.path.join(workdir, LANDSCAPE_FILE))
  return records
