"""DecoReco: reconstruction from the KKT stationarity of the trained victim.

Haim et al. (NeurIPS 2022) observe that a homogeneous network trained to convergence on
{(x_i, y_i)} satisfies, in direction (Lyu & Li 2020), θ* = Σ_i λ_i y_i ∇θΦ(θ*; x_i) with
λ_i ≥ 0. The attack searches m candidate images x_j and multipliers λ_j minimising

  L(x, λ) = Σ_tensors ||c θ − (1/m) Σ_j λ_j ∇θ s_j(θ; x_j)||²                (residual)
            + Σ relu(x − x_max)² + Σ relu(x_min − x)²                         (pixel prior)
            + w_λ Σ_j relu(λ_min − λ_j)²                                       (λ prior)

where s_j and c depend on the form (`FORMS`):

  * ``"binary"`` (Haim et al. 2022): c = 1, s_j = y_j Φ(x_j), y_j ∈ {−1, +1}.
  * ``"weight_decay"`` (Buzaglo et al. 2023): c = wd, s_j = y_j Φ(x_j). For a victim
    trained on E = (1/n) Σ softplus(−y_i Φ_i) + (wd/2)||θ||² (`trdr.victim.energy`) the
    stationarity ∇θE = 0 reads wd θ = (1/n) Σ_i σ(−y_i Φ_i) y_i ∇θΦ_i, so with m = n the
    true multipliers are exactly λ_i = σ(−y_i Φ_i) ∈ (0, 1) and the residual equals
    ||∇θE||² (see `gradient_norm_loss`).
  * ``"multiclass"`` (Buzaglo et al. 2023): c = 1, s_j = Φ_{y_j}(x_j) − max_{k≠y_j} Φ_k(x_j),
    the margin, with integer labels y_j ∈ {0, …, C−1}.

Σ_j λ_j ∇θ s_j is computed as ONE vector-Jacobian product of θ ↦ s(θ; x) ∈ R^m with the
cotangent λ/m, never as m per-sample gradients. During the attack the victim's ReLU is
replaced by `relu_sigmoid_backward` (forward ReLU, derivative sigmoid(αz)), so that ∇x of
the residual, which involves the activation's second derivative, is informative.

`trdr.attacks.gradient_norm` is Runkel et al.'s eq. 3 alternative, min_x ||∇θE(x, y; θ*)||².
`make_loss_and_grad` picks (L, ∂L/∂x, ∂L/∂λ) (autodiff, or the fused forms of `kkt_mlp` for
the MLP and `kkt_cnn` for the ConvNet),
`attack_step` is one SGD-with-momentum iteration on x and λ, and `build` bundles it as a
`trdr.attacks.protocol.Attack`. All functions are pure and jittable.
"""

import functools
import os
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import optax.tree

from absl import logging

from trdr import victim
from trdr.attacks import gradient_norm, kkt_cnn, kkt_mlp
from trdr.configs import decoreco_cifar, sizes
from trdr.runtime import files
from trdr.attacks.protocol import Attack
from trdr.victim import kkt

Params = Any
ApplyFn = Callable[[Params, jax.Array], jax.Array]


@jax.custom_jvp
def _relu_sigmoid_backward(z: jax.Array, alpha: jax.Array) -> jax.Array:
  return jnp.maximum(z, 0.0)


@_relu_sigmoid_backward.defjvp
def _relu_sigmoid_backward_jvp(primals, tangents):
  (z, alpha), (t, _) = primals, tangents   # α is a setting: its tangent is ignored
  return _relu_sigmoid_backward(z, alpha), jax.nn.sigmoid(alpha * z) * t


