"""DP-SGD victims (`trdr.victim.dp_sgd`), their accounting (`trdr.victim.accounting`), the
ReRo bound (`trdr.evaluation.rero`) and the study (`trdr.studies.dp`) at :smoke."""

import functools
import math
import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest
import scipy.stats
from scipy import optimize

from trdr import data, models, victim
from trdr.attacks import prior_aware
from trdr.configs import bilevel_affine, decoreco_cifar
from trdr.configs import dp as dp_config
from trdr.evaluation import rero
from trdr.evaluation import ssim as ssim_lib
from trdr.runtime import files
from trdr.studies import dp
from trdr.victim import accounting, cache, dp_sgd

U64 = np.finfo(np.float64).eps / 2    # unit roundoff of float64
norm = scipy.stats.norm


def _gamma(k: int) -> float:
  """γ_k = k u / (1 − k u): the relative error bound of a k-term float64 sum (Higham)."""
  return k * U64 / (1 - k * U64)


# ------------------------------------------------------------------ accounting


def _gdp_delta(eps: float, mu: float) -> float:
  """Dong, Roth and Su (2019), Cor. 2.13: δ(ε) of μ-GDP, written here from the paper (not
  `accounting.gdp_delta`), so the comparison below is independent of trdr's code."""
  return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)


def test_pld_epsilon_equals_the_gdp_closed_form():
  """T = 100 full-batch steps at σ = 2 are μ-GDP with μ = √T/σ = 5; ε at δ = 1e-5 solves
  the GDP profile δ(ε) = δ (brentq). The PLD accountant is pessimistic: every privacy loss
  rounded up by at most its discretisation Δ, so δ_PLD(ε) ≤ δ(ε − Δ) + η (η: the tail mass
  it truncates to infinity, ≤ 2 e^{-50}) and δ_PLD(ε) ≥ δ(ε): ε ≤ ε_PLD ≤ ε + Δ, up to the
  float64 sums over its ≈ N = 20 μ/Δ probabilities (its grid spans ±10 μ of losses, where
  the Gaussian tail is e^{-50}): an absolute error ≤ N u on δ_PLD, i.e. N u / |δ'(ε)| on ε,
  with δ'(ε) = −e^ε Φ(−ε/μ − μ/2) (the profile's derivative)."""
  s = accounting.DPSettings(noise_multiplier=2.0, clip_norm=1.0, steps=100, lr=0.1,
                            delta=1e-5)
  mu = math.sqrt(100) / 2.0
  assert accounting.gdp_mu(s) == mu
  exact = optimize.brentq(lambda e: _gdp_delta(e, mu) - 1e-5, 0.0, 200.0, xtol=1e-13)
  slope = math.exp(exact) * norm.cdf(-exact / mu - mu / 2)
  rounding = (20 * mu / accounting.DISCRETIZATION) * U64 / slope + 2 * math.exp(-50) / slope
  found = accounting.epsilon(s)
  assert exact - rounding <= found <= exact + accounting.DISCRETIZATION + rounding, (
      found, exact, rounding)
  # trdr's own profile (used by the bound and the calibration) is the same function: its
  # log-domain form differs from the paper's by rounding only (relative 1e-12 allows a
  # cancellation of three digits at δ = 1e-5 on top of the 1e-15 of each term).
  np.testing.assert_allclose(accounting.gdp_delta(exact, mu), 1e-5, rtol=1e-10)


def test_calibrated_noise_gives_the_target_epsilon():
  """σ from `noise_multiplier` (the GDP closed form for full batch) has the PLD ε of the
  target: from above by at most Δ (pessimistic PLD), from below by the rounding of the
  previous test (its bound at μ ≈ 2 is below 1e-6)."""
  sigma = accounting.noise_multiplier(10.0, 1e-5, 100)
  found = accounting.epsilon(accounting.DPSettings(sigma, 1.0, 100, 0.1, 1.0, 1e-5))
  assert 10.0 - 1e-6 <= found <= 10.0 + accounting.DISCRETIZATION + 1e-6
  # Subsampling amplifies privacy: the same σ over the same steps at q = 0.1 has a smaller ε.
  sub = accounting.DPSettings(sigma, 1.0, 100, 0.1, 0.1, 1e-5)
  assert accounting.epsilon(sub) < found
  with pytest.raises(ValueError, match="not μ-GDP"):
    accounting.gdp_mu(sub)


def test_no_noise_or_no_clipping_has_no_finite_epsilon():
  for s in (accounting.DPSettings(0.0, 1.0, 10, 0.1), accounting.DPSettings(1.0, None, 10, 0.1)):
    assert accounting.epsilon(s) == math.inf and accounting.gdp_mu(s) == math.inf
    assert np.all(accounting.privacy_profile(s, [0.0, 1.0]) == 1.0)


@pytest.mark.parametrize("field, value, message", [
    ("noise_multiplier", -1.0, "noise_multiplier must be"),
    ("clip_norm", 0.0, "clip_norm must be > 0 or None"),
    ("steps", 0, "steps must be an integer ≥ 1"),
    ("lr", 0.0, "lr must be > 0"),
    ("sampling_rate", 1.5, r"sampling_rate must be in \(0, 1\]"),
    ("delta", 1.0, r"delta must be in \(0, 1\)")])
