"""The victim classifier: its training objective E, training, and θ* built, cached,
saved and loaded (one place for every experiment).

E(x, y; θ) = (1/n) Σ_i log(1 + exp(−y_i Φ(x_i; θ))) + (wd/2) ||θ||²     (Runkel et al., Sec. 3)

with labels y ∈ {−1, +1} and wd > 0, so that for the affine model (eq. 8) E is strongly
convex in θ and its minimiser θ(x) is unique. The same minimiser is the lower level of the
bilevel attack, so `minimize_energy` serves both the victim's training and the attack.

`load_or_train` returns a `Victim` (model, θ*, config, training report): θ* is reused from
its directory when it was saved for the same victim config (`metadata`), else trained by
L-BFGS (`train`) or Haim et al.'s gradient descent (`train_gd`) and saved (`save`).
"""

import dataclasses
import os
import time
from typing import Any, Callable, NamedTuple

import flax.serialization
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import optax.tree
from absl import logging
from flax import linen as nn

from trdr import io, models
from trdr.solver import MinimizeInfo, minimize_energy  # noqa: F401  (public here too)

Params = Any


def logistic_loss(logits: jax.Array, labels: jax.Array) -> jax.Array:
  """Mean logistic loss (1/n) Σ log(1 + exp(−y_i f_i)); logits, labels float[n], y ∈ {±1}."""
  return jnp.mean(jax.nn.softplus(-labels * logits))


def energy(params: Params, images: jax.Array, labels: jax.Array, *, apply_fn,
           weight_decay: float) -> jax.Array:
  """Training objective E(x, y; θ): mean logistic loss + (wd/2)||θ||².

  Args:
    params: θ, a pytree of float arrays.
    images: float[n, H, W, C].
    labels: float[n] in {−1, +1}.
    apply_fn: (params, images) -> logits float[n].
    weight_decay: wd ≥ 0.
  Returns:
    float[] scalar.
  """
  logits = apply_fn(params, images)
  return logistic_loss(logits, labels) + 0.5 * weight_decay * optax.tree.norm(
      params, squared=True)


@dataclasses.dataclass(frozen=True)
class TrainReport:
  """Outcome of training the victim (all plain Python numbers, JSON-serialisable)."""
  train_accuracy: float
  test_accuracy: float
  grad_norm: float
  energy: float
  num_iter: int
  n_train: int
  n_test: int


def accuracy(logits, labels) -> jax.Array:
  """Fraction of sign(Φ) = y: float[] (jittable)."""
  return jnp.mean(jnp.where(logits >= 0, 1.0, -1.0) == labels)


def train(model, params0: Params, task, victim_config: ml_collections.ConfigDict
          ) -> tuple[Params, TrainReport]:
  """Trains the victim full batch to ||∇θE|| < victim_config.tol: returns θ* and a report.

  Args:
    model: Flax module mapping float[n, H, W, C] to logits float[n].
    params0: initial θ.
    task: a `trdr.data.BinaryTask` (its training set and test set are used).
    victim_config: fields weight_decay, tol, max_iter, memory_size.
  """
  apply_fn = lambda p, x: model.apply({"params": p}, x)
  x, y = jnp.asarray(task.train_images), jnp.asarray(task.train_labels)
  fun = lambda p: energy(p, x, y, apply_fn=apply_fn, weight_decay=victim_config.weight_decay)
  solve = jax.jit(lambda p: minimize_energy(
      fun, p, max_iter=victim_config.max_iter, tol=victim_config.tol,
      memory_size=victim_config.memory_size))
  params, info = solve(params0)
  value, train_acc, test_acc = jax.jit(lambda p, tx, ty: (  # one program, not one per op
      fun(p), accuracy(apply_fn(p, x), y), accuracy(apply_fn(p, tx), ty)))(
          params, jnp.asarray(task.test_images), jnp.asarray(task.test_labels))
  report = TrainReport(
      train_accuracy=float(train_acc), test_accuracy=float(test_acc),
      grad_norm=float(info.grad_norm), energy=float(value), num_iter=int(info.num_iter),
      n_train=int(x.shape[0]), n_test=int(task.test_images.shape[0]))
  return params, report