def relu_sigmoid_backward(alpha) -> Callable[[jax.Array], jax.Array]:
  """ReLU whose derivative is replaced by sigmoid(α z) (Haim et al. 2022, Sec. 4).

  f(z) = max(z, 0) forward; every JVP (hence every gradient) uses f'(z) := sigmoid(α z),
  a smooth surrogate of the step function, and second derivatives α σ'(α z).

  Args:
    alpha: sharpness α > 0 (about 20 in the reference code): a Python number, or a
      float[] array, which may be traced (a vmapped hyperparameter sweep over α).
  Returns:
    Elementwise function float[...] -> float[...], a `jax.custom_jvp`.
  Raises:
    ValueError: alpha concrete and not positive.
  """
  if not isinstance(alpha, jax.core.Tracer) and not float(alpha) > 0:
    raise ValueError(f"alpha must be positive, got {alpha!r}")
  return lambda z: _relu_sigmoid_backward(z, jnp.asarray(alpha, z.dtype))


# Each form: (s(logits, labels) -> float[m], c(weight_decay) -> scale of θ in the residual).
FORMS: dict[str, tuple[Callable, Callable[[float], Any]]] = {
    "binary": (victim.signed_outputs, lambda wd: 1.0),
    "weight_decay": (victim.signed_outputs, lambda wd: wd),
    "multiclass": (victim.margins, lambda wd: 1.0),
}


def _check_form(form):
  if form not in FORMS:
    raise ValueError(f"unknown stationarity form {form!r}; known: {sorted(FORMS)}")


def _check(form, images, lambdas, labels):
  _check_form(form)
  m = images.shape[0]
  if lambdas.shape != (m,) or labels.shape != (m,):
    raise ValueError(f"expected lambdas and labels of shape ({m},) for {m} images, got "
                     f"{lambdas.shape} and {labels.shape}")


def stationarity_residual(params: Params, images: jax.Array, lambdas: jax.Array,
                          labels: jax.Array, *, apply_fn: ApplyFn, form: str = "binary",
                          weight_decay: float = 0.0) -> jax.Array:
  """KKT residual Σ_tensors ||c θ − (1/m) Σ_j λ_j ∇θ s_j(θ; x_j)||² (module docstring).

  Args:
    params: θ*, pytree of float arrays.
    images: float[m, H, W, C], the candidates x_j.
    lambdas: float[m], multipliers λ_j (non-negative at a KKT point).
    labels: float[m] in {−1, +1} for "binary" / "weight_decay"; int[m] in {0, …, C−1}
      for "multiclass".
    apply_fn: (params, images float[m, H, W, C]) -> logits float[m] (binary forms) or
      float[m, C] (multiclass).
    form: name in `FORMS`.
    weight_decay: wd, the factor c of θ in the "weight_decay" form (ignored otherwise).
  Returns:
    float[] scalar.
  Raises:
    ValueError: unknown form, or lambdas / labels not of shape [m].
  """
  _check(form, images, lambdas, labels)
  outputs, scale = FORMS[form]
  _, vjp = jax.vjp(lambda p: outputs(apply_fn(p, images), labels), params)
  (combination,) = vjp(lambdas / images.shape[0])       # (1/m) Σ_j λ_j ∇θ s_j
  diff = optax.tree.sub(optax.tree.scale(scale(weight_decay), params), combination)
  return optax.tree.norm(diff, squared=True)


def prior_penalty(images: jax.Array, lambdas: jax.Array, *, x_min: float = -1.0,
                  x_max: float = 1.0, lambda_min: float = 0.05,
                  lambda_weight: float = 5.0) -> jax.Array:
  """Σ relu(x − x_max)² + Σ relu(x_min − x)² + w_λ Σ_j relu(λ_min − λ_j)².

  Args:
    images: float[m, H, W, C].
    lambdas: float[m].
    x_min, x_max: the pixel box (Haim et al. use [−1, 1]).
    lambda_min: λ_min, the margin below which multipliers are pushed up.
    lambda_weight: w_λ (5 in the reference code).
  Returns:
    float[] scalar.
  """
  pixels = jnp.sum(jax.nn.relu(images - x_max) ** 2) + jnp.sum(jax.nn.relu(x_min - images) ** 2)
  return pixels + lambda_weight * jnp.sum(jax.nn.relu(lambda_min - lambdas) ** 2)