def test_a_bad_recipe_is_refused_by_name(field, value, message):
  recipe = {"noise_multiplier": 1.0, "clip_norm": 1.0, "steps": 10, "lr": 0.1}
  with pytest.raises(ValueError, match=message):
    accounting.DPSettings(**{**recipe, field: value})


def test_victim_dp_section_is_checked():
  v = ml_collections.ConfigDict({"dp": {"noise_multiplier": 1.0, "steps": 10, "lr": 0.1,
                                        "clip": 1.0}, "load": None})
  with pytest.raises(ValueError, match=r"unknown fields \['clip'\], missing fields "
                                       r"\['clip_norm'\]"):
    accounting.settings(v)
  v.dp = {"noise_multiplier": 1.0, "steps": 10, "lr": 0.1, "clip_norm": 1.0}
  v.load = "model.npz"
  with pytest.raises(ValueError, match="victim.load reads it from model.npz"):
    accounting.settings(v)
  assert accounting.settings(ml_collections.ConfigDict({"arch": "affine"})) is None


# ------------------------------------------------------------------ the ReRo bound


def test_gdp_bound_is_the_closed_form_with_its_limits():
  """Φ(Φ⁻¹(κ) + μ) written here with scipy.stats.norm (another code path than
  scipy.special's ndtr/ndtri): both are accurate to a few ulp, so rtol 1e-12. μ = 0 gives
  κ, μ = ∞ gives 1, and the bound grows with μ and with κ."""
  kappa = np.array([1e-4, 0.02, 0.3, 0.9])
  for mu in (0.0, 0.27, 2.0, 10.6):
    np.testing.assert_allclose(rero.gdp_bound(kappa, mu), norm.cdf(norm.ppf(kappa) + mu),
                               rtol=1e-12)
  np.testing.assert_allclose(rero.gdp_bound(kappa, 0.0), kappa, rtol=1e-12)
  assert np.all(rero.gdp_bound(kappa, np.inf) == 1.0)
  mus = np.linspace(0.0, 6.0, 61)
  assert np.all(np.diff(rero.gdp_bound(0.02, mus)) > 0)
  assert np.all(np.diff(rero.gdp_bound(np.linspace(0.01, 0.9, 30), 1.0)) > 0)
  assert rero.gdp_bound(0.0, 3.0) == 0.0 and rero.gdp_bound(1.0, 3.0) == 1.0
  with pytest.raises(ValueError, match="kappa must be a probability"):
    rero.gdp_bound(1.2, 1.0)
  with pytest.raises(ValueError, match="mu must be ≥ 0"):
    rero.gdp_bound(0.1, -1.0)


@pytest.mark.parametrize("mu", [0.5, 2.0])
def test_profile_bound_on_the_gdp_profile_meets_the_closed_form(mu):
  """min_ε δ(ε) + e^ε κ over μ-GDP's profile is Φ(Φ⁻¹(κ) + μ), reached at ε* with
  Φ(−ε*/μ − μ/2) = κ (ε* ≥ 0 here since Φ⁻¹(κ) ≤ −μ/2). Every ε gives a bound ≥ the exact
  one, so the grid's minimum is never below it (up to the profile's rounding, relative
  1e-12 of terms ≤ 1); it exceeds it by at most h²/8 · max g'' near ε* (g(ε) = δ(ε) + e^ε κ,
  g'' = e^ε(κ − Φ(b)) + e^ε φ(b)/μ, b = −ε/μ − μ/2), h the grid step."""
  kappa = 0.02
  eps = np.linspace(0.0, 20.0, 20_001)
  h = eps[1] - eps[0]
  deltas = np.array([max(0.0, _gdp_delta(e, mu)) for e in eps])
  exact = float(rero.gdp_bound(kappa, mu))
  found = float(rero.profile_bound(kappa, eps, deltas))
  b = -eps / mu - mu / 2
  g2 = np.exp(eps) * (kappa - norm.cdf(b)) + np.exp(eps) * norm.pdf(b) / mu
  star = int(np.argmin(np.abs(norm.cdf(b) - kappa)))
  curvature = float(np.max(np.abs(g2[max(star - 2, 0):star + 3])))
  assert exact - 1e-12 <= found <= exact + h * h / 8 * curvature + 1e-12, (found, exact)
  with pytest.raises(ValueError, match="1-D of one length"):
    rero.profile_bound(kappa, eps, deltas[:-1])


def test_guesses_baseline_is_the_union_bound():
  np.testing.assert_array_equal(rero.guesses_baseline([0.01, 0.2], 10), [0.1, 1.0])
  with pytest.raises(ValueError, match="m .answers per target. must be an integer ≥ 1"):
    rero.guesses_baseline(0.1, 0)


