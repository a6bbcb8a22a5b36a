"""Fused DecoReco value and gradient for the Haim MLP against autodiff of the reference loss."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from trdr import models
from trdr.attacks import decoreco, kkt_mlp

ALPHA = 20.0
WEIGHT_DECAY = 0.3
SHAPE = (6, 6, 3)
# float64, fused against autodiff: both sum the same products of a network with 108 inputs
# and widths ≤ 7 (a few hundred terms per entry) in different orders, ~√N·ε ≈ 1e-15
# relative (ε = 2^-52). The Gram form's loss is a difference of terms up to ~10× ||R||² here
# (R is of the size of cθ: the candidates are far from a KKT point), so ≲ 1e-13 for it; 1e-10
# leaves > 1e3 of margin, while a wrong or missing term is an O(1) relative error (another α
# alone moves the gradients by > 1e-4: test_gradients_are_sensitive_to_alpha_and_the_residual).
RTOL_F64 = 1e-10


def _rel_err(a, b):
  a, b = ravel_pytree(a)[0], ravel_pytree(b)[0]
  return float(jnp.linalg.norm(a - b) / jnp.linalg.norm(b))


def _problem(widths, all_biases, m=6, seed=0):
  """θ of a small one-output Haim MLP (float64), candidates with some pixels outside
  [−1, 1], multipliers with some below λ_min, labels −1 then +1."""
  model = models.HaimMLP(widths=widths, activation=decoreco.relu_sigmoid_backward(ALPHA),
                         all_biases=all_biases, first_scale=0.5)
  params = models.init_params(model, jax.random.key(seed), SHAPE, jnp.float64)
  rng = np.random.default_rng(seed)
  images = jnp.asarray(0.8 * rng.normal(size=(m, *SHAPE)))
  lambdas = jnp.asarray(rng.uniform(-0.1, 1.0, size=m)).at[:2].set([-0.05, 0.02])
  labels = jnp.asarray(np.where(np.arange(m) < m // 2, -1.0, 1.0))
  return model, params, images, lambdas, labels


def _autodiff(model, form):
  loss = functools.partial(decoreco.stationarity_loss,
                           apply_fn=lambda p, x: model.apply({"params": p}, x), form=form,
                           weight_decay=WEIGHT_DECAY)
  return jax.jit(jax.value_and_grad(loss, argnums=(1, 2)))


@pytest.mark.parametrize("form", ["binary", "weight_decay"])
@pytest.mark.parametrize("all_biases", [False, True])
# Depth 2 is slow (setup.cfg): depths 1 and 3 keep the property in the fast tier.
@pytest.mark.parametrize("widths", [(7,), pytest.param((7, 5), marks=pytest.mark.slow),
                                    (7, 5, 4)])
def test_value_and_grad_match_autodiff(x64, widths, all_biases, form):
  model, params, images, lambdas, labels = _problem(widths, all_biases)
  # Both priors are active, so their terms are checked too.
  assert jnp.any(jnp.abs(images) > 1) and jnp.any(lambdas < 0.05)
  scale = 1.0 if form == "binary" else WEIGHT_DECAY
  fused = jax.jit(functools.partial(kkt_mlp.value_and_grad, alpha=ALPHA, scale=scale))
  value, (grad_x, grad_lambdas) = fused(params, images, lambdas, labels)
  ref_value, (ref_x, ref_lambdas) = _autodiff(model, form)(params, images, lambdas, labels)
  assert value.dtype == grad_x.dtype == grad_lambdas.dtype == jnp.float64
  assert grad_x.shape == images.shape and grad_lambdas.shape == lambdas.shape
  assert abs(float(value - ref_value)) < RTOL_F64 * abs(float(ref_value))
  assert _rel_err(grad_x, ref_x) < RTOL_F64
  assert _rel_err(grad_lambdas, ref_lambdas) < RTOL_F64


@pytest.mark.parametrize("gram", [(False, False, False), (True, True, True)])
def test_direct_and_gram_forms_match_autodiff(x64, gram):
  """Every layer in each form (the default picks per layer by FLOPs, `gram_layers`).

  Tolerance: `RTOL_F64`. The Gram form's loss is a difference c²||K||² − 2c(…) + Σ Γ∘M,
  whose error is ε times its largest term over ||R||², a factor O(1–10) here."""
  model, params, images, lambdas, labels = _problem((7, 5, 4), True)
  fused = jax.jit(functools.partial(kkt_mlp.value_and_grad, alpha=ALPHA, scale=WEIGHT_DECAY,
                                    gram=gram))
  value, (grad_x, grad_lambdas) = fused(params, images, lambdas, labels)
  ref_value, (ref_x, ref_lambdas) = _autodiff(model, "weight_decay")(
      params, images, lambdas, labels)
  assert abs(float(value - ref_value)) < RTOL_F64 * abs(float(ref_value))
  assert _rel_err(grad_x, ref_x) < RTOL_F64 and _rel_err(grad_lambdas, ref_lambdas) < RTOL_F64


def test_gram_form_where_it_is_cheaper():
  """Haim et al.'s MLP: the Gram form for the first layer at paper size (m = 1000) and for
  both layers at the CPU sizes (m ≤ 200); the direct form everywhere once m ≫ the widths."""
  widths = (3072, 1000, 1000)
  assert kkt_mlp.gram_layers(1000, widths) == (True, False)
  assert kkt_mlp.gram_layers(200, widths) == (True, True)
  assert kkt_mlp.gram_layers(101, widths) == (True, True)
  assert kkt_mlp.gram_layers(5000, widths) == (False, False)
  with pytest.raises(ValueError, match="m ≥ 1"):
    kkt_mlp.gram_layers(0, widths)


def test_odd_number_of_candidates(x64):
  """m odd: the blocked Gram matrices (`kkt_mlp._gram`) split rows unevenly."""
  model, params, images, lambdas, labels = _problem((7, 5), False, m=5)
  value, (grad_x, grad_lambdas) = jax.jit(functools.partial(
      kkt_mlp.value_and_grad, alpha=ALPHA))(params, images, lambdas, labels)
  ref_value, (ref_x, ref_lambdas) = _autodiff(model, "binary")(params, images, lambdas, labels)
  assert abs(float(value - ref_value)) < RTOL_F64 * abs(float(ref_value))
  assert _rel_err(grad_x, ref_x) < RTOL_F64 and _rel_err(grad_lambdas, ref_lambdas) < RTOL_F64


def test_gradients_are_sensitive_to_alpha_and_the_residual(x64):
  """The comparison can fail: another α (second-order terms) or the prior alone differ."""
  model, params, images, lambdas, labels = _problem((7, 5), True)
  _, (ref_x, ref_lambdas) = _autodiff(model, "binary")(params, images, lambdas, labels)
  _, (wrong_x, wrong_lambdas) = jax.jit(functools.partial(
      kkt_mlp.value_and_grad, alpha=1.1 * ALPHA))(params, images, lambdas, labels)
  assert _rel_err(wrong_x, ref_x) > 1e-4 and _rel_err(wrong_lambdas, ref_lambdas) > 1e-4
  prior_x, prior_lambdas = jax.jit(jax.grad(decoreco.prior_penalty, argnums=(0, 1)))(
      images, lambdas)
  assert _rel_err(prior_x, ref_x) > 1e-2 and _rel_err(prior_lambdas, ref_lambdas) > 1e-2


def test_float32(x64):
  """The fused form in float32 (its inputs rounded to float32) against autodiff in float64.

  Tolerance: rounding the inputs to float32 and the float32 sums (108 terms per
  pre-activation) move each pre-activation z by ~√108·u·|z| ≈ 6e-7·|z| (u = 2^-24,
  random-signed roundings); s(αz) = sigmoid(αz) moves by at most α/4 = 5 times that, so by
  ≲ 5e-5 at the largest |z| ≈ 14 of this problem, and every other factor is a product of
  O(1) numbers rounded at u. So 1e-4 relative bounds the float32 error, while a wrong or
  missing term is an O(0.1–1) relative error.
  """
  model, params, images, lambdas, labels = _problem((7, 5), False)
  to32 = lambda t: jax.tree.map(lambda a: a.astype(jnp.float32), t)
  value, (grad_x, grad_lambdas) = jax.jit(functools.partial(
      kkt_mlp.value_and_grad, alpha=ALPHA))(to32(params), *to32((images, lambdas, labels)))
  assert value.dtype == grad_x.dtype == grad_lambdas.dtype == jnp.float32
  ref_value, (ref_x, ref_lambdas) = _autodiff(model, "binary")(params, images, lambdas, labels)
  assert abs(float(value - ref_value)) < 1e-4 * abs(float(ref_value))
  assert _rel_err(grad_x, ref_x) < 1e-4 and _rel_err(grad_lambdas, ref_lambdas) < 1e-4


def test_unsupported_params_raise(x64):
  model, params, images, lambdas, labels = _problem((7, 5), True)
  assert kkt_mlp.supports(params)
  fused = functools.partial(kkt_mlp.value_and_grad, alpha=ALPHA)
  multi = models.init_params(model.clone(num_outputs=3), jax.random.key(0), SHAPE,
                             jnp.float64)
  one_hidden = models.init_params(models.OneHidden(width=7), jax.random.key(0), SHAPE,
                                  jnp.float64)
  mismatched = {**params, "dense_1": {"kernel": jnp.zeros((6, 5))}}
  for bad, match in ((multi, "one output"), (one_hidden, "HaimMLP layers"),
                     (mismatched, "dense_1")):
    assert not kkt_mlp.supports(bad)
    with pytest.raises(ValueError, match=match):
      fused(bad, images, lambdas, labels)
  with pytest.raises(ValueError, match="pixels"):
    fused(params, images[:, :5], lambdas, labels)
  with pytest.raises(ValueError, match="shape"):
    fused(params, images, lambdas[:-1], labels)
  with pytest.raises(ValueError, match="alpha"):
    kkt_mlp.value_and_grad(params, images, lambdas, labels, alpha=0.0)
  with pytest.raises(ValueError, match="one boolean per hidden layer"):
    fused(params, images, lambdas, labels, gram=(True,))