def stationarity_loss(params: Params, images: jax.Array, lambdas: jax.Array,
                      labels: jax.Array, *, apply_fn: ApplyFn, form: str = "binary",
                      weight_decay: float = 0.0, x_min: float = -1.0, x_max: float = 1.0,
                      lambda_min: float = 0.05, lambda_weight: float = 5.0) -> jax.Array:
  """DecoReco loss L(x, λ) = `stationarity_residual` + `prior_penalty` (module docstring).

  Arguments as in those two functions. To jit, bind the keyword settings first:
  ``jax.jit(functools.partial(stationarity_loss, apply_fn=f, form="binary"))``.

  Returns:
    float[] scalar.
  """
  residual = stationarity_residual(params, images, lambdas, labels, apply_fn=apply_fn,
                                   form=form, weight_decay=weight_decay)
  return residual + prior_penalty(images, lambdas, x_min=x_min, x_max=x_max,
                                  lambda_min=lambda_min, lambda_weight=lambda_weight)


# ---------------------------------------------------------------------------------------
# The attack: SGD with momentum on (x, λ), one jitted step, run under `lax.scan`.


class Hyperparameters(NamedTuple):
  """The four settings Haim et al. tune per victim (float[] each, or float[S] for a sweep).

  Attributes:
    init_scale: σ, standard deviation of the Gaussian initial candidates (pixels, in the
      mean-subtracted space).
    lr: step size of SGD on the candidates x.
    lambda_min: λ_min of the multiplier prior.
    alpha: α of the sigmoid-backward ReLU.
  """
  init_scale: Any
  lr: Any
  lambda_min: Any
  alpha: Any


class AttackState(NamedTuple):
  """Candidates, multipliers and their momentum buffers.

  Attributes:
    images: float[m, H, W, C] candidates x (mean-subtracted pixel space).
    lambdas: float[m] multipliers λ.
    images_velocity, lambdas_velocity: SGD momentum buffers, shapes as above.
    step: int32[] iterations done.
  """
  images: jax.Array
  lambdas: jax.Array
  images_velocity: jax.Array
  lambdas_velocity: jax.Array
  step: jax.Array


def init_state(images: jax.Array, lambdas: jax.Array) -> AttackState:
  """AttackState at iteration 0 (zero momentum). images float[m, H, W, C], lambdas float[m]."""
  return AttackState(images, lambdas, jnp.zeros_like(images), jnp.zeros_like(lambdas),
                     jnp.zeros((), jnp.int32))


LossAndGrad = Callable[..., tuple[jax.Array, tuple[jax.Array, jax.Array]]]


# How `autodiff_loss_and_grad` differentiates the residual, whose ∇x involves second
# derivatives of Φ (a mixed ∂x ∂θ): `AUTODIFF_ORDERS`, the name an attack config's
# ``attack.autodiff_order`` gives (configs/decoreco_cifar.py).
AUTODIFF_ORDERS = ("reverse_over_reverse", "forward_over_reverse")