def test_baseline_counts_the_best_guess_leave_one_out():
  """A prior of 4 copies of one CIFAR image and 24 U(0, 1) noise images: each copy's SSIM
  with the others is 1, every other pair is far below the level (checked here with
  dm-pix's SSIM, another engine than the all-pairs one `baseline` uses, on every pair:
  none is within 0.05 of the level, more than float32's rounding of either). A copy
  covers 3 of the 27 others; the mean image's count is computed the same way."""
  task = data.make_task(bilevel_affine.get_config("smoke").data)
  image = np.asarray(task.test_images[0], np.float32)
  noise = np.asarray(jax.random.uniform(jax.random.key(0), (24, *image.shape)), np.float32)
  prior = np.concatenate([np.repeat(image[None], 4, axis=0), noise])
  total = prior.shape[0]
  pair = np.asarray(jax.vmap(lambda a: jax.vmap(lambda b: ssim_lib.ssim(a, b))(prior))(prior))
  off = ~np.eye(total, dtype=bool)
  assert np.all(np.abs(pair[off] - 0.4) > 0.05)
  mean_ssim = np.array([float(ssim_lib.ssim(prior.mean(axis=0), b)) for b in prior])
  assert np.all(np.abs(mean_ssim - 0.4) > 0.05)
  found = rero.baseline(prior, level=0.4)
  hits = (pair >= 0.4) & off
  expected = max(hits.sum(axis=1).max() / (total - 1), (mean_ssim >= 0.4).sum() / total)
  assert found.kappa == pytest.approx(expected, abs=1e-15) and found.kappa >= 3 / (total - 1)
  assert found.mean_pairwise == pytest.approx(hits.sum() / (total * (total - 1)))
  assert found.kappa <= found.upper <= 1
  with pytest.raises(ValueError, match="pixels in"):
    rero.baseline(prior * 2)
  with pytest.raises(ValueError, match="N ≥ 2"):
    rero.baseline(prior[:1])


def test_exceeds_uses_the_clopper_pearson_lower_limit():
  """All n of n: the one-sided lower limit is (1 − c)^(1/n) (the Clopper–Pearson closed
  form at x = n); none of n never exceeds any bound."""
  n, c = 10, 0.95
  lower = (1 - c) ** (1 / n)
  assert rero.exceeds(n, n, lower - 1e-9, c) and not rero.exceeds(n, n, lower + 1e-9, c)
  assert not rero.exceeds(0, n, 0.0, c)
  with pytest.raises(ValueError, match="need 0 ≤ successes ≤ trials"):
    rero.exceeds(11, 10, 0.5)
  with pytest.raises(ValueError, match="bound must be in"):
    rero.exceeds(1, 10, 1.5)


# ------------------------------------------------------------------ DP-SGD training


def _task(config):
  task = data.make_task(config.data)
  return task._replace(**{k: np.asarray(getattr(task, k), np.float64) for k in (
      "train_images", "train_labels", "test_images", "test_labels")})


def _gd_config(config, steps: int, lr: float, loss: str = "bce"):
  v = config.victim.copy_and_resolve_references()
  v.loss, v.lr, v.max_epochs, v.loss_threshold = loss, lr, steps, 0.0
  v.flow_time, v.log_every, v.training = None, steps, "gd"
  return v


def test_affine_dp_victim_without_noise_or_clipping_is_the_gradient_descent_victim():
  """σ = 0, no clipping, q = 1: DP-SGD's step is `train_gd`'s, the per-example gradients
  (vmap) summed and divided by n where `train_gd` differentiates the mean: the same sums
  in another order. Error argument (float64): each logit z_i = x_iᵀw + b is a sum of
  D + 1 terms, so the two differ by ≤ γ_{D+1}(||x_i||₁ W + B) with W, B bounds on |w|, |b|
  along the run (|∂E/∂w_d| ≤ max|x| + wd|w_d| ≤ 1 + wd|w_d| for pixels in [0, 1] and
  |ℓ'| ≤ 1, so |w| ≤ |w0| + T·lr·(1 + wd W) stays below W = |w0|∞ + 2 T lr); ℓ' moves by
  ≤ |Δz|/4 (ℓ'' ≤ 1/4), each gradient entry by that times |x| ≤ 1, the n-term sum adds
  γ_n, the update ≤ 2u(W + lr). With lr ≤ 2/L (L = λ_max(X̃ᵀX̃)/(4n) + wd) a gradient step
  of the convex E is non-expansive, so the two runs differ after T steps by at most T
  times the per-step difference (in ‖·‖₂, √P times the entrywise one, two runs)."""
  config = bilevel_affine.get_config("smoke")
  with jax.enable_x64(True):
    task = _task(config)
    steps, lr = 20, 0.005
    v = _gd_config(config, steps, lr)
    model = models.build_model(v)
    theta0 = cache.initial_params(v, model, task.train_images.shape[1:], jnp.float64)
    plain, _ = victim.train_gd(model, theta0, task, v)
    v.dp = {"noise_multiplier": 0.0, "clip_norm": None, "steps": steps, "lr": lr}
    private, report = dp_sgd.train_dp(jax.random.key(0), model, theta0, task, v)
    diff = float(optax.tree.norm(jax.tree.map(lambda a, b: a - b, plain, private)))
  x = np.asarray(task.train_images).reshape(task.train_images.shape[0], -1)
  n, d = x.shape
  xt = np.concatenate([x, np.ones((n, 1))], axis=1)
  lipschitz = np.linalg.eigvalsh(xt @ xt.T / n).max() / 4 + v.weight_decay
  assert lr <= 2 / lipschitz            # the premise: a non-expansive step
  w_bound = float(np.abs(theta0["dense"]["kernel"]).max()) + 2 * steps * lr
  b_bound = float(np.abs(theta0["dense"]["bias"]).max()) + 2 * steps * lr
  dz = _gamma(d + 1) * (np.abs(x).sum(axis=1).max() * w_bound + b_bound)
  per_entry = lr * (dz / 4 + 8 * U64 + _gamma(n)) + 2 * U64 * (w_bound + lr)
  tolerance = steps * 2 * math.sqrt(d + 1) * per_entry
  assert diff <= tolerance, (diff, tolerance)
  assert report.epsilon == math.inf and report.clipped_fraction == 0.0


