"""The benchmark's reference: the PyTorch transcription of Haim et al.'s DecoReco iteration
gives trdr's loss, so the benchmark's ratio to it compares the same computation."""

import os
import sys

import dm_pix
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from trdr import models
from trdr.attacks import decoreco, kkt_mlp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "experiments"))
from benchmarks import (  # noqa: E402
  common,
  paper_size,
  torch_reference,  # noqa: E402
)
from benchmarks import decoreco as decoreco_section
from benchmarks import main_job

pytestmark = pytest.mark.slow


def test_the_reference_transcription_gives_trdrs_loss_in_float64(x64):
  pytest.importorskip("torch")
  mlp = models.HaimMLP(widths=(24, 16),
                       activation=decoreco.relu_sigmoid_backward(paper_size.ALPHA))
  apply_fn = lambda p, x: mlp.apply({"params": p}, x)
  params = models.init_params(mlp, jax.random.key(0), (4, 4, 3), jnp.float64)
  images, lambdas, labels = common.decoreco_candidates(jax.random.key(1), 8, (4, 4, 3), 0.3,
                                                       jnp.float64)
  gate = decoreco_section.TRANSCRIPTION_RTOL     # its error argument is beside it
  # One compiled program each (called eagerly, every op would compile on its own).
  loss = jax.jit(lambda x: decoreco.stationarity_loss(params, x, lambdas, labels,
                                                      apply_fn=apply_fn))
  expected = float(loss(images))
  fused = float(jax.jit(lambda x: kkt_mlp.value_and_grad(params, x, lambdas, labels,
                                                         alpha=paper_size.ALPHA)[0])(images))
  first = torch_reference.iteration(params, images, lambdas, labels)()
  assert abs(first - expected) <= gate * abs(expected)
  assert abs(fused - expected) <= gate * abs(expected)
  # Candidates outside the pixel box [−1, 1]: the prior terms count in both, alike.
  moved = images + 1.0
  wrong = float(loss(moved))
  assert abs(torch_reference.iteration(params, moved, lambdas, labels)() - wrong) <= (
      gate * abs(wrong))
  # The gate tells those two losses apart (it is not wider than the difference it guards).
  assert abs(first - wrong) > gate * abs(expected)


def test_the_evaluation_section_finds_the_same_neighbours_and_counts_its_products(capsys):
  """The smoke grid: 9 points, 7 distinct (the three λ2 = 0 points share one noise start),
  20 images each, against 20 + 20 + 20 candidates; the three searches are timed and
  compared (that they agree within rounding is tested in tests/test_metrics.py: the
  printed differences are measurements), and the floor counts 2·C·k²·H'W' = 2·3·121·484
  operations per pair over the distinct points' pairs, and over the three sets'.

  10 images per class, not the smoke config's 20: what is tested (the section's counts,
  its products' formula, that it runs every search) does not depend on the number of
  images, and the searches' pairs fall 4x (measured: 38 -> 25 CPU seconds). 10, not
  fewer, so that both GFLOP counts printed (3 and 1) are not 0."""
  from benchmarks import evaluation
  from trdr.configs import bilevel_affine
  config = bilevel_affine.get_config("smoke")
  config.data.n_per_class = 10
  evaluation.run(config, repeats=1)
  out = capsys.readouterr().out
  assert "9 points (7 distinct) x 20 images against 20 + 20 + 20" in out
  for name in ("images", "mixtures"):
    assert f"{name}: indices that differ " in out and " of 540; max |Δ l2| " in out
  # One device here: the line is printed; its bitwise claim is tested on 2 of 8 devices
  # (tests/sharded_grid.py), not here, where both calls run the same path.
  assert "alternating over all 1 local devices" in out and "(bitwise equal: " in out
  flop = 2 * 3 * 121 * 484 * 7 * 20 * 60
  assert f"its pair products: {flop / 1e9:.0f} GFLOP;" in out
  assert f"the products of the three sets, {3 * flop / 7 / 1e9:.0f} GFLOP" in out


