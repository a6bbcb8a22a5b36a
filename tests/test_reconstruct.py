"""DecoReco attack loop, GD victim, sweep, single run and landscape on the :smoke configs:
the numbers they write."""

import functools
import os
import shutil

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from trdr import data, experiment, models, plotting, victim
from trdr.attacks import ATTACKS, decoreco
from trdr.attacks import init as inits
from trdr.configs import bilevel_affine, decoreco_cifar, decoreco_figures
from trdr.evaluation import evaluate, metrics, ssim
from trdr.experiment import starts as start_images
from trdr.report import artefacts
from trdr.runtime import files, rundir, sharding

# DecoReco's sweepable settings (σ, lr, λ_min, α), as its registry entry gives them.
DECORECO_SWEEP = ATTACKS["decoreco"].sweep


def _candidates(key, m, shape, sigma, dtype=jnp.float64):
  """Haim et al.'s start: x ~ N(0, σ²), λ ~ U(0, 1), labels −1 then +1."""
  key_x, key_l = jax.random.split(key)
  return (inits.gaussian(key_x, (m, *shape), sigma, dtype),
          jax.random.uniform(key_l, (m,), dtype), inits.class_labels(m, dtype))


def _target(model, params, config):
  return victim.Victim(model, params, config.victim, {})


@pytest.fixture(scope="module")
def victim_dir(smoke_report_dir, tmp_path_factory):
  """A copy of the θ* that the :smoke report trained for its DecoReco runs (the same
  victim config as `smoke_config`), so the module's runs reuse it instead of training
  their own. A copy: a run whose victim config differed would retrain into it."""
  directory = tmp_path_factory.mktemp("victim") / "victim"
  shutil.copytree(os.path.join(smoke_report_dir, "decoreco_figures", "victim"), directory)
  return str(directory)


def smoke_config(victim_dir, **init):
  """The :smoke report's DecoReco config (its victim has a bias in every layer)."""
  config = decoreco_figures.get_config("smoke").decoreco
  config.victim.checkpoint_dir = victim_dir
  for key, value in init.items():
    config.init[key] = value
  return config


# ----------------------------------------------------------------------- the victim


@pytest.mark.slow  # trains the GD victim to its loss threshold
def test_gd_victim_stops_at_the_loss_threshold(x64_module):
  config = decoreco_cifar.get_config("smoke")
  task = data.make_task(config.data)
  model = models.build_model(config.victim)
  params0 = models.init_params(model, jax.random.key(0), task.train_images.shape[1:],
                               jnp.float64)
  task64 = task._replace(train_images=task.train_images.astype(np.float64),
                         test_images=task.test_images.astype(np.float64))
  logged = []
  params, report = victim.train_gd(model, params0, task64, config.victim, log_fn=logged.append)
  assert report.reached_threshold and report.train_accuracy == 1.0
  assert report.train_loss < config.victim.loss_threshold
  assert 1 < report.epochs < config.victim.max_epochs
  assert [r["epoch"] for r in logged][-1] == report.epochs
  # One epoch fewer must still be above the threshold: it stopped at the first epoch below.
  short = config.victim.copy_and_resolve_references()
  short.max_epochs = report.epochs - 1
  _, early = victim.train_gd(model, params0, task64, short)
  assert not early.reached_threshold and early.train_loss >= config.victim.loss_threshold
  assert early.epochs == report.epochs - 1


def test_gd_victim_training_that_diverges_raises(x64_module):
  config = decoreco_cifar.get_config("smoke")
  # lr 50, a hundred times the recipe's: far past gradient descent's stability limit 2/L
  # on the squared error, whose curvature along the output layer is (2/n)·Σ‖h_i‖²
  config.victim.loss, config.victim.lr = "mse", 50.0
  task = data.make_task(config.data)
  task = task._replace(train_images=task.train_images.astype(np.float64),
                       test_images=task.test_images.astype(np.float64))
  model = models.build_model(config.victim)
  params0 = models.init_params(model, jax.random.key(0), task.train_images.shape[1:],
                               jnp.float64)
  with pytest.raises(FloatingPointError, match="diverged.*lower victim.lr"):
    victim.train_gd(model, params0, task, config.victim)