def test_mlp_dp_step_without_noise_or_clipping_is_the_gradient_descent_step():
  """One step of Haim et al.'s MLP (ReLU, :smoke widths) from θ0: DP-SGD's summed
  per-example gradients against `train_gd`'s batch gradient. The MLP is not convex, so the
  argument is one step's: every entry of both gradients is a sum over paths through the
  layers with identical ReLU masks (checked: no pre-activation is within its rounding of
  0), each of K = D + widths + n + 8 terms at most, so each differs from the exact one by
  ≤ γ_K times the same sums taken of absolute values, which the linear network on |θ|,
  |x| (ReLU replaced by the identity, which dominates it) gives as its gradient A; ℓ'
  moves by ≤ |Δz|/4 ≤ γ_K F/4 (F: that network's output), so per example ≤ γ_K(1 + F/4)A;
  two computations, and the update's rounding 2u(|θ0| + lr|g|)."""
  config = decoreco_cifar.get_config("smoke")
  with jax.enable_x64(True):
    task = _task(config)
    v = _gd_config(config, 1, 0.5)
    model = models.build_model(v)
    theta0 = cache.initial_params(v, model, task.train_images.shape[1:], jnp.float64)
    plain, _ = victim.train_gd(model, theta0, task, v)
    v.dp = {"noise_multiplier": 0.0, "clip_norm": None, "steps": 1, "lr": 0.5}
    private, _ = dp_sgd.train_dp(jax.random.key(0), model, theta0, task, v)
    x, y = jnp.asarray(task.train_images), jnp.asarray(task.train_labels)
    n = x.shape[0]
    linear = model.clone(activation=lambda z: z)
    absolute = jax.tree.map(jnp.abs, theta0)
    out = lambda p, xs: linear.apply({"params": p}, xs)
    forward = out(absolute, jnp.abs(x))                               # F_i
    paths = jax.vmap(jax.grad(lambda p, xi: out(p, xi[None])[0]), (None, 0))(
        absolute, jnp.abs(x))                                         # A_i
    _, pre = model.apply({"params": theta0}, x, capture_intermediates=True)
    _, pre_abs = linear.apply({"params": absolute}, jnp.abs(x), capture_intermediates=True)
    grad = jax.grad(lambda p: victim.GD_LOSSES["bce"](model.apply({"params": p}, x), y))(theta0)
    k = x[0].size + sum(v.widths) + n + 8
    for name in ("dense_0", "dense_1"):   # the ReLU masks cannot flip under rounding
      z, bound = pre["intermediates"][name]["__call__"][0], pre_abs["intermediates"][name][
          "__call__"][0]
      assert bool(jnp.all(jnp.abs(z) > _gamma(k) * bound)), name
    scale = _gamma(k) * (1 + forward / 4)
    tolerance = jax.tree.map(
        lambda a, t, g: 2 * 0.5 * (jnp.tensordot(scale, a, axes=1) / n + _gamma(n) * jnp.mean(
            a, axis=0)) + 2 * U64 * (jnp.abs(t) + 0.5 * jnp.abs(g)), paths, theta0, grad)
    excess = jax.tree.map(lambda a, b, t: float(jnp.max(jnp.abs(a - b) - t)), plain, private,
                          tolerance)
    assert max(jax.tree.leaves(excess)) <= 0, excess


