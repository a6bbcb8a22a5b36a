"""DP-SGD victims: full-batch DP-GD or Poisson-subsampled DP-SGD (Abadi et al., CCS 2016).

The clipping and the noise are jax-privacy's (`jax_privacy.clipping.clipped_grad`, the
sum of per-example gradients each clipped to C, and `jax_privacy.noise_addition.
gaussian_privatizer`, isotropic Gaussian noise); the loop around them is trdr's, written
as `trdr.victim.training.train_gd`'s full-batch step is. jax-privacy 2.0 installs beside
jax 0.10, flax 0.12, optax 0.2.8 and numpy 2 without changing any of them (`pip install
--dry-run jax-privacy==2.0.*` would install jax_privacy alone).

Each step t = 1 … T, from θ0 (the victim's own initialisation, `trdr.victim.cache.
initial_params`):

  g_i = ∇θ ℓ(Φ(x_i; θ), y_i)                      per example
  ḡ_i = g_i · min(1, C / ||g_i||)                  ||·|| over all of θ (flat clipping)
  S   = Σ_{i ∈ B_t} ḡ_i + N(0, σ²C² I)             B_t: all n points (q = 1), or each point
                                                   independently with probability q
  θ  ← θ − η (S / (q n) + wd θ)

with ℓ the victim's loss (the logistic loss of `trdr.victim.energy` for an L-BFGS victim,
``victim.loss`` of `trdr.victim.objective.GD_LOSSES` for a gradient-descent one), wd its
``weight_decay`` (the regulariser is data-independent: added unclipped and noiseless), C
``dp.clip_norm`` (None: no clipping), σ ``dp.noise_multiplier``, q ``dp.sampling_rate``, η
``dp.lr``, T ``dp.steps``. The denominator q·n is public (the expected batch size), so one
training point moves the noisy sum by at most C: each step is a Gaussian mechanism of
noise multiplier σ, and the released θ_T (and the whole sequence θ_0 … θ_T, which the
accountant's adaptive composition covers) has the ε of `trdr.victim.accounting` (written
in the report). The report's training accuracy and loss are computed from the training
data without noise and are not private.

`clipped_sum`, `privatize` and `update` are the step's parts, shared with the
prior-aware attack (`trdr.attacks.prior_aware`), which replays the mechanism.

With σ = 0, no clipping and q = 1 the step is `trdr.victim.training.train_gd`'s: the
same θ* up to the order of the float sums (tests/test_dp.py).
"""

import contextlib
import warnings
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import optax.tree

from trdr.victim import accounting
from trdr.victim.objective import GD_LOSSES, Params, predictions

# The key of the noise and the Poisson samples: the victim's seed folded with this stream
# number, apart from θ0's draw (`jax.random.key(seed)`).
NOISE_STREAM = 1


class DPReport(NamedTuple):
  """Outcome of DP-SGD training (plain Python numbers).

  Attributes:
    train_loss: the loss ℓ at θ* on the training set, without weight decay (not private).
    train_accuracy, test_accuracy: in [0, 1].
    grad_norm: ||∇θ[mean ℓ + (wd/2)||θ||²]|| at θ* (not private): how far θ* is from
      the non-private victim's stationarity.
    steps: T.
    noise_multiplier, clip_norm (None: no clipping), sampling_rate, lr: the recipe.
    clipped_fraction: mean over steps of the fraction of per-example gradients (of the
      sampled points) that were clipped.
    epsilon: ε at ``delta`` by the PLD accountant (inf without noise or clipping).
    delta: δ.
    mu: μ of μ-GDP for a full-batch recipe (√T/σ; inf without noise or clipping), NaN for
      a subsampled one.
    n_train, n_test: the sizes.
  """
  train_loss: float
  train_accuracy: float
  test_accuracy: float
  grad_norm: float
  steps: int
  noise_multiplier: float
  clip_norm: float | None
  sampling_rate: float
  lr: float
  clipped_fraction: float
  epsilon: float
  delta: float
  mu: float
  n_train: int
  n_test: int


def loss_name(victim_config: ml_collections.ConfigDict) -> str:
  """The loss ℓ of the DP recipe: the victim's gradient-descent loss (``victim.loss``) for
  training "gd", the logistic loss ("bce") of E for training "lbfgs"."""
  return victim_config.loss if victim_config.get("training", "lbfgs") == "gd" else "bce"


