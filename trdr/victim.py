"""The victim classifier: its training objective E, full-batch training, saving θ*.

E(x, y; θ) = (1/n) Σ_i log(1 + exp(−y_i Φ(x_i; θ))) + (wd/2) ||θ||²     (Runkel et al., Sec. 3)

with labels y ∈ {−1, +1} and wd > 0, so that for the affine model (eq. 8) E is strongly
convex in θ and its minimiser θ(x) is unique. The same minimiser is the lower level of the
bilevel attack, so `minimize_energy` serves both the victim's training and the attack.
"""

import dataclasses
import json
import os
from typing import Any, Callable, NamedTuple

import flax.serialization
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import optax.tree

Params = Any
EnergyFn = Callable[[Params], jax.Array]


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


class MinimizeInfo(NamedTuple):
  """Diagnostics of one L-BFGS solve.

  Attributes:
    grad_norm: float[] ||∇θE|| at the returned θ.
    num_iter: int32[] iterations taken.
    memory: the L-BFGS curvature pairs (optax ``ScaleByLBFGSState``); `count` is the
      number of updates made, pairs sit in a ring buffer (see `trdr.attacks.bilevel`).
  """
  grad_norm: jax.Array
  num_iter: jax.Array
  memory: optax.ScaleByLBFGSState


def minimize_energy(fun: EnergyFn, params0: Params, *, max_iter: int, tol: float,
                    memory_size: int = 10) -> tuple[Params, MinimizeInfo]:
  """Minimises a smooth function with optax L-BFGS (zoom line search) to ||∇f|| < tol.

  A `lax.while_loop`, so it is jittable and vmappable (a vmapped batch runs until every
  member has converged or reached ``max_iter``).

  Args:
    fun: params -> float[] scalar.
    params0: starting point, pytree of float arrays.
    max_iter: most iterations.
    tol: stop when the Euclidean norm of the gradient over all leaves is below this.
    memory_size: number of L-BFGS curvature pairs kept.
  Returns:
    (params, MinimizeInfo).
  """
  opt = optax.lbfgs(memory_size=memory_size)
  value_and_grad = optax.value_and_grad_from_state(fun)

  def step(carry):
    params, state, _, i = carry
    value, grad = value_and_grad(params, state=state)
    updates, state = opt.update(grad, state, params, value=value, grad=grad, value_fn=fun)
    params = optax.apply_updates(params, updates)
    # The line search caches the gradient at the new point: no extra evaluation.
    grad_norm = optax.tree.norm(optax.tree.get(state, "grad"))
    return params, state, grad_norm, i + 1

  def not_done(carry):
    _, _, grad_norm, i = carry
    return (i < max_iter) & (grad_norm >= tol)

  grad_norm0 = optax.tree.norm(jax.grad(fun)(params0))
  init = (params0, opt.init(params0), grad_norm0, jnp.asarray(0, jnp.int32))
  params, state, grad_norm, num_iter = jax.lax.while_loop(not_done, step, init)
  return params, MinimizeInfo(grad_norm, num_iter, state[0])


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


def accuracy(logits, labels) -> float:
  """Fraction of sign(Φ) = y."""
  return float(jnp.mean(jnp.where(logits >= 0, 1.0, -1.0) == labels))


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
  test_logits = apply_fn(params, jnp.asarray(task.test_images))
  report = TrainReport(
      train_accuracy=accuracy(apply_fn(params, x), y),
      test_accuracy=accuracy(test_logits, jnp.asarray(task.test_labels)),
      grad_norm=float(info.grad_norm), energy=float(fun(params)),
      num_iter=int(info.num_iter), n_train=int(x.shape[0]),
      n_test=int(task.test_images.shape[0]))
  return params, report


_PARAMS_FILE = "theta_star.msgpack"
_META_FILE = "victim.json"


def save(directory: str, params: Params, metadata: dict) -> None:
  """Writes θ* (flax msgpack) and its metadata (JSON) into ``directory``, atomically.

  ``metadata`` should hold everything that determines θ*: architecture, loss, weight
  decay, data config, seed (and may hold the training report).
  """
  os.makedirs(directory, exist_ok=True)
  for name, payload in ((_PARAMS_FILE, flax.serialization.to_bytes(params)),
                        (_META_FILE, json.dumps(metadata, indent=2, sort_keys=True).encode())):
    tmp = os.path.join(directory, name + ".tmp")
    with open(tmp, "wb") as f:
      f.write(payload)
    os.replace(tmp, os.path.join(directory, name))