def autodiff_loss_and_grad(model, params: Params, labels: jax.Array, *, form: str = "binary",
                           weight_decay: float = 0.0, x_min: float = -1.0,
                           x_max: float = 1.0, lambda_weight: float = 5.0,
                           order: str = "reverse_over_reverse") -> LossAndGrad:
  """(images, lambdas, alpha, lambda_min) -> (L, (∂L/∂x, ∂L/∂λ)) by JAX autodiff.

  `stationarity_loss` for the victim ``model`` (a `trdr.models.HaimMLP`, a
  `trdr.models.ConvNet`, or any Flax module with an ``activation`` attribute) with its
  activation replaced by `relu_sigmoid_backward(alpha)`; α and λ_min may be traced
  (vmapped sweeps). Two ways to the same gradients (``order``, `AUTODIFF_ORDERS`):

    * "reverse_over_reverse": `jax.value_and_grad` of the loss, i.e. reverse mode through
      the vector-Jacobian product g(x) = (1/m) Σ_j λ_j ∇θ s_j that the residual holds.
    * "forward_over_reverse": with d = c θ − g(x) held fixed, ∇x ||d||² = −2 ∇x ⟨d, g(x)⟩
      and ⟨d, g(x)⟩ = (1/m) ⟨λ, J d⟩, J d = Σ_tensors ∂θ s · d the Jacobian-vector product
      in θ (forward mode); so ∂residual/∂x = −(2/m) (∂(J d)/∂x)ᵀ λ, one VJP in x of that
      JVP, and ∂residual/∂λ = −(2/m) J d, with no extra pass. The same derivatives of the
      same rules (a ReLU's surrogate derivative sigmoid(αz) and its derivative α σ'(αz)
      enter both alike), summed in another order: equal to rounding
      (tests/test_decoreco.py). Faster where the network's backward pass is costly to
      differentiate again (the CNN: `make benchmark-conv` prints both, side by side).

  Args:
    model: Flax module; ``model.clone(activation=...)`` must be valid.
    params: θ*.
    labels: float[m] (±1) or int[m] (multiclass), the candidates' labels.
    form, weight_decay, x_min, x_max, lambda_weight: as in `stationarity_loss`.
    order: a name in `AUTODIFF_ORDERS`.
  Returns:
    The function; L float[], gradients float[m, H, W, C] and float[m].
  Raises:
    ValueError: unknown form or order.
  """
  if order not in AUTODIFF_ORDERS:
    raise ValueError(f"unknown autodiff order {order!r}; known: {list(AUTODIFF_ORDERS)}")
  _check_form(form)
  prior = dict(x_min=x_min, x_max=x_max, lambda_weight=lambda_weight)

  def apply_fn(alpha):
    attack_model = model.clone(activation=relu_sigmoid_backward(alpha))
    return lambda p, x: attack_model.apply({"params": p}, x)

  def loss(images, lambdas, alpha, lambda_min):
    return stationarity_loss(params, images, lambdas, labels, apply_fn=apply_fn(alpha),
                             form=form, weight_decay=weight_decay, lambda_min=lambda_min,
                             **prior)

  if order == "reverse_over_reverse":
    return jax.value_and_grad(loss, argnums=(0, 1))

  outputs, scale = FORMS[form]

  def forward_over_reverse(images, lambdas, alpha, lambda_min):
    _check(form, images, lambdas, labels)
    m = images.shape[0]
    apply = apply_fn(alpha)
    s = lambda p, x: outputs(apply(p, x), labels)        # float[m]
    _, vjp = jax.vjp(lambda p: s(p, images), params)
    (combination,) = vjp(lambdas / m)                     # g = (1/m) Σ_j λ_j ∇θ s_j
    d = optax.tree.sub(optax.tree.scale(scale(weight_decay), params), combination)
    jd, vjp_x = jax.vjp(lambda x: jax.jvp(lambda p: s(p, x), (params,), (d,))[1], images)
    (jd_x,) = vjp_x(lambdas)
    penalty, (prior_x, prior_l) = jax.value_and_grad(
        functools.partial(prior_penalty, lambda_min=lambda_min, **prior),
        argnums=(0, 1))(images, lambdas)
    return (optax.tree.norm(d, squared=True) + penalty,
            (prior_x - (2.0 / m) * jd_x, prior_l - (2.0 / m) * jd))

  return forward_over_reverse


def attack_step(state: AttackState, hparams: Hyperparameters, *, loss_and_grad: LossAndGrad,
                lambda_lr: float = 1e-4, momentum: float = 0.9
                ) -> tuple[AttackState, jax.Array]:
  """One DecoReco iteration: L and its gradients, then SGD with momentum (PyTorch's form
  v ← μ v + g, p ← p − lr v) on x (step hparams.lr) and λ (step ``lambda_lr``).

  Returns:
    (new state, L float[] at the state before the step).
  """
  loss, (grad_x, grad_l) = loss_and_grad(state.images, state.lambdas, hparams.alpha,
                                         hparams.lambda_min)
  vx = momentum * state.images_velocity + grad_x
  vl = momentum * state.lambdas_velocity + grad_l
  return AttackState(state.images - hparams.lr * vx, state.lambdas - lambda_lr * vl,
                     vx, vl, state.step + 1), loss