def test_noise_has_the_scale_sigma_c_over_n():
  """One full-batch step at a large σ: θ1 − (1 − lr·wd)θ0 = −lr (Σ clipped g_i + N(0,
  σ²C² I))/n, so its P entries have std lr σ C / n, up to the clipped sum's share (it moves
  the std by at most its rms, ≤ lr C/√P since ||Σ clipped g_i / n|| ≤ C: a relative
  n/(σ√P)) and the sampling error of a standard deviation from P draws (sd ≈ 1/√(2P):
  five of them)."""
  config = bilevel_affine.get_config("smoke")
  sigma, clip, lr = 1000.0, 0.5, 0.01
  with jax.enable_x64(True):
    task = _task(config)
    v = config.victim.copy_and_resolve_references()
    v.dp = {"noise_multiplier": sigma, "clip_norm": clip, "steps": 1, "lr": lr}
    model = models.build_model(v)
    theta0 = cache.initial_params(v, model, task.train_images.shape[1:], jnp.float64)
    theta1, report = dp_sgd.train_dp(jax.random.key(3), model, theta0, task, v)
  step = np.concatenate([np.ravel(np.asarray(a) - (1 - lr * v.weight_decay) * np.asarray(b))
                         for a, b in zip(jax.tree.leaves(theta1), jax.tree.leaves(theta0))])
  n, p = task.train_images.shape[0], step.size
  expected = lr * sigma * clip / n
  assert abs(step.std() / expected - 1) <= 5 / math.sqrt(2 * p) + n / (sigma * math.sqrt(p))
  assert report.clipped_fraction == 1.0        # every image's gradient is above C = 0.5
  assert report.mu == pytest.approx(1 / sigma, rel=1e-15)


@pytest.mark.parametrize("microbatch_size", [dp_sgd.MICROBATCH_SIZE, None])
def test_clipping_bounds_each_norm_and_sums_the_clipped_gradients(microbatch_size):
  """jax-privacy's clipping as `dp_sgd` calls it: per example g · min(1, C/||g||) over all
  leaves, the sum of those, a weight 0 removing an example, C = inf clipping nothing; one
  example at a time (trdr's) and all vmapped (`make benchmark-dp`'s other way).
  float32: one division and a few sums, rtol 1e-6."""
  clipped_sum = functools.partial(dp_sgd.clipped_sum, microbatch_size=microbatch_size)
  apply_fn = lambda p, x: x.reshape(x.shape[0], -1) @ p["w"] + p["b"]
  mse = lambda logits, labels: jnp.mean(0.5 * (logits - labels) ** 2)
  params = {"w": jnp.zeros(2), "b": jnp.zeros(())}
  x = jnp.array([[3.0, 4.0], [0.3, 0.4]]).reshape(2, 2, 1, 1)
  y = jnp.array([-1.0, -1.0])
  # ∇ of ½(wᵀx + b − y)² at 0: (x, 1)·(0 − y) = (x, 1); norms √26 and √1.25.
  each = dp_sgd.clipped_each(apply_fn, mse, params, x, y, 1.0)
  norms = np.sqrt(np.asarray(each["w"]) ** 2 @ np.ones(2) + np.asarray(each["b"]) ** 2)
  np.testing.assert_allclose(norms, [1.0, 1.0], rtol=1e-6)
  np.testing.assert_allclose(each["w"][0], np.array([3.0, 4.0]) / math.sqrt(26), rtol=1e-6)
  summed, raw = clipped_sum(apply_fn, mse, params, x, y, jnp.ones(2), 2.0)
  np.testing.assert_allclose(raw, [math.sqrt(26), math.sqrt(1.25)], rtol=1e-6)
  np.testing.assert_allclose(summed["w"], 2 * np.array([3.0, 4.0]) / math.sqrt(26)
                             + np.array([0.3, 0.4]), rtol=1e-6)
  only_second, _ = clipped_sum(apply_fn, mse, params, x, y, jnp.array([0.0, 1.0]), 2.0)
  np.testing.assert_allclose(only_second["w"], [0.3, 0.4], rtol=1e-6)
  unclipped, _ = clipped_sum(apply_fn, mse, params, x, y, jnp.ones(2), jnp.inf)
  np.testing.assert_allclose(unclipped["w"], [3.3, 4.4], rtol=1e-6)


def test_poisson_subsampled_victim_trains_and_is_cached(tmp_path):
  """q < 1: the step samples each point with probability q; θ* is finite, its report
  holds the PLD ε (no μ: not GDP), and a second call reuses the saved θ*."""
  config = decoreco_cifar.get_config("smoke")
  config.victim.dp = {"noise_multiplier": 1.0, "clip_norm": 1.0, "steps": 5, "lr": 0.1,
                      "sampling_rate": 0.5, "delta": 1e-5}
  with jax.enable_x64(True):
    task = data.make_task(config.data)
    first = victim.load_or_train(config, task, str(tmp_path))
    again = victim.load_or_train(config, task, str(tmp_path))
  report = files.from_jsonable(first.metadata["report"])
  assert math.isfinite(report["epsilon"]) and math.isnan(report["mu"])
  jax.tree.map(np.testing.assert_array_equal, first.params, again.params)


def test_victim_metadata_is_unchanged_without_dp():
  """The cache key of every existing victim is what it was: no DP key without victim.dp
  (so saved θ* are reused), and a DP recipe is part of the key."""
  for config in (bilevel_affine.get_config("smoke"), decoreco_cifar.get_config("smoke")):
    task = data.make_task(config.data)
    meta = victim.metadata(config, task)
    assert not {"dp", "base_training"} & set(meta) and meta.get("training") != "dp_sgd"
    config.victim.dp = None
    assert victim.metadata(config, task) == meta
    config.victim.dp = {"noise_multiplier": 1.0, "clip_norm": 1.0, "steps": 10, "lr": 0.1}
    private = victim.metadata(config, task)
    assert private["training"] == "dp_sgd" and private["dp"]["noise_multiplier"] == 1.0
    config.victim.dp.noise_multiplier = 2.0
    assert victim.metadata(config, task) != private


