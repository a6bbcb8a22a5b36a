"""Training the victim to θ*: full-batch L-BFGS to stationarity (`train`), or Haim et
al.'s gradient descent for a gradient-flow time or to a train-loss threshold (`train_gd`).

L-BFGS minimises E (`trdr.victim.energy`) to ||∇θE|| < tol with `trdr.victim.solver`, the
same solver as the bilevel attack's lower level.
"""

import dataclasses
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import optax.tree

from trdr.victim.objective import GD_LOSSES, Params, accuracy, energy, predictions
from trdr.victim.solver import minimize_energy


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


def train(model, params0: Params, task, victim_config: ml_collections.ConfigDict
          ) -> tuple[Params, TrainReport]:
  """Trains the victim full batch to ||∇θE|| < victim_config.tol: returns θ* and a report.

  Args:
    model: Flax module mapping float[n, H, W, C] to logits float[n].
    params0: initial θ.
    task: a `trdr.data.Task` (its training set and test set are used).
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


class GDReport(NamedTuple):
  """Outcome of gradient-descent training (plain Python numbers after `train_gd`);
  ``flow_time`` is lr × epochs, the gradient-flow time the training covered."""
  train_loss: float
  train_accuracy: float
  test_accuracy: float
  epochs: int
  grad_norm: float
  reached_threshold: bool
  n_train: int
  n_test: int
  flow_time: float


def gd_epochs(victim_config: ml_collections.ConfigDict) -> int:
  """The epochs `train_gd` runs at most: ⌈flow_time / lr⌉ when ``victim_config.flow_time``
  is set (Haim et al. train for a fixed time, lr 0.01 × 10⁶ epochs = 10⁴, with no early
  stop), else ``max_epochs``.

  Raises:
    ValueError: flow_time not positive, or set together with a loss_threshold > 0 (two
      stopping rules: set loss_threshold to 0).
  """
  cfg = victim_config
  flow_time = cfg.get("flow_time")
  if flow_time is None:
    return int(cfg.max_epochs)
  if not flow_time > 0:
    raise ValueError(f"victim.flow_time must be positive, got {flow_time}")
  if cfg.loss_threshold > 0:
    raise ValueError(f"victim.flow_time ({flow_time}) and victim.loss_threshold "
                     f"({cfg.loss_threshold}) are two stopping rules: set one, the other "
                     "to None (flow_time) or 0 (loss_threshold)")
  return max(1, int(np.ceil(flow_time / cfg.lr - 1e-9)))


def train_gd(model, params0: Params, task, victim_config: ml_collections.ConfigDict,
             log_fn: Callable[[dict], None] | None = None) -> tuple[Params, GDReport]:
  """Full-batch gradient descent as in Haim et al. 2022, for a gradient-flow time or to a
  train-loss threshold.

  θ ← θ − lr ∇θ [loss(Φ(x; θ), y) + (wd/2)||θ||²] for `gd_epochs` epochs (⌈flow_time /
  lr⌉, or at most ``max_epochs``), up to the first epoch whose training loss (without
  weight decay) is below ``loss_threshold`` (0: never); a `lax.while_loop` in jitted chunks
  of ``log_every`` epochs, each logged.

  Args:
    model: Flax module, images float[n, H, W, C] -> logits float[n] (or float[n, C] for
      the "ce" loss).
    params0: initial θ (e.g. `models.init_params`, Haim's 1e-4 first layer).
    task: a `trdr.data.Task` (training and test sets; labels ±1, or 0 … C−1).
    victim_config: fields loss (a `GD_LOSSES` name), lr > 0, weight_decay ≥ 0,
      max_epochs ≥ 1, loss_threshold ≥ 0, log_every ≥ 1, flow_time (None, or > 0 with
      loss_threshold 0).
    log_fn: called with a dict (epoch, train_loss, train_accuracy) after every chunk.
  Returns:
    (θ*, GDReport).
  Raises:
    ValueError: unknown loss, non-positive lr, max_epochs or log_every; as `gd_epochs`.
    FloatingPointError: the loss became NaN or infinite (the step size is too large).
  """
  cfg = victim_config
  if cfg.loss not in GD_LOSSES:
    raise ValueError(f"unknown victim loss {cfg.loss!r}; known: {sorted(GD_LOSSES)}")
  if not cfg.lr > 0 or cfg.max_epochs < 1 or cfg.log_every < 1:
    raise ValueError(f"victim lr, max_epochs and log_every must be positive, got "
                     f"{cfg.lr}, {cfg.max_epochs}, {cfg.log_every}")
  max_epochs = gd_epochs(cfg)
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
  while int(epoch) < max_epochs and not float(loss) < cfg.loss_threshold:
    until = min(int(epoch) + cfg.log_every, max_epochs)
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
      n_train=int(x.shape[0]), n_test=int(task.test_images.shape[0]),
      flow_time=float(cfg.lr * int(epoch)))
  return params, report