def per_example_gradients(apply_fn: Callable, loss: Callable, params: Params,
                          images: jax.Array, labels: jax.Array) -> Params:
  """∇θ ℓ(Φ(x_i; θ), y_i) for every i, by `jax.vmap` of `jax.grad` over the examples.

  Args:
    apply_fn: (params, images float[b, H, W, C]) -> logits float[b] (or float[b, C]).
    loss: (logits, labels) -> float[] mean over the batch (`GD_LOSSES`).
    params: θ, a pytree.
    images: float[n, H, W, C]; labels: float[n].
  Returns:
    A pytree like θ whose leaves have a leading axis n.
  """
  one = lambda p, x, y: loss(apply_fn(p, x[None]), y[None])
  return jax.vmap(jax.grad(one), in_axes=(None, 0, 0))(params, images, labels)


def _jax_privacy():
  try:
    from jax_privacy import clipping, noise_addition  # noqa: PLC0415  (optional dependency)
  except ImportError as e:
    raise ImportError("DP-SGD's clipping and noise need the jax-privacy package: "
                      "pip install -e \".[dp]\"") from e
  return clipping, noise_addition


@contextlib.contextmanager
def _jax_privacy_warnings():
  """jax-privacy 2.0's clipping calls optax.global_norm, which optax 0.2.8 deprecates (a
  warning at trace time, not trdr's to fix); only that warning is silenced."""
  with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="optax.global_norm is deprecated",
                            category=DeprecationWarning)
    yield


# jax-privacy's per-example gradients one example at a time (``microbatch_size=1``: a
# `jax.lax.map` of single-example gradients, each clipped and added to the running sum)
# rather than all n vmapped at once. The vmapped form writes n copies of every weight
# matrix (for the (256, 256) MLP's first layer, 3,072 × 256 floats per example) before
# summing them, a memory-bound pass the sequential form never makes; the sum is the same to
# the float rounding of its order. `make benchmark-dp` times both side by side.
MICROBATCH_SIZE = 1


def clipped_sum(apply_fn: Callable, loss: Callable, params: Params, images: jax.Array,
                labels: jax.Array, weights: jax.Array, clip_norm) -> tuple[Params, jax.Array]:
  """Σ_i w_i ḡ_i: the per-example gradients of ℓ clipped to C (flat, over all of θ) and
  summed, by `jax_privacy.clipping.clipped_grad` one example at a time
  (`MICROBATCH_SIZE`); w_i ∈ {0, 1} selects a Poisson batch (a
  0 zeroes the example's loss, so its gradient and its norm are 0).

  Args:
    apply_fn: (params, images float[b, H, W, C]) -> logits float[b] (or float[b, C]).
    loss: (logits, labels) -> float[] mean over the batch (`GD_LOSSES`).
    params: θ, a pytree.
    images: float[n, H, W, C]; labels: float[n]; weights: float[n] in {0, 1}.
    clip_norm: C > 0 (a traced scalar is fine), or inf: no clipping.
  Returns:
    (the sum, a pytree like θ; float[n] the norms ||g_i|| before clipping).
  """
  clipping, _ = _jax_privacy()
  one = lambda p, x, y, w: w[0] * loss(apply_fn(p, x), y)
  with _jax_privacy_warnings():
    summed, aux = clipping.clipped_grad(one, l2_clip_norm=clip_norm, batch_argnums=(1, 2, 3),
                                        return_grad_norms=True,
                                        microbatch_size=MICROBATCH_SIZE)(params, images,
                                                                         labels, weights)
  return summed, aux.grad_norms


def clipped_each(apply_fn: Callable, loss: Callable, params: Params, images: jax.Array,
                 labels: jax.Array, clip_norm) -> Params:
  """ḡ_i for every i, not summed: `per_example_gradients` each clipped to C by
  `jax_privacy.clipping.clip_pytree` (leaves with a leading axis n)."""
  clipping, _ = _jax_privacy()
  grads = per_example_gradients(apply_fn, loss, params, images, labels)
  with _jax_privacy_warnings():
    return jax.vmap(lambda g: clipping.clip_pytree(g, clip_norm)[0])(grads)


def privatize(summed: Params, key: jax.Array, stddev) -> Params:
  """summed + N(0, stddev² I) by `jax_privacy.noise_addition.gaussian_privatizer` (the
  noise drawn from ``key`` in the leaves' dtype). stddev = σC; 0 adds exact zeros."""
  _, noise_addition = _jax_privacy()
  privatizer = noise_addition.gaussian_privatizer(stddev=stddev, prng_key=key)
  return privatizer.update(summed, privatizer.init(summed))[0]


def update(params: Params, noisy_sum: Params, denominator, weight_decay, lr) -> Params:
  """θ − η (S / (q n) + wd θ): the step from the noisy sum S (`privatize`)."""
  grad = optax.tree.add_scale(jax.tree.map(lambda v: v / denominator, noisy_sum),
                              weight_decay, params)
  return jax.tree.map(lambda p, g: p - lr * g, params, grad)