# ------------------------------------------------------------------ preprocessing


def _saved_training_set(path, images, labels):
  np.savez(path, images=images, labels=labels.astype(np.int64))
  return str(path)


@pytest.mark.parametrize("mean_from", ["test", "train"])
def test_a_public_mean_leaves_every_other_input_unchanged(tmp_path, mean_from):
  """The DP victims' preprocessing depends on no training image: with the test split's
  mean (``data.mean_from`` "test", configs/dp.py's MLP), removing one training image
  leaves every other preprocessed input bit for bit as it was. The control: the training
  set's own mean (the knowledge study's) moves all of them, so the check can fail."""
  config = dp_config.get_config("smoke").victims.haim_mlp.data.copy_and_resolve_references()
  assert config.subtract_mean and config.mean_from == "test"   # the DP MLP's setting
  config.mean_from = mean_from
  drawn = data.make_task(config)
  pixels = drawn.to_pixels(drawn.train_images)
  tasks = []
  for keep, name in ((slice(None), "all"), (slice(1, None), "one_removed")):
    config.training_set = _saved_training_set(tmp_path / f"{name}.npz", pixels[keep],
                                              drawn.train_labels[keep])
    tasks.append(data.make_task(config))
  whole, removed = tasks
  same = np.array_equal(whole.train_images[1:], removed.train_images)
  assert same == (mean_from == "test")
  if mean_from == "test":
    np.testing.assert_array_equal(whole.test_images, removed.test_images)
    np.testing.assert_array_equal(whole.mean, removed.mean)


def test_an_unknown_mean_source_is_refused_by_name():
  config = dp_config.get_config("smoke").victims.haim_mlp.data.copy_and_resolve_references()
  config.mean_from = "partition"
  with pytest.raises(ValueError, match="data.mean_from must be one of"):
    data.make_task(config)


# ------------------------------------------------------------------ the prior-aware attack


def _tiny(seed: int, n: int = 6, k: int = 4, shape=(3, 3, 1)):
  """A tiny affine task: n − 1 known images, k candidates of label +1 (pixels U(−½, ½))."""
  rng = np.random.default_rng(seed)
  known = rng.uniform(-0.5, 0.5, (n - 1, *shape))
  labels = np.where(np.arange(n - 1) % 2 == 0, 1.0, -1.0)
  candidates = rng.uniform(-0.5, 0.5, (k, *shape))
  model = models.Affine()
  theta0 = models.init_params(model, jax.random.key(seed), shape, jnp.float64)
  apply_fn = lambda p, x: model.apply({"params": p}, x)
  return (apply_fn, victim.GD_LOSSES["bce"], theta0, jnp.asarray(known),
          jnp.asarray(labels), jnp.asarray(candidates), jnp.ones(k, jnp.float64))


def _recipe(sigma: float, steps: int = 5) -> prior_aware.Recipe:
  # C = 0.2 clips most gradients (||∇|| ≈ ½ ||x̃||, ||x̃|| ≈ 1 here): the clipped regime.
  return prior_aware.Recipe(lr=0.5, clip_norm=0.2, noise_multiplier=sigma, steps=steps,
                            weight_decay=1e-3)


def test_prior_aware_replay_is_the_dp_sgd_mechanism_and_its_scores_read_the_release():
  """`replay`'s mechanism is `train_dp`'s: on D⁻ ∪ {target} with the same key, the same
  θ_T (float64; the two sum the n clipped gradients in another order, a relative γ_n of
  the sum per step, carried over T = 5 steps of lr 0.5: 1e-12 absolute is ~10⁴ times
  that). Its scores are `scores_from_release`'s, which reads only θ_0 … θ_T, D⁻ and the
  candidates (the same sums, up to the rounding of R_t = n(θ_t − θ_{t+1})/η: n/η · u ·
  |θ| per entry, ≲ 1e-14, squared into scores of size ~1: 1e-9 relative covers it)."""
  with jax.enable_x64(True):
    apply_fn, loss, theta0, known, labels, cands, cand_labels = _tiny(0)
    recipe = _recipe(sigma=2.0)
    key = jax.random.key(7)
    scores, path = prior_aware.replay(apply_fn, loss, theta0, known, labels, cands,
                                      cand_labels, 2, key, recipe, trajectory=True)
    thetas = [theta0] + [jax.tree.map(lambda v, t=t: v[t], path) for t in range(recipe.steps)]
    released = prior_aware.scores_from_release(apply_fn, loss, thetas, known, labels, cands,
                                               cand_labels, recipe)
    np.testing.assert_allclose(released, scores, rtol=1e-9)
    images = jnp.concatenate([known, cands[2:3]])
    task = data.Task(images, jnp.concatenate([labels, cand_labels[:1]]), None, None,
                     images, jnp.concatenate([labels, cand_labels[:1]]), None, None, None)
    v = ml_collections.ConfigDict({"weight_decay": recipe.weight_decay, "training": "lbfgs",
                                   "dp": {"noise_multiplier": 2.0, "clip_norm": 0.2,
                                          "steps": 5, "lr": 0.5}})
    theta_star, _ = dp_sgd.train_dp(key, models.Affine(), theta0, task, v)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b[-1], rtol=0, atol=1e-12),
               theta_star, path)