def test_the_main_job_section_times_both_lower_levels_on_the_same_starts(capsys):
  """The :smoke main job, smaller (the 4 pure grid points x 20 images, one chunk of 10 outer
  steps: the section, not the size, is tested), run whole with each lower level: every
  phase and its ratio printed, and the start images' fields, which no lower level touches,
  equal to the bit (|Δ| 0)."""
  from trdr.configs import bilevel_affine
  config = bilevel_affine.get_config("smoke")
  config.data.n_per_class, config.attack.steps = 10, config.attack.log_every
  config.init.lambda1 = config.init.lambda2 = (0.0, 1.0)
  main_job.run(config, repeats=1)
  out = capsys.readouterr().out
  assert "4 grid points x 20 images, 10 outer steps" in out
  for phase in (*main_job.PHASES, "whole run"):
    line = next(line for line in out.splitlines() if line.startswith(phase))
    assert line.rstrip().endswith("x"), line
  deltas = dict(item.rsplit(" ", 1) for item in out.split("Newton–CG: ")[-1].strip().split(", "))
  assert {k: float(v) for k, v in deltas.items() if k.startswith("start_")} == {
      k: 0.0 for k in deltas if k.startswith("start_")}
  assert set(deltas) > {"upper_loss", "param_distance", "ssim_to_train"}


def test_the_conv_section_times_conv3x3_and_nn_conv_on_the_same_network(capsys):
  """The :smoke CNN (channels (4, 8)), 4 candidates, 2 scan steps: both computations at the
  top level and in the scan, each row with both networks' ms / step and their ratio, and
  the agreement check passed (it raises otherwise) with its differences printed; then
  the DecoReco iteration in both autodiff orders, with their ratio, and their agreement;
  before all that, the attack's step on the CNN (`kkt_cnn`, checked against autodiff) beside
  the :smoke MLP's (`kkt_mlp`), with their ratio, and the profile's parts."""
  from benchmarks import conv
  from trdr.attacks import decoreco
  from trdr.configs import decoreco_cifar, decoreco_cnn
  conv.run(decoreco_cnn.get_config("smoke"), steps=2, repeats=1, candidates=4,
           mlp_config=decoreco_cifar.get_config("smoke"))
  out = capsys.readouterr().out
  side, out = out.split("## 3 × 3 convolutions", 1)
  assert "Haim MLP 3072-32-32-1, n = 10, m = 4 candidates" in side
  (row,) = [line for line in side.splitlines() if line.startswith("| ") and "ms /" not in line
            and "`" not in line and "the " not in line]
  cnn, mlp, ratio = [cell.strip() for cell in row.strip().strip("|").split("|")]
  assert float(ratio[:-1]) == pytest.approx(float(cnn) / float(mlp), rel=2e-3, abs=6e-3)
  assert all(text in side for text in conv.PROFILE.values())
  out, orders = out.split("The DecoReco iteration's autodiff order", 1)
  first, second = decoreco.AUTODIFF_ORDERS
  assert f"| {first}, ms / step | {second}, ms / step | {first} / {second} |" in orders
  (row,) = [line for line in orders.splitlines() if line.startswith("| ")
            and "ms / step" not in line]
  a, b, ratio = [cell.strip() for cell in row.strip().strip("|").split("|")]
  assert float(ratio[:-1]) == pytest.approx(float(a) / float(b), rel=2e-3, abs=6e-3)
  assert "ConvNet channels (4, 8), m = 4 candidates 32×32×3, float32, median of 1" in out
  assert "| computation | where | Conv3x3, ms / step | nn.Conv, ms / step | " in out
  rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
          for line in out.splitlines() if line.startswith("| ") and "ms / step" not in line]
  assert [(what.split(" (")[0], where) for what, where, *_ in rows] == [
      (what, where) for what in ("∇x of the logistic loss", "one DecoReco iteration")
      for where in ("top level, one call", "inside `lax.scan`, 2 steps")]
  for _, _, ours, theirs, ratio in rows:
    assert float(ours) > 0 and float(theirs) > 0 and ratio.endswith("×")
    # ms to 4 digits, the ratio to 2 decimals
    assert float(ratio[:-1]) == pytest.approx(float(theirs) / float(ours), rel=2e-3, abs=6e-3)
  checked = dict(item.rsplit(" ", 1) for item in
                 orders.split("The same network: ")[1].split("): ", 1)[1].strip().split(", "))
  compared = ("DecoReco loss", "DecoReco ∇x", "DecoReco ∇λ")
  assert set(checked) == {"logits", "∇x logistic loss", *compared} | {
      f"{name} ({second} vs {first})" for name in compared} | {
      f"{name} (kkt_cnn vs autodiff)" for name in compared}
  gate = conv.RTOL_EPS * float(jnp.finfo(jnp.float32).eps)
  assert all(float(v) <= gate for v in checked.values()), checked