VICTIM_FILE = "victim.msgpack"


def save(directory: str, params: Params, metadata: dict) -> None:
  """Writes θ* and its metadata (what determines θ*, `metadata`, and the training report)
  into ONE file, ``directory``/victim.msgpack, atomically and checksummed
  (`trdr.io.write_verified` of {"params": θ*'s state dict, "metadata": JSON text}).

  Raises:
    ValueError: θ* holds NaN or inf (a diverged training is never cached).
  """
  bad = [jax.tree_util.keystr(k) for k, v in jax.tree_util.tree_flatten_with_path(params)[0]
         if not np.all(np.isfinite(np.asarray(v)))]
  if bad:
    raise ValueError(f"θ* has non-finite values in {bad}; not saved to {directory}")
  os.makedirs(directory, exist_ok=True)
  io.write_verified(os.path.join(directory, VICTIM_FILE),
                    {"params": flax.serialization.to_state_dict(params),
                     "metadata": io.dumps_json(metadata, sort_keys=True)})


def _read(directory: str) -> dict | None:
  """victim.msgpack's contents, checksum verified; None if there is none."""
  path = os.path.join(directory, VICTIM_FILE)
  if not os.path.exists(path):
    return None
  return io.read_verified(path, f"delete {path} to train θ* again")


def load_metadata(directory: str) -> dict | None:
  """The metadata saved with θ* in ``directory``, or None if there is no saved victim.

  Raises:
    ValueError: the file there is corrupted (`trdr.io.read_verified`).
  """
  saved = _read(directory)
  return None if saved is None else io.loads_json(saved["metadata"])


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


def class_index(labels: jax.Array, num_classes: int) -> jax.Array:
  """int32[n] class indices: (y + 1)/2 of ±1 labels for C = 2, else the labels 0 … C−1."""
  return ((labels + 1) / 2 if num_classes == 2 else labels).astype(jnp.int32)


# Losses of the gradient-descent victims (Haim et al. 2022; Buzaglo et al. 2023), each
# (logits, labels float[n]: ±1, or 0 … C−1 for C > 2) -> float[] mean over the training set.
GD_LOSSES: dict[str, Callable[[jax.Array, jax.Array], jax.Array]] = {
    # Binary cross-entropy on {0, 1} labels, i.e. the logistic loss on y ∈ {−1, +1}.
    "bce": logistic_loss,
    # Squared error to the ±1 target, (1/n) Σ (Φ_i − y_i)².
    "mse": lambda logits, labels: jnp.mean((logits - labels) ** 2),
    # Cross-entropy over C output logits (Buzaglo et al.'s multiclass victim; C = 2 on
    # the binary task).
    "ce": lambda logits, labels: jnp.mean(optax.softmax_cross_entropy_with_integer_labels(
        logits, class_index(labels, logits.shape[1]))),
}


class GDReport(NamedTuple):
  """Outcome of gradient-descent training (plain Python numbers after `train_gd`)."""
  train_loss: float
  train_accuracy: float
  test_accuracy: float
  epochs: int
  grad_norm: float
  reached_threshold: bool
  n_train: int
  n_test: int


def predictions(logits: jax.Array) -> jax.Array:
  """Predicted labels as the task's: ±1 from logits float[n] (sign) or float[n, 2]
  (argmax), the class 0 … C−1 from float[n, C > 2]."""
  if logits.ndim == 2 and logits.shape[1] > 2:
    return jnp.argmax(logits, axis=1).astype(logits.dtype)
  if logits.ndim == 2:
    return jnp.where(jnp.argmax(logits, axis=1) == 1, 1.0, -1.0)
  return jnp.where(logits >= 0, 1.0, -1.0)


