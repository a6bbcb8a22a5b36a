"""The informed adversary: θ*, the training recipe and every training image but k.

Balle, Cherubin and Hayes ("Reconstructing Training Data with Informed Adversaries",
IEEE S&P 2022) give the adversary all training points but the target and reconstruct it;
the paper's adversary (Runkel et al. 2024) is the other end, k = n. Between the two the
adversary knows the n − k points K and reconstructs the k unknown points U, whose labels
it is given (as DecoReco's candidates have theirs).

Victims trained to stationarity of E (`trdr.victim.energy`, training "lbfgs"):

  0 = ∇θE(θ*) = r + (1/n) Σ_{j∈U} ∇θℓ(y_j Φ(x_j; θ*)),
  r = ∇θ[(1/n) Σ_{i∈K} ℓ(y_i Φ(x_i; θ)) + (wd/2)||θ||²] at θ*         (`known_residual`)

with ℓ(s) = log(1 + e^{−s}). The residual r is what the known points leave unexplained.

* **Affine victim, k = 1** (`affine_formula`). Φ = wᵀx + b, so ∇_w ℓ_j = ℓ'_j x_j and
  ∇_b ℓ_j = ℓ'_j, and r = −(ℓ'_j/n) [x_j; 1]: x_j = r_w / r_b exactly, and the label is
  sign(r_b) (ℓ'_j = −y_j σ(−y_j Φ_j)). If θ* is only approximately stationary,
  ∇θE(θ*) = g with ||g|| ≤ ε, the computed residual is r + g and the formula returns
  x̂ = x + (g_w − g_b x)/r̂_b, so ||x̂ − x|| ≤ ε √(1 + ||x||²) / |r̂_b| (Cauchy–Schwarz on
  (||g_w||, |g_b|)·(1, ||x||)); |r̂_b| ≈ σ(−y_j Φ_j)/n, so a well-fit point (small loss
  gradient) needs a θ* stationary to far below σ(−y_j Φ_j)/n.
* **A first layer with a bias** (`first_layer_formula`; the one-hidden network of eq. 9).
  Unit u gives ∇_{W[:, u]} ℓ_j = δ_{ju} x_j and ∇_{b_u} ℓ_j = δ_{ju} with
  δ_{ju} = ℓ'_j v_u σ'(z_{ju}), so r_{W[:, u]} / r_{b_u} = Σ_j δ_{ju} x_j / Σ_j δ_{ju}: the
  image x_j itself when x_j is the only unknown point that activates u (ReLU: σ' ∈ {0, 1};
  any activation with k = 1). The error bound is the affine one with r̂_{b_u} for r̂_b.
  It is Phong et al.'s observation on the gradient of a dense layer with a bias (IEEE
  TIFS 2018), which Fowl et al.'s "Robbing the Fed" (ICLR 2022) builds on, applied to
  the residual of stationarity instead of a batch's gradient.
* **Otherwise** the adversary fits the residual with the k unknowns' gradients,
  `residual_loss` = min_c ||r − Σ_j c_j y_j ∇θΦ(x_j)||² / ||r||² (the eq. 3 objective
  with the known points fixed, its coefficients fitted: variable projection), by Adam
  from several starts, in the pixel box or, for a first layer with a bias and k ≤ its
  width, in the k-dimensional span that holds the unknown points (`first_layer_span`).
  The affine victim's residual is one vector in R^{D+1}: for k ≥ 2 any k images whose
  gradients span it fit, so the unknown points are not identifiable from it.

Victims trained by gradient descent without weight decay (Haim et al.'s MLP, training
"gd") are stationary only in the KKT sense θ* = Σ_i λ_i y_i ∇θΦ(x_i) with unknown λ_i ≥ 0
for every point, known or not: there the adversary runs DecoReco (`trdr.attacks.
decoreco`: its loss, step and settings) on all n points with the n − k known images fixed
and every λ free (`build`, `reconstruct`), or, for a one-output Haim MLP, `kkt_search`:
the known images' λ fitted first (the loss is a quadratic in λ at fixed images,
`haim_grams`), then DecoReco's step on the k unknown images and their λ only, its
objective optionally weighted per tensor where the premise holds (`premise_weights`).
"""

from typing import Any, NamedTuple

import jax
import jax.flatten_util
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import optax.tree
import scipy.optimize

from trdr import models, victim
from trdr.attacks import decoreco, kkt_mlp, truth
from trdr.attacks import init as inits
from trdr.attacks.protocol import Attack

Params = Any


def known_residual(target: victim.Victim, known_images: jax.Array, known_labels: jax.Array,
                   n: int) -> Params:
  """r = ∇θ[(1/n) Σ_{i∈K} ℓ(y_i Φ(x_i; θ)) + (wd/2)||θ||²] at θ* (module docstring).

  Args:
    target: a victim trained to stationarity of E (training "lbfgs").
    known_images: float[n − k, H, W, C], the known training images (victim input space).
    known_labels: float[n − k] in {−1, +1}.
    n: the training set's size, known points and unknown ones.
  Returns:
    r, a pytree like θ*: −(1/n) Σ_{j∈U} ∇θℓ_j + ∇θE(θ*) (the second term ≈ 0).
  Raises:
    ValueError: more known points than n.
  """
  if known_images.shape[0] > n:
    raise ValueError(f"{known_images.shape[0]} known points but n = {n}")
  wd = target.config.weight_decay

  def known_energy(params):
    decay = 0.5 * wd * optax.tree.norm(params, squared=True)
    if known_images.shape[0] == 0:          # k = n: the paper's adversary knows no point
      return decay
    logits = target.model.apply({"params": params}, known_images)
    return jnp.sum(jax.nn.softplus(-known_labels * logits)) / n + decay

  return jax.grad(known_energy)(target.params)