def test_gd_victim_rejects_unknown_loss():
  config = decoreco_cifar.get_config("smoke").victim
  config.loss = "hinge"
  with pytest.raises(ValueError, match="unknown victim loss 'hinge'"):
    victim.train_gd(None, None, None, config)


# ------------------------------------------------------------------- the attack loop


def test_attack_step_is_pytorch_sgd_with_momentum(x64_module):
  target_x, target_l = jnp.arange(6.0).reshape(3, 2, 1, 1), jnp.asarray([0.3, 0.5, 0.7])

  def loss_and_grad(x, lam, alpha, lambda_min):
    return (jnp.sum((x - target_x) ** 2) + jnp.sum((lam - target_l) ** 2),
            (2 * (x - target_x), 2 * (lam - target_l)))

  hp = decoreco.Hyperparameters(0.0, 0.1, 0.05, 20.0)
  state = decoreco.init_state(jnp.zeros((3, 2, 1, 1)), jnp.zeros(3))
  x, lam, vx, vl = (np.zeros((3, 2, 1, 1)), np.zeros(3), np.zeros((3, 2, 1, 1)), np.zeros(3))
  final, losses = decoreco.run_steps(state, hp, 3, loss_and_grad=loss_and_grad,
                                     lambda_lr=0.01, momentum=0.9)
  for _ in range(3):
    vx = 0.9 * vx + 2 * (x - np.asarray(target_x))
    vl = 0.9 * vl + 2 * (lam - np.asarray(target_l))
    x, lam = x - 0.1 * vx, lam - 0.01 * vl
  # float64, the same dozen operations per entry on numbers ≤ 6 (fused or not): ≲ 20ε ≈ 4e-15
  # relative; a wrong momentum or learning rate is O(0.1) off after 3 steps.
  np.testing.assert_allclose(final.images, x, rtol=1e-12)
  np.testing.assert_allclose(final.lambdas, lam, rtol=1e-12)
  assert int(final.step) == 3 and losses.shape == (3,)
  # At the zero start: a float64 sum of 9 squares ≤ 25, exact to ≲ 1e-15 (approx: 1e-6).
  assert losses[0] == pytest.approx(float(jnp.sum(target_x ** 2) + jnp.sum(target_l ** 2)))