def train_gd(model, params0: Params, task, victim_config: ml_collections.ConfigDict,
             log_fn: Callable[[dict], None] | None = None) -> tuple[Params, GDReport]:
  """Full-batch gradient descent as in Haim et al. 2022, stopped at a train-loss threshold.

  θ ← θ − lr ∇θ [loss(Φ(x; θ), y) + (wd/2)||θ||²] for at most ``max_epochs`` epochs, up
  to the first epoch whose training loss (without weight decay) is below ``loss_threshold``;
  a `lax.while_loop` in jitted chunks of ``log_every`` epochs, each logged.

  Args:
    model: Flax module, images float[n, H, W, C] -> logits float[n] (or float[n, C] for
      the "ce" loss).
    params0: initial θ (e.g. `models.init_params`, Haim's 1e-4 first layer).
    task: a `trdr.data.BinaryTask` (training and test sets; labels ±1, or 0 … C−1).
    victim_config: fields loss (a `GD_LOSSES` name), lr > 0, weight_decay ≥ 0,
      max_epochs ≥ 1, loss_threshold ≥ 0, log_every ≥ 1.
    log_fn: called with a dict (epoch, train_loss, train_accuracy) after every chunk.
  Returns:
    (θ*, GDReport).
  Raises:
    ValueError: unknown loss, non-positive lr, max_epochs or log_every.
    FloatingPointError: the loss became NaN or infinite (the step size is too large).
  """
  cfg = victim_config
  if cfg.loss not in GD_LOSSES:
    raise ValueError(f"unknown victim loss {cfg.loss!r}; known: {sorted(GD_LOSSES)}")
  if not cfg.lr > 0 or cfg.max_epochs < 1 or cfg.log_every < 1:
    raise ValueError(f"victim lr, max_epochs and log_every must be positive, got "
                     f"{cfg.lr}, {cfg.max_epochs}, {cfg.log_every}")
  apply_fn = lambda p, x: model.apply({"params": p}, x)
  x, y = jnp.asarray(task.train_images), jnp.asarray(task.train_labels)
  data_loss = lambda p: GD_LOSSES[cfg.loss](apply_fn(p, x), y)
  objective = lambda p: data_loss(p) + 0.5 * cfg.weight_decay * optax.tree.norm(
      p, squared=True)

  @jax.jit
  def chunk(params, loss, epoch, until):
    def body(carry):
      params, _, epoch = carry
      loss, grad = jax.value_and_grad(data_loss)(params)
      grad = optax.tree.add_scale(grad, cfg.weight_decay, params)
      # The loss is that of the parameters before the step; stop before stepping.
      params = jax.tree.map(lambda p, g: jnp.where(loss < cfg.loss_threshold, p,
                                                   p - cfg.lr * g), params, grad)
      return params, loss, epoch + jnp.where(loss < cfg.loss_threshold, 0, 1)

    def cond(carry):
      _, loss, e = carry
      return (loss >= cfg.loss_threshold) & (e < until)

    return jax.lax.while_loop(cond, body, (params, loss, epoch))

  acc = lambda p, images, labels: float(jnp.mean(predictions(apply_fn(
      p, jnp.asarray(images))) == jnp.asarray(labels)))
  params, loss, epoch = params0, jnp.asarray(jnp.inf, x.dtype), jnp.asarray(0, jnp.int32)
  while int(epoch) < cfg.max_epochs and not float(loss) < cfg.loss_threshold:
    until = min(int(epoch) + cfg.log_every, cfg.max_epochs)
    params, loss, epoch = chunk(params, loss, epoch, jnp.asarray(until, jnp.int32))
    if not np.isfinite(float(loss)):
      raise FloatingPointError(
          f"victim training diverged: {cfg.loss} loss {float(loss)} at epoch {int(epoch)}; "
          f"lower victim.lr (now {cfg.lr})")
    if log_fn is not None:
      log_fn({"epoch": int(epoch), "train_loss": float(loss),
              "train_accuracy": acc(params, x, y)})
  final_loss = float(data_loss(params))
  report = GDReport(
      train_loss=final_loss, train_accuracy=acc(params, x, y),
      test_accuracy=acc(params, task.test_images, task.test_labels),
      epochs=int(epoch), grad_norm=float(optax.tree.norm(jax.grad(objective)(params))),
      reached_threshold=bool(final_loss < cfg.loss_threshold),
      n_train=int(x.shape[0]), n_test=int(task.test_images.shape[0]))
  return params, report


