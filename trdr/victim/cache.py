"""θ* built, cached, saved and loaded: one place for every experiment.

`load_or_train` returns a `Victim` (model, θ*, config, training report): θ* is reused from
its directory when it was saved for the same victim config (`metadata`), else trained by
L-BFGS (`trdr.victim.training.train`), Haim et al.'s gradient descent (`train_gd`) or, with
``victim.dp`` set, DP-SGD (`trdr.victim.dp_sgd.train_dp`) and saved (`save`): one
checksummed file, victim.msgpack.
"""

import os
import time
from typing import NamedTuple

import flax.serialization
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging
from flax import linen as nn

from trdr import models
from trdr.runtime import files
from trdr.victim import accounting, dp_sgd
from trdr.victim.objective import Params
from trdr.victim.training import gd_epochs, train, train_gd

VICTIM_FILE = "victim.msgpack"


def save(directory: str, params: Params, metadata: dict) -> None:
  """Writes θ* and its metadata (what determines θ*, `metadata`, and the training report)
  into ONE file, ``directory``/victim.msgpack, atomically and checksummed
  (`trdr.runtime.files.write_verified` of {"params": θ*'s state dict, "metadata": JSON text}).

  Raises:
    ValueError: θ* holds NaN or inf (a diverged training is never cached).
  """
  bad = [jax.tree_util.keystr(k) for k, v in jax.tree_util.tree_flatten_with_path(params)[0]
         if not np.all(np.isfinite(np.asarray(v)))]
  if bad:
    raise ValueError(f"θ* has non-finite values in {bad}; not saved to {directory}")
  os.makedirs(directory, exist_ok=True)
  files.write_verified(os.path.join(directory, VICTIM_FILE),
                       {"params": flax.serialization.to_state_dict(params),
                        "metadata": files.dumps_json(metadata, sort_keys=True)})


def _read(directory: str) -> dict | None:
  """victim.msgpack's contents, checksum verified; None if there is none."""
  path = os.path.join(directory, VICTIM_FILE)
  if not os.path.exists(path):
    return None
  return files.read_verified(path, f"delete {path} to train θ* again")


def load_metadata(directory: str) -> dict | None:
  """The metadata saved with θ* in ``directory``, or None if there is no saved victim.

  Raises:
    ValueError: the file there is corrupted (`trdr.runtime.files.read_verified`).
  """
  saved = _read(directory)
  return None if saved is None else files.loads_json(saved["metadata"])


def load(directory: str, template: Params) -> Params:
  """Loads θ* saved by `save` into the structure of ``template``.

  Args:
    directory: folder written by `save`.
    template: pytree with the expected structure, shapes and dtypes (e.g. `init_params`).
  Raises:
    FileNotFoundError: no saved victim in ``directory``.
    ValueError: the file is corrupted, or the saved parameters do not fit the template's
      architecture (a missing or extra parameter, or a shape mismatch, named in the
      message).
  """
  saved = _read(directory)
  if saved is None:
    raise FileNotFoundError(f"no saved victim at {os.path.join(directory, VICTIM_FILE)}")
  flat = lambda tree: {jax.tree_util.keystr(k): v for k, v in
                       jax.tree_util.tree_flatten_with_path(tree)[0]}
  saved_flat, expected_flat = flat(saved["params"]), flat(
      flax.serialization.to_state_dict(template))
  if saved_flat.keys() != expected_flat.keys():
    raise ValueError(
        f"saved victim at {directory} does not match the architecture: parameters "
        f"missing {sorted(expected_flat.keys() - saved_flat.keys())}, unexpected "
        f"{sorted(saved_flat.keys() - expected_flat.keys())}")
  for name, value in expected_flat.items():
    if np.shape(saved_flat[name]) != np.shape(value):
      raise ValueError(
          f"saved victim at {directory} does not match the architecture: parameter "
          f"{name} has shape {np.shape(saved_flat[name])}, expected {np.shape(value)}")
  restored = flax.serialization.from_state_dict(template, saved["params"])
  return jax.tree.map(lambda t, r: jnp.asarray(r, t.dtype), template, restored)


class Victim(NamedTuple):
  """A trained victim: Φ(x; θ*) and what determines it.

  Attributes:
    model: the Flax module (`trdr.models.build_model`).
    params: θ*, a pytree of float arrays (float64 when the config says so).
    config: the victim config section.
    metadata: what `save` stored beside θ*: "config" (`metadata`), "report" (train/test
      accuracy, final gradient norm, ...) and "train_seconds".
  """
  model: nn.Module
  params: Params
  config: ml_collections.ConfigDict
  metadata: dict

  def apply(self, params: Params, images: jax.Array) -> jax.Array:
    """Φ(images; params): float[n, H, W, C] -> logits float[n] (or float[n, C])."""
    return self.model.apply({"params": params}, images)

  def initial_params(self, image_shape) -> Params:
    """θ0, the parameters the victim's training started from (`initial_params`), in θ*'s
    dtype; traceable.

    Args:
      image_shape: (H, W, C) of the images.
    Raises:
      ValueError: θ* was loaded from a file (``config.load``): its θ0 is unknown.
    """
    if self.config.get("load"):
      raise ValueError(f"the victim's θ0 is unknown: θ* was loaded from {self.config.load}, "
                       "not trained by trdr (a lower-level start 'victim_theta0' needs it)")
    dtype = jax.tree.leaves(self.params)[0].dtype
    return initial_params(self.config, self.model, image_shape, dtype)


