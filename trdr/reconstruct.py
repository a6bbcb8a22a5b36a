"""DecoReco experiments (Haim et al. 2022; Runkel et al. 2024, Sec. 4.4–4.5; Figs. 5–12(b)).

Three runs share one victim (a `trdr.models.HaimMLP` trained by gradient descent, reused
from its directory while its config is unchanged) and one attack loop (`attack_grid`:
G independent DecoReco attacks, each `decoreco.run_steps` under `lax.scan`, mapped over
the leading axis G as ONE jitted computation, checkpointed after every chunk):

  `run`        one attack (G = 1) from ``config.init.kind``: Gaussian N(0, σ²), U(0, 1),
               the ground truth, the distinct partition, or an eq. 10 mixture; m = 2n
               candidates (n for the image initialisations, one per image, with its label).
  `sweep`      S hyperparameter settings (σ, lr, λ_min, α) drawn from Haim et al.'s ranges,
               G = S, ranked by the in-run score (`metrics.matched_score` of
               `metrics.ncc_distances`); the best setting goes to best.json, which the figure
               configs read through ``attack.hparams_file``.
  `landscape`  (in `trdr.landscape.run` when ``attack.name == "decoreco"``) the 25 eq. 10
               initialisations, G = 25.

Evaluation (`evaluate`): reconstructions are shown and scored as Haim et al. do — the mean
added back, each image min-max scaled to [0, 1] — against the training set and the
partition (and the noise set in the landscape): each reconstruction's SSIM-nearest image
and the L2 distance to it; per training image, the SSIM of its best reconstruction; the
number of training images reconstructed with SSIM ≥ 0.3 / 0.4 / 0.5; the victim's output
Φ(x_i) per training image (Haim et al., Fig. 4).

Files written into the work directory: config.json, victim/, metrics.jsonl,
checkpoint.msgpack, results.npz, summary.json (the finished marker), figures; the sweep
also sweep.json and best.json.
"""

import functools
import json
import os
import time

import flax.serialization
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging

from trdr import data, io, metrics, models, sharding
from trdr.attacks import decoreco, init as inits, kkt_mlp

SUMMARY_FILE = "summary.json"
RESULTS_FILE = "results.npz"
SWEEP_FILE = "sweep.json"
BEST_FILE = "best.json"
INIT_KINDS = ("gaussian", "uniform", "ground_truth", "partition", "mixture")
HPARAM_NAMES = decoreco.Hyperparameters._fields


# ------------------------------------------------------------------------------ set-up


def setup(config: ml_collections.ConfigDict, workdir: str):
  """Task, victim model and θ* (trained or reused), dtype: shared by every DecoReco run.

  Sets JAX's process-wide ``jax_enable_x64`` to ``config.float64``.

  Returns:
    (task, model, theta_star, victim_metadata, dtype).
  """
  from trdr import landscape  # the victim helpers live there; imported late (cycle)

  jax.config.update("jax_enable_x64", bool(config.float64))
  dtype = jnp.float64 if config.float64 else jnp.float32
  task = data.make_binary_task(config.data)
  model = models.build_model(config.victim)
  victim_dir = config.victim.checkpoint_dir or os.path.join(workdir, "victim")
  theta_star, meta = landscape.load_or_train_victim(config, task, model, victim_dir)
  return task, model, theta_star, meta, dtype


def hyperparameters(config: ml_collections.ConfigDict) -> decoreco.Hyperparameters:
  """(σ, lr, λ_min, α) from ``config.attack``, or from ``attack.hparams_file`` when set.

  Raises:
    FileNotFoundError: hparams_file set but missing (run the sweep first).
    ValueError: the file lacks one of the four settings.
  """
  path = config.attack.get("hparams_file")
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
    return decoreco.Hyperparameters(*(float(best[k]) for k in HPARAM_NAMES))
  return decoreco.Hyperparameters(*(float(config.attack[k]) for k in HPARAM_NAMES))