def test_the_conv_sections_check_tells_a_wrong_convolution_from_rounding():
  """nn.Conv on Conv3x3's θ passes `check_agreement`; on θ with one kernel flipped (a
  convolution computed wrong) it raises."""
  from benchmarks import conv
  from trdr.configs import decoreco_cnn
  model = models.build_model(decoreco_cnn.get_config("smoke").victim).clone(
      activation=decoreco.relu_sigmoid_backward(20.0))
  params = models.init_params(model, jax.random.key(0), conv.SHAPE)
  flipped = {**params, "conv_1": {"kernel": params["conv_1"]["kernel"][::-1, ::-1]}}
  images = jax.random.normal(jax.random.key(1), (2, *conv.SHAPE))
  grad = lambda net, p: jax.jit(jax.grad(
      lambda x: jnp.sum(net.apply({"params": p}, x))))(images)
  ours, twin = grad(model, params), conv.flax_twin(model)
  assert conv.check_agreement({"∇x": (ours, grad(twin, params), None)}, jnp.float32)["∇x"] <= (
      conv.RTOL_EPS * float(jnp.finfo(jnp.float32).eps))
  with pytest.raises(ValueError, match="differ in ∇x"):
    conv.check_agreement({"∇x": (ours, grad(twin, flipped), None)}, jnp.float32)


def test_the_dp_section_checks_then_times_both_clipped_sums(capsys):
  """The :smoke DP study's victims (affine n = 40, MLP (32, 32) n = 10, float64): one row
  each with both ways' ms / call and their ratio, the agreement check passed (it raises
  otherwise) with its differences printed; a sum with one example dropped fails it."""
  pytest.importorskip("jax_privacy")
  from benchmarks import dp
  from trdr.configs import dp as dp_config
  dp.run(dp_config.get_config("smoke"), repeats=1)
  out = capsys.readouterr().out
  rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
          for line in out.splitlines() if line.startswith("| ") and "ms / call" not in line]
  assert [(r[0], r[1], r[3]) for r in rows] == [("affine", "40", "float64"),
                                                ("haim_mlp", "10", "float64")]
  for *_, one, vmapped, ratio in rows:
    assert float(one) > 0 and float(vmapped) > 0 and ratio.endswith("×")
    # The times are printed to 4 significant digits (each ≤ 5e-4 relative off), so their
    # quotient is ≤ 1e-3 relative off the true ratio, which is printed to 2 decimals (≤ 0.005
    # off): the two differ by at most the sum (pytest.approx's max of the two is too tight).
    computed = float(vmapped) / float(one)
    assert abs(float(ratio[:-1]) - computed) <= 0.005 + 1.01e-3 * computed, (ratio, computed)
  gate = dp.RTOL_EPS * float(jnp.finfo(jnp.float64).eps)
  checked = [float(item.rsplit(" ", 1)[1])
             for part in out.split("The same sum: ")[1].split("): ", 1)[1].split("; ")
             for item in part.split(": ", 1)[1].split(", ")]
  assert len(checked) == 8 and all(d <= gate for d in checked), checked
  # One term of n = 10 missing: about a tenth of the scale, far beyond rounding.
  terms = np.full((10, 3), 0.1)
  with pytest.raises(ValueError, match="differ in sum"):
    dp.check_agreement({"sum": (terms.sum(0), terms[1:].sum(0), 1.0)}, jnp.float64)


