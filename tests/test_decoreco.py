"""DecoReco (KKT) loss: against explicit per-sample gradients, the custom ReLU, the Haim
MLP, and the residual at the true training set of a converged victim."""

import functools

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
import scipy.optimize
from jax.flatten_util import ravel_pytree

from trdr import data, models, victim
from trdr.attacks import decoreco, gradient_norm

ALPHA = 20.0
PRIOR = dict(x_min=-1.0, x_max=1.0, lambda_min=0.05, lambda_weight=5.0)
# float64, one formula against another: the same products of a network with ≤ 32 inputs and
# widths ≤ 6, summed in other orders (one VJP vs per-sample gradients), ~√N·ε ≈ 1e-15
# relative (ε = 2^-52; the residual is not near 0, so no cancellation magnifies it). 1e-10
# leaves 1e5 of margin; a wrong or missing term is an O(0.1–1) relative error.
RTOL_F64 = 1e-10


def _rel_err(a, b):
  a, b = ravel_pytree(a)[0], ravel_pytree(b)[0]
  return float(jnp.linalg.norm(a - b) / jnp.linalg.norm(b))


def _small_problem(form, activation, m=6, shape=(4, 4, 2), widths=(6, 5), seed=0):
  """θ of a small Haim MLP (float64), candidates x with some pixels outside [−1, 1],
  multipliers λ with some below λ_min, and labels for ``form``."""
  num_outputs = 3 if form == "multiclass" else 1
  model = models.HaimMLP(widths=widths, activation=activation, all_biases=True,
                         num_outputs=num_outputs, first_scale=0.5)
  params = models.init_params(model, jax.random.key(seed), shape, jnp.float64)
  rng = np.random.default_rng(seed)
  images = jnp.asarray(0.8 * rng.normal(size=(m, *shape)))
  lambdas = jnp.asarray(rng.uniform(-0.1, 1.0, size=m))
  if form == "multiclass":
    labels = jnp.asarray(rng.integers(0, num_outputs, size=m))
  else:
    labels = jnp.asarray(np.repeat([-1.0, 1.0], m // 2))
  apply_fn = lambda p, x: model.apply({"params": p}, x)
  return params, images, lambdas, labels, apply_fn


def _reference_loss(params, images, lambdas, labels, *, apply_fn, form, weight_decay):
  """The same loss with one explicit jax.grad per candidate, summed in a Python loop
  (unrolled under jit: ``labels`` is a tuple of Python numbers, a static argument)."""
  m = images.shape[0]

  def signed_output(p, x, y):
    logits = apply_fn(p, x[None])[0]
    if form == "multiclass":
      y = int(y)
      return logits[y] - jnp.max(jnp.concatenate([logits[:y], logits[y + 1:]]))
    return y * logits

  c = weight_decay if form == "weight_decay" else 1.0
  total = jax.tree.map(lambda t: c * t, params)
  for i in range(m):
    g = jax.grad(signed_output)(params, images[i], labels[i])
    total = jax.tree.map(lambda t, gi, i=i: t - lambdas[i] / m * gi, total, g)
  residual = sum(jnp.sum(t ** 2) for t in jax.tree.leaves(total))
  prior = (jnp.sum(jnp.maximum(images - 1.0, 0.0) ** 2)
           + jnp.sum(jnp.maximum(-1.0 - images, 0.0) ** 2)
           + 5.0 * jnp.sum(jnp.maximum(0.05 - lambdas, 0.0) ** 2))
  return residual + prior


@pytest.mark.parametrize("form", ["binary", "weight_decay", "multiclass"])
def test_loss_and_gradients_match_per_sample_reference(x64, form):
  """Acceptance 1: one VJP equals the sum of per-sample gradients, value and ∇(x, λ)."""
  params, images, lambdas, labels, apply_fn = _small_problem(
      form, decoreco.relu_sigmoid_backward(ALPHA))
  kw = dict(apply_fn=apply_fn, form=form, weight_decay=0.3)
  # Value and gradient from one program each (the unrolled reference compiles slowly).
  ours = jax.jit(jax.value_and_grad(
      functools.partial(decoreco.stationarity_loss, **kw, **PRIOR), argnums=(1, 2)))
  reference = jax.jit(jax.value_and_grad(functools.partial(_reference_loss, **kw),
                                         argnums=(1, 2)), static_argnums=3)
  static_labels = tuple(np.asarray(labels).tolist())

  value, (gx, gl) = ours(params, images, lambdas, labels)
  expected, (rx, rl) = reference(params, images, lambdas, static_labels)
  assert value.dtype == jnp.float64
  assert abs(float(value - expected)) < RTOL_F64 * abs(float(expected))
  # Both prior terms are active, so their gradients are checked too.
  assert float(decoreco.prior_penalty(images, lambdas, **PRIOR)) > 0
  assert jnp.any(jnp.abs(images) > 1) and jnp.any(lambdas < 0.05)
  assert _rel_err(gx, rx) < RTOL_F64
  assert _rel_err(gl, rl) < RTOL_F64



def _small_cnn_problem(form, activation, m=4, shape=(8, 8, 3), seed=1):
  """`_small_problem` for a small `models.ConvNet` (3 × 3 convs, pooling): (model, θ,
  candidates, multipliers, labels)."""
  num_outputs = 3 if form == "multiclass" else 1
  model = models.ConvNet(channels=(4, 5), pool=True, activation=activation,
                         num_outputs=num_outputs, first_scale=0.5)
  params = models.init_params(model, jax.random.key(seed), shape, jnp.float64)
  rng = np.random.default_rng(seed)
  images = jnp.asarray(0.8 * rng.normal(size=(m, *shape)))
  lambdas = jnp.asarray(rng.uniform(-0.1, 1.0, size=m))
  labels = (jnp.asarray(rng.integers(0, num_outputs, size=m)) if form == "multiclass"
            else jnp.asarray(np.repeat([-1.0, 1.0], m // 2)))
  return model, params, images, lambdas, labels


@pytest.mark.parametrize("victim_kind, form", [
    ("cnn", "binary"), ("cnn", "weight_decay"), ("cnn", "multiclass"),
    ("mlp", "binary")])   # the MLP's other forms: test_loss_and_gradients_match_per_sample_...
def test_autodiff_orders_match_per_sample_reference(x64, victim_kind, form):
  """`decoreco.autodiff_loss_and_grad` in both orders (`AUTODIFF_ORDERS`: reverse mode
  twice, and a VJP in x of a JVP in θ) gives the per-sample reference's value and ∇(x, λ),
  on the ReLU victim as the attack sees it (derivative sigmoid(αz), whose own derivative
  both orders differentiate): for the CNN (`models.ConvNet`, autodiff through its 3 × 3
  convs and pooling), the KKT term Σ λ_i y_i ∇θΦ(x_i; θ*) as one VJP equals the
  per-sample gradients summed. Tolerance: `RTOL_F64`'s argument holds for both victims;
  the CNN has 8·8·3 = 192 inputs and 3·3·4 + 3·3·4·5 = 216 weights a sum at most runs
  over, so the reordered float64 sums differ by ~√216·ε ≈ 3e-15 relative, 3e4 below
  1e-10."""
  relu = decoreco.relu_sigmoid_backward(ALPHA)
  if victim_kind == "cnn":
    model, params, images, lambdas, labels = _small_cnn_problem(form, "relu")
  else:
    params, images, lambdas, labels, _ = _small_problem(form, "relu")
    model = models.HaimMLP(widths=(6, 5), activation="relu", all_biases=True,
                           num_outputs=3 if form == "multiclass" else 1)
  reference = jax.jit(jax.value_and_grad(functools.partial(
      _reference_loss, apply_fn=lambda p, x: model.clone(activation=relu).apply(
          {"params": p}, x), form=form, weight_decay=0.3), argnums=(1, 2)), static_argnums=3)
  expected, (rx, rl) = reference(params, images, lambdas, tuple(np.asarray(labels).tolist()))
  settings = {k: v for k, v in PRIOR.items() if k != "lambda_min"}
  for order in decoreco.AUTODIFF_ORDERS:
    loss_and_grad = jax.jit(decoreco.autodiff_loss_and_grad(
        model, params, labels, form=form, weight_decay=0.3, order=order, **settings))
    value, (gx, gl) = loss_and_grad(images, lambdas, jnp.asarray(ALPHA),
                                    jnp.asarray(PRIOR["lambda_min"]))
    assert abs(float(value - expected)) < RTOL_F64 * abs(float(expected)), order
    assert _rel_err(gx, rx) < RTOL_F64, order
    assert _rel_err(gl, rl) < RTOL_F64, order
  with pytest.raises(ValueError, match="unknown autodiff order 'sideways'"):
    decoreco.autodiff_loss_and_grad(model, params, labels, form=form, order="sideways")


def test_weight_decay_form_differs_from_binary_only_by_the_scale_of_theta(x64):
  params, images, lambdas, labels, apply_fn = _small_problem("binary", "softplus")
  res = jax.jit(functools.partial(decoreco.stationarity_residual, params, images, lambdas,
                                  labels, apply_fn=apply_fn), static_argnames="form")
  # wd = 1 multiplies θ by 1.0 (exact); only the order of the same float64 sums may differ
  # (~1e-15, `RTOL_F64`'s argument): 1e-12 leaves 1e3 of margin.
  assert float(res(form="weight_decay", weight_decay=1.0)) == pytest.approx(
      float(res(form="binary")), rel=1e-12)
  assert abs(float(res(form="weight_decay", weight_decay=0.1)) - float(res(form="binary"))) > 1e-3


def test_gradient_wrt_images_matches_finite_differences(x64):
  """With a smooth activation the autodiff gradient is the true one: central differences."""
  params, images, lambdas, labels, apply_fn = _small_problem("weight_decay", "softplus")
  loss = jax.jit(functools.partial(
      decoreco.stationarity_loss, params, lambdas=lambdas, labels=labels, apply_fn=apply_fn,
      form="weight_decay", weight_decay=0.3, **PRIOR))
  direction = jnp.asarray(np.random.default_rng(1).normal(size=images.shape))
  eps = 1e-6
  fd = (loss(images + eps * direction) - loss(images - eps * direction)) / (2 * eps)
  ad = jnp.vdot(jax.jit(jax.grad(loss))(images), direction)
  # Central differences in float64: rounding ε|f|/eps ≈ 2e-16·12/1e-6 ≈ 3e-9 (f ≈ 12 here),
  # truncation eps²|f'''|/6 ≈ 2e-13 (|f'''| ≈ 1 along this direction), against |ad| ≈ 2:
  # ≲ 2e-9 relative. The prior's kinks (|x| = 1, where f''' does not exist) are ≥ 5e-3·|d|
  # from every pixel, beyond eps. 1e-7 leaves a margin of 50; a wrong gradient is O(1) off.
  assert abs(float(fd - ad)) < 1e-7 * abs(float(ad))


def test_relu_sigmoid_backward_forward_is_relu_and_derivative_is_sigmoid(x64):
  f = decoreco.relu_sigmoid_backward(ALPHA)
  z = jnp.linspace(-0.5, 0.5, 101)
  np.testing.assert_array_equal(f(z), jax.nn.relu(z))
  # Each side evaluates sigmoid(αz) (and s(1 − s)) once in float64, maybe fused differently:
  # a few ulps (ε = 2.2e-16), inside 1e-14 (1e-12 for the product of three roundings and
  # α); a wrong surrogate (ReLU's step, another α) differs by O(1) near the kink.
  np.testing.assert_allclose(jax.vmap(jax.grad(f))(z), jax.nn.sigmoid(ALPHA * z), rtol=1e-14)
  _, tangent = jax.jvp(f, (z,), (2.0 * jnp.ones_like(z),))
  np.testing.assert_allclose(tangent, 2.0 * jax.nn.sigmoid(ALPHA * z), rtol=1e-14)
  # Its second derivative is that of the surrogate, α σ'(α z), non-zero around the kink.
  second = jax.vmap(jax.grad(jax.grad(f)))(z)
  s = jax.nn.sigmoid(ALPHA * z)
  np.testing.assert_allclose(second, ALPHA * s * (1 - s), rtol=1e-12)
  with pytest.raises(ValueError, match="alpha"):
    decoreco.relu_sigmoid_backward(0.0)


@pytest.mark.slow  # about 150 op-by-op compilations; fast tier: the residual test below
def test_gradient_norm_loss_is_weight_decay_residual_at_sigmoid_multipliers(x64):
  """||∇θE||² = ||wd θ − (1/n) Σ σ(−y_i Φ_i) y_i ∇θΦ_i||² (eq. 3 vs the KKT form)."""
  params, images, _, labels, apply_fn = _small_problem("binary", "softplus")
  wd = 0.3
  lambdas = jax.nn.sigmoid(-labels * apply_fn(params, images))
  eq3 = gradient_norm.loss(params, images, labels, apply_fn=apply_fn, weight_decay=wd)
  kkt = decoreco.stationarity_residual(params, images, lambdas, labels, apply_fn=apply_fn,
                                       form="weight_decay", weight_decay=wd)
  assert float(eq3) > 1e-6
  # Two float64 formulas of the same norm (`RTOL_F64`), not near 0: ||∇θE||² > 1e-6.
  assert abs(float(eq3 - kkt)) < RTOL_F64 * float(eq3)


def test_bad_inputs_raise(x64):
  params, images, lambdas, labels, apply_fn = _small_problem("binary", "relu")
  with pytest.raises(ValueError, match="unknown stationarity form"):
    decoreco.stationarity_loss(params, images, lambdas, labels, apply_fn=apply_fn, form="kkt")
  with pytest.raises(ValueError, match="shape"):
    decoreco.stationarity_loss(params, images, lambdas[:-1], labels, apply_fn=apply_fn)


def test_haim_mlp_structure_init_and_registry():
  config = ml_collections.ConfigDict(dict(arch="haim_mlp", widths=[7, 5], activation="relu",
                                          all_biases=False, num_outputs=1,
                                          later_init="pytorch"))
  assert set(models.MODEL_FIELDS["haim_mlp"]) <= set(config.keys())
  model = models.build_model(config)
  params = models.init_params(model, jax.random.key(0), (8, 8, 3))
  shapes = jax.tree.map(jnp.shape, params)
  assert shapes == {"dense_0": {"kernel": (192, 7), "bias": (7,)},
                    "dense_1": {"kernel": (7, 5)}, "output": {"kernel": (5, 1)}}
  first = np.concatenate([np.ravel(params["dense_0"]["kernel"]), params["dense_0"]["bias"]])
  # N(0, 1)·1e-4 over 192·7 + 7 = 1351 draws: the sample std's own std is
  # 1e-4/√(2·1351) ≈ 2e-6, so ±3e-5 is 15 of those; another scale is off by a factor.
  assert 0.7e-4 < first.std() < 1.3e-4
  # PyTorch's nn.Linear default, U(±1/√7): std 1/√21 ≈ 0.22, far from the first layer's.
  assert np.abs(params["dense_1"]["kernel"]).max() <= 1 / np.sqrt(7)
  assert np.asarray(params["dense_1"]["kernel"]).std() > 0.1
  assert model.apply({"params": params}, jnp.ones((4, 8, 8, 3))).shape == (4,)

  multi = model.clone(all_biases=True, num_outputs=3)
  params = models.init_params(multi, jax.random.key(0), (8, 8, 3))
  assert jax.tree.map(jnp.shape, params)["output"] == {"kernel": (5, 3), "bias": (3,)}
  assert "bias" in params["dense_1"]
  assert multi.apply({"params": params}, jnp.ones((4, 8, 8, 3))).shape == (4, 3)

  # The activation is a module attribute: the attack's ReLU gives the same forward pass.
  swapped = multi.clone(activation=decoreco.relu_sigmoid_backward(ALPHA))
  x = jnp.asarray(np.random.default_rng(0).normal(size=(4, 8, 8, 3)), jnp.float32)
  np.testing.assert_array_equal(swapped.apply({"params": params}, x),
                                multi.apply({"params": params}, x))
  for bad in (dict(widths=()), dict(widths=(0,)), dict(num_outputs=0),
              dict(activation="tanhh")):
    with pytest.raises(ValueError):
      models.init_params(model.clone(**bad), jax.random.key(0), (8, 8, 3))


def test_residual_vanishes_at_true_training_set_of_converged_victim(x64):
  """Acceptance 2: the weight-decay KKT residual with NNLS-fitted λ ≥ 0 is ~0 at the
  training set and not at other images.

  Form and victim: the "weight_decay" form, a victim trained WITH weight decay on E
  (`trdr.victim.energy`) by L-BFGS to ||∇θE|| < 1e-9, where stationarity is exact:
  wd θ* = (1/n) Σ_i λ_i y_i ∇θΦ_i with λ_i = σ(−y_i Φ_i). (The "binary" form without weight
  decay holds only in direction, asymptotically, for homogeneous nets — Lyu & Li 2020 —
  so it would make no sharp test.) The Haim MLP uses softplus here: with ReLU, L-BFGS
  stalls at ||∇θE|| ~ 1e-3 on this problem (kinks), which would only test the solver.
  """
  config = data.default_data_config()
  config.n_per_class = 10
  task = data.make_task(config)
  x = jnp.asarray(task.train_images, jnp.float64)
  y = jnp.asarray(task.train_labels, jnp.float64)
  model = models.HaimMLP(widths=(16, 16), activation="softplus")
  apply_fn = lambda p, z: model.apply({"params": p}, z)
  wd = 1e-2
  theta0 = models.init_params(model, jax.random.key(0), x.shape[1:], jnp.float64)
  energy = lambda p: victim.energy(p, x, y, apply_fn=apply_fn, weight_decay=wd)
  theta, info = jax.jit(lambda p: victim.minimize_energy(energy, p, max_iter=2000, tol=1e-9)
                        )(theta0)
  assert float(info.grad_norm) < 1e-9
  assert victim.accuracy(apply_fn(theta, x), y) == 1.0

  flat_theta, unravel = ravel_pytree(theta)
  jacobian = jax.jit(lambda images: jax.jacrev(
      lambda f: y * apply_fn(unravel(f), images))(flat_theta).T / images.shape[0])
  residual_at = jax.jit(lambda images, lambdas: decoreco.stationarity_residual(
      theta, images, lambdas, y, apply_fn=apply_fn, form="weight_decay", weight_decay=wd))

  def fitted_residual(images):
    """min_{λ ≥ 0} of the residual by NNLS on the explicit Jacobian (a test-only oracle);
    returns (residual, λ, Jacobian A)."""
    columns = jacobian(images)
    lambdas, _ = scipy.optimize.nnls(np.asarray(columns), np.asarray(wd * flat_theta))
    lambdas = jnp.asarray(lambdas)
    residual = residual_at(images, lambdas)
    return float(residual), lambdas, np.asarray(columns)

  at_truth, lambdas, a = fitted_residual(x)
  noise = jnp.asarray(np.random.default_rng(0).uniform(size=x.shape))
  at_noise, _, _ = fitted_residual(noise)
  at_partition, _, _ = fitted_residual(jnp.asarray(task.partition_images, jnp.float64))
  print(f"KKT residual with NNLS λ: true training set {at_truth:.3e}, uniform noise "
        f"{at_noise:.3e}, distinct partition {at_partition:.3e}")
  # Error argument. With A = [y_i ∇θΦ_i / n] (P x n, P = 49,440 parameters) and
  # c = wd θ, stationarity gives c − A λ* = ∇θE(θ) =: g for λ* = σ(−yΦ) > 0, and
  # ||g|| = info.grad_norm < 1e-9. Float64 rounding perturbs A λ − c by at most
  # ~eps64 · D · (||c|| + ||A|| ||λ*||) (inner products of ≤ D = 3072 terms; ~1e-13
  # here), added to ||g||.
  lambda_star = np.asarray(jax.nn.sigmoid(-y * apply_fn(theta, x)))
  singular = np.linalg.svd(a, compute_uv=False)
  rounding = np.finfo(np.float64).eps * x[0].size * (
      np.linalg.norm(wd * np.asarray(flat_theta)) + singular[0] * np.linalg.norm(lambda_star))
  g_bound = float(info.grad_norm) + rounding
  # (1) λ* is feasible for NNLS, whose minimum is therefore at most ||A λ* − c||² = ||g||².
  assert at_truth <= g_bound ** 2
  # ... while at other images no λ ≥ 0 brings the residual near that floor: we ask for
  # a factor 1e3 in norm (1e6 in the squared residual) above the victim's tolerance.
  assert min(at_noise, at_partition) > 1e6 * g_bound ** 2
  # (2) The fitted multipliers are the ones stationarity predicts. A has full column
  # rank, so the unconstrained least-squares solution is λ* + A⁺g, within
  # ||g|| / σ_min(A) of λ* (σ_min(A) = 0.41 here, condition number 25). That is below
  # min λ* (7e-5), so it is positive and NNLS returns it: |λ − λ*| ≤ ||g|| / σ_min(A).
  lambda_bound = g_bound / singular[-1]
  assert lambda_bound < lambda_star.min()
  np.testing.assert_allclose(lambdas, lambda_star, rtol=0, atol=lambda_bound)