def load_metadata(directory: str) -> dict | None:
  """The metadata saved with θ* in ``directory``, or None if there is no saved victim."""
  path = os.path.join(directory, _META_FILE)
  if not (os.path.exists(path) and os.path.exists(os.path.join(directory, _PARAMS_FILE))):
    return None
  with open(path) as f:
    return json.load(f)


def load(directory: str, template: Params) -> Params:
  """Loads θ* saved by `save` into the structure of ``template``.

  Args:
    directory: folder written by `save`.
    template: pytree with the expected structure, shapes and dtypes (e.g. `init_params`).
  Raises:
    FileNotFoundError: no saved victim in ``directory``.
    ValueError: the saved parameters do not fit the template's architecture (a missing
      or extra parameter, or a shape mismatch, named in the message).
  """
  path = os.path.join(directory, _PARAMS_FILE)
  if not os.path.exists(path):
    raise FileNotFoundError(f"no saved victim parameters at {path}")
  with open(path, "rb") as f:
    saved = flax.serialization.msgpack_restore(f.read())
  expected = flax.serialization.to_state_dict(template)
  saved_flat = {jax.tree_util.keystr(k): v for k, v in
                jax.tree_util.tree_flatten_with_path(saved)[0]}
  expected_flat = {jax.tree_util.keystr(k): v for k, v in
                   jax.tree_util.tree_flatten_with_path(expected)[0]}
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
  restored = flax.serialization.from_state_dict(template, saved)
  return jax.tree.map(lambda t, r: jnp.asarray(r, t.dtype), template, restored)


# Losses of the gradient-descent victims (Haim et al. 2022; Buzaglo et al. 2023), each
# (logits, labels y ∈ {−1, +1} float[n]) -> float[] mean over the training set.
GD_LOSSES: dict[str, Callable[[jax.Array, jax.Array], jax.Array]] = {
    # Binary cross-entropy on {0, 1} labels, i.e. the logistic loss on y ∈ {−1, +1}.
    "bce": logistic_loss,
    # Squared error to the ±1 target, (1/n) Σ (Φ_i − y_i)².
    "mse": lambda logits, labels: jnp.mean((logits - labels) ** 2),
    # Cross-entropy over C = 2 output logits, class index (y + 1)/2 (the multiclass
    # victim of Buzaglo et al. on the binary task).
    "ce": lambda logits, labels: jnp.mean(optax.softmax_cross_entropy_with_integer_labels(
        logits, ((labels + 1) / 2).astype(jnp.int32))),
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
  """±1 predictions from logits float[n] (sign) or float[n, 2] (argmax)."""
  if logits.ndim == 2:
    return jnp.where(jnp.argmax(logits, axis=1) == 1, 1.0, -1.0)
  return jnp.where(logits >= 0, 1.0, -1.0)


def train_gd(model, params0: Params, task, victim_config: ml_collections.ConfigDict,
             log_fn: Callable[[dict], None] | None = None) -> tuple[Params, GDReport]:
  """Full-batch gradient descent as in Haim et al. 2022, stopped at a train-loss threshold.

  θ ← θ − lr ∇θ [loss(Φ(x; θ), y) + (wd/2)||θ||²] for at most ``max_epochs`` epochs,
  stopping at the first epoch whose training loss (without the weight-decay term) is below
  ``loss_threshold``. The loop is a `lax.while_loop`, run from Python in jitted chunks of
  ``log_every`` epochs so that progress is logged.

  Args:
    model: Flax module, images float[n, H, W, C] -> logits float[n] (or float[n, 2] for
      the "ce" loss).
    params0: initial θ (e.g. `models.init_params`, Haim's 1e-4 first layer).
    task: a `trdr.data.BinaryTask` (training and test sets; labels ±1).
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
              "train_accuracy": float(jnp.mean(predictions(apply_fn(params, x)) == y))})
  final_loss = float(data_loss(params))
  report = GDReport(
      train_loss=final_loss,
      train_accuracy=float(jnp.mean(predictions(apply_fn(params, x)) == y)),
      test_accuracy=float(jnp.mean(predictions(apply_fn(params, jnp.asarray(task.test_images)))
                                   == jnp.asarray(task.test_labels))),
      epochs=int(epoch), grad_norm=float(optax.tree.norm(jax.grad(objective)(params))),
      reached_threshold=bool(final_loss < cfg.loss_threshold),
      n_train=int(x.shape[0]), n_test=int(task.test_images.shape[0]))
  return params, report
