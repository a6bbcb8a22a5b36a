"""The landscape experiment end to end on its :smoke config: the numbers it writes."""

import functools
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax.tree
import pytest

from trdr import data, experiment, models, plotting, victim
from trdr.attacks import bilevel
from trdr.attacks import init as inits
from trdr.configs import bilevel_affine
from trdr.evaluation import evaluate, ssim
from trdr.experiment import loop
from trdr.report import artefacts
from trdr.runtime import files, rundir

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRID_RECORD_KEYS = (
    "lambda1", "lambda2", "param_distance", "upper_loss", "l2_to_train", "l2_to_partition",
    "l2_to_noise", "ssim_to_train", "ssim_to_partition", "ssim_to_noise",
    "lower_level_grad_norm_max", "lower_level_iters_mean")


def smoke_config():
  return bilevel_affine.get_config("smoke")


@pytest.fixture(scope="module")
def smoke_run(smoke_report_dir):
  """The :smoke bilevel landscape, as `make figures SIZE=smoke` ran it (same config)."""
  workdir = artefacts.run_dir(smoke_report_dir, "landscape_bilevel")
  assert files.read_json(os.path.join(workdir, "config.json")) == files.to_jsonable(smoke_config())
  return workdir, files.read_json(os.path.join(workdir, "landscape.json"))


def _target(config, task, dtype=jnp.float32):
  """θ* of the config's victim, trained here, as a `victim.Victim`."""
  model = models.build_model(config.victim)
  theta0 = models.init_params(model, jax.random.key(0), task.train_images.shape[1:], dtype)
  theta_star, _ = victim.train(model, theta0, task, config.victim)
  return victim.Victim(model, theta_star, config.victim, {})