VICTIM_INITS = ("default", "uniform")


def initial_params(victim_config: ml_collections.ConfigDict, model: nn.Module, image_shape,
                   dtype) -> Params:
  """θ0 of the victim's training, from ``victim_config.seed``: the network's own
  initialisation (``init`` "default": `trdr.models.init_params`) or every entry drawn from
  U(0, 1) (``init`` "uniform": Runkel et al.'s random θ0, `trdr.models.uniform_params`).

  Raises:
    ValueError: an unknown ``victim_config.init``.
  """
  init = _init(victim_config)
  if init not in VICTIM_INITS:
    raise ValueError(f"unknown victim.init {init!r}; known: {list(VICTIM_INITS)}")
  key = jax.random.key(victim_config.seed)
  default = models.init_params(model, key, image_shape, dtype)
  return default if init == "default" else models.uniform_params(key, default)


def _init(victim_config) -> str:
  # A config saved before the key existed (a finished run's config.json) trained from the
  # default θ0 (`trdr.runtime.rundir.ADDED_KEYS`).
  return victim_config.get("init", "default")


def metadata(config: ml_collections.ConfigDict, task) -> dict:
  """Everything that determines θ*: compared to decide whether a saved θ* is reusable.

  The config names the data (a path, classes); "data_sha256" is what is at that path now
  (the SHA-256 of the training and test splits), so data regenerated in place is
  trained on again.

  Args:
    config: the experiment config (sections victim, data; float64).
    task: the `trdr.data.Task` θ* is trained on.
  """
  v = config.victim
  model_fields = {k: v.get(k, models.ABSENT_FIELDS.get(k)) for k in
                  models.MODEL_FIELDS.get(v.arch, ())}
  dp = accounting.settings(v)
  if dp is not None:
    # Only a DP-SGD victim has these keys: the metadata of every other victim is as it
    # was before victim.dp existed, so their saved θ* are reused.
    training = {"training": "dp_sgd", "base_training": v.get("training", "lbfgs"),
                "loss": dp_sgd.loss_name(v), "weight_decay": v.weight_decay,
                "dp": {k: getattr(dp, k) for k in accounting.FIELDS}}
  elif v.training == "gd":
    training = {"training": "gd", **{k: v[k] for k in (
        "loss", "lr", "weight_decay", "max_epochs", "loss_threshold")}}
    if v.get("flow_time") is not None:   # absent otherwise: victims saved before the key
      training["flow_time"] = v.flow_time
  else:
    training = {"loss": "logistic", **{k: v[k] for k in (
        "weight_decay", "tol", "max_iter", "memory_size")}}
  # "init" only where it is not the default, so that victims saved before the key existed
  # (all trained from the default θ0) are reused.
  init = {} if _init(v) == "default" else {"init": _init(v)}
  # data.training_set only where set, for the same reason (the task's digest below holds
  # the images either way).
  data = {k: x for k, x in files.to_jsonable(config.data).items()
          if not (k == "training_set" and x is None)}
  return files.to_jsonable({
      "arch": v.arch, **model_fields, **training, "seed": v.seed, **init,
      "float64": config.float64, "data": data,
      "image_shape": list(task.train_images.shape[1:]), "data_sha256": files.array_digest(
          task.train_images, task.train_labels, task.test_images, task.test_labels)})


def _template(config: ml_collections.ConfigDict, image_shape) -> tuple[nn.Module, Params]:
  """The model and a θ of its structure, shapes and dtype (what a saved θ* is read into)."""
  dtype = jnp.float64 if config.float64 else jnp.float32
  model = models.build_model(config.victim)
  return model, models.init_params(model, jax.random.key(0), image_shape, dtype)


def load_saved(config: ml_collections.ConfigDict, directory: str, image_shape) -> Victim:
  """The victim saved in ``directory`` for ``config`` (without checking the data).

  Raises:
    FileNotFoundError: nothing saved there.
    ValueError: the saved θ* does not fit ``config.victim``'s architecture.
  """
  model, template = _template(config, image_shape)
  meta = load_metadata(directory)
  if meta is None:
    raise FileNotFoundError(f"no saved victim in {directory}")
  return Victim(model, load(directory, template), config.victim, meta)


def report_line(report: dict) -> str:
  """A training report (`TrainReport`, `GDReport` or a loaded θ*'s) for the log: its
  floats to 4 significant digits."""
  return ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                   for k, v in report.items())