def make_loss_and_grad(config, model, theta_star, labels) -> decoreco.LossAndGrad:
  """The jitted-ready (images, λ, α, λ_min) -> (L, grads) for ``config.attack``.

  ``attack.form``: "binary" / "weight_decay" (`decoreco.stationarity_loss`),
  "multiclass" (Buzaglo et al.; for a victim with num_outputs = 2 trained with the "ce"
  loss, class index (y + 1)/2), or
  "gradient_norm", Runkel et al.'s eq. 3, ||∇θE(x, y; θ*)||² with E the victim's
  objective (its loss — BCE — and weight decay) plus the pixel box prior; λ is unused
  there (its gradient is zero).

  Raises:
    ValueError: unknown form.
  """
  a = config.attack
  if a.form == "gradient_norm":
    return decoreco.gradient_norm_loss_and_grad(
        model, theta_star, labels, weight_decay=config.victim.weight_decay, x_min=a.x_min,
        x_max=a.x_max)
  if a.form not in decoreco.FORMS:
    raise ValueError(f"unknown attack.form {a.form!r}; known: "
                     f"{sorted(decoreco.FORMS) + ['gradient_norm']}")
  if (a.form == "multiclass") != (config.victim.num_outputs > 1):
    raise ValueError(f"attack.form {a.form!r} does not fit a victim with num_outputs = "
                     f"{config.victim.num_outputs}: use 'multiclass' exactly when it is > 1")
  if a.form == "multiclass":  # ±1 labels -> class indices 0 / 1 (Buzaglo et al.)
    labels = ((labels + 1) / 2).astype(jnp.int32)
  if a.get("fused", True) and fused_applies(config, theta_star):
    scale = config.victim.weight_decay if a.form == "weight_decay" else 1.0

    def fused(images, lambdas, alpha, lambda_min):
      return kkt_mlp.value_and_grad(theta_star, images, lambdas, labels, alpha=alpha,
                                    scale=scale, x_min=a.x_min, x_max=a.x_max,
                                    lambda_min=lambda_min, lambda_weight=a.lambda_weight)

    return fused
  weight_decay = config.victim.weight_decay if a.form == "weight_decay" else 0.0
  return decoreco.autodiff_loss_and_grad(
      model, theta_star, labels, form=a.form, weight_decay=weight_decay, x_min=a.x_min,
      x_max=a.x_max, lambda_weight=a.lambda_weight)


def fused_applies(config, theta_star) -> bool:
  """Whether `kkt_mlp.value_and_grad` computes this attack's loss: a ReLU Haim MLP with
  one output (`kkt_mlp.supports`). Otherwise JAX autodiff of the same loss is used."""
  v = config.victim
  return (v.arch == "haim_mlp" and v.activation == "relu" and v.num_outputs == 1
          and kkt_mlp.supports(theta_star))