def _logged_steps(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [json.loads(line)["step"] for line in f]


def _point(records, lambda1, lambda2):
  (record,) = [r for r in records if r["lambda1"] == lambda1 and r["lambda2"] == lambda2]
  return record


def test_writes_every_artefact(smoke_run):
  """Its files, and the figures `plotting.run_figures` draws from them alone."""
  workdir, records = smoke_run
  plotting.run_figures(workdir)
  for name in ("config.json", "landscape.json", "results.npz", "metrics.jsonl",
               "victim/victim.msgpack"):
    assert os.path.exists(os.path.join(workdir, name)), name
  # What only a resumption needed is gone (`rundir.drop_checkpoints`), and the start
  # images are regenerated rather than stored (`trdr.experiment.results`).
  assert not os.path.exists(os.path.join(workdir, rundir.CHECKPOINT_FILE))
  with np.load(os.path.join(workdir, "results.npz")) as stored:
    assert "initial_images" not in stored.files
  for fig in ("fig10_heatmaps", "fig11_lambda2_eq_1", "fig12_lambda1_eq_1",
              "reconstructions_noise", "reconstructions_ground_truth",
              "reconstructions_partition", "reconstructions_partition_vs_partition"):
    for ext in ("png", "pdf"):
      assert os.path.getsize(os.path.join(workdir, f"{fig}.{ext}")) > 1000, (fig, ext)
  assert records == files.read_json(os.path.join(workdir, "landscape.json"))
  assert len(records) == 9
  for record in records:
    assert set(GRID_RECORD_KEYS) <= set(record)
    # The start images' evaluation beside (the verdicts' baseline), lower level excepted.
    assert {evaluate.START + k for k in GRID_RECORD_KEYS[2:] if "lower_level" not in k
            and k != "upper_loss"} <= set(record)
    assert all(np.isfinite(v) for v in record.values())
  gt = _point(records, 1.0, 1.0)   # the ground-truth start is the training set itself
  # SSIM(x, x) = 1 up to the engine's float32 error (≤ ~5e-6, trdr.evaluation.ssim); another image's
  # SSIM is far below (every other start and reconstruction of this grid scores ≤ 0.56).
  assert gt["start_l2_to_train"] == 0.0 and gt["start_ssim_to_train"] > 0.999
  assert _logged_steps(workdir) == [10, 20, 30]
  summary = files.read_json(os.path.join(workdir, "summary.json"))  # where the time went
  seconds = summary["phase_seconds"]
  assert set(seconds) == {"victim", "attack", "evaluation"}  # (JSON keys are sorted)
  assert seconds["attack"] == summary["attack_seconds"]
  assert all(np.isfinite(v) and v >= 0 for v in seconds.values())


def test_ground_truth_initialisation_returns_the_training_images(smoke_run):
  workdir, records = smoke_run
  gt = _point(records, 1.0, 1.0)
  # Mean Euclidean distance over all pixels in [0, 1]. θ* meets the lower level's tol at
  # x_true, so the attack takes no step (0 exactly; test_bilevel's fixed-point test); one
  # Adam step moves every pixel by ~lr = 1e-2 wherever |∇x l| ≫ ε = 1e-8: L2 ~ lr·√3072 ≈ 0.5.
  assert gt["l2_to_train"] < 1e-2
  # l ≈ 0: θ* is only converged to ||∇E|| < victim.tol and the evaluation's re-solve at
  # x_true to eval.lower_level_tol, each within its tol / wd of the minimiser (E is
  # wd-strongly convex): ||θ* − θ||² ≤ ((1e-5 + 1e-6) / 1e-2)² ≈ 1.2e-6.
  config = smoke_config()
  assert gt["param_distance"] < ((config.victim.tol + config.eval.lower_level_tol)
                                 / config.victim.weight_decay) ** 2
  # The other points start at l ≥ 2 and stay O(0.1) after 30 steps: 1e-3 of them ≫ 1.2e-6.
  others = [r["param_distance"] for r in records if (r["lambda1"], r["lambda2"]) != (1.0, 1.0)]
  assert gt["param_distance"] < 1e-3 * min(others)
  assert gt["ssim_to_train"] > 0.999  # SSIM(x, x) = 1 up to float32 rounding, as above
  results = experiment.load_results(workdir)
  g = list(zip(results["lambda1"], results["lambda2"])).index((1.0, 1.0))
  np.testing.assert_array_equal(results["train_index"][g], np.arange(40))


def test_partition_initialisation_ends_closer_to_the_partition(smoke_run):
  _, records = smoke_run
  part = _point(records, 0.0, 1.0)
  assert part["l2_to_partition"] < part["l2_to_train"]
  assert part["ssim_to_partition"] > part["ssim_to_train"]
  # ... while the attack did reduce l from its value at the partition itself.
  noise = _point(records, 0.0, 0.0)
  assert noise["l2_to_noise"] < noise["l2_to_train"]


def test_the_partition_start_is_traced_along_the_attack(smoke_run):
  """Its mean L2 to the training set, the partition and its start at every logged step
  (`evaluate.trajectory`); the other grid points are not traced (NaN)."""
  workdir, records = smoke_run
  results = experiment.load_results(workdir)
  np.testing.assert_array_equal(results["trace_step"], [0, 10, 20, 30])
  g = list(zip(results["lambda1"], results["lambda2"])).index((0.0, 1.0))
  for name in ("train", "partition", "start"):
    trace = results[f"trace_l2_to_{name}"]
    assert trace.shape == (9, 4) and np.all(np.isfinite(trace[g]))
    assert np.all(np.isnan(np.delete(trace, g, axis=0)))
  # At step 0 the images are the partition images: each pixel (x − mean) + mean carries <= 2
  # roundings of values <= 1 (2u, u = 2^-24), so over D = 32·32·3 values the L2 is <= 2u√D.
  bound = 2 * 2.0**-24 * np.sqrt(32 * 32 * 3)
  assert results["trace_l2_to_start"][g, 0] == 0.0
  assert results["trace_l2_to_partition"][g, 0] <= bound
  # The last step's images are the run's reconstructions: their nearest training image by L2
  # is at most as far as their SSIM-nearest one, up to each distance's float32 relative
  # error (D + 4)·u/2 (`metrics.pairwise_l2`), twice.
  part = _point(records, 0.0, 1.0)
  assert results["trace_l2_to_train"][g, -1] <= part["l2_to_train"] * (
      1 + (32 * 32 * 3 + 4) * 2.0**-24)
  assert results["trace_l2_to_start"][g, -1] > 0


def test_attack_reduces_the_upper_loss(smoke_run):
  workdir, _ = smoke_run
  loss = experiment.load_results(workdir)["history_upper_loss"]
  # Every point but the ground truth, whose l at step 0 is 0, or at most ((victim.tol +
  # lower_level.tol) / wd)² = 4e-6 were the lower level to re-solve; the others start at l ≥ 2.
  config = smoke_config()
  moving = loss[:, 0] > ((config.victim.tol + config.attack.lower_level.tol)
                         / config.victim.weight_decay) ** 2
  assert moving.sum() == 8
  # Not a rounding tolerance: the attack must make progress. Doing nothing keeps the ratio
  # at 1, a wrong-sign hypergradient raises it; measured ≤ 0.17, far from 0.7.
  assert np.all(loss[moving, -1] < 0.7 * loss[moving, 0])


def test_finished_run_is_not_overwritten(smoke_run):
  workdir, _ = smoke_run
  with pytest.raises(FileExistsError, match="finished run"):
    experiment.run(smoke_config(), workdir, "landscape")


@functools.cache
def _grid_problem():
  """The float64 grid problem of `test_vmapped_grid_equals_one_by_one`, built (θ* trained,
  the unbatched step compiled) once for its three batch sizes; call under x64."""
  config = smoke_config()
  config.data.n_per_class = 5
  config.attack.optimizer = "sgd"
  config.attack.lr = 1.0                 # pixel steps ~1e-2 at hypergradients ~1e-2
  config.attack.lower_level.tol = 1e-11  # τ
  config.attack.hypergradient.cg_tol = 1e-12
  config.victim.tol = 1e-10
  task = data.make_task(config.data)
  target = _target(config, task, jnp.float64)
  grid = inits.make_grid(config.init.lambda1, config.init.lambda2)
  x_rnd = inits.uniform(jax.random.key(1), task.train_images.shape, dtype=jnp.float64)
  x0 = inits.grid_images(grid, jnp.asarray(task.train_images, jnp.float64),
                         jnp.asarray(task.partition_images, jnp.float64), x_rnd)
  attack = bilevel.build(target, config.attack, jnp.asarray(task.train_labels, jnp.float64),
                         key=jax.random.key(2))
  single_step = jax.jit(attack.step)
  return config, x0, attack, single_step


@pytest.mark.slow  # compiles the float64 attack step on a grid, several ways
def test_one_start_at_a_time_gives_the_bits_of_the_mapped_grid(x64):
  """On one device at batch 1, `loop.run`'s chunk (`loop._chunk`) calls one jitted
  `run_steps` per start in a Python loop instead of mapping it with `lax.map`
  (`loop.run_grid`): the same program for every start, so the same bits, not only the
  same numbers to a tolerance."""
  _, x0, attack, _ = _grid_problem()
  states = jax.vmap(attack.init)(x0)
  devices = jax.local_devices()[:1]
  looped = loop._chunk(attack.step, 1, devices, 2)(states, 2)
  mapped = jax.jit(lambda s: loop.run_grid(attack.step, s, 2, 1, devices))(states)
  assert float(jnp.max(jnp.abs(looped[0].images - states.images))) > 0  # the attack moved
  jax.tree.map(np.testing.assert_array_equal, looped, mapped)


@pytest.mark.slow  # compiles the float64 attack step on a grid, several ways
def test_the_next_chunk_goes_on_from_the_states_on_their_devices(x64, monkeypatch):
  """`loop._chunk` given ``then`` keeps each start's state on its device (and queues its
  next chunk there, on every device but the first), and the next call given the returned
  states goes on from them (no start is copied to a device again): the bits of a call
  that starts from the states. (Two devices: tests/sharded_grid.py.)"""
  _, x0, attack, _ = _grid_problem()
  chunk = loop._chunk(attack.step, 1, jax.local_devices()[:1], 1)
  first, _ = chunk(jax.vmap(attack.init)(x0), 1, 1)
  copies = []
  device_put = jax.device_put
  monkeypatch.setattr(jax, "device_put", lambda *a: copies.append(a) or device_put(*a))
  queued = chunk(first, 1)
  assert not copies  # from the states on their device, not copied there again
  fresh = loop._chunk(attack.step, 1, jax.local_devices()[:1], 1)(first, 1)
  assert len(copies) == x0.shape[0]  # one copy per start: the path the queue skips
  assert float(jnp.max(jnp.abs(queued[0].images - first.images))) > 0  # the attack moved
  jax.tree.map(np.testing.assert_array_equal, queued, fresh)


@pytest.mark.slow  # compiles the float64 attack step on a grid, several ways
@pytest.mark.parametrize("batch_size", [9, 4, 1])
def test_vmapped_grid_equals_one_by_one(x64, batch_size):
  """The eq. 10 grid as one computation, vmapped whole (9) or in batches (4 leaves a
  remainder, 1 is a sequential map), gives the per-initialisation results.

  Step by step: each outer step of `loop.run_grid` on the grid is compared with
  `attack.step` on each grid point's copy of the same state, so both start from
  identical inputs and may differ only within the solvers' tolerances (a vmapped L-BFGS
  may stop one iteration earlier or later than the unbatched one when ||∇θE|| lands
  near its tolerance; XLA's AVX2 and AVX-512 code round differently), bounded below.
  Plain gradient steps (eq. 7's "sgd"), not Adam: Adam's step lr·m/(√v + ε) amplifies
  a hypergradient difference by up to lr/ε = 1e6 wherever |∇x l| ≲ ε = 1e-8.
  """
  config, x0, attack, single_step = _grid_problem()
  grid_step = jax.jit(lambda s: loop.run_grid(attack.step, s, 1, batch_size))

  # Error argument. Affine victim θ = (w, c), u_i = (x_i, 1), E = (1/n) Σ ℓ(y_i θ·u_i)
  # + (wd/2)||θ||² with ℓ = softplus(−·): 0 < ℓ'' ≤ 1/4, |ℓ'| < 1, |ℓ'''| ≤ ℓ''.
  # E is wd-strongly convex, so a lower-level solve stopped at ||∇θE|| < τ is within
  # τ/wd of θ(x), and the two runs' θ are within δθ = 2τ/wd. The hypergradient of image
  # i is h_i = −(1/n)[ℓ''_i (u_i·v) w + ℓ'_i y_i v_w], v = H⁻¹b, b = 2(θ − θ*), where
  # H = ∇²θE ⪰ (ℓ''_i/n) u_i u_iᵀ + wd I gives |u_i·H⁻¹r| ≤ √(n/(ℓ''_i wd)) ||r||, so
  # ℓ''_i |u_i·H⁻¹r| ≤ γ||r|| with γ = √(n/wd)/2. An error e = H⁻¹∇θE in θ (first
  # order) moves ℓ'_i and ℓ''_i by ≤ γτ and H v by ≤ τ B S/wd (B = ||b||, S = Σ_i ||u_i||),
  # so v by H⁻¹ρ with ||ρ|| ≤ τ(2 + B S)/wd, and h_i by ≤ [(τ/wd)(n B W + 2γB)
  # + ||ρ||(γW + 1/wd)]/n (W = ||w||). CG stops at relative residual cg_tol (the true
  # residual: + ~eps64·κ(H), κ(H) ≤ 1 + (D + 1)/(4 wd)), adding ρ' with ||ρ'|| ≤ that·B.
  # Twice this bounds the two runs' hypergradient difference (2-norm per image, so
  # also per pixel), and lr times it their images after the step (lr_k ≤ lr; the
  # projection onto [0, 1] is 1-Lipschitz). The upper loss l = ||θ − θ*||² differs by
  # ≤ (2√l + δθ)δθ. Float64 rounding (~1e-13 relative: sums of ≤ 3073 terms) and
  # second-order terms (~(τ/wd)²) are negligible. ≤ 3e-5 per step here, against pixel
  # steps ~1e-2.
  tau, wd, lr = config.attack.lower_level.tol, config.victim.weight_decay, config.attack.lr
  eps = np.finfo(np.float64).eps
  delta_theta = 2 * tau / wd

  def image_tolerance(images, theta, loss):
    n, d = images.shape[0], images[0].size
    gamma = 0.5 * np.sqrt(n / wd)
    big_b = 2 * (np.sqrt(loss) + tau / wd)
    big_w = np.linalg.norm(np.asarray(theta["dense"]["kernel"])) + tau / wd
    big_s = np.sum(np.sqrt(np.sum(np.asarray(images).reshape(n, -1) ** 2, axis=1) + 1))
    rho = tau * (2 + big_b * big_s) / wd
    rho_cg = (config.attack.hypergradient.cg_tol + eps * (1 + (d + 1) / (4 * wd))) * big_b
    per_run = ((tau / wd) * (n * big_b * big_w + 2 * gamma * big_b)
               + (rho + rho_cg) * (gamma * big_w + 1 / wd)) / n
    return lr * 2 * per_run

  states = jax.vmap(attack.init)(x0)
  for _ in range(3):  # step 1 starts at θ*, later ones at the batched θ ("previous")
    next_v, metrics_v = grid_step(states)
    for g in range(x0.shape[0]):
      state_g = jax.tree.map(lambda leaf, g=g: leaf[g], states)
      next_g, metrics_g = single_step(state_g)
      loss = float(metrics_g.upper_loss)
      assert float(metrics_g.grad_norm) < tau and float(metrics_v.grad_norm[g, 0]) < tau
      atol = image_tolerance(state_g.images, next_g.theta, loss)
      np.testing.assert_allclose(next_v.images[g], next_g.images, rtol=0, atol=atol)
      if loss > 1e-2:  # every point but the ground truth (l ≈ 0) moves, by >> atol
        assert float(jnp.max(jnp.abs(next_g.images - state_g.images))) > 100 * atol
      np.testing.assert_allclose(metrics_v.upper_loss[g, 0], loss, rtol=3073 * eps,
                                 atol=(2 * np.sqrt(loss) + delta_theta) * delta_theta)
      theta_gap = optax.tree.norm(optax.tree.sub(
          jax.tree.map(lambda t, g=g: t[g], next_v.theta), next_g.theta))
      assert float(theta_gap) <= delta_theta
      assert int(next_v.step[g]) == int(next_g.step)
    states = next_v


@pytest.mark.slow  # the evaluation's searches, several shapes
def test_identical_grid_points_are_evaluated_once(monkeypatch):
  """`evaluate.reconstructions` searches bit-identical grid points once (a landscape's five
  λ2 = 0 points share one noise start; a start the attack leaves unchanged equals its
  reconstruction) and gives each the numbers of its own evaluation. Error argument: the
  two evaluations run the same pairs in programs of other shapes, so SSIM may differ in
  float32 rounding, L2 within twice its bound, and indices and counts not at all where the
  best candidate leads by more than that
  (test_metrics.py::test_nearest_neighbours_per_set_equals_one_search_per_set argues the
  bounds; the premise is checked below)."""
  rng = np.random.default_rng(0)
  sets = {"train": rng.random((6, 16, 16, 1), np.float32),
          "partition": rng.random((5, 16, 16, 1), np.float32)}
  images = rng.random((4, 3, 16, 16, 1), np.float32)
  images[2] = images[3] = images[0]
  for candidates in sets.values():
    top2 = np.sort(np.asarray(ssim.pairwise_ssim(images, candidates)), axis=-1)[..., -2:]
    assert np.min(top2[..., 1] - top2[..., 0]) > 1e-5
  searched = []
  search = ssim.nearest_neighbours_per_set
  monkeypatch.setattr(ssim, "nearest_neighbours_per_set",
                      lambda q, *a, **k: searched.append(q.shape) or search(q, *a, **k))
  out = evaluate.reconstructions(images, None, sets, thresholds=(0.3,))
  assert searched == [(2, 3, 16, 16, 1)]  # points 0 and 1 only
  l2_rtol = 2 * (16 * 16 + 5) * 2.0**-24 / 2  # twice metrics.l2_rows' bound, d = 256
  for g in range(4):
    alone = evaluate.reconstructions(images[g], None, sets, thresholds=(0.3,))
    assert set(alone) == set(out)
    for k, v in alone.items():
      if "ssim" in k and np.issubdtype(v.dtype, np.floating):
        np.testing.assert_allclose(out[k][g], v, rtol=0, atol=1e-5)
      elif k.endswith("_l2"):
        np.testing.assert_allclose(out[k][g], v, rtol=l2_rtol)
      else:
        np.testing.assert_array_equal(out[k][g], v)


def test_identical_grid_points_are_re_solved_once(monkeypatch, x64):
  """`evaluate.param_distances` re-solves bit-identical grid points once and gives each
  its own ||θ* − θ(x)||². On ridge regression, E(θ) = ½||Xθ − y||² + ½ wd ||θ||², θ(x) has
  a closed form. Error argument: L-BFGS stops at ||∇E|| < tol, and E is wd-strongly convex,
  so ||θ − θ(x)|| ≤ δ = tol / wd, and | ||θ* − θ||² − ||θ* − θ(x)||² | ≤ (2||θ* − θ(x)|| + δ) δ;
  the distinct points' exact distances differ by far more, so a point given another's
  number fails."""
  wd, tol = 0.1, 1e-10
  rng = np.random.default_rng(0)
  labels = jnp.asarray([-1.0, 1.0, -1.0, 1.0])
  images = rng.random((5, 4, 2, 2, 1))
  images[2] = images[0]
  images[4] = images[1]
  energy = lambda theta, x, y: 0.5 * (
      jnp.sum((x.reshape(x.shape[0], -1) @ theta["w"] - y) ** 2) + wd * jnp.sum(theta["w"] ** 2))
  theta_star = {"w": jnp.asarray(rng.normal(size=4))}
  mapped = []
  grid_map = evaluate.sharding.grid_map
  monkeypatch.setattr(evaluate.sharding, "grid_map", lambda fn, xs, *a, **k: (
      mapped.append(xs.shape) or grid_map(fn, xs, *a, **k)))
  out = evaluate.param_distances(energy, theta_star, images, labels, tol=tol, max_iter=100,
                                 memory_size=10, batch=1)
  assert mapped == [(3, 4, 2, 2, 1)]  # points 0, 1 and 3 only
  for g in range(5):
    x = images[g].reshape(4, -1)
    exact = np.linalg.solve(x.T @ x + wd * np.eye(4), x.T @ np.asarray(labels))
    gap = np.linalg.norm(np.asarray(theta_star["w"]) - exact)
    delta = tol / wd
    assert abs(out[g] - gap**2) <= (2 * gap + delta) * delta
  assert out[2] == out[0] and out[4] == out[1]


def test_search_progress_counts_each_distinct_pair_once_and_changes_nothing():
  """`evaluate.reconstructions`' ``progress`` (the runner logs the time left from it): called
  as blocks finish, with the (image, candidate) pairs done rising to all of this call's
  pairs: the nearest neighbours of the 2 distinct grid points' 3 images each among the
  6 + 5 candidates, then the per-training-image counts of windows 11 and 3 among the 6
  training images. The results are bitwise those without it: the same programs on the same
  inputs, only waited for one block at a time."""
  rng = np.random.default_rng(0)
  sets = {"train": rng.random((6, 16, 16, 1), np.float32),
          "partition": rng.random((5, 16, 16, 1), np.float32)}
  images = rng.random((3, 3, 16, 16, 1), np.float32)
  images[2] = images[0]
  settings = dict(thresholds=(0.3,), count_windows=(3,), chunk_size=2)
  calls = []
  out = evaluate.reconstructions(images, None, sets, **settings,
                                 progress=lambda done, total: calls.append((done, total)))
  total = 2 * 3 * (6 + 5) + 2 * (2 * 3 * 6)
  done = [d for d, _ in calls]
  assert {t for _, t in calls} == {total} and done[-1] == total
  assert done == sorted(set(done)) and len(done) > 3    # rising, block by block
  alone = evaluate.reconstructions(images, None, sets, **settings)
  assert set(alone) == set(out)
  for k, v in alone.items():
    np.testing.assert_array_equal(out[k], v, err_msg=k)


@pytest.mark.slow  # the evaluation of a :smoke grid
def test_a_landscapes_starts_are_searched_as_mixtures_of_the_three_sets(monkeypatch):
  """`evaluate.reconstructions` with a mixture (how a landscape evaluates its starts) hands
  the search the displayed starts of the distinct grid points with their eq. 10 weights and
  the three sets as bases, and gives the duplicate λ2 = 0 points the numbers of theirs.
  (That the mixture search equals the search of the images, within rounding, is
  test_metrics.py::test_nearest_neighbours_of_mixtures_equal_the_search_of_the_images.)"""
  config = smoke_config()
  task = data.make_task(config.data)
  grid = inits.make_grid(config.init.lambda1, config.init.lambda2)
  x_rnd = inits.uniform(jax.random.key(0), task.train_images.shape, task.mean)
  x0 = np.asarray(inits.grid_images(grid, jnp.asarray(task.train_images),
                                    jnp.asarray(task.partition_images), x_rnd))
  sets = evaluate.comparison_sets(task, x_rnd)
  weights = inits.mixture_weights(grid.lambda1, grid.lambda2)
  mixture = dict(zip(("train", "partition", "noise"), weights.T))
  calls = []
  search = ssim.nearest_neighbours_per_set
  monkeypatch.setattr(ssim, "nearest_neighbours_per_set",
                      lambda q, s, **k: calls.append((q, k["mixture"])) or search(q, s, **k))
  out = evaluate.reconstructions(x0, task.mean, sets, mixture=mixture, thresholds=(0.3,))
  (queries, (w, bases)), = calls
  # Row-major (λ1 outer): points 3 and 6, (λ1, λ2) = (.5, 0) and (1, 0), are point 0's noise.
  distinct = [0, 1, 2, 4, 5, 7, 8]
  assert np.all(weights[[3, 6]] == weights[0])
  np.testing.assert_array_equal(queries, evaluate.to_display(x0[distinct], task.mean))
  np.testing.assert_array_equal(w, weights[distinct])
  np.testing.assert_array_equal(bases, np.stack([sets["train"], sets["partition"],
                                                 sets["noise"]]))
  for v in out.values():
    assert v.shape[0] == x0.shape[0]
    np.testing.assert_array_equal(v[[3, 6]], v[[0, 0]])
  # The start of the pure partition point (λ1, λ2) = (0, 1) is partition image i itself,
  # that of the ground truth (1, 1) training image i: its per-training-image SSIM (the
  # counts' branch) is 1 up to rounding, ≥ 0.3 for all.
  np.testing.assert_array_equal(out["partition_index"][2], np.arange(x0.shape[1]))
  assert out["count_ssim_ge"][8, 0] == x0.shape[1]
  for bad, match in (({"display": "minmax", "mixture": mixture}, "display 'pixels'"),
                     ({"mixture": {"test": weights[:, 0]}}, "weights of comparison sets"),
                     ({"mixture": {}}, "weights of comparison sets")):
    with pytest.raises(ValueError, match=match):
      evaluate.reconstructions(x0, task.mean, sets, **bad)
  with pytest.raises(ValueError, match="not the mixtures"):
    evaluate.reconstructions(x0[:, ::-1], task.mean, sets, mixture=mixture)


@pytest.mark.slow  # three :smoke landscape runs
def test_a_process_searches_the_same_starts_once(tmp_path, monkeypatch):
  """The report runs the affine victim's pure starts again under other optimisers: the
  second run with the same starts, sets and evaluation settings takes the first run's start
  numbers (no second search; they are that search's, so the exact ones), while a run with
  other starts (another seed) searches its own."""
  from trdr.experiment import phases   # noqa: PLC0415
  monkeypatch.setattr(phases, "_START_EVALUATIONS", type(phases._START_EVALUATIONS)())  # pylint: disable=protected-access
  searched = []   # a landscape's start images are the searches with a mixture
  search = ssim.nearest_neighbours_per_set
  monkeypatch.setattr(ssim, "nearest_neighbours_per_set", lambda q, s, **k: searched.append(
      k.get("mixture") is not None) or search(q, s, **k))
  config = smoke_config()
  config.attack.steps, config.attack.log_every = 3, 3
  config.eval.uniform_start_tols = ()
  other_step = config.copy_and_resolve_references()
  other_step.attack.optimizer, other_step.attack.lr_schedule = "sgd", "constant"
  other_seed = config.copy_and_resolve_references()
  other_seed.seed = other_seed.data.seed = 1
  runs = {}
  for name, c in (("first", config), ("other_step", other_step), ("other_seed", other_seed)):
    experiment.run(c, str(tmp_path / name), "landscape")
    runs[name] = files.read_json(tmp_path / name / experiment.LANDSCAPE_FILE)
  assert searched.count(True) == 2   # the start images: the first run's and the other seed's
  start_keys = [k for k in runs["first"][0] if k.startswith(evaluate.START)]
  assert start_keys
  for first, again in zip(runs["first"], runs["other_step"]):
    assert {k: first[k] for k in start_keys} == {k: again[k] for k in start_keys}
  assert any(first[k] != other[k] for first, other in zip(runs["first"], runs["other_seed"])
             for k in start_keys)


@pytest.mark.slow
def test_command_line_with_user_npz_and_class_override(subprocess_env, tmp_path):
  """The README's override example on a user .npz of 28×28 grayscale images, run with
  --overwrite over a finished run of another config: recomputed from scratch, nothing of
  the old run reused.

  The old run is the files a finished landscape leaves (the attack's are not read back
  when a run is replaced, so stand-ins do): another config, landscape.json, a checkpoint
  of step 30 and its metrics lines. 5 images per class and 10 steps, not the config's 20
  and 30: what is tested (the user's data and classes read, the old run replaced) does not
  depend on them.
  """
  rng = np.random.default_rng(0)
  path = tmp_path / "my.npz"
  np.savez(path, train_images=rng.integers(0, 256, (400, 28, 28), dtype=np.uint8),
           train_labels=np.arange(400) % 10,
           test_images=rng.integers(0, 256, (50, 28, 28), dtype=np.uint8),
           test_labels=np.arange(50) % 10)
  workdir = tmp_path / "run"
  workdir.mkdir()
  old = smoke_config()
  old.data.n_per_class = 7
  files.write_json(workdir / rundir.CONFIG_FILE, files.to_jsonable(old))
  files.write_json(workdir / experiment.LANDSCAPE_FILE, [])
  rundir.write_metrics(workdir, [{"step": s} for s in (10, 20, 30)])
  (workdir / rundir.CHECKPOINT_FILE).write_bytes(b"a checkpoint of step 30")
  cmd = [sys.executable, os.path.join(REPO, "experiments", "landscape.py"),
         f"--config={os.path.join(REPO, 'configs', 'bilevel_affine.py')}:smoke",
         f"--workdir={workdir}", "--config.data.source=npz", f"--config.data.path={path}",
         "--config.data.classes=((0,2,4,6,8),(1,3,5,7,9))", "--config.data.n_per_class=5",
         "--config.attack.steps=10"]
  # The mistyped flag fails while parsing, before the work dir is read: it runs beside
  # the refused command.
  failed = subprocess.Popen(cmd + ["--config.attack.stepz=10"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            env=subprocess_env)
  refused = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path,
                           env=subprocess_env, timeout=600)
  assert refused.returncode != 0 and "--overwrite" in refused.stderr
  _, failed_stderr = failed.communicate(timeout=600)
  assert failed.returncode != 0 and "stepz" in failed_stderr
  # One line naming the flag and ml_collections' suggestion, not a traceback.
  assert 'Did you mean "steps"' in failed_stderr and "Traceback" not in failed_stderr
  done = subprocess.run(cmd + ["--overwrite"], capture_output=True, text=True, cwd=tmp_path,
                        env=subprocess_env, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  assert "Resuming" not in done.stderr
  assert sorted(os.listdir(tmp_path)) == ["my.npz", "run"]  # swapped in, nothing left over
  saved = files.read_json(workdir / "config.json")
  assert saved["data"]["classes"] == [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]
  assert saved["data"]["n_per_class"] == 5
  assert _logged_steps(workdir) == [10]
  results = experiment.load_results(str(workdir))
  assert results["final_images"].shape == (9, 10, 28, 28, 1)
  gt = _point(files.read_json(workdir / "landscape.json"), 1.0, 1.0)
  assert gt["l2_to_train"] < 1e-2  # no step at x_true (test_ground_truth_initialisation_...)


@pytest.mark.slow
def test_the_main_jobs_newton_cg_lower_level_keeps_what_lbfgs_finds(smoke_run, like_the_runs,
                                                                    tmp_path):
  """The main job's lower level, Newton–CG (the fast path), against L-BFGS (the paper's
  quasi-Newton, the path before it) on the :smoke landscape.

  What the lower-level tolerance bounds: every solve of both runs stops at ||∇θE|| < tol,
  and E is wd-strongly convex, so every θ(x) of either run lies within tol / wd of the exact
  minimiser at its x: two solves at one x differ by at most 2 tol / wd (tests/test_solver.py
  and test_bilevel.py check the solvers at fixed images). Nothing here depends on the solver
  before the attack: the start images and their evaluation are the same bits. What it does
  not bound: the images after T Adam steps, each step's hypergradient taken at a θ(x) that
  differs by up to 2 tol / wd, feed the next step, with no contraction that would carry a
  bound through. So the findings are held equal: every pure start's nearest neighbour in
  each set, and which set each pure start ends nearest to; and the L2 fields agree within
  what the two runs' images allow (triangle inequality: with the same nearest neighbour,
  | ||x − y|| − ||x' − y|| | ≤ ||x − x'||, averaged over the images). The L-BFGS run is
  compiled as the report's Newton–CG run was (`like_the_runs`), so the start images'
  evaluation is the same programs' bits."""
  newton_dir, newton = smoke_run
  config = smoke_config()
  assert config.attack.lower_level.method == "newton_cg"
  tol = config.attack.lower_level.tol
  like_the_runs(
      "from trdr import experiment\n"
      "from trdr.configs import bilevel_affine\n"
      "config = bilevel_affine.get_config('smoke')\n"
      "config.attack.lower_level.method = 'lbfgs'\n"
      f"experiment.run(config, {str(tmp_path)!r}, 'landscape')\n")
  lbfgs = files.read_json(tmp_path / "landscape.json")
  for a, b in zip(newton, lbfgs):
    assert (a["lambda1"], a["lambda2"]) == (b["lambda1"], b["lambda2"])
    assert {k: v for k, v in a.items() if k.startswith(evaluate.START)} == {
        k: v for k, v in b.items() if k.startswith(evaluate.START)}
    assert a["lower_level_grad_norm_max"] < tol and b["lower_level_grad_norm_max"] < tol
  x, y = experiment.load_results(newton_dir), experiment.load_results(str(tmp_path))
  points = list(zip(x["lambda1"], x["lambda2"]))
  sets = ("train", "partition", "noise")
  for corner in ((0.0, 0.0), (0.0, 1.0), (1.0, 1.0)):
    g = points.index(corner)
    for s in sets:
      np.testing.assert_array_equal(x[f"{s}_index"][g], y[f"{s}_index"][g], err_msg=str(corner))
    a, b = _point(newton, *corner), _point(lbfgs, *corner)
    assert max(sets, key=lambda s: a[f"ssim_to_{s}"]) == max(
        sets, key=lambda s: b[f"ssim_to_{s}"]), corner
    apart = float(np.mean(np.sqrt(np.sum(
        (x["final_images"][g].astype(np.float64) - y["final_images"][g]) ** 2,
        axis=(1, 2, 3)))))
    # Each run's L2 is the root of a float32 sum of C·H·W squares: worst-case rounding
    # (C·H·W) u relative on the sum, half of it on the root (u = 2^-24), for either run.
    rounding = x["final_images"][g][0].size * 2.0**-24
    for s in sets:
      gap = abs(a[f"l2_to_{s}"] - b[f"l2_to_{s}"])
      assert gap <= apart + rounding * max(a[f"l2_to_{s}"], b[f"l2_to_{s}"]), (corner, s, apart)


@pytest.mark.slow
def test_attack_converges_with_the_quasi_newton_hypergradient():
  """Eq. 7's quasi-Newton hypergradient is an approximation, but the attack still drives
  l down from noise and from the partition (smoke size, 40 outer steps)."""
  config = smoke_config()
  config.attack.hypergradient.solve = "quasi_newton"
  config.attack.lower_level.method = "lbfgs"   # its curvature pairs are L-BFGS's
  task = data.make_task(config.data)
  target = _target(config, task)
  x_rnd = inits.uniform(jax.random.key(1), task.train_images.shape)
  starts = jnp.stack([x_rnd, jnp.asarray(task.partition_images)])
  attack = bilevel.build(target, config.attack, jnp.asarray(task.train_labels),
                         key=jax.random.key(2))
  _, step_metrics = jax.jit(lambda s: loop.run_grid(attack.step, s, 40, 1))(
      jax.vmap(attack.init)(starts))
  loss = np.asarray(step_metrics.upper_loss)
  # Measured: noise 8.0 -> 1.9, partition 5.9 -> 0.84 (CG reaches lower, see the benchmark).
  # Not a rounding tolerance: what is tested is that l falls (doing nothing keeps the ratio at
  # 1, a wrong-sign hypergradient raises it), not by how much; 0.5 leaves ×2 over the
  # measured 0.24 to a 40-step float32 trajectory whose L-BFGS pairs shift with rounding.
  assert np.all(loss[:, -1] < 0.5 * loss[:, 0]), loss[:, [0, -1]]
  assert np.all(np.diff(loss, axis=1).mean(axis=1) < 0)


@pytest.mark.slow
def test_float64_switch_runs_the_whole_path_in_float64(x64, tmp_path):
  """config.float64 trains θ*, attacks and saves results in float64, with the same findings."""
  config = smoke_config()
  config.float64 = True
  config.attack.steps = 10
  config.data.n_per_class = 10                      # the path, not the size, is tested
  config.init.lambda1 = config.init.lambda2 = (0.0, 1.0)
  records = experiment.run(config, str(tmp_path), "landscape").records
  results = experiment.load_results(str(tmp_path))
  assert results["final_images"].dtype == np.float64
  assert results["history_upper_loss"].dtype == np.float64
  assert _point(records, 1.0, 1.0)["l2_to_train"] < 1e-2  # no step at x_true (see above)
  part = _point(records, 0.0, 1.0)
  assert part["l2_to_partition"] < part["l2_to_train"]


def test_the_checkpoint_holds_only_what_a_resume_needs(tmp_path, caplog):
  """A :smoke landscape kept with its checkpoint: the file holds the attack state of the
  grid (images, the outer optimiser's state, θ(x), the step), the loss history, the
  metrics and the trace, nothing else; its size is those arrays' bytes plus msgpack's
  framing and the checksum (a few bytes per array: bounded here by 1 % + 64 KiB), and the
  log states it at every checkpoint."""
  import logging   # noqa: PLC0415
  from trdr.attacks import bilevel   # noqa: PLC0415
  from trdr.runtime import rundir   # noqa: PLC0415
  config = smoke_config()
  config.attack.steps, config.attack.log_every = 10, 10
  with caplog.at_level(logging.INFO):
    experiment.run(config, str(tmp_path), "landscape", keep_checkpoint=True)
  saved = rundir.load_checkpoint(str(tmp_path))
  assert set(saved) <= {"state", "history", "metrics", "trace"}
  assert set(saved["state"]) == set(bilevel.AttackState._fields)
  leaves = [x for x in jax.tree.leaves(saved) if isinstance(x, np.ndarray)]
  arrays = sum(x.nbytes for x in leaves)
  size = os.path.getsize(tmp_path / rundir.CHECKPOINT_FILE)
  assert arrays <= size <= 1.01 * arrays + 65536, (size, arrays)
  assert "Checkpoint of step 10:" in caplog.text


def test_the_outer_loop_stays_at_a_minimiser_of_l(tmp_path):
  """Started at the training images x_GT on the affine victim (:smoke), where l is already
  at the lower level's tolerance: Adam with the outer stopping rule takes no step, and
  eq. 7's plain step with the backtracking line search never increases l; both end with l
  within that tolerance of l(x_GT), and with images that still pass Fig. 2's check.

  The tolerance in l: E is μ-strongly convex with μ ≥ weight_decay, so any θ with
  ‖∇θE(θ)‖ ≤ tol lies within tol / μ of the minimiser, and the lower level's θ(x_GT) and
  θ* (trained to the same tol) are within 2·tol / μ of each other: l(x_GT) ≤ (2·tol/μ)²,
  the stopping rule's stop_loss here. The images: Fig. 2's own check (mean SSIM to the
  nearest training image > 0.9, mean L2 < 1; `RULES`), which Adam without the rule fails
  on the :cpu victim (docs/verdicts.md's outer-step table)."""
  from trdr.attacks import bilevel   # noqa: PLC0415
  from trdr.evaluation import metrics, ssim   # noqa: PLC0415
  from trdr.report.verdicts import RULES   # noqa: PLC0415
  config = smoke_config()
  task = data.make_task(config.data)
  target = _target(config, task)
  tol, mu = config.attack.lower_level.tol, config.victim.weight_decay
  assert config.victim.tol == tol   # so that the bound below is the one the report uses
  bound = (2 * tol / mu) ** 2
  assert bilevel.resolvable_loss(config.victim.tol, tol, mu) == pytest.approx(bound, rel=1e-12)
  with pytest.raises(ValueError, match="weight_decay > 0"):
    bilevel.resolvable_loss(tol, tol, 0.0)
  labels = jnp.asarray(task.train_labels)
  x_gt = jnp.asarray(task.train_images)
  ends = {}
  for name, overrides in (("adam, stopping rule", {"stop_loss": bound}),
                          ("plain step, line search", {"optimizer": "sgd_linesearch",
                                                       "lr": 10.0,
                                                       "lr_schedule": "constant"})):
    a = config.attack.copy_and_resolve_references()
    a.update(overrides)
    attack = bilevel.build(target, a, labels, key=jax.random.key(0))
    state = attack.init(x_gt)
    step = jax.jit(attack.step)
    losses, stopped = [], []
    for _ in range(20):
      state, m = step(state)
      losses.append(float(m.upper_loss))
      stopped.append(int(m.stopped))
    ends[name] = (state.images, losses, stopped)
  l0 = ends["adam, stopping rule"][1][0]
  assert l0 <= bound
  images, losses, stopped = ends["adam, stopping rule"]
  assert stopped == [1] * 20 and bool(jnp.all(images == x_gt))
  images, losses, stopped = ends["plain step, line search"]
  assert max(losses) <= l0 + bound and losses[-1] <= l0   # Armijo: l never increases
  for name, (images, _, _) in ends.items():
    pixels = np.clip(np.asarray(images), 0, 1)
    s = np.asarray(ssim.pairwise_ssim(pixels, np.asarray(x_gt))).max(1)
    l2 = np.asarray(metrics.pairwise_l2(pixels, np.asarray(x_gt))).min(1)
    assert s.mean() > RULES["recovered_min_ssim"] and l2.mean() < RULES["recovered_max_l2"], (
        name, s.mean(), l2.mean())


@pytest.mark.slow  # two 30-step runs of fresh lower-level solves (about 2 minutes, 2 cores)
def test_the_stopping_rule_where_fresh_lower_level_solves_stop_at_their_cap():
  """Where the rule matters: Runkel et al.'s lower level (θ0 ~ U(0, 1) drawn afresh at every
  outer step, L-BFGS: `bilevel_affine.paper_lower_level`, the registered reading's) from
  the training images x_GT, with an iteration cap (70 at :smoke; the :cpu runs' 134 of 300
  held steps are this regime) at which some solves reach the tolerance and others stop
  above it. There l(x_GT) crosses the rule's threshold from step to step, so the
  warm-started Newton–CG test above (l always below it) cannot see a rule that holds the
  wrong steps. Checked: the rule holds exactly the steps with l ≤ stop_loss, and some of
  each kind occur (else this is not the regime of the departure); Adam's images stay x_GT
  bit for bit until its first step that is not held; eq. 7's step with the line search and
  the rule ends passing Fig. 2's check (mean SSIM to the nearest training image > 0.9,
  mean L2 < 1). The threshold: `resolvable_loss`, argued in the test above."""
  from trdr.evaluation import metrics   # noqa: PLC0415
  from trdr.report.verdicts import RULES   # noqa: PLC0415
  config = smoke_config()
  bilevel_affine.paper_lower_level(config.attack)
  config.attack.lower_level.max_iter = 70
  task = data.make_task(config.data)
  target = _target(config, task)
  bound = bilevel.resolvable_loss(config.victim.tol, config.attack.lower_level.tol,
                                  config.victim.weight_decay)
  labels, x_gt = jnp.asarray(task.train_labels), jnp.asarray(task.train_images)
  for name, overrides in (("adam", {"stop_loss": bound}),
                          ("line search", {"stop_loss": bound, "optimizer": "sgd_linesearch",
                                           "lr": 10.0, "lr_schedule": "constant"})):
    a = config.attack.copy_and_resolve_references()
    a.update(overrides)
    attack = bilevel.build(target, a, labels, key=jax.random.key(0))
    state = attack.init(x_gt)
    step = jax.jit(attack.step)
    losses, held, unmoved = [], [], []
    for _ in range(30):
      state, m = step(state)
      losses.append(float(m.upper_loss))
      held.append(bool(m.stopped))
      unmoved.append(bool(jnp.all(state.images == x_gt)))
    assert held == [loss <= bound for loss in losses], (name, losses, held)
    if name == "adam":
      assert 0 < sum(held) < len(held), (losses, held)   # the regime of the departure
      first = held.index(False)
      assert all(unmoved[:first]) and not unmoved[first], unmoved
    else:
      pixels = np.clip(np.asarray(state.images), 0, 1)
      s = np.asarray(ssim.pairwise_ssim(pixels, np.asarray(x_gt))).max(1)
      l2 = np.asarray(metrics.pairwise_l2(pixels, np.asarray(x_gt))).min(1)
      assert s.mean() > RULES["recovered_min_ssim"] and l2.mean() < RULES["recovered_max_l2"], (
          s.mean(), l2.mean(), held)


def test_the_bilevel_premise_at_the_training_images_is_measured():
  """`bilevel.training_images_distance` (the bilevel attack's premise): l(x_GT) from θ* is
  0 (the solve stops at once: θ* is stationary to the same tol); from a U(0, 1) draw, on
  the strongly convex affine E (μ ≥ weight decay), within (2·tol/μ)² of 0, the bound of
  test_the_outer_loop_stays_at_a_minimiser_of_l."""
  config = smoke_config()
  task = data.make_task(config.data)
  target = _target(config, task)
  a = config.attack.copy_and_resolve_references()
  out = bilevel.training_images_distance(target, a, task, jnp.float32, jax.random.key(0))
  assert out["l_training_images"] == 0.0 and out["start"] == "previous"
  a.lower_level.start = "uniform"
  out = bilevel.training_images_distance(target, a, task, jnp.float32, jax.random.key(0))
  bound = (2 * a.lower_level.tol / config.victim.weight_decay) ** 2
  assert out["grad_norm"] < a.lower_level.tol and out["l_training_images"] <= bound, out
  # The re-solve is the attack's own lower level (its method): cut to 2 iterations from
  # the U(0, 1) draw, Newton–CG and L-BFGS stop at different θ, and each premise is that
  # method's θ(x_GT), as `make_lower_level` solves it. Tolerance: the same two iterations
  # compiled in two programs may sum in other orders; float32 rounds each operation to
  # 2⁻²⁴ ≈ 6e-8 relative, which over the ≤ 2·(1 + cg_iters) Hessian-vector products of a
  # chain (≈ 2.4e-5) and a conditioning of two Newton steps on this strongly convex E
  # (≤ 10) stays below 1e-3 of l; the two methods' l differ by well over 1e-2.
  energy = functools.partial(victim.energy, apply_fn=target.apply,
                             weight_decay=target.config.weight_decay)
  start = models.uniform_params(jax.random.key(0), target.params)
  x, y = (jnp.asarray(v, jnp.float32) for v in (task.train_images, task.train_labels))
  found = {}
  for method in ("newton_cg", "lbfgs"):
    a.lower_level.method, a.lower_level.max_iter = method, 2
    out = bilevel.training_images_distance(target, a, task, jnp.float32, jax.random.key(0))
    theta, _ = bilevel.make_lower_level(
        energy, max_iter=2, tol=a.lower_level.tol, memory_size=a.lower_level.memory_size,
        solve="cg", method=method, cg_iters=a.lower_level.cg_iters)(start, x, y)
    expected = float(victim.param_distance(target.params, theta))
    assert out["l_training_images"] == pytest.approx(expected, rel=1e-3), (method, out, expected)
    found[method] = out["l_training_images"]
  assert found["newton_cg"] != pytest.approx(found["lbfgs"], rel=1e-2), found