def run_steps(state: AttackState, hparams: Hyperparameters, num_steps: int, *,
              loss_and_grad: LossAndGrad, lambda_lr: float = 1e-4,
              momentum: float = 0.9) -> tuple[AttackState, jax.Array]:
  """``num_steps`` iterations of `attack_step` under `jax.lax.scan`.

  Returns:
    (state after the steps, L float[num_steps] before each step).
  """
  step = functools.partial(attack_step, hparams=hparams, loss_and_grad=loss_and_grad,
                           lambda_lr=lambda_lr, momentum=momentum)
  return jax.lax.scan(lambda s, _: step(s), state, None, length=num_steps)


# ---------------------------------------------------------------------------------------
# The attack as the common protocol.


class State(NamedTuple):
  """One attack's state: the iterate and its (possibly swept) hyperparameters."""
  attack: AttackState
  hparams: Hyperparameters


class StepMetrics(NamedTuple):
  loss: jax.Array  # L before the step, float[]


def make_loss_and_grad(target: victim.Victim, attack_config, labels: jax.Array) -> LossAndGrad:
  """The (images, λ, α, λ_min) -> (L, grads) of ``attack_config.form``.

  "binary" / "weight_decay" (`stationarity_loss`), "multiclass" (Buzaglo et al.; for a
  victim with num_outputs = 2 trained with the "ce" loss, class index (y + 1)/2), or
  "gradient_norm", `gradient_norm.loss` with E the victim's objective plus the pixel box
  prior (λ unused). For a ReLU Haim MLP with one output the fused
  `kkt_mlp.value_and_grad` computes the same loss (unless ``attack_config.fused`` is
  False); otherwise JAX autodiff does (`autodiff_loss_and_grad`, in the order
  ``attack_config.autodiff_order``; a config without the key: "reverse_over_reverse").

  Raises:
    ValueError: unknown form or autodiff order, or a form that does not fit the victim's
      outputs.
  """
  a, v = attack_config, target.config
  if a.form == "gradient_norm":
    return gradient_norm.loss_and_grad(target.model, target.params, labels,
                                       weight_decay=v.weight_decay, x_min=a.x_min,
                                       x_max=a.x_max, activation=relu_sigmoid_backward)
  if a.form not in FORMS:
    raise ValueError(f"unknown attack.form {a.form!r}; known: "
                     f"{sorted(FORMS) + ['gradient_norm']}")
  outputs = v.num_outputs
  if (a.form == "multiclass") != (outputs > 1):
    raise ValueError(f"attack.form {a.form!r} does not fit a victim with num_outputs = "
                     f"{outputs}: use 'multiclass' exactly when it is > 1")
  if a.form == "multiclass":  # class indices (Buzaglo et al.): ±1 -> 0 / 1 when C = 2
    labels = victim.class_index(labels, outputs)
  weight_decay = v.weight_decay if a.form == "weight_decay" else 0.0
  if a.fused and fused_applies(target):
    scale = weight_decay if a.form == "weight_decay" else 1.0

    def fused(images, lambdas, alpha, lambda_min):
      return kkt_mlp.value_and_grad(target.params, images, lambdas, labels, alpha=alpha,
                                    scale=scale, x_min=a.x_min, x_max=a.x_max,
                                    lambda_min=lambda_min, lambda_weight=a.lambda_weight)

    return fused
  if a.fused and fused_cnn_applies(target):
    scale = weight_decay if a.form == "weight_decay" else 1.0

    def fused_cnn(images, lambdas, alpha, lambda_min):
      return kkt_cnn.value_and_grad(target.params, images, lambdas, labels, alpha=alpha,
                                    pool=v.pool, scale=scale, x_min=a.x_min, x_max=a.x_max,
                                    lambda_min=lambda_min, lambda_weight=a.lambda_weight)

    return fused_cnn
  return autodiff_loss_and_grad(target.model, target.params, labels, form=a.form,
                                weight_decay=weight_decay, x_min=a.x_min, x_max=a.x_max,
                                lambda_weight=a.lambda_weight,
                                order=a.get("autodiff_order", AUTODIFF_ORDERS[0]))


