"""The informed adversary (`trdr.attacks.informed`): the closed forms against their error
bounds, the first-layer formula's exactness, the optimisation path on a planted case, and
the knowledge experiment's files."""

import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax.tree
import pytest

import trdr
from trdr import models, victim
from trdr.attacks import ATTACKS, decoreco, informed
from trdr.attacks import init as inits
from trdr.configs import knowledge as knowledge_config
from trdr.studies import knowledge
from trdr.runtime import files

U64 = np.finfo(np.float64).eps / 2   # unit roundoff of float64


def _stationary_victim(name: str, tmp_path, tol: float = 1e-12):
  """A smoke-size victim trained by L-BFGS in float64 to ||∇θE|| < tol, its task, and the
  measured ||∇θE(θ*)|| on the whole training set."""
  config = trdr.get_config(name, "smoke")
  config.float64 = True
  config.victim.tol = tol
  config.victim.max_iter = 20_000
  with jax.enable_x64(True):
    task = trdr.load_task(config)
    target = trdr.train_victim(config, task, str(tmp_path / name))
    x = jnp.asarray(task.train_images, jnp.float64)
    y = jnp.asarray(task.train_labels, jnp.float64)
    grad = jax.grad(lambda p: victim.energy(p, x, y, apply_fn=target.apply,
                                            weight_decay=config.victim.weight_decay))(
        target.params)
    return target, x, y, float(optax.tree.norm(grad))


@pytest.fixture(scope="module")
def affine(tmp_path_factory):
  return _stationary_victim("bilevel_affine", tmp_path_factory.mktemp("victims"))


@pytest.fixture(scope="module")
def one_hidden(tmp_path_factory):
  return _stationary_victim("bilevel_one_hidden", tmp_path_factory.mktemp("victims"), 1e-10)


def _rounding(target, x) -> float:
  """A bound on the float64 rounding of the computed residual r: n gradients of norm ≤
  √(1 + ||x_i||²)·max|ℓ'| ≤ √(1 + max||x_i||²) each (times 1/n), plus wd·θ*, summed in
  some order: ≤ (n + 2)·u·(that norm + wd·||θ*||), the textbook bound on a sum."""
  n = x.shape[0]
  biggest = float(jnp.sqrt(1.0 + jnp.max(jnp.sum(x.reshape((n, -1)) ** 2, axis=1))))
  return (n + 2) * U64 * (biggest + target.config.weight_decay
                          * float(optax.tree.norm(target.params)))


