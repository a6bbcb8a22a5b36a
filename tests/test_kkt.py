"""The KKT premise of DecoReco (`trdr.victim.kkt`): the non-negative fit of θ* by its training
images' gradients, checked against scipy's NNLS on the explicit gradient matrix; and the
victim recipe that puts θ* nearer that point (Haim et al.'s later-layer initialisation)."""

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize

from trdr import data, models, victim
from trdr.attacks import decoreco
from trdr.configs import decoreco_cifar
from trdr.evaluation import power
from trdr.victim import kkt

U = np.finfo(np.float64).eps / 2   # unit roundoff of float64


def _affine(n=6, d=12, seed=0):
  rng = np.random.default_rng(seed)
  images = jnp.asarray(rng.normal(size=(n, 2, 2, d // 4)))
  labels = jnp.asarray(np.where(np.arange(n) % 2 == 0, 1.0, -1.0))
  model = models.Affine()
  apply_fn = lambda p, x: model.apply({"params": p}, x)
  # Rows of A: a_i = y_i ∇θΦ(x_i) = y_i [x_i, 1] (kernel then bias).
  a = np.asarray(labels)[:, None] * np.concatenate(
      [np.asarray(images).reshape(n, -1), np.ones((n, 1))], axis=1)
  return apply_fn, images, labels, a


def _float64(task):
  return task._replace(train_images=task.train_images.astype(np.float64),
                       test_images=task.test_images.astype(np.float64))


def _params(vector, d):
  return {"dense": {"kernel": jnp.asarray(vector[:d, None]), "bias": jnp.asarray(vector[d:])}}


def test_a_kkt_point_is_explained_exactly(x64):
  """θ = Aᵀλ with λ ≥ 0: nothing unexplained, up to rounding."""
  apply_fn, images, labels, a = _affine()
  n, p = a.shape
  lambdas = np.random.default_rng(1).uniform(0.1, 1.0, n)
  fit = kkt.fit(apply_fn, _params(a.T @ lambdas, p - 1), images, labels, chunk=4)
  # The fit solves the normal equations through K = AAᵀ: the computed λ carries a relative
  # error of at most κ(K)·(n·p)·u = κ(A)²·(n·p)·u (rounding in forming K and in the
  # solve), so ‖r‖/‖θ‖ ≤ κ(A)·‖λ − λ̂‖·σ_max/‖θ‖ ≲ κ(A)³·(n·p)·u; ten times that bounds it.
  kappa = np.linalg.cond(a)
  bound = 10 * kappa ** 3 * n * p * U
  assert np.sqrt(fit.relative_total) <= bound
  assert fit.positive == n and fit.n == n and fit.form == "binary"
  assert fit.first_layer == "dense/kernel"


def test_the_fit_is_the_nnls_projection_on_the_explicit_matrix(x64):
  """A θ outside the cone: the residual per tensor equals that of scipy's NNLS on the
  explicit A (the projection onto a closed convex cone is unique, even where λ is not)."""
  apply_fn, images, labels, a = _affine(seed=2)
  n, p = a.shape
  theta = np.random.default_rng(3).normal(size=p)
  lambdas, _ = scipy.optimize.nnls(a.T, theta)
  r = theta - a.T @ lambdas
  fit = kkt.fit(apply_fn, _params(theta, p - 1), images, labels, chunk=4)
  assert 0 < fit.positive < n   # the case this test is about: some constraints active
  expected = {"dense/kernel": np.sum(r[:-1] ** 2), "dense/bias": r[-1] ** 2}
  # Both are the same projection computed two ways; λ agrees to κ(K)·(n·p)·u = κ(A)²·n·p·u
  # (relative), the residual components to κ(A)³·n·p·u of ‖θ‖, so their squares to twice
  # that relative to ‖θ‖² (the bias's single residual is as small as it is, so compare in
  # units of ‖θ‖²).
  tol = 10 * np.linalg.cond(a) ** 3 * n * p * U * np.sum(theta ** 2)
  for name, value in expected.items():
    assert abs(fit.residual[name] - value) <= tol
  assert fit.relative_total == pytest.approx(np.sum(r ** 2) / np.sum(theta ** 2),
                                             abs=tol / np.sum(theta ** 2))


def test_the_multiclass_margins_fit_as_the_explicit_jacobian(x64):
  """A 3-class Haim MLP, the margin form (Buzaglo et al.): the chunked Gram route (blocks of
  2 rows, one partial) gives the residual of NNLS on the explicit Jacobian of the margins."""
  model = models.HaimMLP(widths=(7, 5), num_outputs=3, first_scale=0.3)
  rng = np.random.default_rng(4)
  images = jnp.asarray(rng.normal(size=(5, 2, 2, 2)))
  labels = jnp.asarray([0.0, 1.0, 2.0, 1.0, 0.0])
  params = models.init_params(model, jax.random.key(5), (2, 2, 2), jnp.float64)
  apply_fn = lambda p, x: model.apply({"params": p}, x)
  fit = kkt.fit(apply_fn, params, images, labels, form="multiclass", chunk=2)
  margins = lambda p: victim.margins(apply_fn(p, images), labels.astype(jnp.int32))
  flat, unravel = jax.flatten_util.ravel_pytree(params)
  a = np.asarray(jax.jacrev(lambda v: margins(unravel(v)))(flat))        # float[n, P]
  lambdas, _ = scipy.optimize.nnls(a.T, np.asarray(flat))
  r = np.asarray(flat) - a.T @ lambdas
  # As above: the same projection two ways, agreeing to κ(A)³·n·P·u of ‖θ‖².
  n, p = a.shape
  tol = 10 * np.linalg.cond(a) ** 3 * n * p * U * float(flat @ flat)
  assert fit.residual_total == pytest.approx(float(r @ r), abs=tol)
  per_tensor = unravel(jnp.asarray(r))
  for path, value in fit.residual.items():
    layer, name = path.split("/")
    assert value == pytest.approx(float(np.sum(np.asarray(per_tensor[layer][name]) ** 2)),
                                  abs=tol)


@pytest.mark.parametrize("kwargs, message", [
    (dict(form="nope"), "unknown KKT form"),
    (dict(form="multiclass"), "needs a victim with C > 1 outputs"),
    (dict(form="weight_decay"), "weight_decay > 0"),
])
def test_bad_forms_are_refused(x64, kwargs, message):
  apply_fn, images, labels, a = _affine()
  params = _params(np.ones(a.shape[1]), a.shape[1] - 1)
  with pytest.raises(ValueError, match=message):
    kkt.fit(apply_fn, params, images, labels, **kwargs)
  with pytest.raises(ValueError, match="labels must have shape"):
    kkt.fit(apply_fn, params, images, labels[:-1])


def test_pytorch_later_init_is_nn_linear_default():
  """`HaimMLP.later_init` "pytorch": U(±1/√fan_in) after the first layer; the first layer
  N(0, first_scale²) either way."""
  model = models.HaimMLP(widths=(1000, 1000), all_biases=True, later_init="pytorch")
  params = models.init_params(model, jax.random.key(0), (4, 4, 3))
  w = np.asarray(params["dense_1"]["kernel"], np.float64)
  bound = 1 / np.sqrt(1000)
  assert np.all(np.abs(w) <= bound) and np.abs(params["dense_1"]["bias"]).max() <= bound
  # The sample variance of N = 10⁶ draws of U(±a) (variance a²/3, kurtosis 9/5) has a
  # relative standard error √((9/5 − 1)/N) ≈ 9e-4; five of them bound the deviation.
  assert np.var(w) == pytest.approx(bound ** 2 / 3, rel=5 * np.sqrt(0.8 / w.size))
  flax = models.HaimMLP(widths=(1000, 1000), later_init="flax")
  w_flax = np.asarray(models.init_params(flax, jax.random.key(0), (4, 4, 3))["dense_1"]
                      ["kernel"], np.float64)
  # lecun_normal: variance 1/fan_in (a truncated normal rescaled to it; kurtosis < 3, so
  # the normal's relative standard error √(2/N) bounds the estimate's).
  assert np.var(w_flax) == pytest.approx(1 / 1000, rel=5 * np.sqrt(2 / w_flax.size))
  with pytest.raises(ValueError, match="unknown later_init"):
    models.init_params(models.HaimMLP(widths=(3,), later_init="torch"),
                       jax.random.key(0), (2, 2, 1))


def test_flow_time_runs_its_epochs_and_refuses_two_stopping_rules(x64):
  config = decoreco_cifar.get_config("smoke")
  v = config.victim
  v.flow_time, v.loss_threshold = 10.25, 0.0
  assert victim.training.gd_epochs(v) == 21        # ⌈10.25 / 0.5⌉
  task = _float64(data.make_task(config.data))
  model = models.build_model(v)
  params0 = victim.cache.initial_params(v, model, task.train_images.shape[1:], jnp.float64)
  _, report = victim.train_gd(model, params0, task, v)
  assert report.epochs == 21 and report.flow_time == pytest.approx(10.5)
  v.loss_threshold = 1e-4
  with pytest.raises(ValueError, match="two stopping rules"):
    victim.train_gd(model, params0, task, v)
  v.flow_time, v.loss_threshold = -1.0, 0.0
  with pytest.raises(ValueError, match="must be positive"):
    victim.training.gd_epochs(v)


def test_haim_et_al_s_recipe_leaves_the_smaller_kkt_residual(x64):
  """At :smoke, the adopted recipe (PyTorch's later-layer initialisation) against Flax's:
  the same data, seed and training; the first layer's unexplained fraction is smaller."""
  config = decoreco_cifar.get_config("smoke")
  task = _float64(data.make_task(config.data))
  first = {}
  for init in ("pytorch", "flax"):
    config.victim.later_init = init
    model = models.build_model(config.victim)
    params0 = victim.cache.initial_params(config.victim, model, task.train_images.shape[1:],
                                          jnp.float64)
    params, _ = victim.train_gd(model, params0, task, config.victim)
    apply_fn = lambda p, x, model=model: model.apply({"params": p}, x)
    fit = kkt.fit(apply_fn, params, task.train_images, task.train_labels)
    first[init] = fit.relative[fit.first_layer]
  assert decoreco_cifar.get_config("smoke").victim.later_init == "pytorch"
  assert first["pytorch"] < first["flax"]


def test_a_run_warns_when_the_premise_does_not_hold(x64, caplog):
  """`decoreco.kkt_premise`, which every DecoReco run calls (its registry entry's premise),
  and the warning the runner adds at the calibrated threshold (`power.premise_warning`): an
  untrained θ* (the first layer a random N(0, 1e-4²) draw of D·w entries, against the n
  rank-one directions x_i δ_iᵀ that the training images' gradients span there, so nearly
  all of it unexplained) is warned about; the trained one is not. The threshold comes from
  a calibration table written here: one cell recovering at a first-layer fraction of 0.5,
  one failing above it (`power.premise_threshold` then derives 0.5; the trained :smoke θ*
  lies below it, the untrained one near 1)."""
  table = {"premise_threshold": power.premise_threshold(
      [{"unexplained": 0.5, "recovered": 3, "start": 0},
       {"unexplained": 0.95, "recovered": 0, "start": 0}])}
  assert table["premise_threshold"]["threshold"] == 0.5
  config = decoreco_cifar.get_config("smoke")
  task = _float64(data.make_task(config.data))
  model = models.build_model(config.victim)
  params0 = victim.cache.initial_params(config.victim, model, task.train_images.shape[1:],
                                        jnp.float64)
  trained, _ = victim.train_gd(model, params0, task, config.victim)
  for params, warned in ((params0, True), (trained, False)):
    caplog.clear()
    target = victim.Victim(model, params, config.victim, {})
    with caplog.at_level("INFO"):
      fit = decoreco.kkt_premise(target, config.attack, task, jnp.float64)
    first = fit.relative[fit.first_layer]
    warning = power.premise_warning(fit.to_json(), table=table)
    assert (first > 0.5) == warned == (warning is not None), first
    if warned:
      assert f"{first:.2f} of this θ*'s first layer is unexplained" in warning
    assert "KKT premise" in caplog.text
  assert power.premise_warning(fit.to_json(), table={}) is None   # no calibration: none