def initial_candidates(kind: str, key, task, dtype, *, init_scale=None, m_per_image: int = 2,
                       lambda1: float = 1.0, lambda2: float = 1.0
                       ) -> tuple[jax.Array, jax.Array]:
  """The attack's starting candidates and their labels (mean-subtracted pixel space).

  Args:
    kind: "gaussian" (N(0, σ²), σ = ``init_scale``, Haim et al.), "uniform" (U(0, 1)
      pixels minus the mean, no variance tuning: Runkel et al. Fig. 5), "ground_truth",
      "partition", or "mixture" (eq. 10 with ``lambda1``, ``lambda2``).
    key: PRNG key.
    task: `trdr.data.BinaryTask` (mean-subtracted when ``task.mean`` is set).
    dtype: float dtype.
    init_scale: σ, for "gaussian"; may be traced.
    m_per_image: candidates per training image for "gaussian" / "uniform" (m = 2n in the
      reference); the image initialisations use one candidate per image (m = n).
  Returns:
    (images float[m, H, W, C], labels float[m] in {−1, +1}: −1 for the first half).
  Raises:
    ValueError: unknown kind, or m_per_image < 1.
  """
  if kind not in INIT_KINDS:
    raise ValueError(f"unknown init.kind {kind!r}; known: {INIT_KINDS}")
  n, shape = task.train_images.shape[0], task.train_images.shape[1:]
  if kind in ("gaussian", "uniform"):
    if m_per_image < 1:
      raise ValueError(f"candidates_per_image must be >= 1, got {m_per_image}")
    m = m_per_image * n
    labels = jnp.repeat(jnp.asarray([-1.0, 1.0], dtype), m // 2)
    if kind == "gaussian":
      return init_scale * jax.random.normal(key, (m, *shape), dtype), labels
    return inits.uniform(key, (m, *shape), task.mean, dtype), labels
  labels = jnp.asarray(task.train_labels, dtype)
  x_gt = jnp.asarray(task.train_images, dtype)
  x_part = jnp.asarray(task.partition_images, dtype)
  if kind == "ground_truth":
    return x_gt, labels
  if kind == "partition":
    return x_part, labels
  x_rnd = inits.uniform(key, x_gt.shape, task.mean, dtype)
  return inits.mixture(x_gt, x_part, x_rnd, lambda1, lambda2), labels


# ------------------------------------------------------------------------- attack loop


def grid_batch_size(requested: int, grid_size: int) -> int:
  """Attacks per vmapped batch on each device: ``requested`` (> 0), or 0 for all of them.

  Unlike the bilevel lower level, the DecoReco step has no data-dependent loops, so a
  vmapped batch is a batched matrix product on every backend.

  Raises:
    ValueError: requested < 0.
  """
  if requested < 0:
    raise ValueError(f"grid_batch_size must be >= 0 (0: whole grid), got {requested}")
  return grid_size if requested == 0 else min(requested, grid_size)


def attack_grid(config, loss_and_grad, states: decoreco.AttackState,
                hparams: decoreco.Hyperparameters, workdir: str, resume: bool
                ) -> tuple[decoreco.AttackState, np.ndarray]:
  """G DecoReco attacks (leading axis of ``states`` and ``hparams``) as one computation.

  Runs ``config.attack.steps`` iterations in jitted chunks of ``attack.log_every``
  (`decoreco.run_steps` under `lax.scan`), mapped over G and sharded over all local
  devices (`sharding.grid_map`, ``attack.grid_batch_size`` per device). After every chunk
  the checkpoint (states, loss history and the metrics records so far) is written first,
  atomically, then the chunk's metrics.jsonl line; a resumed run continues from the
  checkpoint and rewrites metrics.jsonl from it (the protocol of `trdr.landscape`), so a
  run killed at any moment ends with the uninterrupted run's numbers.

  Returns:
    (final states, loss history float[G, steps]: L before each iteration).
  """
  a = config.attack
  size = states.step.shape[0]
  losses = np.zeros((size, 0))
  records = []
  if resume:
    saved = io.load_checkpoint(workdir)
    states = flax.serialization.from_state_dict(states, saved["state"])
    losses = np.asarray(saved["losses"]).reshape(size, -1)
    records = json.loads(saved["metrics"])
    logging.info("Resuming from iteration %d", int(np.max(states.step)))
  io.write_metrics(workdir, records)
  batch = grid_batch_size(a.grid_batch_size, size)
  logging.info("DecoReco, %d candidates per attack: %s", states.images.shape[1],
               sharding.describe(size, batch))
  run = functools.partial(decoreco.run_steps, loss_and_grad=loss_and_grad,
                          lambda_lr=a.lambda_lr, momentum=a.momentum)

  @functools.partial(jax.jit, static_argnums=2)
  def chunk(states, hparams, n):
    return sharding.grid_map(lambda sh: run(sh[0], sh[1], n), (states, hparams), batch)

  states, hparams = sharding.replicate((states, hparams))
  done = int(np.max(states.step))
  while done < a.steps:
    n = min(a.log_every, a.steps - done)
    start = time.time()
    states, chunk_losses = chunk(states, hparams, n)
    jax.block_until_ready(states)
    seconds = (time.time() - start) / n
    losses = np.concatenate([losses, np.asarray(chunk_losses)], axis=1)
    done += n
    last = losses[:, -1]
    finite = last[np.isfinite(last)]
    records.append({"step": done, "loss_min": float(finite.min()) if finite.size else None,
                    "loss_median": float(np.median(finite)) if finite.size else None,
                    "diverged": int(np.sum(~np.isfinite(last))), "seconds_per_step": seconds})
    io.save_checkpoint(workdir, {"state": states, "losses": losses,
                                 "metrics": json.dumps(io.to_jsonable(records))})
    io.append_metrics(workdir, records[-1])
    logging.info("iteration %d/%d  L: min %s  median %s  diverged %d  (%.3fs/iteration)",
                 done, a.steps, records[-1]["loss_min"], records[-1]["loss_median"],
                 records[-1]["diverged"], seconds)
  return states, losses


def in_run_score(images, task, k: int) -> jax.Array:
  """Haim et al.'s score of reconstructions float[..., m, H, W, C] (lower is better).

  `metrics.matched_score` of `metrics.ncc_distances` to the training set (standardised,
  so the mean and the min-max scaling do not matter); non-finite images score +inf.
  """
  images = jnp.asarray(images)
  flat = images.reshape((-1, *images.shape[-4:]))
  train = jnp.asarray(task.train_images, jnp.float32)
  scores = jnp.stack([
      metrics.matched_score(metrics.ncc_distances(jnp.asarray(x, jnp.float32), train), k)
      for x in flat])
  finite = jnp.all(jnp.isfinite(flat.reshape(flat.shape[0], -1)), axis=1)
  return jnp.where(finite & jnp.isfinite(scores), scores, jnp.inf).reshape(images.shape[:-4])


# -------------------------------------------------------------------------- evaluation


def to_display(images, mean) -> np.ndarray:
  """Reconstructions as shown and scored: mean added back, each image min-max scaled.

  Non-finite images (a diverged attack) become 0.
  """
  x = np.asarray(images, np.float64)
  if mean is not None and np.size(mean):
    x = x + np.asarray(mean)
  x = np.where(np.isfinite(x), x, 0.0)
  return np.asarray(metrics.minmax_scale(x), np.float32)


def evaluate(images, task, sets: dict[str, np.ndarray], *, thresholds=(0.3, 0.4, 0.5),
             chunk_size: int = 500) -> dict[str, np.ndarray]:
  """Nearest neighbours of DecoReco reconstructions (see the module docstring).

  Args:
    images: float[..., m, H, W, C] reconstructions (mean-subtracted space).
    task: the `BinaryTask` (its mean).
    sets: name -> float[M, H, W, C] comparison images in pixel space [0, 1]; must hold
      "train".
    thresholds: SSIM levels at which reconstructed training images are counted.
  Returns:
    For each set s: s_index, s_ssim, s_l2 (float[..., m], each reconstruction's
    SSIM-nearest image of s); best_ssim_per_train float[..., n] and
    best_index_per_train int[..., n] (the best reconstruction of each training image);
    count_ssim_ge float[..., len(thresholds)].
  """
  recon = to_display(images, task.mean)
  out = {}
  for name, candidates in sets.items():
    nn = metrics.nearest_neighbours(recon, np.asarray(candidates, np.float32),
                                    chunk_size=chunk_size)
    for field in nn._fields:
      out[f"{name}_{field}"] = np.asarray(getattr(nn, field))
  ssim = metrics.pairwise_ssim(recon, np.asarray(sets["train"], np.float32),
                               chunk_size=chunk_size)
  best, index = metrics.best_per_candidate(ssim)
  out["best_ssim_per_train"] = np.asarray(best)
  out["best_index_per_train"] = np.asarray(index)
  out["count_ssim_ge"] = np.stack([np.sum(out["best_ssim_per_train"] >= t, axis=-1)
                                   for t in thresholds], axis=-1)
  return out


def pixel_sets(task, noise=None) -> dict[str, np.ndarray]:
  """Comparison sets in pixel space: train, partition (and noise if given)."""
  sets = {"train": data.to_pixels(task.train_images, task.mean),
          "partition": data.to_pixels(task.partition_images, task.mean)}
  if noise is not None:
    sets["noise"] = data.to_pixels(np.asarray(noise), task.mean)
  return sets


# -------------------------------------------------------------------------------- runs


def _counts_dict(counts, thresholds) -> dict:
  return {f"ssim_ge_{t:g}": int(c) for t, c in zip(thresholds, np.asarray(counts))}


def run(config: ml_collections.ConfigDict, workdir: str, overwrite: bool = False) -> dict:
  """One DecoReco attack from ``config.init.kind``, evaluated; writes into ``workdir``.

  Args:
    config: see configs/decoreco_cifar.py.
    workdir: run directory (resumed from its checkpoint when the config is the same).
    overwrite: replace a finished run (otherwise FileExistsError).
  Returns:
    The summary written to summary.json.
  Raises:
    FileExistsError: ``workdir`` holds a finished run or another config's run.
    FileNotFoundError: ``attack.hparams_file`` set but missing.
    ValueError: bad data, model, init or attack settings.
  """
  from trdr import plotting

  resume = io.prepare_workdir(workdir, config, SUMMARY_FILE, overwrite)
  task, model, theta_star, victim_meta, dtype = setup(config, workdir)
  hp = hyperparameters(config)
  key_init, key_lambda = jax.random.split(jax.random.key(config.seed))
  x0, labels = initial_candidates(
      config.init.kind, key_init, task, dtype, init_scale=hp.init_scale,
      m_per_image=config.attack.candidates_per_image, lambda1=config.init.lambda1,
      lambda2=config.init.lambda2)
  lambda0 = jax.random.uniform(key_lambda, labels.shape, dtype)
  loss_and_grad = make_loss_and_grad(config, model, theta_star, labels)
  states = jax.tree.map(lambda t: t[None], decoreco.init_state(x0, lambda0))
  hparams = jax.tree.map(lambda v: jnp.asarray([v], dtype), hp)
  start = time.time()
  states, losses = attack_grid(config, loss_and_grad, states, hparams, workdir, resume)
  attack_seconds = time.time() - start

  thresholds = tuple(config.eval.ssim_thresholds)
  evaluation = evaluate(states.images[0], task, pixel_sets(task), thresholds=thresholds,
                        chunk_size=config.eval.ssim_chunk_size)
  score = float(in_run_score(states.images[0], task, config.eval.score_k))
  apply_fn = lambda p, x: model.apply({"params": p}, x)
  phi_train = np.asarray(apply_fn(theta_star, jnp.asarray(task.train_images, dtype)))
  if phi_train.ndim == 2:  # C = 2 logits: Φ = Φ_1 − Φ_0, the binary logit's counterpart
    phi_train = phi_train[:, 1] - phi_train[:, 0]
  io.save_npz(os.path.join(workdir, RESULTS_FILE),
              initial_images=np.asarray(x0), final_images=np.asarray(states.images[0]),
              final_lambdas=np.asarray(states.lambdas[0]), labels=np.asarray(labels),
              train_images=task.train_images, train_labels=task.train_labels,
              partition_images=task.partition_images,
              mean=np.zeros(0) if task.mean is None else task.mean, losses=losses[0],
              phi_train=phi_train, **evaluation)
  results = dict(np.load(os.path.join(workdir, RESULTS_FILE)))
  n = task.train_images.shape[0]
  figures = {
      "reconstructions_vs_train": plotting.decoreco_grid(
          results, "train", n_show=config.eval.n_show, order="ssim",
          title=f"DecoReco, {config.init.kind} initialisation"),
      "reconstructions_vs_partition": plotting.decoreco_grid(
          results, "partition", n_show=config.eval.n_show, order="ssim",
          title=f"DecoReco, {config.init.kind} initialisation"),
      "overview": plotting.decoreco_grid(
          results, "train", n_show=config.eval.n_show, order="index",
          title="DecoReco, the first reconstructions"),
      "best_per_train": plotting.best_per_train_grid(results, n_show=config.eval.n_show),
      "ssim_vs_output": plotting.ssim_vs_output(results, thresholds),
  }
  for name, fig in figures.items():
    io.save_figure(fig, workdir, name)
  summary = {
      "victim": victim_meta["report"], "hyperparameters": dict(zip(HPARAM_NAMES, map(float, hp))),
      "init": config.init.kind, "candidates": int(x0.shape[0]), "n_train": n,
      "steps": int(config.attack.steps), "final_loss": float(losses[0, -1]),
      "attack_seconds": attack_seconds, "score": score,
      "reconstructed": _counts_dict(evaluation["count_ssim_ge"], thresholds),
      "mean_best_ssim": float(np.mean(evaluation["best_ssim_per_train"])),
      "fraction_ssim_ge_0.4": float(np.mean(evaluation["best_ssim_per_train"] >= 0.4)),
  }
  io.write_json(os.path.join(workdir, SUMMARY_FILE), summary)
  logging.info("DecoReco: %s", json.dumps(summary["reconstructed"]))
  return summary


def sample_settings(key, num: int, ranges: ml_collections.ConfigDict, dtype
                    ) -> decoreco.Hyperparameters:
  """``num`` settings drawn from Haim et al.'s sweep ranges.

  σ and lr log-uniform, λ_min and α uniform, each over ``ranges.<name>`` = (low, high).

  Returns:
    Hyperparameters of float[num] arrays.
  Raises:
    ValueError: a range with low > high or a non-positive log-uniform bound.
  """
  keys = jax.random.split(key, len(HPARAM_NAMES))
  values = []
  for k, name in zip(keys, HPARAM_NAMES):
    low, high = (float(v) for v in ranges[name])
    if low > high:
      raise ValueError(f"sweep range for {name} has low {low} > high {high}")
    log = name in ("init_scale", "lr")
    if log and low <= 0:
      raise ValueError(f"sweep range for {name} is log-uniform: bounds must be > 0, "
                       f"got ({low}, {high})")
    u = jax.random.uniform(k, (num,), dtype)
    values.append(jnp.exp(jnp.log(low) + u * (jnp.log(high) - jnp.log(low))) if log
                  else low + u * (high - low))
  return decoreco.Hyperparameters(*values)


def sweep(config: ml_collections.ConfigDict, workdir: str, overwrite: bool = False) -> dict:
  """The vmapped hyperparameter sweep (replaces Haim et al.'s W&B cluster sweep).

  ``config.sweep.num_settings`` settings from `sample_settings`, each a full Gaussian-init
  DecoReco attack of ``config.sweep.steps`` iterations against the same victim, run as ONE
  computation mapped over the settings; ranked by `in_run_score` (lower is better,
  diverged settings last). Writes sweep.json (every setting, its score, final loss and
  count of training images with SSIM ≥ 0.4), best.json (the best setting) and
  summary.json.

  Returns:
    The summary (best setting and its score).
  """
  resume = io.prepare_workdir(workdir, config, SUMMARY_FILE, overwrite)
  task, model, theta_star, victim_meta, dtype = setup(config, workdir)
  key_settings, key_init = jax.random.split(jax.random.key(config.sweep.seed))
  settings = sample_settings(key_settings, config.sweep.num_settings, config.sweep.ranges,
                             dtype)
  _, labels = initial_candidates("gaussian", key_init, task, dtype, init_scale=1.0,
                                 m_per_image=config.attack.candidates_per_image)
  keys = jax.random.split(key_init, config.sweep.num_settings)

  def start(key, scale):
    key_x, key_l = jax.random.split(key)
    x0, _ = initial_candidates("gaussian", key_x, task, dtype, init_scale=scale,
                               m_per_image=config.attack.candidates_per_image)
    return decoreco.init_state(x0, jax.random.uniform(key_l, labels.shape, dtype))

  states = jax.vmap(start)(keys, settings.init_scale)
  loss_and_grad = make_loss_and_grad(config, model, theta_star, labels)
  sweep_config = config.copy_and_resolve_references()
  with sweep_config.unlocked():
    sweep_config.attack.steps = config.sweep.steps
  started = time.time()
  states, losses = attack_grid(sweep_config, loss_and_grad, states, settings, workdir, resume)
  seconds = time.time() - started
  scores = np.asarray(in_run_score(states.images, task, config.eval.score_k))
  sets = {"train": data.to_pixels(task.train_images, task.mean)}
  counts = np.stack([
      evaluate(states.images[s], task, sets, thresholds=(0.4,),
               chunk_size=config.eval.ssim_chunk_size)["count_ssim_ge"][0]
      for s in range(config.sweep.num_settings)])
  order = np.argsort(scores, kind="stable")
  rows = [{**{k: float(getattr(settings, k)[s]) for k in HPARAM_NAMES},
           "score": float(scores[s]), "final_loss": float(losses[s, -1]),
           "ssim_ge_0.4": int(counts[s]), "rank": int(r + 1)} for r, s in enumerate(order)]
  io.write_json(os.path.join(workdir, SWEEP_FILE), rows)
  io.write_json(os.path.join(workdir, BEST_FILE), rows[0])
  summary = {"victim": victim_meta["report"], "num_settings": config.sweep.num_settings,
             "steps": config.sweep.steps, "seconds": seconds, "best": rows[0],
             "diverged": int(np.sum(~np.isfinite(scores)))}
  io.write_json(os.path.join(workdir, SUMMARY_FILE), summary)
  logging.info("Best setting: %s", rows[0])
  return summary


def landscape(config: ml_collections.ConfigDict, workdir: str, overwrite: bool = False
              ) -> list[dict]:
  """The DecoReco energy landscape (Runkel et al. Figs. 10(b)–12(b)): one attack per eq. 10
  initialisation of the (λ1, λ2) grid, all as ONE computation (`attack_grid`).

  Each attack has m = n candidates, candidate i starting at the mixture of training image
  i, partition image i (same label) and noise image i, with the training labels; λ starts
  at one U(0, 1) draw shared by all grid points. Writes the bilevel landscape's files
  (`trdr.landscape`): landscape.json (records with λ1, λ2, the final KKT loss as
  upper_loss, mean L2 / SSIM to the SSIM-nearest image of the training set, the partition
  and the noise set, and the count of training images reconstructed with SSIM ≥ 0.4),
  results.npz, summary.json and the Fig. 10–12 panels.

  Returns:
    The records.
  """
  from trdr import landscape as bilevel_landscape, plotting

  resume = io.prepare_workdir(workdir, config, bilevel_landscape.LANDSCAPE_FILE, overwrite)
  task, model, theta_star, victim_meta, dtype = setup(config, workdir)
  hp = hyperparameters(config)
  grid = inits.make_grid(config.init.lambda1, config.init.lambda2)
  key_noise, key_lambda = jax.random.split(jax.random.key(config.seed))
  x_gt = jnp.asarray(task.train_images, dtype)
  x_part = jnp.asarray(task.partition_images, dtype)
  labels = jnp.asarray(task.train_labels, dtype)
  x_rnd = inits.uniform(key_noise, x_gt.shape, task.mean, dtype)
  x0 = inits.grid_images(grid, x_gt, x_part, x_rnd)
  size = x0.shape[0]
  lambda0 = jnp.broadcast_to(jax.random.uniform(key_lambda, labels.shape, dtype),
                             (size, *labels.shape))
  states = jax.vmap(decoreco.init_state)(x0, lambda0)
  hparams = jax.tree.map(lambda v: jnp.full((size,), v, dtype), hp)
  loss_and_grad = make_loss_and_grad(config, model, theta_star, labels)
  logging.info("DecoReco landscape: %d initialisations × %d candidates", size, x_gt.shape[0])
  start = time.time()
  states, losses = attack_grid(config, loss_and_grad, states, hparams, workdir, resume)
  attack_seconds = time.time() - start

  sets = pixel_sets(task, x_rnd)
  evaluation = evaluate(states.images, task, sets, thresholds=(0.4,),
                        chunk_size=config.eval.ssim_chunk_size)
  records = []
  for g in range(size):
    records.append({
        "lambda1": float(grid.lambda1[g]), "lambda2": float(grid.lambda2[g]),
        "upper_loss": float(losses[g, -1]),
        **{f"l2_to_{s}": float(evaluation[f"{s}_l2"][g].mean()) for s in sets},
        **{f"ssim_to_{s}": float(evaluation[f"{s}_ssim"][g].mean()) for s in sets},
        "train_ssim_ge_0.4": int(evaluation["count_ssim_ge"][g, 0]),
    })
  io.save_npz(os.path.join(workdir, RESULTS_FILE),
              lambda1=grid.lambda1, lambda2=grid.lambda2, grid_shape=np.asarray(grid.shape),
              initial_images=np.asarray(x0), final_images=np.asarray(states.images),
              final_lambdas=np.asarray(states.lambdas), labels=np.asarray(labels),
              train_images=task.train_images, partition_images=task.partition_images,
              noise_images=np.asarray(x_rnd),
              mean=np.zeros(0) if task.mean is None else task.mean,
              history_upper_loss=losses, **evaluation)
  for name, fig in plotting.landscape_figures(records, grid.shape).items():
    io.save_figure(fig, workdir, name)
  results = np.load(os.path.join(workdir, RESULTS_FILE))
  for name, (l1, l2) in bilevel_landscape.PURE_INITS.items():
    if np.any(np.isclose(grid.lambda1, l1) & np.isclose(grid.lambda2, l2)):
      for reference in ("train", "partition"):
        fig = plotting.decoreco_grid(results, reference, n_show=config.eval.n_show,
                                     grid_index=grid.index(l1, l2),
                                     title=f"DecoReco, {name.replace('_', ' ')} initialisation")
        suffix = "" if reference == "train" else f"_vs_{reference}"
        io.save_figure(fig, workdir, f"reconstructions_{name}{suffix}")
  io.write_json(os.path.join(workdir, bilevel_landscape.SUMMARY_FILE), {
      "victim": victim_meta["report"], "attack": "decoreco",
      "hyperparameters": dict(zip(HPARAM_NAMES, map(float, hp))),
      "attack_seconds": attack_seconds})
  io.write_json(os.path.join(workdir, bilevel_landscape.LANDSCAPE_FILE), records)
  return records