def fused_applies(target: victim.Victim) -> bool:
  """Whether `kkt_mlp.value_and_grad` computes the attack's loss for this victim: a ReLU
  Haim MLP with one output (`kkt_mlp.supports`) and no input normalisation (the fused form
  takes the images as the first layer's inputs)."""
  v = target.config
  return (v.arch == "haim_mlp" and v.activation == "relu" and v.num_outputs == 1
          and not v.get("input_shift") and not v.get("input_scale")
          and kkt_mlp.supports(target.params))


def fused_cnn_applies(target: victim.Victim) -> bool:
  """Whether `kkt_cnn.value_and_grad` computes the attack's loss for this victim: a ReLU
  `trdr.models.ConvNet` (victim.arch "cnn") with one output (`kkt_cnn.supports`) and no
  input normalisation."""
  v = target.config
  return (v.arch == "cnn" and v.activation == "relu" and v.num_outputs == 1
          and v.get("pool") in kkt_cnn.POOLS
          and not v.get("input_shift") and not v.get("input_scale")
          and kkt_cnn.supports(target.params))


# Haim et al.'s published tuned run b9dfyspx on binary CIFAR-10 (their MLP, m = 2n;
# /work/shared/paper/reference_settings.md; configs/victim_recipe.py's B9DFYSPX).
PUBLISHED = {"b9dfyspx": Hyperparameters(init_scale=8.857e-4, lr=0.5549, lambda_min=0.4983,
                                         alpha=19.14)}


def own_model_settings(attack_config, untuned: list[dict]) -> tuple[Any, str]:
  """The DecoReco settings (σ, lr, λ_min, α) to run on a user's θ* (``victim.load``), and
  where they come from: never a config's untuned defaults.

    * ``attack.hparams_file`` set (a sweep's best.json, on this model): kept as it is; the
      runner reads the file (source: that file).
    * the four settings differ from every entry of ``untuned`` (someone set them, e.g.
      ``--config.attack.lr=``): kept (source: "the config (set explicitly)").
    * otherwise Haim et al.'s published b9dfyspx (`PUBLISHED`), the settings trdr's docs
      report their counts at; ``attack.hparams_keep`` names settings kept from the config.

  Args:
    attack_config: a DecoReco config section (the four `Hyperparameters` fields,
      hparams_file, hparams_keep).
    untuned: the configs' default settings ({name: value} per config variant).
  Returns:
    (a copy of ``attack_config`` with the settings to run, a sentence naming their source).
  """
  a = attack_config.copy_and_resolve_references()
  names = Hyperparameters._fields
  if a.get("hparams_file"):
    return a, f"the sweep's {a.hparams_file} (tuned on this model)"
  current = {k: float(a[k]) for k in names}
  if all(any(current[k] != float(d[k]) for k in names) for d in untuned):
    return a, "the config (set explicitly, not its defaults)"
  keep = tuple(a.get("hparams_keep", ()))
  with a.unlocked():
    for k in names:
      if k not in keep:
        a[k] = float(getattr(PUBLISHED["b9dfyspx"], k))
  return a, ("Haim et al. 2022's published run b9dfyspx (no sweep's best.json given: "
             "attack.hparams_file; a sweep on this model tunes them, docs/own_model.md)")