def step_key(key: jax.Array, t) -> tuple[jax.Array, jax.Array]:
  """(the Poisson sampling key, the noise key) of step t from the run's key."""
  k_sample, k_noise = jax.random.split(jax.random.fold_in(key, t))
  return k_sample, k_noise


def train_dp(key: jax.Array, model, params0: Params, task,
             victim_config: ml_collections.ConfigDict) -> tuple[Params, DPReport]:
  """θ* by DP-SGD (the module docstring's step) from ``params0`` for ``victim_config.dp``.

  Args:
    key: the noise and sampling key (`jax.random.key`); step t uses fold_in(key, t).
    model: Flax module, images float[n, H, W, C] -> logits float[n] (or float[n, C]).
    params0: θ0, a pytree (its dtype is θ*'s; the noise is drawn in it).
    task: a `trdr.data.Task` (its training set trains; its test set is scored), images in
      θ0's dtype.
    victim_config: the victim section: ``dp`` (`trdr.victim.accounting.settings`),
      ``weight_decay``, ``training`` and, for "gd", ``loss``.
  Returns:
    (θ*, `DPReport`).
  Raises:
    ValueError: ``victim_config.dp`` is absent or invalid, or an unknown loss.
    FloatingPointError: θ became NaN or infinite (lower ``dp.lr``).
  """
  s = accounting.settings(victim_config)
  if s is None:
    raise ValueError("train_dp needs victim.dp (noise_multiplier, clip_norm, steps, lr)")
  name = loss_name(victim_config)
  if name not in GD_LOSSES:
    raise ValueError(f"unknown victim loss {name!r}; known: {sorted(GD_LOSSES)}")
  loss, wd = GD_LOSSES[name], float(victim_config.weight_decay)
  apply_fn = lambda p, x: model.apply({"params": p}, x)
  x, y = jnp.asarray(task.train_images), jnp.asarray(task.train_labels)
  n = x.shape[0]
  clip, q = s.clip_norm, s.sampling_rate

  # The data and the recipe's numbers are arguments, not constants of the program: one
  # compilation serves every seed and noise level of a shape (and JAX's persistent cache
  # keeps it across runs).
  @jax.jit
  def run(params, x, y, key, sigma, clip_norm, lr):
    dtype = x.dtype
    noise_scale = sigma * (clip_norm if clip is not None else 1.0)
    bound = clip_norm if clip is not None else jnp.inf

    def step(t, carry):
      params, clipped_total = carry
      k_sample, k_noise = step_key(key, t)
      sampled = (jax.random.bernoulli(k_sample, q, (n,)) if q < 1
                 else jnp.ones((n,), bool))
      summed, norms = clipped_sum(apply_fn, loss, params, x, y, sampled.astype(dtype), bound)
      clipped = sampled & (norms > bound)
      clipped_total += jnp.sum(clipped) / jnp.maximum(jnp.sum(sampled), 1)
      # σ = 0 adds exact zeros: the sum is unchanged bit for bit. The sum over the n
      # examples divided by n, plus wd θ: `train_gd`'s step when σ = 0, C = None, q = 1.
      params = update(params, privatize(summed, k_noise, noise_scale), q * n, wd, lr)
      return params, clipped_total

    return jax.lax.fori_loop(0, s.steps, step, (params, jnp.zeros((), dtype)))

  dtype = x.dtype
  params, clipped_total = run(params0, x, y, key, jnp.asarray(s.noise_multiplier, dtype),
                              jnp.asarray(clip if clip is not None else 1.0, dtype),
                              jnp.asarray(s.lr, dtype))
  if not all(bool(jnp.all(jnp.isfinite(v))) for v in jax.tree.leaves(params)):
    raise FloatingPointError(f"DP-SGD victim diverged after {s.steps} steps: θ is not "
                             f"finite; lower victim.dp.lr (now {s.lr})")
  data_loss = lambda p: loss(apply_fn(p, x), y)
  objective = lambda p: data_loss(p) + 0.5 * wd * optax.tree.norm(p, squared=True)
  acc = lambda p, images, labels: float(jnp.mean(predictions(apply_fn(
      p, jnp.asarray(images))) == jnp.asarray(labels)))
  report = DPReport(
      train_loss=float(data_loss(params)), train_accuracy=acc(params, x, y),
      test_accuracy=acc(params, task.test_images, task.test_labels),
      grad_norm=float(optax.tree.norm(jax.grad(objective)(params))), steps=int(s.steps),
      noise_multiplier=float(s.noise_multiplier), clip_norm=clip, sampling_rate=float(q),
      lr=float(s.lr),
      clipped_fraction=float(clipped_total) / s.steps,
      epsilon=accounting.epsilon(s), delta=float(s.delta),
      mu=accounting.gdp_mu(s) if q == 1 else float("nan"),
      n_train=int(n), n_test=int(np.shape(task.test_images)[0]))
  return params, report