# ------------------------------------------------------------- θ*: build, cache, load


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


def metadata(config: ml_collections.ConfigDict, task) -> dict:
  """Everything that determines θ*: compared to decide whether a saved θ* is reusable.

  The config names the data (a path, classes); "data_sha256" is what is at that path now
  (the SHA-256 of the training and test splits), so data regenerated in place is
  trained on again.

  Args:
    config: the experiment config (sections victim, data; float64).
    task: the `trdr.data.BinaryTask` θ* is trained on.
  """
  v = config.victim
  model_fields = {k: v[k] for k in models.MODEL_FIELDS.get(v.arch, ())}
  if v.get("training", "lbfgs") == "gd":
    training = {"training": "gd", **{k: v[k] for k in (
        "loss", "lr", "weight_decay", "max_epochs", "loss_threshold")}}
  else:
    training = {"loss": "logistic", **{k: v[k] for k in (
        "weight_decay", "tol", "max_iter", "memory_size")}}
  return io.to_jsonable({
      "arch": v.arch, **model_fields, **training, "seed": v.seed,
      "float64": config.float64, "data": config.data,
      "image_shape": list(task.train_images.shape[1:]), "data_sha256": io.array_digest(
          task.train_images, task.train_labels, task.test_images, task.test_labels)})


def _template(config: ml_collections.ConfigDict, image_shape) -> tuple[nn.Module, Params]:
  dtype = jnp.float64 if config.float64 else jnp.float32
  model = models.build_model(config.victim)
  return model, models.init_params(model, jax.random.key(config.victim.seed), image_shape,
                                   dtype)


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


def load_or_train(config: ml_collections.ConfigDict, task, directory: str) -> Victim:
  """θ* from ``directory`` if it was saved for this same victim config, else trained.

  ``config.victim.training`` chooses the training: "lbfgs" (default; `train`, to
  ||∇θE|| < tol) or "gd" (`train_gd`, Haim et al.'s full-batch gradient descent to a
  train-loss threshold). Training saves θ* and its metadata into ``directory``.

  Args:
    config: the experiment config (sections victim, data; float64).
    task: the `trdr.data.BinaryTask` the victim is trained on.
    directory: where θ* is cached.
  Returns:
    The `Victim`; its metadata["report"] holds train/test accuracy and the final
    gradient norm (and, for "gd", the loss and epochs).
  """
  dtype = jnp.float64 if config.float64 else jnp.float32
  meta = metadata(config, task)
  model, template = _template(config, task.train_images.shape[1:])
  saved = load_metadata(directory)
  if saved is not None and io.to_jsonable(saved.get("config")) == meta:
    logging.info("Reusing θ* saved in %s", directory)
    return Victim(model, load(directory, template), config.victim, saved)
  if saved is not None:
    logging.info("Victim config changed: retraining θ* into %s", directory)
  start = time.time()
  if config.victim.get("training", "lbfgs") == "gd":
    task = task._replace(train_images=task.train_images.astype(dtype),
                         test_images=task.test_images.astype(dtype))
    theta_star, report = train_gd(
        model, template, task, config.victim,
        log_fn=lambda r: logging.info("victim epoch %d: train loss %.3e, accuracy %.3f",
                                      r["epoch"], r["train_loss"], r["train_accuracy"]))
    report = report._asdict()
  else:
    theta_star, report = train(model, template, task, config.victim)
    report = report.__dict__
  meta = {"config": meta, "report": io.to_jsonable(report),
          "train_seconds": time.time() - start}
  save(directory, theta_star, meta)
  logging.info("Trained θ* in %.1fs: %s", meta["train_seconds"], report)
  return Victim(model, theta_star, config.victim, meta)
