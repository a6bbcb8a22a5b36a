"""Fused DecoReco value and gradient for the ConvNet against autodiff of the reference loss."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from trdr import models, victim
from trdr.attacks import decoreco, kkt_cnn
from trdr.configs import decoreco_cnn

ALPHA = 20.0
WEIGHT_DECAY = 0.3
SHAPE = (8, 8, 3)
# float64, fused against autodiff (forward over reverse, the CNN config's order): both sum
# the same products in other orders, each entry a sum of at most a few hundred terms (a
# 3 × 3 window over ≤ 5 channels, a map of 8 × 8 positions, 4 samples), whose rounding
# errors grow like √N · ε ≈ 4e-15 relative (ε = 2^-52); 1e-10 leaves > 1e4 of margin, while
# a wrong or missing term (a flipped kernel, the max's routing, the second derivative's
# α σ'(αz)) is an O(0.1–1) relative error.
RTOL_F64 = 1e-10


def _rel_err(a, b):
  a, b = ravel_pytree(a)[0], ravel_pytree(b)[0]
  return float(jnp.linalg.norm(a - b) / jnp.linalg.norm(b))


def _problem(channels, pool, all_biases, m=4, seed=1):
  """θ of a small one-output ConvNet (float64), candidates with some pixels outside
  [−1, 1], multipliers with some below λ_min, labels −1 then +1."""
  model = models.ConvNet(channels=channels, pool=pool, first_scale=0.5, all_biases=all_biases)
  params = models.init_params(model, jax.random.key(seed), SHAPE, jnp.float64)
  rng = np.random.default_rng(seed)
  images = jnp.asarray(0.8 * rng.normal(size=(m, *SHAPE)))
  lambdas = jnp.asarray(rng.uniform(-0.1, 1.0, size=m)).at[:2].set([-0.05, 0.02])
  labels = jnp.asarray(np.where(np.arange(m) < m // 2, -1.0, 1.0))
  return model, params, images, lambdas, labels


@pytest.mark.parametrize("form", ["binary", "weight_decay"])
@pytest.mark.parametrize("channels, pool, all_biases", [
    ((4, 5), True, False),          # the :cpu CNN's kind: average pooling, first bias only
    ((4, 5), "max", True),          # max pooling (ties after the ReLU), every bias
    ((3,), False, False),           # no pooling, one conv
    ((3, 4, 5), "max", False),      # three convs
])
def test_value_and_grad_match_autodiff(x64, channels, pool, all_biases, form):
  model, params, images, lambdas, labels = _problem(channels, pool, all_biases)
  # Both priors are active, so their terms are checked too.
  assert jnp.any(jnp.abs(images) > 1) and jnp.any(lambdas < 0.05)
  wd = WEIGHT_DECAY if form == "weight_decay" else 0.0
  fused = jax.jit(functools.partial(kkt_cnn.value_and_grad, alpha=ALPHA, pool=pool,
                                    scale=1.0 if form == "binary" else wd))
  value, (grad_x, grad_lambdas) = fused(params, images, lambdas, labels)
  reference = jax.jit(decoreco.autodiff_loss_and_grad(
      model, params, labels, form=form, weight_decay=wd, order="forward_over_reverse"))
  ref_value, (ref_x, ref_lambdas) = reference(images, lambdas, jnp.asarray(ALPHA),
                                              jnp.asarray(0.05))
  assert value.dtype == grad_x.dtype == grad_lambdas.dtype == jnp.float64
  assert grad_x.shape == images.shape and grad_lambdas.shape == lambdas.shape
  assert abs(float(value - ref_value)) < RTOL_F64 * abs(float(ref_value))
  assert _rel_err(grad_x, ref_x) < RTOL_F64
  assert _rel_err(grad_lambdas, ref_lambdas) < RTOL_F64


def test_the_attack_runs_the_fused_form_on_the_cnn_config(x64):
  """`decoreco.make_loss_and_grad` on configs/decoreco_cnn.py's victim (shrunk) takes the
  fused form (`decoreco.fused_cnn_applies`), and gives autodiff's numbers (attack.fused
  False) to `RTOL_F64`; a victim with input normalisation falls back to autodiff."""
  config = decoreco_cnn.get_config("smoke")
  model, params, images, lambdas, labels = _problem((4, 8), True, False)
  target = victim.Victim(model, params, config.victim, {})
  assert decoreco.fused_cnn_applies(target)
  fused = decoreco.make_loss_and_grad(target, config.attack, labels)
  config.attack.fused = False
  autodiff = decoreco.make_loss_and_grad(target, config.attack, labels)
  args = (images, lambdas, jnp.asarray(ALPHA), jnp.asarray(0.05))
  (value, grads), (ref_value, ref_grads) = (jax.jit(f)(*args) for f in (fused, autodiff))
  assert abs(float(value - ref_value)) < RTOL_F64 * abs(float(ref_value))
  for ours, theirs in zip(grads, ref_grads):
    assert _rel_err(ours, theirs) < RTOL_F64
  config.victim.input_shift = (0.5,)
  assert not decoreco.fused_cnn_applies(victim.Victim(model, params, config.victim, {}))


def test_other_parameters_and_settings_are_refused_by_name(x64):
  mlp = models.init_params(models.HaimMLP(widths=(4,)), jax.random.key(0), SHAPE)
  assert not kkt_cnn.supports(mlp)
  _, params, images, lambdas, labels = _problem((4,), True, False)
  assert kkt_cnn.supports(params)
  two = models.init_params(models.ConvNet(channels=(4,), num_outputs=2), jax.random.key(0),
                           SHAPE)
  with pytest.raises(ValueError, match="only one output"):
    kkt_cnn.value_and_grad(two, images, lambdas, labels, alpha=ALPHA)
  with pytest.raises(ValueError, match="unknown pool"):
    kkt_cnn.value_and_grad(params, images, lambdas, labels, alpha=ALPHA, pool="median")
  with pytest.raises(ValueError, match="alpha must be positive"):
    kkt_cnn.value_and_grad(params, images, lambdas, labels, alpha=0.0)
  with pytest.raises(ValueError, match="do not pool"):
    kkt_cnn.value_and_grad(params, images[:, :7], lambdas, labels, alpha=ALPHA)