def test_the_pruning_sections_bound_bounds_ssim_and_rules_out_pairs(x64):
  """`pruning.cauchy_schwarz_bound` is an upper bound on dm_pix's SSIM (its docstring's
  proof), on random images and on the shipped CIFAR-10 sample, evaluated in float64 on
  both sides: each is a mean of 3·22² = 1452 terms of a few roundings each, so they carry
  errors <~ 1452 · 20 · 2^-53 ≈ 3e-12; 1e-9 is far above that and far below the ~1e-2 by
  which a wrong formula (a missing clip, a wrong window) would overshoot. The bound is
  attained (1) by identical images and rules out dissimilar pairs (the section's premise
  that it can prune at all)."""
  from benchmarks import pruning
  from trdr import data

  rng = np.random.default_rng(0)
  task = data.make_task(data.default_data_config())
  real = np.asarray(task.train_images[:8], np.float64)
  for q, c in ((rng.random((4, 32, 32, 3)), rng.random((6, 32, 32, 3))),
               (real[:4], real), (0.5 * real[:3] + 0.25, real)):
    bound = np.asarray(pruning.cauchy_schwarz_bound(jnp.asarray(q), jnp.asarray(c)))
    exact = np.asarray(jax.vmap(jax.vmap(dm_pix.ssim, (None, 0)), (0, None))(
        jnp.asarray(q), jnp.asarray(c)))
    assert bound.shape == exact.shape == (len(q), len(c))
    assert np.all(bound >= exact - 1e-9), np.min(bound - exact)
  same = np.asarray(pruning.cauchy_schwarz_bound(jnp.asarray(real[:4]), jnp.asarray(real)))
  assert np.allclose(np.diagonal(same), 1.0, atol=1e-9)
  assert np.any(same < 0.9)  # some pairs a search would skip once it has found the copy


def test_the_step_section_profiles_three_points_at_two_states(capsys):
  """The smoke grid (3 × 3 points; 10 images per class: what is tested does not depend on
  the size): the noise start, the middle point and the ground truth, each at its first
  step and after ``warm_steps``, one row each with the lower level's Newton iterations.
  At the ground truth θ* is θ(x_GT) (the bilevel premise), so its lower level, started at
  θ*, takes 0 iterations; the noise start's first solve, from θ*, takes some."""
  from benchmarks import step
  from trdr.configs import bilevel_affine
  config = bilevel_affine.get_config("smoke")
  config.data.n_per_class = 10
  step.run(config, repeats=1, warm_steps=2)
  rows = [line.split() for line in capsys.readouterr().out.splitlines()
          if line.startswith("(") and " steps " in line]
  assert [" ".join(r[:4]) for r in rows] == [
      f"({a}, {b}), {n} steps" for a, b in (("0.00", "0.00"), ("0.50", "0.50"),
                                            ("1.00", "1.00")) for n in (0, 2)]
  iterations = {" ".join(r[:4]): int(r[4]) for r in rows}
  assert iterations["(1.00, 1.00), 0 steps"] == 0
  assert iterations["(0.00, 0.00), 0 steps"] > 0


def test_the_cold_path_section_reads_the_clis_cache_line():
  """The cold_path section counts a run's compiled and loaded programs from the CLI's last
  log line (`trdr.cli`); the line's wording is the CLI's, so it is parsed as the CLI
  writes it (the section's four whole runs are too long for the suite: make
  benchmark-cold-path)."""
  from benchmarks import cold_path
  from trdr import cli

  use = cli._CacheUse("/tmp/cache (1)")
  use.hits, use.misses, use.saved_s = 34, 42, 13.6
  assert cold_path._CACHE_LINE.findall(use.line()) == [("34", "42")]
  use.hits, use.misses, use.saved_s = 0, 76, 0.0
  assert cold_path._CACHE_LINE.findall(use.line()) == [("0", "76")]