def test_prior_aware_projection_changes_no_score_without_noise():
  """In the span of D⁻ and the candidates (`basis`, `project_params`) every forward pass
  and clipped gradient norm is the pixel space's, so at σ = 0 (no noise orthogonal to
  the span) the scores are equal: float64, a handful of ≤ 16-term sums per step, 1e-9
  relative is loose by orders of magnitude."""
  recipe, key = _recipe(sigma=0.0), jax.random.key(0)
  with jax.enable_x64(True):
    # 5 known images and 4 candidates in 16 pixels: a proper subspace of 9 dimensions.
    apply_fn, loss, theta0, known, labels, cands, cand_labels = _tiny(1, shape=(4, 4, 1))
    q = prior_aware.basis(np.concatenate([known, cands]))
    assert q.shape == (9, 16)
    pixel = prior_aware.replay(apply_fn, loss, theta0, known, labels, cands, cand_labels, 1,
                               key, recipe)
    projected = prior_aware.replay(
        apply_fn, loss, prior_aware.project_params(theta0, q),
        jnp.asarray(prior_aware.project_images(np.asarray(known), q)), labels,
        jnp.asarray(prior_aware.project_images(np.asarray(cands), q)), cand_labels, 1, key,
        recipe)
  # The target's score is only rounding: T·P·(n/η · u · max|θ|)² ≲ 5·17·(12·1e-16·10)²
  # ≈ 1e-26 in either space; 1e-20 absolute covers it.
  np.testing.assert_allclose(projected, pixel, rtol=1e-9, atol=1e-20)


def _success(sigma: float, trials: int, k: int, steps: int = 5) -> np.ndarray:
  with jax.enable_x64(True):
    apply_fn, loss, theta0, known, labels, cands, cand_labels = _tiny(2, k=k)
    one = lambda target, key: prior_aware.replay(apply_fn, loss, theta0, known, labels,
                                                 cands, cand_labels, target, key,
                                                 _recipe(sigma, steps))
    targets = jnp.arange(trials) % k
    scores = jax.jit(jax.vmap(one))(targets, jax.random.split(jax.random.key(3), trials))
  return np.argmax(np.asarray(scores), axis=1) == np.asarray(targets)


def test_prior_aware_attack_is_certain_without_noise():
  """σ = 0: R_t is the target's clipped gradient, so the target's score is 0 (the
  maximum) and every other candidate's is −½ Σ_t ||ḡ_z − ḡ_target||² < 0 (distinct random
  images): every trial picks the target."""
  assert _success(0.0, trials=40, k=10).all()


def test_prior_aware_attack_is_chance_under_overwhelming_noise():
  """σ = 10⁶: the candidates' score differences are ~ ||ḡ|| σC, of random sign, against
  their ~||ḡ||² systematic part (a 10⁻⁶ share): the success rate is 1/K up to sampling.
  Tolerance: four binomial standard deviations √(p(1 − p)/N) at N = 400 (a false alarm
  below 10⁻⁴); the targets cycle through the K slots, so a bias to one slot cannot pass."""
  for k in (2, 10):
    hit = _success(1e6, trials=400, k=k)
    p = 1 / k
    assert abs(hit.mean() - p) <= 4 * math.sqrt(p * (1 - p) / hit.size), (k, hit.mean())


def test_trials_needed_gives_the_clopper_pearson_half_width():
  """The smallest N with every interval within ± h: N − 1 has one wider (at its midpoint)."""
  n = dp.trials_needed(0.05, 0.95)
  widths = lambda m: [dp._ci_halfwidth(x, m, 0.95) for x in range(m + 1)]
  assert max(widths(n)) <= 0.05 < max(widths(n - 1))
  with pytest.raises(ValueError, match="halfwidth and confidence"):
    dp.trials_needed(0.0, 0.95)


# ------------------------------------------------------------------ the study


def _study_config():
  config = dp_config.get_config("smoke")
  config.steps.affine, config.steps.haim_mlp = 100, 50
  config.decoreco.steps, config.decoreco.log_every = 20, 10
  config.bilevel.steps = 3
  config.epsilons = (1.0,)   # one finite ε: the bound's test; 100 only adds victims
  return config