def own_model(config: ml_collections.ConfigDict) -> tuple[ml_collections.ConfigDict, dict]:
  """DecoReco on a θ* read from a file (``victim.load``): ``config`` with the attack's
  settings (σ, lr, λ_min, α) chosen for a user's model, never the config's untuned defaults
  (`own_model_settings`: a sweep's best.json, settings set explicitly, else Haim et al.'s
  published b9dfyspx), logged with their source. The `trdr.attacks.ATTACKS` entry's
  ``own_model`` part, which `trdr.experiment` asks for a loaded θ*.

  Returns:
    (the config, {"attack_settings": {name: value} (those of attack.hparams_file where
    set), "attack_settings_source": a sentence}) for the run's summary.json.
  """
  untuned = [decoreco_cifar.get_config(v).attack.to_dict() for v in sizes.PAPER]
  attack, source = own_model_settings(config.attack, untuned)
  out = ml_collections.ConfigDict(config.to_dict())
  out.attack = attack
  values = attack
  if attack.get("hparams_file") and os.path.exists(attack.hparams_file):
    values = {**attack.to_dict(), **files.read_json(attack.hparams_file)}
    values.update({k: attack[k] for k in attack.get("hparams_keep", ())})
  settings = {k: float(values[k]) for k in Hyperparameters._fields}
  logging.info("DecoReco settings on this model: σ %.4g, lr %.4g, λ_min %.4g, α %.4g; from %s",
               *settings.values(), source)
  return out, {"attack_settings": settings, "attack_settings_source": source}


def build(target: victim.Victim, attack_config, labels: jax.Array, *, key=None, box=None
          ) -> Attack:
  """DecoReco against θ* as an `Attack` (Haim et al. 2022; Runkel et al. Sec. 4.4).

  Args:
    target: the victim.
    attack_config: form, x_min, x_max, lambda_weight, fused, lambda_lr, momentum and the
      `Hyperparameters` fields; labels: float[m] in {−1, +1}, the candidates' labels;
    key, box: unused (the pixel box is the prior's x_min, x_max).
  Returns:
    The `Attack`: ``init(x0, key)`` draws λ ~ U(0, 1) from ``key`` and takes the config's
    hyperparameters (a sweep replaces ``state.hparams``); metrics `StepMetrics`.
  """
  del key, box
  hp = Hyperparameters(*(float(attack_config[k]) for k in Hyperparameters._fields))
  loss_and_grad = make_loss_and_grad(target, attack_config, labels)

  def init(images, key):
    lambdas = jax.random.uniform(key, (images.shape[0],), images.dtype)
    return State(init_state(images, lambdas),
                 jax.tree.map(lambda v: jnp.asarray(v, images.dtype), hp))

  def step(state):
    new, loss = attack_step(state.attack, state.hparams, loss_and_grad=loss_and_grad,
                            lambda_lr=attack_config.lambda_lr,
                            momentum=attack_config.momentum)
    return State(new, state.hparams), StepMetrics(loss)

  return Attack(name="decoreco", init=init, step=step, images=lambda s: s.attack.images,
                batches_well=True, display="minmax", hyperparameters=hp,
                outputs=lambda s: {"final_lambdas": s.attack.lambdas})


# ------------------------------------------------------------------ premise

def kkt_premise(target: victim.Victim, attack_config, task, dtype) -> kkt.KKTFit:
  """DecoReco's premise for θ* (`trdr.victim.kkt.fit` on the task's training images), logged:
  how much of each tensor of θ*, the first layer's kernel where the images enter above all,
  is no non-negative combination of the training images' gradients. What fraction makes a
  count uninformative is calibrated on trdr's own victims (`trdr.evaluation.power.
  premise_warning`, docs/power.md), not assumed here."""
  form = kkt.victim_form(target.config, attack_config.form)
  fit = kkt.fit(target.apply, target.params, jnp.asarray(task.train_images, dtype),
                jnp.asarray(task.train_labels, dtype), form=form,
                weight_decay=float(target.config.get("weight_decay", 0.0)))
  logging.info("%s", fit.line())
  return fit


def premise(target: victim.Victim, attack_config, task, dtype, key) -> dict:
  """DecoReco's premise on θ* for the run's summary (`trdr.attacks.protocol.AttackKind`):
  {"kkt_premise": `kkt.KKTFit.to_json`} (`kkt_premise`, logged); the runner adds its
  "warning" at the threshold calibrated by `make power` (`trdr.evaluation.power.
  premise_warning`). ``key`` is unused."""
  del key
  return {"kkt_premise": kkt_premise(target, attack_config, task, dtype).to_json()}