def test_affine_formula_recovers_each_missing_image_within_its_bound(affine):
  """Runkel eq. 8 with k = 1: x = r_w / r_b. With ∇θE(θ*) = g, ||g|| ≤ ε, the formula's
  error is ||g_w − g_b x|| / |r̂_b| ≤ ε √(1 + ||x||²) / |r̂_b| (the module docstring's
  Cauchy–Schwarz step); ε here is the measured ||g|| plus the float64 rounding of r
  (`_rounding`). The label is sign(r_b)."""
  target, x, y, grad_norm = affine
  n = x.shape[0]
  with jax.enable_x64(True):
    eps = grad_norm + _rounding(target, x)
    for j in (0, 3, 7, n // 2, n - 1):
      keep = np.arange(n) != j
      residual = informed.known_residual(target, x[keep], y[keep], n)
      found, label = informed.affine_formula(residual, x.shape[1:])
      r_b = abs(float(residual["dense"]["bias"][0]))
      error = float(np.linalg.norm(found[0] - np.asarray(x[j])))
      bound = eps * np.sqrt(1.0 + float(jnp.sum(x[j] ** 2))) / r_b
      assert error <= bound, (j, error, bound)
      assert label == float(y[j])
      # The closed form the attack takes is this formula.
      np.testing.assert_array_equal(informed.closed_form(target, x[keep], y[keep], 1), found)


def test_one_hidden_closed_form_with_one_missing_image(one_hidden):
  """The first-layer formula with k = 1 (any activation: the one point is alone on every
  unit), on the softplus smoke victim; bound as for the affine victim with the kept unit's
  |r̂_{b_u}| (the module docstring)."""
  target, x, y, grad_norm = one_hidden
  n = x.shape[0]
  with jax.enable_x64(True):
    eps = grad_norm + _rounding(target, x)
    for j in (0, n - 1):
      keep = np.arange(n) != j
      residual = informed.known_residual(target, x[keep], y[keep], n)
      candidates, bias = informed.first_layer_formula(residual, x.shape[1:])
      error = float(np.linalg.norm(candidates[0] - np.asarray(x[j])))
      assert error <= eps * np.sqrt(1.0 + float(jnp.sum(x[j] ** 2))) / bias[0], (j, error)


def test_first_layer_formula_recovers_exactly_the_images_alone_on_a_unit():
  """A ReLU one-hidden network at random θ, and the residual a stationary θ* leaves when k
  points are unknown, r = −(1/n) Σ_j ∇θℓ_j (by definition). A unit's candidate
  r_{W[:, u]} / r_{b_u} is x_j when x_j is the only unknown point with z_{ju} > 0: ReLU's
  other terms are exact zeros, so the candidate is one product and one division away
  from x_j, ≤ 2u relative per pixel (tolerance 8u·||x||). A point alone on no unit gets
  no candidate near it: every candidate is then a combination with weights δ_{ju} of
  order one of images that differ by order one."""
  shape, k, n = (4, 4, 1), 5, 40
  model = models.OneHidden(width=24, activation="relu")
  with jax.enable_x64(True):
    params = models.init_params(model, jax.random.key(3), shape, jnp.float64)
    rng = np.random.default_rng(3)
    images = jnp.asarray(rng.uniform(-1, 1, size=(k, *shape)))
    labels = jnp.asarray(rng.choice([-1.0, 1.0], size=k))
    apply = lambda p, im: model.apply({"params": p}, im)
    residual = jax.grad(lambda p: -jnp.sum(jax.nn.softplus(-labels * apply(p, images))) / n)(
        params)
    z = np.asarray(images.reshape((k, -1)) @ params["hidden"]["kernel"]
                   + params["hidden"]["bias"])
    active = z > 0
    alone = [j for j in range(k) if np.any(active[j] & (active.sum(axis=0) == 1))]
    assert 0 < len(alone) < k, "the setup must hold both cases"   # seeded: fixed
    candidates, _ = informed.first_layer_formula(residual, shape)
    flat = candidates.reshape((len(candidates), -1))
    for j in range(k):
      x = np.asarray(images[j]).ravel()
      nearest = float(np.min(np.linalg.norm(flat - x, axis=1)))
      if j in alone:
        assert nearest <= 8 * U64 * np.linalg.norm(x), (j, nearest)
      else:
        assert nearest > 1e-3 * np.linalg.norm(x), (j, nearest)


@pytest.mark.parametrize("activation, alpha", [("softplus", None), ("relu", 20.0)])
def test_one_hidden_gram_in_closed_form_equals_the_per_sample_gradients(activation, alpha):
  """`gradient_gram`'s closed form for the one-hidden network against A formed from
  per-sample gradients (jax.jacrev), with DecoReco's sigmoid(α z) for the ReLU's σ'. Both
  are float64 sums of the same products in other orders: ~√P·u relative for P ≈ 600
  products, far below 1e-12; a wrong or missing term is an O(1) relative error."""
  shape, k = (3, 3, 2), 4
  model = models.OneHidden(width=7, activation=activation)
  with jax.enable_x64(True):
    params = models.init_params(model, jax.random.key(1), shape, jnp.float64)
    rng = np.random.default_rng(1)
    images = jnp.asarray(rng.uniform(-1, 1, size=(k, *shape)))
    labels = jnp.asarray([1.0, -1.0, -1.0, 1.0])
    residual = jax.tree.map(lambda p: jnp.asarray(rng.normal(size=p.shape)), params)
    target = victim.Victim(model, params, ml_collections.ConfigDict(
        {"arch": "one_hidden", "activation": activation}), {})
    gram, projection, combine = informed.gradient_gram(target, residual, images, labels,
                                                       alpha)
    act = decoreco.relu_sigmoid_backward(alpha) if alpha else jax.nn.softplus

    def phi(p):   # eq. 9 written out, the activation's backward as the attack's
      z = images.reshape((k, -1)) @ p["hidden"]["kernel"] + p["hidden"]["bias"]
      return labels * (act(z) @ p["output"]["kernel"][:, 0] + p["output"]["bias"][0])

    per_sample = jax.jacrev(phi)(params)
    a = jnp.concatenate([v.reshape((k, -1)) for v in jax.tree.leaves(per_sample)], axis=1)
    r = jnp.concatenate([v.ravel() for v in jax.tree.leaves(residual)])
    np.testing.assert_allclose(gram, a @ a.T, rtol=1e-12)
    np.testing.assert_allclose(projection, a @ r, rtol=1e-12)
    c = jnp.asarray(rng.normal(size=k))
    flat = jnp.concatenate([v.ravel() for v in jax.tree.leaves(combine(c))])
    np.testing.assert_allclose(flat, c @ a, rtol=1e-12, atol=1e-14 * float(jnp.abs(a).max()))


@pytest.mark.slow
def test_optimisation_recovers_a_planted_pair(one_hidden):
  """k = 2 unknown points of the stationary softplus one-hidden victim (no closed form:
  softplus puts both on every unit): the span search from eight U(0, 1) starts, the
  lowest residual kept, recovers both under the knowledge experiment's own rule (best
  buddies at SSIM ≥ its level, window 11), and the noise starts recover neither."""
  target, x, y, _ = one_hidden
  config = knowledge_config.get_config("smoke")
  attack = config.attack
  attack.steps = 1500
  task = trdr.load_task(trdr.get_config("bilevel_one_hidden", "smoke"))
  unknown = np.array([3, 11])
  keep = np.setdiff1d(np.arange(x.shape[0]), unknown)
  with jax.enable_x64(True):
    assert informed.closed_form(target, x[keep], y[keep], 2) is None
    starts = jax.vmap(lambda key: inits.uniform(key, (2, *x.shape[1:]), task.mean,
                                                jnp.float64))(
        jax.random.split(jax.random.key(0), 8))
    found = informed.reconstruct(target, attack, (x[keep], y[keep]), y[unknown], starts,
                                 box=inits.pixel_box(task.mean), truth=x[unknown])
  assert found.method == "optimisation"
  # The truth is the global minimum (0 up to ||∇θE(θ*)||²/||r||²) and stays one: the
  # diagnostic's loss is at most the kept start's.
  assert found.truth_residual <= found.residual
  level, windows = config.eval.ssim_level, (11,)
  truth = np.asarray(x[unknown])
  assert knowledge.recovered(found.images, truth, task.mean, level, windows) == {"w11": 2}
  assert knowledge.recovered(np.asarray(starts[found.start]), truth, task.mean, level,
                             windows) == {"w11": 0}


def test_the_attack_is_in_the_registry_and_checks_its_starts(affine):
  target, x, y, _ = affine
  attack_config = ml_collections.ConfigDict(
      {"lr": 0.01, "lambda_lr": 0.01, "steps": 2, "alpha": 20.0})
  with jax.enable_x64(True):
    attack = ATTACKS["informed"](target, attack_config, y[:2], key=None, box=(-1.0, 1.0),
                                 known=(x[2:], y[2:]))
    with pytest.raises(ValueError, match="3 start images for 2 unknown labels"):
      attack.init(x[:3], None)
    state, metrics = attack.step(attack.init(x[:2] * 0.5, None))
  assert attack.name == "informed" and attack.images(state).shape == x[:2].shape
  assert np.isfinite(float(metrics.loss))


@pytest.mark.slow
def test_knowledge_experiment_writes_its_rows_and_reuses_them(tmp_path):
  """A tiny knowledge run: one row per (victim, adversary, seed, k), knowledge.json written
  as rows finish and a rerun computing nothing; the page's table holds every row."""
  config = knowledge_config.get_config("smoke")
  del config.victims["one_hidden"]
  assert config.truth_seeds == config.seeds    # every seed has its own diagnostic
  config.seeds = config.truth_seeds = (0,)
  config.ks = (1, 2)
  config.steps.affine = config.steps.haim_mlp = 20
  config.bilevel.victims = ("affine",)
  config.bilevel.steps = 3
  rows = knowledge.run(config, str(tmp_path))
  assert [(r["victim"], r["adversary"], r["k"]) for r in rows] == [
      ("affine", "informed", 1), ("affine", "informed", 2),
      ("affine", "bilevel, θ0 known", 40), ("affine", "bilevel, θ0 unknown", 40),
      ("haim_mlp", "informed", 1), ("haim_mlp", "informed, premise-weighted", 1),
      ("haim_mlp", "informed, first layer", 1), ("haim_mlp", "informed", 2)]
  assert rows[0]["method"] == "closed form" and rows[0]["recovered"]["w11"] == 1
  assert config.truth_seeds == (0,) and np.isfinite(rows[1]["truth_residual"])
  # The gradient-descent victim's rows carry the truth diagnostic on every truth seed,
  # read by truth.verdict from their own two losses and the truth start's count.
  for r in rows[4:]:
    t = r["truth"]
    assert t["loss_at_truth"] == r["truth_residual"] and t["loss_reached"] == r["residual"]
    assert t["truth_lower"] == (t["loss_at_truth"] < t["loss_reached"])
    assert t["verdict"] == ("search" if t["truth_lower"] and t["stays"] else "objective")
    assert 0 <= t["truth_start"]["kept"] <= r["k"] and -1 <= t["truth_start"]["ssim_to_start"] <= 1
  assert set(rows[5]["weights"]) == set(rows[4]["weights"]) and all(
      w == 1.0 for w in rows[4]["weights"].values())
  assert rows[6]["weights"] == {p: float(p.startswith("dense_0/")) for p in rows[4]["weights"]}
  saved = files.read_json(os.path.join(tmp_path, knowledge.ROWS_FILE))
  fields = lambda rs: [(r["victim"], r["seed"], r["k"], r["recovered"]) for r in rs]
  assert fields(saved) == fields(rows)
  stamp = os.path.getmtime(os.path.join(tmp_path, knowledge.ROWS_FILE))
  again = knowledge.run(config, str(tmp_path))
  assert files.dumps_json(again) == files.dumps_json(saved)
  assert os.path.getmtime(os.path.join(tmp_path, knowledge.ROWS_FILE)) == stamp
  config.attack.lr *= 2       # rows of other settings: refused, nothing written
  with pytest.raises(FileExistsError, match="attack.lr: 0.02 -> 0.04"):
    knowledge.run(config, str(tmp_path))
  assert os.path.getmtime(os.path.join(tmp_path, knowledge.ROWS_FILE)) == stamp
  page = knowledge.markdown(rows, config)
  assert page.count("| affine |") == 4 * len(config.eval.windows)
  assert "haim_mlp (gradient descent, KKT only)" in page
  assert page.count("| haim_mlp | informed") == 4 * len(config.eval.windows) + 4
  assert "## The KKT premise" in page and "Truth diagnostic:" in page
  knowledge.figure(rows, tuple(config.eval.windows))


def test_api_entry_point_returns_the_missing_images_in_their_order(affine):
  """`trdr.informed_attack` with one unknown index is the affine closed form; bad indices
  are refused by name."""
  target, x, y, _ = affine
  task = trdr.load_task(trdr.get_config("bilevel_affine", "smoke"))
  found = trdr.informed_attack(target, task, [5])
  with jax.enable_x64(True):
    keep = np.arange(x.shape[0]) != 5
    expected, _ = informed.affine_formula(informed.known_residual(target, x[keep], y[keep],
                                                                  x.shape[0]), x.shape[1:])
  np.testing.assert_array_equal(found, expected)
  with pytest.raises(ValueError, match="distinct training indices"):
    trdr.informed_attack(target, task, [5, 5])


def _row(victim_name, k, n, found, seed, adversary="informed"):
  return {"victim": victim_name, "adversary": adversary, "seed": seed, "k": k, "n": n,
          "method": "optimisation", "residual": 0.1, "truth_residual": 0.0,
          "recovered": {"w11": found, "w3": found}, "start_recovered": {"w11": 0, "w3": 0},
          "seconds": 1.0, "grad_norm": 1e-10}


def test_reading_says_where_privacy_is_uncertainty_and_only_there():
  """The paragraph follows the numbers: a victim whose informed adversary recovers every
  unknown image at k ≤ 2 and none at k = n is named as one where privacy is uncertainty
  about the other images; one where no k recovers more than half is not."""
  rows = [_row("a", k, 10, k if k < 10 else 0, seed) for seed in (0, 1) for k in (1, 2, 10)]
  rows += [_row("b", k, 10, 0, seed) for seed in (0, 1) for k in (1, 2, 10)]
  text = knowledge.reading(rows, 11)
  assert "For a the paper's adversaries recover at most half" in text
  assert "a (n = 10): at k = n informed 0.00 ± 0.00 (start images 0.00)" in text
  assert "knowing all but k = 2 or fewer" in text
  assert "b (n = 10): at k = n informed 0.00 ± 0.00 (start images 0.00); no k < n" in text
  table = knowledge.summary(rows, 11)
  assert [(r["victim"], r["k"], r["mean"]) for r in table] == [
      ("a", 1, 1.0), ("a", 2, 1.0), ("a", 10, 0.0), ("b", 1, 0.0), ("b", 2, 0.0),
      ("b", 10, 0.0)]
  only_b = knowledge.reading([r for r in rows if r["victim"] == "b"], 11)
  assert "paper's adversaries recover at most half" not in only_b


@pytest.fixture(scope="module")
def haim_smoke(tmp_path_factory):
  """The knowledge study's smoke Haim MLP (widths (32, 32), n = 10, gradient descent), its
  task as float64 arrays, and the study's DecoReco settings."""
  config = knowledge_config.get_config("smoke")
  c = knowledge._seeded(config.victims.haim_mlp, 0)
  with jax.enable_x64(True):
    task = trdr.load_task(c)
    target = victim.load_or_train(c, task, str(tmp_path_factory.mktemp("haim")))
    x = jnp.asarray(task.train_images, jnp.float64)
    return target, x, jnp.asarray(task.train_labels, jnp.float64), config.attack.kkt


def test_haim_grams_give_decoreco_loss_and_the_kkt_premise(haim_smoke):
  """The closed-form Grams reproduce (a) DecoReco's own loss (autodiff, sigmoid(αz)
  derivative, λ prior) at fixed images and λ, and (b) `trdr.victim.kkt.fit`'s unexplained
  fraction per tensor (plain ReLU). Tolerances: (a) both are float64 sums of O(P) terms of
  the loss's size: relative 1e-9 is ~10⁵ unit roundoffs; (b) the Gram form is ‖θ_t‖² −
  2bᵀλ + λᵀKλ, a difference of terms of size ‖θ_t‖², and the NNLS solutions agree to
  their own tolerance: 1e-6 of ‖θ_t‖² absolute on the fraction."""
  target, x, y, kkt = haim_smoke
  with jax.enable_x64(True):
    lambdas = jnp.linspace(0.0, 2.0, x.shape[0])
    grams = informed.haim_grams(target.params, x, y, float(kkt.alpha))
    value = informed.lambda_loss(informed.quadratic(grams, informed.premise_weights(
        grams, "all")), x.shape[0], float(kkt.lambda_min), float(kkt.lambda_weight))(lambdas)
    auto = kkt.copy_and_resolve_references()
    auto.fused = False
    reference = decoreco.make_loss_and_grad(target, auto, y)(x, lambdas, kkt.alpha,
                                                              kkt.lambda_min)[0]
    np.testing.assert_allclose(float(value), float(reference), rtol=1e-9)
    relative, total = informed.premise_fit(informed.haim_grams(target.params, x, y))
    fit = victim.kkt.fit(target.apply, target.params, x, y)
    weights = informed.premise_weights(informed.haim_grams(target.params, x, y), "explained")
  assert set(relative) == set(fit.relative)
  for path in relative:
    assert abs(relative[path] - fit.relative[path]) < 1e-6, path
  np.testing.assert_allclose(total, fit.residual_total, rtol=1e-6)
  assert all(0.0 <= w <= 1.0 for w in weights.values())
  assert informed.premise_weights(grams, "first_layer") == {
      p: float(p.startswith("dense_0/")) for p in grams}
  with pytest.raises(ValueError, match="unknown premise weighting"):
    informed.premise_weights(grams, "second_layer")


def test_kkt_search_loss_is_the_objective_it_reports(haim_smoke):
  """With no steps from the truth and λ fitted there, the search's own loss (the unknown
  image's autodiff path, known λ held) equals the fitted objective at the truth (the Gram
  path), and the images stay the truth: both compute L(x, λ) of the same λ (float64,
  relative 1e-9 as above)."""
  target, x, y, kkt = haim_smoke
  unknown, known = np.array([3]), np.setdiff1d(np.arange(x.shape[0]), [3])
  with jax.enable_x64(True):
    objective = informed.kkt_objective(target, kkt, (x[known], y[known]), y[unknown])
    lambdas, at_truth, grad_norm = informed.objective_at(target, objective, x[unknown])
    found = informed.kkt_search(target, objective, x[unknown][None], 0, lambdas[:-1],
                                lambdas[-1:])
  assert grad_norm < 1e-6 * max(1.0, at_truth)
  np.testing.assert_allclose(found.search_loss, at_truth, rtol=1e-9)
  np.testing.assert_allclose(found.loss, at_truth, rtol=1e-9)
  np.testing.assert_array_equal(found.images, np.asarray(x[unknown]))