def from_run(run_dir: str) -> Victim:
  """θ* of a run directory (trained by the run, or reused by it), with the run's victim
  config from its config.json: what `trdr.victim.pretrained.export` writes out.

  Raises:
    FileNotFoundError: ``run_dir`` has no config.json or no saved victim (its victim/ or
      the config's ``victim.checkpoint_dir``).
    ValueError: the run read θ* from a file (``victim.load``): that file is θ*; or the
      saved θ* is corrupted or does not fit the run's architecture.
  """
  path = os.path.join(run_dir, "config.json")
  if not os.path.exists(path):
    raise FileNotFoundError(f"no config.json in {run_dir}: not a trdr run directory")
  config = ml_collections.ConfigDict(files.read_json(path))
  if config.victim.get("load"):
    raise ValueError(f"the run in {run_dir} read θ* from {config.victim.load} "
                     "(victim.load): that file is its θ*")
  directory = config.victim.get("checkpoint_dir") or os.path.join(run_dir, "victim")
  meta = load_metadata(directory)
  if meta is None:
    raise FileNotFoundError(f"no saved victim in {directory}")
  with jax.enable_x64(bool(config.float64)):
    return load_saved(config, directory, tuple(meta["config"]["image_shape"]))


def _gd_progress(victim_config, began: float):
  """`train_gd`'s ``log_fn``: each chunk's epoch, loss and accuracy, and the time left at
  the pace so far (from ``began``, `time.time`) if training ran to its epoch cap (with a
  loss threshold it stops earlier when the loss reaches it: an upper bound)."""
  cap = gd_epochs(victim_config)
  until = (f"the gradient-flow time {victim_config.flow_time:g}, {cap} epochs"
           if victim_config.get("flow_time") is not None else
           f"the cap of {cap} epochs, or sooner at a loss below "
           f"{victim_config.loss_threshold:g}")

  def log(r: dict) -> None:
    left = (time.time() - began) * (cap - r["epoch"]) / max(r["epoch"], 1)
    logging.info("victim epoch %d: train loss %.3e, accuracy %.3f (at most about %.0f s "
                 "left: %s)", r["epoch"], r["train_loss"], r["train_accuracy"], left, until)
  return log


def load_or_train(config: ml_collections.ConfigDict, task, directory: str) -> Victim:
  """θ* from ``directory`` if it was saved for this same victim config, else trained.

  ``config.victim.training`` chooses the training: "lbfgs" (default; `train`, to
  ||∇θE|| < tol) or "gd" (`train_gd`, Haim et al.'s full-batch gradient descent to a
  train-loss threshold); ``config.victim.dp``, where set, replaces either by DP-SGD
  (`trdr.victim.dp_sgd.train_dp`, its noise keyed by ``victim.seed``). Training saves θ*
  and its metadata into ``directory``.

  Args:
    config: the experiment config (sections victim, data; float64).
    task: the `trdr.data.Task` the victim is trained on.
    directory: where θ* is cached.
  Returns:
    The `Victim`; its metadata["report"] holds train/test accuracy and the final
    gradient norm (and, for "gd", the loss and epochs; for DP-SGD, `DPReport`: the
    recipe, ε at δ and μ).
  Raises:
    ValueError: an invalid ``victim.dp`` (`trdr.victim.accounting.settings`).
  """
  dtype = jnp.float64 if config.float64 else jnp.float32
  meta = metadata(config, task)
  model, template = _template(config, task.train_images.shape[1:])
  saved = load_metadata(directory)
  if saved is not None and files.to_jsonable(saved.get("config")) == meta:
    logging.info("Reusing θ* saved in %s", directory)
    return Victim(model, load(directory, template), config.victim, saved)
  if saved is not None:
    logging.info("Victim config changed: retraining θ* into %s", directory)
  start = time.time()
  theta0 = initial_params(config.victim, model, task.train_images.shape[1:], dtype)
  if accounting.settings(config.victim) is not None:
    task = task._replace(train_images=task.train_images.astype(dtype),
                         test_images=task.test_images.astype(dtype))
    key = jax.random.fold_in(jax.random.key(config.victim.seed), dp_sgd.NOISE_STREAM)
    theta_star, report = dp_sgd.train_dp(key, model, theta0, task, config.victim)
    report = report._asdict()
  elif config.victim.training == "gd":
    task = task._replace(train_images=task.train_images.astype(dtype),
                         test_images=task.test_images.astype(dtype))
    theta_star, report = train_gd(model, theta0, task, config.victim,
                                  log_fn=_gd_progress(config.victim, start))
    report = report._asdict()
  else:
    theta_star, report = train(model, theta0, task, config.victim)
    report = report.__dict__
  meta = {"config": meta, "report": files.to_jsonable(report),
          "train_seconds": time.time() - start}
  save(directory, theta_star, meta)
  logging.info("Trained θ* in %.1fs: %s", meta["train_seconds"], report_line(report))
  return Victim(model, theta_star, config.victim, meta)