@pytest.mark.slow  # an attack program per setting
def test_vmapped_sweep_equals_settings_one_by_one(x64_module):
  """Acceptance 3: S settings vmapped as one computation == each run alone."""
  model = models.HaimMLP(widths=(8, 6), all_biases=True, first_scale=0.3)
  params = models.init_params(model, jax.random.key(0), (12, 12, 1), jnp.float64)
  m = 6
  _, _, labels = _candidates(jax.random.key(1), m, (12, 12, 1), 1.0)
  settings = start_images.sample_settings(
      jax.random.key(2), 4, ml_collections.ConfigDict({
          "init_scale": (0.05, 0.5), "lr": (1e-3, 1e-2), "lambda_min": (0.01, 0.5),
          "alpha": (10.0, 50.0)}), jnp.float64, DECORECO_SWEEP)
  keys = jax.random.split(jax.random.key(3), 4)
  starts = jax.vmap(lambda k, s: decoreco.init_state(*_candidates(
      k, m, (12, 12, 1), s)[:2]))(keys, settings.init_scale)
  run = functools.partial(decoreco.run_steps, num_steps=15,
                          loss_and_grad=decoreco.autodiff_loss_and_grad(model, params, labels))
  together, losses = jax.jit(lambda s, h: sharding.grid_map(
      lambda sh: run(sh[0], sh[1]), (s, h), 4))(starts, settings)
  batched, _ = jax.jit(lambda s, h: sharding.grid_map(
      lambda sh: run(sh[0], sh[1]), (s, h), 3))(starts, settings)
  # float64: vmapping reorders some sums, ~√N·ε ≈ 1e-15 relative per step. Heavy-ball SGD
  # grows an error by at most 1 + β + lr·L per step: β = 0.9, and lr·L ≤ 0.65 at these four
  # settings (L ≤ 160, the loss's largest Hessian eigenvalue at their starts by power
  # iteration), so ≤ 2.6^15·1e-15 ≈ 2e-9 after 15 steps: rtol 1e-7, and atol 1e-8 (rtol
  # times the entries' scale ~0.1) for entries near 0. Another setting's run differs by
  # O(1) (checked below).
  for i in range(4):
    pick = lambda tree, i=i: jax.tree.map(lambda t: t[i], tree)
    alone, alone_losses = jax.jit(run)(pick(starts), pick(settings))
    np.testing.assert_allclose(together.images[i], alone.images, rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(together.lambdas[i], alone.lambdas, rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(losses[i], alone_losses, rtol=1e-7)
    np.testing.assert_allclose(batched.images[i], alone.images, rtol=1e-7, atol=1e-8)
  # The settings differ, so the runs must differ (the comparison above is not vacuous).
  assert not np.allclose(together.images[0], together.images[1])


def test_sample_settings_ranges(x64_module):
  ranges = decoreco_cifar.get_config("").sweep.ranges
  s = start_images.sample_settings(jax.random.key(0), 2000, ranges, jnp.float64,
                                   DECORECO_SWEEP)
  for name in DECORECO_SWEEP.names:
    low, high = ranges[name]
    values = np.asarray(getattr(s, name))
    assert values.min() >= low and values.max() <= high, name
  # log-uniform: the median of σ is near the geometric mean of its range. Over 2000 draws
  # the sample median of log10 σ ~ U(−6, −1) has a standard error ≈ 5/(2√2000) ≈ 0.06, so
  # 0.2 is 3.6 of them; a uniform (not log-uniform) draw puts it at −1.3, 2.2 away.
  assert np.median(np.log10(s.init_scale)) == pytest.approx(np.mean(np.log10(ranges.init_scale)),
                                                            abs=0.2)
  bad = ranges.copy_and_resolve_references()
  bad.lr = (0.0, 1.0)
  with pytest.raises(ValueError, match="log-uniform"):
    start_images.sample_settings(jax.random.key(0), 2, bad, jnp.float64, DECORECO_SWEEP)


def test_the_sweep_starts_from_the_published_settings(x64_module):
  config = decoreco_cifar.get_config("")
  published = config.sweep.include
  sampled = start_images.sample_settings(jax.random.key(0), 3, config.sweep.ranges, jnp.float64,
                                         DECORECO_SWEEP)
  settings = start_images._with_included(sampled, published, 5)
  for i, name in enumerate(DECORECO_SWEEP.names):
    np.testing.assert_array_equal(getattr(settings, name)[:2], [s[i] for s in published])
    np.testing.assert_array_equal(getattr(settings, name)[2:], getattr(sampled, name))
  assert start_images._with_included(sampled, (), 3) is sampled
  with pytest.raises(ValueError, match="at most num_settings"):
    start_images._with_included(sampled, published, 1)
  with pytest.raises(ValueError, match="4 numbers"):
    start_images._with_included(sampled, ((1.0, 2.0),), 4)


def test_hparams_keep_keeps_the_configs_sigma_and_takes_the_rest(tmp_path):
  best = {"init_scale": 0.01, "lr": 0.2, "lambda_min": 0.3, "alpha": 40.0}
  files.write_json(str(tmp_path / "best.json"), best)
  config = decoreco_cifar.get_config("smoke")
  config.attack.hparams_file = str(tmp_path / "best.json")
  config.attack.init_scale, config.attack.hparams_keep = 1.0, ("init_scale",)
  a = experiment.attack_config(config)
  assert (a.init_scale, a.lr, a.lambda_min, a.alpha) == (1.0, 0.2, 0.3, 40.0)
  config.attack.hparams_keep = ("momentum",)
  with pytest.raises(ValueError, match="hparams_keep"):
    experiment.attack_config(config)


# --------------------------------------------------------------------------- scores


# ncc_distances in float32 is ||q||² + ||c||² − 2 q·c over P = 3·16·16 = 768 standardised
# values (each of the three sums ≈ P): rounding ≈ √P·u·P ≈ 1.3e-3 per sum (u = 2^-24,
# random-signed), ≈ 4e-3 for the three, plus ulp(2P) ≈ 1e-4 for the difference. So 5e-3 for
# a distance that is 0 in exact arithmetic, against > 100 between different images.
NCC_ATOL = 5e-3


def test_ncc_distance_is_invariant_to_per_channel_affine_changes():
  rng = np.random.default_rng(0)
  x = rng.uniform(size=(3, 32, 32, 3)).astype(np.float32)
  y = x * np.asarray([2.0, 0.5, 3.0], np.float32) + np.asarray([0.1, -0.3, 1.0], np.float32)
  d = np.asarray(metrics.ncc_distances(y, x))
  assert np.allclose(np.diag(d), 0.0, atol=NCC_ATOL)
  assert np.all(d[~np.eye(3, dtype=bool)] > 100.0)


def test_matched_score_counts_a_reconstruction_once_per_training_image():
  train = np.random.default_rng(1).uniform(size=(6, 32, 32, 3)).astype(np.float32)
  # Three exact copies of training image 0: only one training image is matched at 0.
  recon = np.stack([train[0]] * 3)
  d = metrics.ncc_distances(recon, train)
  assert float(metrics.matched_score(d, k=1)) == pytest.approx(0.0, abs=NCC_ATOL)
  assert float(metrics.matched_score(d, k=2)) > 100.0
  with pytest.raises(ValueError, match="k must be in"):
    metrics.matched_score(d, k=7)


# ---------------------------------------------------------------- end-to-end, :smoke


@pytest.fixture(scope="module")
def gaussian_run(smoke_report_dir, tmp_path_factory):
  """The :smoke report's tuned run (`tuned_config`), copied, with the run's own figures
  drawn from its files as the command line does; returns (workdir, summary)."""
  workdir = tmp_path_factory.mktemp("tuned") / "tuned"
  shutil.copytree(artefacts.run_dir(smoke_report_dir, "tuned"), workdir)
  plotting.run_figures(str(workdir))
  return str(workdir), files.read_json(workdir / experiment.SUMMARY_FILE)


def tuned_config(smoke_report_dir, victim_dir):
  """The report's tuned run: `smoke_config` (Gaussian start) on the sweep's best setting."""
  config = smoke_config(victim_dir)
  config.attack.hparams_file = os.path.join(artefacts.run_dir(smoke_report_dir, "sweep"),
                                            experiment.BEST_FILE)
  return config


def test_smoke_run_writes_consistent_numbers(gaussian_run):
  workdir, summary = gaussian_run
  for name in ("results.npz", "summary.json", "metrics.jsonl", "overview.png",
               "reconstructions_vs_train.png", "reconstructions_vs_partition.png",
               "best_per_train.png", "ssim_vs_output.png"):
    assert os.path.exists(os.path.join(workdir, name)), name
  results = np.load(os.path.join(workdir, "results.npz"))
  n = results["train_images"].shape[0]
  assert summary["candidates"] == 2 * n == results["final_images"].shape[0]
  losses = results["history_loss"]
  assert losses.shape == (40,) and np.all(np.isfinite(losses)) and losses[-1] < losses[0]
  # Per-training-image best SSIM recomputed from scratch: the run called the same function on
  # the same float32 inputs in one block of 2n ≤ 500 queries, as this does, so the same
  # program gives the same numbers; atol 1e-6 (8 ulps at SSIM ≤ 1) only absorbs the last
  # bits should another process compile it apart. A wrong set or display transform moves
  # SSIMs by > 1e-2.
  shown = evaluate.to_display(results["final_images"], results["mean"], "minmax")
  train = np.clip(results["train_images"] + results["mean"], 0, 1)
  similarity = np.asarray(ssim.pairwise_ssim(shown, train))
  np.testing.assert_allclose(results["best_ssim_per_train"], similarity.max(axis=0), atol=1e-6)
  for t in (0.3, 0.4, 0.5):
    assert summary["reconstructed"][f"ssim_ge_{t:g}"] == int(np.sum(similarity.max(axis=0) >= t))
  # Best buddies (Haim et al.'s matching, by NCC): recomputed from scratch, and a pair's
  # SSIM is at most the training image's best, so its counts are at most the others.
  buddy, index = metrics.best_buddies(metrics.ncc_distances(shown, train))
  pair = np.where(buddy, similarity[np.asarray(index), np.arange(n)], np.nan)
  np.testing.assert_allclose(results["best_buddy_ssim_per_train"], pair, atol=1e-6)
  for k, count in summary["reconstructed_best_buddies"].items():
    assert count <= summary["reconstructed"][k], k
  # Haim et al.'s scale beside: the same counts with a 3x3 SSIM window, the same buddy pairs.
  ssim3 = np.asarray(ssim.pairwise_ssim(shown, train, filter_size=3))
  np.testing.assert_allclose(results["best_ssim_per_train_w3"], ssim3.max(axis=0), atol=1e-6)
  pair3 = np.where(buddy, ssim3[np.asarray(index), np.arange(n)], np.nan)
  np.testing.assert_allclose(results["best_buddy_ssim_per_train_w3"], pair3, atol=1e-6)
  for t in (0.3, 0.4, 0.5):
    k = f"ssim_ge_{t:g}"
    assert summary["reconstructed_w3"][k] == int(np.sum(ssim3.max(axis=0) >= t))
    assert summary["reconstructed_best_buddies_w3"][k] == int(np.sum(pair3 >= t))
  assert summary["ssim_window"] == 11 and "start_reconstructed_w3" in summary
  # The realism score of Figs. 6–8: every candidate's nearest public (test-split) image.
  assert results["public_ssim"].shape == results["start_public_ssim"].shape == (2 * n,)
  assert np.isfinite(summary["score"]) and summary["victim"]["train_accuracy"] == 1.0
  with pytest.raises(FileExistsError, match="--overwrite"):
    experiment.run(smoke_config(os.path.join(workdir, "victim_unused")), workdir, "attack")


@pytest.mark.slow
def test_ground_truth_initialisation_keeps_the_training_images(victim_dir, tmp_path):
  summary = experiment.run(smoke_config(victim_dir, kind="ground_truth"), str(tmp_path),
                           "attack").summary
  results = np.load(os.path.join(tmp_path, "results.npz"))
  assert summary["candidates"] == results["train_images"].shape[0]
  # Most candidates' SSIM-nearest training image is still their own starting image (at
  # lr 0.4 a few drift to another training image within 40 iterations: measured 8 of 10).
  assert np.mean(results["train_index"] == np.arange(summary["candidates"])) >= 0.7
  assert summary["reconstructed"]["ssim_ge_0.5"] >= 0.7 * summary["n_train"]


def test_sweep_ranks_settings_and_feeds_the_run(smoke_report_dir, victim_dir, tmp_path):
  """The report's :smoke sweep (decoreco_cifar.py:smoke, conftest.py): settings ranked by
  the in-run score, the best one in best.json, which the tuned run read."""
  config = smoke_config(victim_dir)
  sweep_dir = artefacts.run_dir(smoke_report_dir, "sweep")
  rows = files.read_json(os.path.join(sweep_dir, "sweep.json"))
  assert len(rows) == config.sweep.num_settings
  scores = [r["score"] for r in rows]
  assert scores == sorted(scores) and [r["rank"] for r in rows] == [1, 2, 3]
  best = files.read_json(os.path.join(sweep_dir, "best.json"))
  assert best == rows[0] == files.read_json(os.path.join(sweep_dir, "summary.json"))["best"]
  tuned = files.read_json(
      os.path.join(artefacts.run_dir(smoke_report_dir, "tuned"), "summary.json"))
  for name in DECORECO_SWEEP.names:
    assert tuned["hyperparameters"][name] == pytest.approx(best[name])
  config.attack.hparams_file = str(tmp_path / "missing.json")
  with pytest.raises(FileNotFoundError, match="run the sweep"):
    experiment.attack_config(config)
  with pytest.raises(ValueError, match="sweepable settings"):
    experiment.run(bilevel_affine.get_config("smoke"), str(tmp_path / "bilevel"), "sweep")
  assert not os.path.exists(tmp_path / "bilevel")   # refused before anything was written


def test_decoreco_landscape_stays_near_its_initialisation(smoke_report_dir, tmp_path):
  """The :smoke report's DecoReco landscape (decoreco_landscape.py:smoke on the sweep's
  best setting), and the run's own figures drawn from its files."""
  run = tmp_path / "landscape_decoreco"
  shutil.copytree(artefacts.run_dir(smoke_report_dir, "landscape_decoreco"), run)
  plotting.run_figures(str(run))
  records = files.read_json(run / experiment.LANDSCAPE_FILE)
  assert len(records) == 9
  point = {(r["lambda1"], r["lambda2"]): r for r in records}
  gt, part, noise = point[1.0, 1.0], point[0.0, 1.0], point[0.0, 0.0]
  assert gt["l2_to_train"] < part["l2_to_train"] and gt["l2_to_train"] < noise["l2_to_train"]
  assert part["l2_to_partition"] < part["l2_to_train"]
  assert noise["ssim_to_noise"] > max(noise["ssim_to_train"], noise["ssim_to_partition"])
  assert gt["train_ssim_ge_0.4"] == 10
  for fig in ("fig10_heatmaps", "fig11_lambda2_eq_1", "fig12_lambda1_eq_1",
              "reconstructions_partition_vs_partition"):
    assert os.path.getsize(run / f"{fig}.png") > 1000


def test_gradient_norm_form_decreases_the_victims_gradient(x64_module):
  """Runkel et al. eq. 3 as an attack: ||∇θE(x, y; θ*)||² falls; λ is left alone."""
  model = models.HaimMLP(widths=(8, 6), all_biases=True, first_scale=0.3)
  params = models.init_params(model, jax.random.key(0), (12, 12, 1), jnp.float64)
  x, lam, labels = _candidates(jax.random.key(1), 6, (12, 12, 1), 0.3)
  config = decoreco_cifar.get_config("smoke")
  config.attack.form = "gradient_norm"
  config.victim.weight_decay = 1e-3
  target = _target(model, params, config)
  loss_and_grad = decoreco.make_loss_and_grad(target, config.attack, labels)
  hp = decoreco.Hyperparameters(0.3, 0.05, 0.05, 20.0)
  state, losses = jax.jit(lambda s: decoreco.run_steps(s, hp, 50, loss_and_grad=loss_and_grad))(
      decoreco.init_state(x, lam))
  assert losses[-1] < 0.5 * losses[0]
  np.testing.assert_array_equal(state.lambdas, lam)
  config.attack.form = "multiclass"
  with pytest.raises(ValueError, match="does not fit a victim with num_outputs = 1"):
    decoreco.make_loss_and_grad(target, config.attack, labels)
  config.attack.form = "hinge"
  with pytest.raises(ValueError, match="unknown attack.form 'hinge'"):
    decoreco.make_loss_and_grad(target, config.attack, labels)


def test_attack_uses_the_fused_gradient_and_it_equals_autodiff(x64_module):
  """make_loss_and_grad picks kkt_mlp for a ReLU Haim MLP; a vmapped sweep over α and
  λ_min through it equals the autodiff loss's."""
  config = decoreco_cifar.get_config("smoke")
  model = models.HaimMLP(widths=(8, 6))
  params = models.init_params(model, jax.random.key(0), (12, 12, 1), jnp.float64)
  x, lam, labels = _candidates(jax.random.key(1), 6, (12, 12, 1), 0.5)
  config.victim.widths = (8, 6)
  target = _target(model, params, config)
  assert decoreco.fused_applies(target)
  fused = decoreco.make_loss_and_grad(target, config.attack, labels)
  autodiff = decoreco.autodiff_loss_and_grad(model, params, labels)
  alphas, lambda_mins = jnp.asarray([10.0, 20.0, 60.0]), jnp.asarray([0.01, 0.3, 0.5])
  out_f = jax.jit(jax.vmap(lambda a, m: fused(x, lam, a, m)))(alphas, lambda_mins)
  out_a = jax.jit(jax.vmap(lambda a, m: autodiff(x, lam, a, m)))(alphas, lambda_mins)
  # float64, the fused gradient against autodiff (test_kkt_mlp.py's `RTOL_F64` argument:
  # ≲ 1e-13 relative with the Gram form's cancellation); atol for entries that are ~0.
  for f, a in zip(jax.tree.leaves(out_f), jax.tree.leaves(out_a)):
    np.testing.assert_allclose(f, a, rtol=1e-9, atol=1e-14)
  config.attack.fused = False
  assert decoreco.make_loss_and_grad(target, config.attack, labels).__name__ != "fused"


def test_a_crashed_run_resumes_to_the_same_results(smoke_report_dir, victim_dir, tmp_path,
                                                   monkeypatch):
  """Killed after its first checkpoint (before the metrics line), restarted: the same
  results.npz as the uninterrupted run, bit for bit, and one metrics line per chunk.

  The uninterrupted run is run here too, not read from the :smoke report: the bits are
  those of one process's programs (the report's process compiles under other XLA flags,
  tests/conftest.py); it adds no compilation, its programs are the crashed run's."""
  calls = []

  def crash(workdir, records):
    calls.append(records)
    raise KeyboardInterrupt("simulated kill after the first checkpoint")

  monkeypatch.setattr(rundir, "append_metrics", crash)
  config = tuned_config(smoke_report_dir, victim_dir)
  with pytest.raises(KeyboardInterrupt):
    experiment.run(config, str(tmp_path), "attack")
  assert len(calls) == 1 and not os.path.exists(tmp_path / "summary.json")
  monkeypatch.undo()
  experiment.run(config, str(tmp_path), "attack")
  finished = experiment.run(config, str(tmp_path / "uninterrupted"), "attack").workdir
  a = np.load(os.path.join(finished, "results.npz"))
  b = np.load(tmp_path / "results.npz")
  assert sorted(a.files) == sorted(b.files)
  for key in a.files:
    np.testing.assert_array_equal(a[key], b[key], err_msg=key)
  assert [r["step"] for r in rundir.read_metrics(str(tmp_path))] == [20, 40]


@pytest.mark.slow
@pytest.mark.parametrize("loss, outputs, form, lr", [("mse", 1, "binary", 0.1),
                                                     ("ce", 2, "multiclass", 0.5)])
def test_other_victim_losses_train_and_attack(x64_module, loss, outputs, form, lr, tmp_path):
  """Buzaglo et al.'s MSE and multiclass (C = 2, cross-entropy) victims: GD reaches the
  loss threshold, and the matching DecoReco form attacks them (the loss falls)."""
  config = decoreco_cifar.get_config("smoke")
  config.victim.loss, config.victim.num_outputs, config.attack.form = loss, outputs, form
  config.victim.lr = lr
  config.victim.loss_threshold = 1e-3
  config.attack.steps, config.attack.log_every = 20, 20
  summary = experiment.run(config, str(tmp_path), "attack").summary
  assert summary["victim"]["reached_threshold"] and summary["victim"]["train_accuracy"] == 1.0
  losses = np.load(tmp_path / "results.npz")["history_loss"]
  assert np.all(np.isfinite(losses)) and losses[-1] < losses[0]