def affine_formula(residual: Params, image_shape) -> tuple[np.ndarray, float]:
  """The missing image of the affine victim (eq. 8 of Runkel et al.) with k = 1: x = r_w / r_b.

  Args:
    residual: `known_residual` of the affine victim.
    image_shape: (H, W, C).
  Returns:
    (x float[1, H, W, C] in the victim's input space, its label sign(r_b) ∈ {−1, +1}).
    The error bound in ||∇θE(θ*)|| is in the module docstring.
  Raises:
    ValueError: r_b = 0 (θ* exactly explained by the known points: nothing is missing).
  """
  w = np.asarray(residual["dense"]["kernel"])[:, 0]
  b = float(np.asarray(residual["dense"]["bias"])[0])
  if b == 0.0:
    raise ValueError("the residual's bias entry is 0: no missing point to recover")
  return (w / b).reshape((1, *image_shape)), float(np.sign(b))


def first_layer_formula(residual: Params, image_shape, layer: str = "hidden",
                        min_bias: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
  """Per unit u of a first layer with a bias: x̂_u = r_{W[:, u]} / r_{b_u} (module docstring).

  Args:
    residual: `known_residual` of a victim whose first layer ``layer`` has a kernel
      float[D, U] and a bias float[U].
    image_shape: (H, W, C) with H·W·C = D.
    layer: the first layer's name in θ (the one-hidden network's "hidden").
    min_bias: units with |r_{b_u}| ≤ min_bias are left out (no unknown point reached
      them, or too few for the bound of the module docstring).
  Returns:
    (candidates float[J, H, W, C], |r_{b_u}| float[J]) for the J units kept, largest
    |r_{b_u}| first. A candidate is an unknown image exactly when that point is the only
    unknown one on the unit; else a weighted combination of the points on it.
  """
  kernel = np.asarray(residual[layer]["kernel"])
  bias = np.asarray(residual[layer]["bias"])
  keep = np.flatnonzero(np.abs(bias) > min_bias)
  keep = keep[np.argsort(-np.abs(bias[keep]), kind="stable")]
  candidates = (kernel[:, keep] / bias[keep]).T
  return candidates.reshape((len(keep), *image_shape)), np.abs(bias[keep])


def closed_form(target: victim.Victim, known_images, known_labels, k: int
                ) -> np.ndarray | None:
  """The k unknown images where the residual gives them in closed form, else None.

  k = 1 only: the affine victim (`affine_formula`), and a victim with a first layer named
  "hidden" (the one-hidden network: `first_layer_formula` at the unit with the largest
  |r_b|). For k ≥ 2 a unit's candidate is x_j only where x_j is alone on it, and the
  adversary cannot tell those units from the ones two or more points share (their
  candidates, Σ_{j∈S} ℓ'_j x_j / Σ_{j∈S} ℓ'_j, repeat over every unit with the same set S
  of active points, and a saturating activation such as softplus behaves alike), so the
  optimisation path (`build`, in `first_layer_span`) takes over. Victims trained by
  gradient descent have no closed form here (their λ_i are unknown).

  Returns:
    float[k, H, W, C] in the victim's input space, or None.
  """
  v = target.config
  if v.get("training", "lbfgs") != "lbfgs":
    return None
  shape = tuple(known_images.shape[1:])
  n = known_images.shape[0] + k
  residual = known_residual(target, known_images, known_labels, n)
  if v.arch == "affine" and k == 1:
    return affine_formula(residual, shape)[0]
  if "hidden" not in residual:
    return None
  if k == 1:
    return first_layer_formula(residual, shape)[0][:1]
  return None


def _attack_apply(target: victim.Victim, alpha: float | None):
  """The victim's logits, with a ReLU's backward replaced by sigmoid(α z) unless α is None
  (DecoReco's trick, `decoreco.relu_sigmoid_backward`): ∇x of a gradient needs σ'' ≠ 0."""
  model = target.model
  if alpha is not None and getattr(model, "activation", None) == "relu":
    model = model.clone(activation=decoreco.relu_sigmoid_backward(alpha))
  return lambda p, x: model.apply({"params": p}, x)


def _kkt_attack(target: victim.Victim, kkt: ml_collections.ConfigDict, labels: jax.Array,
                known: tuple[jax.Array, jax.Array]) -> Attack:
  """DecoReco (`trdr.attacks.decoreco`, its loss, step and settings) on all n points, the
  n − k known images held fixed (their gradient zeroed, so their momentum stays 0) and
  every λ free: the informed adversary against a victim trained by gradient descent."""
  known_images, known_labels = known
  fixed = known_images.shape[0]
  loss_and_grad = decoreco.make_loss_and_grad(target, kkt,
                                              jnp.concatenate([known_labels, labels]))
  hp = decoreco.Hyperparameters(*(float(kkt[f]) for f in decoreco.Hyperparameters._fields))

  def masked(images, lambdas, alpha, lambda_min):
    value, (grad_x, grad_l) = loss_and_grad(images, lambdas, alpha, lambda_min)
    return value, (grad_x.at[:fixed].set(0.0), grad_l)

  def init(x0, key):
    if x0.shape[0] != labels.shape[0]:
      raise ValueError(f"{x0.shape[0]} start images for {labels.shape[0]} unknown labels")
    images = jnp.concatenate([known_images.astype(x0.dtype), x0])
    return decoreco.init_state(images, jax.random.uniform(key, (images.shape[0],), x0.dtype))

  def step(state):
    new, loss = decoreco.attack_step(state, hp, loss_and_grad=masked,
                                     lambda_lr=kkt.lambda_lr, momentum=kkt.momentum)
    return new, StepMetrics(loss)

  return Attack(name="informed", init=init, step=step, images=lambda s: s.images[fixed:],
                batches_well=True, display="minmax", hyperparameters=hp,
                outputs=lambda s: {"final_lambdas": s.lambdas})


def start_images(target: victim.Victim, attack_config: ml_collections.ConfigDict,
                 key: jax.Array, shape, mean=None, dtype=jnp.float32) -> jax.Array:
  """Start images float[shape] of the informed attack: U(0, 1) noise (minus ``mean``) for
  a stationary victim, DecoReco's N(0, σ²) (σ = ``attack_config.kkt.init_scale``) for a
  victim trained by gradient descent."""
  if target.config.get("training", "lbfgs") == "gd":
    return inits.gaussian(key, shape, attack_config.kkt.init_scale, dtype)
  return inits.uniform(key, shape, mean, dtype)


def gradient_gram(target: victim.Victim, residual: Params, images: jax.Array,
                  labels: jax.Array, alpha: float | None = None):
  """G = A Aᵀ, A r and c ↦ Aᵀc for the signed per-sample gradients a_j = y_j ∇θΦ(x_j; θ*)
  (the rows of A).

  For the one-hidden network Φ(x) = vᵀσ(Wᵀx + b) + c (eq. 9 of Runkel et al.) in closed
  form, never forming the k × P matrix A. With g = v ⊙ σ'(z) and h = σ(z) at
  z = Wᵀx + b: ∇_W Φ = x gᵀ, ∇_b Φ = g, ∇_v Φ = h and ∇_c Φ = 1, so
  ⟨∇Φ(x_i), ∇Φ(x_j)⟩ = (x_iᵀx_j + 1) g_iᵀg_j + h_iᵀh_j + 1,
  ⟨∇Φ(x_i), r⟩ = g_iᵀ(r_Wᵀx_i + r_b) + h_iᵀr_v + r_c, and
  Aᵀc = {W: Xᵀ(c ⊙ g), b: Σ c_j g_j, v: Σ c_j h_j, c: Σ c_j} (signs y_j folded into g, h, 1).
  Otherwise A is formed by one gradient per image.

  Args:
    target, residual, images, labels: as in `residual_loss`.
    alpha: None, or α: a ReLU's derivative is then DecoReco's sigmoid(α z)
      (`decoreco.relu_sigmoid_backward`), so that ∇x of the loss is informative.
  Returns:
    (G float[k, k], A r float[k], c ↦ Aᵀc as a pytree like θ*).
  """
  if "hidden" in residual and "output" in residual and len(residual) == 2:
    activation = target.model.activation
    sigma = models.ACTIVATIONS[activation]
    dsigma = ((lambda z: jax.nn.sigmoid(alpha * z)) if activation == "relu" and alpha
              else jax.vmap(jax.vmap(jax.grad(sigma))))
    hidden, output = target.params["hidden"], target.params["output"]
    x = images.reshape((images.shape[0], -1))
    z = x @ hidden["kernel"] + hidden["bias"]
    g = output["kernel"][:, 0] * dsigma(z) * labels[:, None]
    h = sigma(z) * labels[:, None]
    gram = (x @ x.T + 1.0) * (g @ g.T) + h @ h.T + jnp.outer(labels, labels)
    r = residual
    projection = (jnp.sum(g * (x @ r["hidden"]["kernel"] + r["hidden"]["bias"]), axis=1)
                  + h @ r["output"]["kernel"][:, 0] + labels * r["output"]["bias"][0])
    combine = lambda c: {"hidden": {"kernel": x.T @ (c[:, None] * g), "bias": c @ g},
                         "output": {"kernel": (c @ h)[:, None], "bias": (c @ labels)[None]}}
    return gram, projection, combine
  apply_fn = _attack_apply(target, alpha)
  flat_r, unravel = jax.flatten_util.ravel_pytree(residual)

  def signed_gradient(x, y):
    grad = jax.grad(lambda p: y * apply_fn(p, x[None])[0])(target.params)
    return jax.flatten_util.ravel_pytree(grad)[0]

  a = jax.vmap(signed_gradient)(images, labels)                # float[k, P]
  return a @ a.T, a @ flat_r, lambda c: unravel(c @ a)


def residual_loss(target: victim.Victim, residual: Params, images: jax.Array,
                  labels: jax.Array, alpha: float | None = None, ridge: float = 1e-10
                  ) -> jax.Array:
  """The part of the residual r that the guesses' gradients leave unexplained, relative:
  ||r − Σ_j c_j a_j||² / ||r||² with a_j = y_j ∇θΦ(x_j; θ*) and c the least-squares
  coefficients, in [0, 1].

  At the truth r = (1/n) Σ_{j∈U} σ(−y_j Φ_j) a_j (module docstring), so the loss is 0 with
  c_j = σ(−y_j Φ_j)/n. Fitting the coefficients c (variable projection; ridge μ·tr(G)/k
  on the Gram matrix G for stability) instead of fixing them at σ(−y_j Φ(x_j))/n removes
  the trivial minimum ||r||² at guesses that the victim fits so well that their loss
  gradient vanishes, which plain ||r + (1/n) Σ_j ∇θℓ(x_j)||² falls into. The unexplained
  vector is formed explicitly (`gradient_gram`'s c ↦ Aᵀc), so the loss is a sum of squares,
  never negative: ||r||² − bᵀG⁻¹b would cancel catastrophically where G is ill-conditioned,
  and an optimiser would exploit its rounding.

  Args:
    target: the victim (θ*).
    residual: `known_residual`.
    images: float[k, H, W, C], guesses of the unknown points; labels float[k] (±1).
    alpha: as in `gradient_gram` (`build` passes the config's α).
    ridge: μ.
  Returns:
    float[] scalar in [0, 1].
  """
  gram, projection, combine = gradient_gram(target, residual, images, labels, alpha)
  k = labels.shape[0]
  c = jnp.linalg.solve(gram + ridge * jnp.trace(gram) / k * jnp.eye(k, dtype=gram.dtype),
                       projection)
  unexplained = optax.tree.sub(residual, combine(c))
  return optax.tree.norm(unexplained, squared=True) / optax.tree.norm(residual, squared=True)


def first_layer_span(residual: Params, k: int, layer: str = "hidden"
                     ) -> tuple[np.ndarray, np.ndarray]:
  """The k-dimensional space that holds every unknown point, from a first layer with a bias.

  [r_W; r_bᵀ] = [x_1 … x_k; 1 … 1] Δ with Δ_{ju} = δ_{ju} (module docstring): the
  (D + 1) × U matrix has rank ≤ k and its column space holds [x_j; 1] for every unknown
  point. Its top-k left singular vectors Q give each unknown point as x_j = Q_x c_j /
  (Q_b · c_j) for some c_j ∈ R^k: the optimisation searches k² numbers instead of k·D.

  Returns:
    (Q_x float[k, D], Q_b float[k]), the basis as rows; or raises ValueError when the
    layer has fewer than k units (the rank argument needs U ≥ k).
  """
  kernel = np.asarray(residual[layer]["kernel"])
  bias = np.asarray(residual[layer]["bias"])
  if kernel.shape[1] < k:
    raise ValueError(f"{kernel.shape[1]} units in {layer!r} cannot span {k} unknown points")
  left, _, _ = np.linalg.svd(np.concatenate([kernel, bias[None]]), full_matrices=False)
  basis = left[:, :k].T
  return basis[:, :-1], basis[:, -1]


class State(NamedTuple):
  """A stationary victim's attack state: the unknown images' guesses (float[k, H, W, C],
  or their coefficients float[k, k] in `first_layer_span`'s basis) and Adam's state. (A
  KKT victim's is DecoReco's `decoreco.AttackState`.)"""
  images: jax.Array
  opt_state: Any


class StepMetrics(NamedTuple):
  loss: jax.Array  # the stationarity residual (plus DecoReco's priors for KKT victims)


def build(target: victim.Victim, attack_config: ml_collections.ConfigDict, labels: jax.Array,
          *, key=None, box=None, known: tuple[jax.Array, jax.Array]) -> Attack:
  """The informed adversary's optimisation path as an `Attack` (module docstring).

  Args:
    target: the victim; training "lbfgs" (stationary E: `residual_loss` by Adam) or "gd"
      (KKT: DecoReco with the known images fixed).
    attack_config: lr (Adam on the images, pixels; cosine decay to 1 % over ``steps``),
      alpha (the sigmoid-backward ReLU's α), span (search a first layer's span,
      `first_layer_span`, when the victim has one with ≥ k units), and ``kkt``, a DecoReco
      attack section (configs/decoreco_cifar.py: form, σ, lr, λ_min, α, λ_lr, momentum,
      steps, the priors) for victims trained by gradient descent.
    labels: float[k] in {−1, +1}, the unknown points' labels (given to the adversary).
    key: unused (the start images and ``init``'s key are the whole start).
    box: (low, high) pixel bounds of the victim's input space: the images are projected
      onto it after each step (not in the span search, whose images are its decoding).
    known: (images float[n − k, H, W, C], labels float[n − k]), the known points.
  Returns:
    The `Attack` (name "informed"): ``init(x0, key)`` from the k start images x0 (and for
    KKT victims λ ~ U(0, 1) from ``key``); ``images`` the k guesses. Metrics `StepMetrics`.
  Raises:
    ValueError: an unknown victim training; at ``init``, start images that are not k.
  """
  del key
  training = target.config.get("training", "lbfgs")
  if training == "gd":
    return _kkt_attack(target, attack_config.kkt, labels, known)
  if training != "lbfgs":
    raise ValueError(f"unknown victim training {training!r}; known: 'lbfgs', 'gd'")
  a = attack_config
  known_images, known_labels = known
  k = labels.shape[0]
  n = known_images.shape[0] + k
  shape = tuple(known_images.shape[1:])
  residual = known_residual(target, known_images, known_labels, n)
  optimizer = optax.adam(optax.cosine_decay_schedule(a.lr, max(int(a.steps), 1), alpha=0.01))
  low, high = (-jnp.inf, jnp.inf) if box is None else box
  encode, decode = (lambda x: x), (lambda v: v)
  span = a.get("span", True) and "hidden" in residual and residual["hidden"]["bias"].size >= k
  if span:
    q_x, q_b = (jnp.asarray(q, known_images.dtype) for q in first_layer_span(residual, k))
    encode = lambda x: jnp.concatenate([x.reshape((k, -1)), jnp.ones((k, 1), x.dtype)],
                                       axis=1) @ jnp.concatenate([q_x, q_b[:, None]], 1).T
    decode = lambda c: ((c @ q_x) / (c @ q_b)[:, None]).reshape((k, *shape))
  loss = lambda v: residual_loss(target, residual, decode(v), labels, a.alpha)

  def init(x0, key):
    del key
    if x0.shape[0] != k:
      raise ValueError(f"{x0.shape[0]} start images for {k} unknown labels")
    variables = encode(x0)
    return State(variables, optimizer.init(variables))

  def step(state):
    value, grad = jax.value_and_grad(loss)(state.images)
    updates, opt_state = optimizer.update(grad, state.opt_state, state.images)
    variables = optax.apply_updates(state.images, updates)
    if not span:
      variables = jnp.clip(variables, low, high)
    return State(variables, opt_state), StepMetrics(value)

  return Attack(name="informed", init=init, step=step, images=lambda s: decode(s.images),
                batches_well=True, display="pixels")


class Reconstruction(NamedTuple):
  """`reconstruct`'s answer: the k images (float[k, H, W, C], victim input space), how
  they were found ("closed form" | "optimisation"), the kept start's final loss (NaN for
  a closed form), its index among the starts, and the final loss from the true images
  as a start (NaN when not asked for)."""
  images: np.ndarray
  method: str
  residual: float
  start: int
  truth_residual: float = float("nan")


def reconstruct(target: victim.Victim, attack_config: ml_collections.ConfigDict,
                known: tuple[jax.Array, jax.Array], labels: jax.Array, starts: jax.Array,
                box=None, truth: jax.Array | None = None) -> Reconstruction:
  """The informed adversary's answer: the closed form where one applies (`closed_form`),
  else ``attack_config.steps`` steps (``kkt.steps`` for a victim trained by gradient
  descent) of `build`'s attack from each start (`start_images`), keeping the start whose
  final loss is lowest (the adversary can compute it; it cannot see the truth).

  Args:
    target, attack_config, known, labels, box: as in `build`.
    starts: float[S, k, H, W, C], S start images of the k unknown points.
    truth: None, or the true unknown images float[k, H, W, C]: a diagnostic the adversary
      cannot run, the same steps from the truth, never kept. Its final loss below the
      kept start's says the optimiser missed a better point; at or above it, that the
      objective does not prefer the training images.
  Returns:
    A `Reconstruction`.
  """
  images = closed_form(target, *known, labels.shape[0])
  if images is not None:
    return Reconstruction(np.asarray(images), "closed form", float("nan"), 0)
  attack = build(target, attack_config, labels, box=box, known=known)
  gd = target.config.get("training", "lbfgs") == "gd"
  everyone = starts if truth is None else jnp.concatenate([starts, truth[None]])
  keys = jax.random.split(jax.random.key(0), everyone.shape[0])
  states = jax.vmap(attack.init)(everyone, keys)
  step = jax.jit(jax.vmap(attack.step))
  for _ in range(int(attack_config.kkt.steps if gd else attack_config.steps)):
    states, _ = step(states)
  final = np.asarray(step(states)[1].loss)
  own = final[:starts.shape[0]]
  kept = int(np.nanargmin(own)) if np.isfinite(own).any() else 0
  return Reconstruction(np.asarray(jax.vmap(attack.images)(states))[kept], "optimisation",
                        float(own[kept]), kept,
                        float("nan") if truth is None else float(final[-1]))


# ---------------------------------------------------------------------------------------
# Victims trained by gradient descent: the KKT search with the known multipliers fitted.
#
# DecoReco's loss with the n − k known images fixed (`_kkt_attack`), for the Haim MLP, is
# a quadratic in λ at fixed images: with a_i = y_i ∇θΦ(x_i; θ*) under the attack's
# derivative sigmoid(αz) (`decoreco.relu_sigmoid_backward`), m = n and per-tensor weights
# w_t (1: DecoReco's loss),
#
#   L(x, λ) = Σ_t w_t ||θ_t − (1/m) Σ_i λ_i a_{i,t}||² + pixel prior(x) + w_λ Σ_i relu(λ_min − λ_i)²
#           = Σ_t w_t (||θ_t||² − (2/m) b_tᵀλ + (1/m²) λᵀ K_t λ) + priors,
#
# K_t[i, j] = <a_{i,t}, a_{j,t}>, b_t[i] = <a_{i,t}, θ_t> (`haim_grams`, closed form). The
# adversary knows the known images, so it fits their λ once (`truth.fit_lambdas`, convex), and
# then searches the unknown images and their λ by DecoReco's step on
# Σ_t w_t ||r_t − (1/m) Σ_{j∈U} λ_j a_{j,t}||² with r = θ − (1/m) Σ_{i∈K} λ_i a_i fixed: the
# same gradient in (x_U, λ_U) as DecoReco's with λ_K held (DecoReco moves λ by 10⁻⁴ a step),
# at the cost of k images instead of n. At the end every λ is fitted again for the images
# found, so the loss reached and the loss at the truth are both min over λ of L.


def haim_grams(params: Params, images: jax.Array, labels: jax.Array,
               alpha: float | None = None) -> dict[str, tuple[np.ndarray, np.ndarray, float]]:
  """Per-tensor Gram matrices of the signed per-sample gradients of a one-output Haim MLP.

  With rows as samples, Z_k = H_{k−1} K_k (+ b_k), H_k = relu(Z_k), H_{−1} = X, and the
  backprop vectors Δ_{H−1} = σ'(Z_{H−1}) ∘ k_outᵀ, Δ_k = σ'(Z_k) ∘ (Δ_{k+1} K_{k+1}ᵀ)
  (σ' = sigmoid(αz), the attack's, or the plain step where ``alpha`` is None, as
  `trdr.victim.kkt.fit`), signed D_k = diag(y) Δ_k:
  K_{K_k} = (H_{k−1} H_{k−1}ᵀ) ∘ (D_k D_kᵀ), b_{K_k} = rowsum((H_{k−1} K_k) ∘ D_k);
  K_{b_k} = D_k D_kᵀ, b_{b_k} = D_k b_k; the output layer with D = y.

  Args:
    params: θ* of a `trdr.models.HaimMLP` with one output (`kkt_mlp.supports`).
    images: float[n, H, W, C] (the network's inputs); labels: float[n] in {−1, +1}.
    alpha: the sigmoid-backward ReLU's α, or None.
  Returns:
    {tensor path ("dense_0/kernel", as `trdr.victim.kkt.fit`): (K_t float64[n, n],
    b_t float64[n], ||θ_t||²)}.
  Raises:
    ValueError: θ* is not a one-output Haim MLP's.
  """
  if not kkt_mlp.supports(params):
    raise ValueError("haim_grams needs the parameters of a one-output HaimMLP")
  hidden = sum(1 for name in params if name.startswith("dense_"))
  names = [f"dense_{k}" for k in range(hidden)] + ["output"]
  deriv = ((lambda z: jax.nn.sigmoid(alpha * z)) if alpha is not None
           else (lambda z: (z > 0).astype(z.dtype)))
  hs, zs = [images.reshape((images.shape[0], -1))], []
  for name in names:
    layer = params[name]
    z = hs[-1] @ layer["kernel"] + (layer["bias"] if "bias" in layer else 0.0)
    zs.append(z)
    hs.append(jax.nn.relu(z))
  deltas = [labels[:, None] * jnp.ones_like(zs[-1])]            # output: ∂s/∂Z = y
  for k in reversed(range(hidden)):
    deltas.insert(0, deriv(zs[k]) * (deltas[0] @ params[names[k + 1]]["kernel"].T))
  out = {}
  for name, h, d in zip(names, hs, deltas):
    layer = params[name]
    hh = h @ h.T
    out[f"{name}/kernel"] = ((hh * (d @ d.T), jnp.sum((h @ layer["kernel"]) * d, axis=1),
                              jnp.sum(layer["kernel"] ** 2)))
    if "bias" in layer:
      out[f"{name}/bias"] = (d @ d.T, d @ layer["bias"], jnp.sum(layer["bias"] ** 2))
  return {p: (np.asarray(g, np.float64), np.asarray(b, np.float64), float(c))
          for p, (g, b, c) in sorted(out.items())}


def premise_weights(grams: dict, mode: str) -> dict[str, float]:
  """Per-tensor weights w_t of the informed adversary's KKT objective.

  "all": 1 (DecoReco's loss); "first_layer": 1 on the first layer's tensors, 0 elsewhere;
  "explained": the explained fraction 1 − relative[t], clipped to [0, 1], of the best
  λ ≥ 0 on the images of ``grams`` (`trdr.victim.kkt.fit`'s non-negative least squares;
  the adversary passes the KNOWN images' plain-ReLU Grams: all it can compute).

  Args:
    grams: `haim_grams` output.
    mode: "all", "first_layer" or "explained".
  Raises:
    ValueError: unknown mode.
  """
  if mode == "all":
    return {p: 1.0 for p in grams}
  if mode == "first_layer":
    return {p: float(p.startswith("dense_0/")) for p in grams}
  if mode != "explained":
    raise ValueError(f"unknown premise weighting {mode!r}; known: all, first_layer, explained")
  return {p: float(np.clip(1.0 - r, 0.0, 1.0)) for p, r in premise_fit(grams)[0].items()}


def premise_fit(grams: dict) -> tuple[dict[str, float], float]:
  """`trdr.victim.kkt.fit` from `haim_grams` (alpha None): the best λ ≥ 0 by non-negative
  least squares on ||θ − Σ_i λ_i a_i||², its unexplained fraction per tensor and ‖r‖².

  Returns:
    ({tensor path: ‖r_t‖² / ‖θ_t‖²}, Σ_t ‖r_t‖²). ‖r_t‖² is formed as ‖θ_t‖² − 2 b_tᵀλ +
    λᵀK_tλ, a difference of terms of the size of ‖θ_t‖²: relative error about n ε ‖θ_t‖²
    / ‖r_t‖² (float64), far below what a weight or a premise reading needs.
  """
  gram = sum(g for g, _, _ in grams.values())
  proj = sum(b for _, b, _ in grams.values())
  w, v = np.linalg.eigh(0.5 * (gram + gram.T))
  keep = w > w.max() * gram.shape[0] * np.finfo(np.float64).eps * 16
  root = np.sqrt(w[keep])
  lambdas, _ = scipy.optimize.nnls(root[:, None] * v[:, keep].T,
                                   (v[:, keep].T @ proj) / root, maxiter=50 * gram.shape[0])
  residual = {p: max(c - 2 * b @ lambdas + lambdas @ g @ lambdas, 0.0)
              for p, (g, b, c) in grams.items()}
  return ({p: residual[p] / c if c > 0 else 0.0 for p, (_, _, c) in grams.items()},
          float(sum(residual.values())))


def quadratic(grams: dict, weights: dict[str, float]) -> tuple[np.ndarray, np.ndarray, float]:
  """(K, b, c) = Σ_t w_t (K_t, b_t, ||θ_t||²): the residual is c − (2/m) bᵀλ + λᵀKλ/m²."""
  return (sum(weights[p] * g for p, (g, _, _) in grams.items()),
          sum(weights[p] * b for p, (_, b, _) in grams.items()),
          float(sum(weights[p] * c for p, (_, _, c) in grams.items())))


def lambda_loss(quad, m: int, lambda_min: float, lambda_weight: float, pixel_prior: float = 0.0):
  """λ float[m] ↦ L float[], jittable: the KKT loss at fixed images (the section above), for
  `trdr.attacks.truth.fit_lambdas`."""
  gram, proj, const = (np.asarray(q, np.float64) for q in quad)   # float64 under x64

  def loss(lambdas):
    lambdas = lambdas.astype(jnp.float64)
    return (const - 2.0 / m * proj @ lambdas + lambdas @ gram @ lambdas / m ** 2
            + lambda_weight * jnp.sum(jax.nn.relu(lambda_min - lambdas) ** 2) + pixel_prior)

  return loss


def _fit(loss, lambdas0) -> tuple[np.ndarray, float, float]:
  """`truth.fit_lambdas` in float64 (λ is n numbers; the Grams are float64)."""
  if np.size(lambdas0) == 0:
    return np.zeros(0), float(loss(jnp.zeros(0, jnp.float64))), 0.0
  with jax.enable_x64(True):
    lambdas, value, grad_norm = truth.fit_lambdas(loss, jnp.asarray(lambdas0, jnp.float64),
                                                  max_iter=1000, tol=1e-9)
    return np.asarray(lambdas, np.float64), float(value), float(grad_norm)


def _reduced_loss(target: victim.Victim, kkt: ml_collections.ConfigDict, labels: jax.Array,
                  residual: Params, weights: Params, m: int, const: float):
  """(x_U, λ_U, α, λ_min) -> (L, (∂L/∂x_U, ∂L/∂λ_U)): DecoReco's loss in the unknown images
  and their λ, with θ − (1/m) Σ_{i∈K} λ_i a_i = ``residual`` fixed, per-tensor ``weights``;
  ``const`` the known λ's prior term (so that L is DecoReco's loss, not only its gradient)."""

  def loss(images, lambdas, alpha, lambda_min):
    apply_fn = _attack_apply(target, alpha)
    _, vjp = jax.vjp(lambda p: labels * apply_fn(p, images), target.params)
    (combination,) = vjp(lambdas / m)
    diff = optax.tree.sub(residual, combination)
    value = sum(jnp.sum(w * d ** 2) for w, d in zip(jax.tree.leaves(weights),
                                                     jax.tree.leaves(diff)))
    return value + const + decoreco.prior_penalty(
        images, lambdas, x_min=kkt.x_min, x_max=kkt.x_max, lambda_min=lambda_min,
        lambda_weight=kkt.lambda_weight)

  return jax.value_and_grad(loss, argnums=(0, 1))


class KKTSearch(NamedTuple):
  """`kkt_search`'s answer. images float[k, H, W, C] (the kept start's, or the truth
  start's); loss: min over λ of the objective at them (every λ fitted again); lambdas
  float64[n] there (known first, then unknown); search_loss: the kept start's final loss
  with the known λ as fitted before the search; start: its index."""
  images: np.ndarray
  loss: float
  lambdas: np.ndarray
  search_loss: float
  start: int


class KKTObjective(NamedTuple):
  """The informed adversary's KKT objective on a gradient-descent victim (`kkt_objective`):
  per-tensor weights, the Grams at the known images (the attack's derivative) and its
  settings."""
  weights: dict
  grams_known: dict
  kkt: Any
  known: tuple
  labels: jax.Array


def kkt_objective(target: victim.Victim, kkt: ml_collections.ConfigDict,
                  known: tuple[jax.Array, jax.Array], labels: jax.Array,
                  premise: str = "all") -> KKTObjective:
  """The objective of `kkt_search`: weights from the known images (`premise_weights`;
  their plain-ReLU fit for "explained") and the known images' Grams under the attack's α."""
  known_images, known_labels = known
  grams_known = haim_grams(target.params, known_images, known_labels, float(kkt.alpha))
  plain = grams_known if premise != "explained" else haim_grams(
      target.params, known_images, known_labels, None)
  return KKTObjective(premise_weights(plain, premise), grams_known, kkt, known, labels)


def objective_at(target: victim.Victim, objective: KKTObjective, images: jax.Array,
                 lambdas0=None) -> tuple[np.ndarray, float, float]:
  """min over every λ of the objective with the unknown images at ``images`` (float[k, H, W,
  C]): (λ float64[n], L, ||∂L/∂λ||) by `truth.fit_lambdas` from ``lambdas0`` (default all 1)."""
  kkt = objective.kkt
  known_images, known_labels = objective.known
  alls = jnp.concatenate([known_images, images.astype(known_images.dtype)])
  grams = haim_grams(target.params, alls, jnp.concatenate([known_labels, objective.labels]),
                     float(kkt.alpha))
  n = alls.shape[0]
  pixel = float(decoreco.prior_penalty(images, jnp.zeros((0,), images.dtype),
                                       x_min=kkt.x_min, x_max=kkt.x_max))
  loss = lambda_loss(quadratic(grams, objective.weights), n, float(kkt.lambda_min),
                     float(kkt.lambda_weight), pixel)
  return _fit(loss, np.ones(n) if lambdas0 is None else lambdas0)


def kkt_search(target: victim.Victim, objective: KKTObjective, starts: jax.Array,
               steps: int, lambdas_known=None, lambdas_start=None) -> KKTSearch:
  """The informed adversary's search on a gradient-descent victim (the section above).

  Args:
    target: a one-output Haim MLP (`kkt_mlp.supports`) trained by gradient descent.
    objective: `kkt_objective`.
    starts: float[S, k, H, W, C], S starts of the k unknown images.
    steps: DecoReco iterations (its step: SGD with momentum at the objective's kkt.lr on
      the images, kkt.lambda_lr on λ_U) per start, all starts at once.
    lambdas_known: float[n − k], the known images' λ during the search; default: fitted
      on the known images alone (`truth.fit_lambdas`).
    lambdas_start: float[k], λ_U's start; default: the median of the known ones.
  Returns:
    `KKTSearch` of the start whose final search loss is lowest.
  """
  kkt = objective.kkt
  known_images, known_labels = objective.known
  n = known_images.shape[0] + objective.labels.shape[0]
  k = objective.labels.shape[0]
  if lambdas_known is None:
    loss_k = lambda_loss(quadratic(objective.grams_known, objective.weights), n,
                         float(kkt.lambda_min), float(kkt.lambda_weight))
    lambdas_known = _fit(loss_k, np.ones(n - k))[0]
  lambdas_known = np.asarray(lambdas_known, np.float64)
  if lambdas_start is None:   # DecoReco's λ ~ U(0, 1) has mean 0.5 (no known image: k = n)
    lambdas_start = np.full(k, np.median(lambdas_known) if lambdas_known.size else 0.5)
  dtype = jax.tree.leaves(target.params)[0].dtype
  known_images = known_images.astype(dtype)
  apply_fn = _attack_apply(target, float(kkt.alpha))
  _, vjp = jax.vjp(lambda p: known_labels.astype(dtype) * apply_fn(p, known_images),
                   target.params)
  (explained,) = vjp(jnp.asarray(lambdas_known / n, dtype))
  residual = optax.tree.sub(target.params, explained)
  paths = ["/".join(str(getattr(q, "key", q)) for q in path)
           for path, _ in jax.tree_util.tree_flatten_with_path(target.params)[0]]
  weights = jax.tree.unflatten(jax.tree.structure(target.params),
                               [jnp.asarray(objective.weights[p], dtype) for p in paths])
  const = float(kkt.lambda_weight * np.sum(np.maximum(kkt.lambda_min - lambdas_known, 0) ** 2))
  loss_and_grad = _reduced_loss(target, kkt, objective.labels, residual, weights, n, const)
  hp = decoreco.Hyperparameters(*(float(kkt[f]) for f in decoreco.Hyperparameters._fields))

  def run(x0):
    state = decoreco.init_state(x0.astype(dtype), jnp.asarray(lambdas_start, dtype))
    state, _ = decoreco.run_steps(state, hp, int(steps), loss_and_grad=loss_and_grad,
                                  lambda_lr=kkt.lambda_lr, momentum=kkt.momentum)
    return state.images, state.lambdas, loss_and_grad(state.images, state.lambdas, hp.alpha,
                                                      hp.lambda_min)[0]

  images, _, final = jax.jit(jax.vmap(run))(starts)
  final = np.asarray(final)
  kept = int(np.nanargmin(final)) if np.isfinite(final).any() else 0
  found = jnp.asarray(images[kept])
  lambdas, value, _ = objective_at(target, objective, found, np.concatenate(
      [lambdas_known, np.asarray(lambdas_start, np.float64)]))
  return KKTSearch(np.asarray(found), value, lambdas, float(final[kept]), kept)