@pytest.mark.slow   # 16 smoke victims, their informed, DecoReco and bilevel rows
def test_no_measured_success_lies_above_the_bound(tmp_path):
  """The study at :smoke. Where the bound's assumptions hold (a finite ε: full-batch
  DP-SGD with clipping and noise, μ = √T/σ; targets drawn from the prior, κ from the test
  split; `trdr.studies.dp.ASSUMPTIONS`), no measured success lies above it: the one-sided
  Clopper–Pearson lower limit of successes / trials stays at or below the bound at κ's
  upper limit (`rero.exceeds`). The rule can fail: the informed adversary's closed form
  recovers every unknown image of the stationary non-private affine victim (k = 1), and
  that success, held against the bound of the most private level, is flagged."""
  config = _study_config()
  result = dp.run(config, str(tmp_path))
  table = dp.summary(result, config)
  private = [r for r in table if math.isfinite(r["epsilon"])]
  assert private and all(math.isfinite(r["mu"]) for r in private)
  above = [(r["victim"], r["level"], r["adversary"], r["k"]) for r in private if r["above"]]
  assert above == []
  # Each DP victim's ε is its target (PLD: from above by at most Δ, from below by rounding).
  for r in private:
    target = float(r["level"].removeprefix("ε = "))
    assert target - 1e-6 <= r["epsilon"] <= target + accounting.DISCRETIZATION + 1e-6
  # The prior-aware rows: κ = 1/K exact, the bound exact; none above it. Their control:
  # the σ = 0 trajectory identifies the target, and that success held against the bound
  # at ε = 1 is flagged.
  aware = dp.prior_aware_summary(result, config)
  assert {r["K"] for r in aware} == {2, config.prior_aware.k_max}
  assert all(r["trials"] >= dp.trials_needed(config.prior_aware.halfwidth,
                                             config.eval.confidence) for r in aware)
  assert [r for r in aware if r["above"]] == []
  for r in aware:
    if r["level"] == dp.NOISELESS:
      assert r["successes"] == r["trials"]
      strict = next(p["bound"] for p in aware if p["K"] == r["K"] and p["victim"] ==
                    r["victim"] and p["level"] == "ε = 1")
      assert rero.exceeds(r["successes"], r["trials"], strict, config.eval.confidence)
  control = next(r for r in table if (r["victim"], r["level"], r["adversary"], r["k"])
                 == ("affine", dp.NONPRIVATE, dp.INFORMED, 1))
  assert control["successes"] == control["trials"] == len(config.seeds)
  tightest = min(private, key=lambda r: r["mu"])
  strict = float(rero.gdp_bound(result["prior"]["affine"]["upper"], tightest["mu"]))
  assert rero.exceeds(control["successes"], control["trials"], strict, config.eval.confidence)
  # Rows are reused: a rerun computes nothing.
  path = os.path.join(tmp_path, dp.ROWS_FILE)
  stamp = os.path.getmtime(path)
  again = dp.run(config, str(tmp_path))["rows"]        # NaN residuals: compared as JSON
  assert files.dumps_json(again) == files.dumps_json(files.read_json(path)["rows"])
  assert os.path.getmtime(path) == stamp
  page = dp.markdown(result, config)
  assert page.count("| affine |") >= len(table) // 2 and "## The bound's assumptions" in page
  assert "## The prior-aware attack" in page and "**Only θ\\* released.**" in page
  dp.figure(result, config)


def test_beats_start_is_the_one_sided_fisher_test_against_the_start_images():
  """3 of 3 against 0 of 3 starts: p = 1/20, significant at 0.95 (the boundary itself);
  2 of 6 against 0: p = 5/22 ≈ 0.23, not; 3 of 300 against 0: p = 0.125, not; 30 of 300
  against 3 of 300 (start_mean 0.01): p ≪ 0.05. A start count above the successes never
  beats it."""
  row = lambda s, t, start: {"successes": s, "trials": t, "start_mean": start}
  assert dp.beats_start(row(3, 3, 0.0), 0.95)
  assert not dp.beats_start(row(2, 6, 0.0), 0.95)
  assert not dp.beats_start(row(3, 300, math.nan), 0.95)
  assert dp.beats_start(row(30, 300, 0.01), 0.95)
  assert not dp.beats_start(row(3, 300, 0.02), 0.95)


def test_the_truth_section_shows_each_decoreco_rows_diagnostic_and_names_a_lower_point():
  """The page's truth section from synthetic DecoReco rows: a diverged row reads
  "diverged", a diagnosed one its verdict and losses; the levels where the run from the
  truth ends lower while keeping the images are named with their seed counts; no DecoReco
  row with a diagnostic, no section."""
  def row(level, seed, truth, method="decoreco"):
    return {"victim": "haim_mlp", "level": level, "seed": seed, "adversary": dp.DECORECO,
            "method": method, "truth": truth}
  diagnosed = {"verdict": "objective", "loss_at_truth": 86.38, "loss_reached": 86.04,
               "kept": 100, "n": 100, "truth_start_lower": True}
  rows = [row("ε = 1", 0, None, "diverged"), row("non-private", 0, diagnosed),
          row("non-private", 1, diagnosed | {"truth_start_lower": False})]
  lines = dp.truth_section({"rows": rows})
  assert "| haim_mlp | ε = 1 | 0 | diverged | — | — | — | — |" in lines
  assert "| haim_mlp | non-private | 0 | objective | 86.38 | 86.04 | 100 of 100 | yes |" in lines
  assert any("on haim_mlp non-private (1 of 2 seeds)" in line for line in lines)
  assert dp.truth_section({"rows": rows[:1]}) == []
