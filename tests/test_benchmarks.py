"""The benchmark's reference: the PyTorch transcription of Haim et al.'s DecoReco iteration
gives trdr's loss, so the benchmark's ratio to it compares the same computation."""

import os
import sys

import jax
import jax.numpy as jnp
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
  """The :smoke main job, smaller (9 grid points x 20 images, one chunk of 10 outer steps:
  the section, not the size, is tested), run whole with each lower level: every phase and
  its ratio printed, and the start images' fields, which no lower level touches, equal to
  the bit (|Δ| 0)."""
  from trdr.configs import bilevel_affine
  config = bilevel_affine.get_config("smoke")
  config.data.n_per_class, config.attack.steps = 10, config.attack.log_every
  main_job.run(config, repeats=1)
  out = capsys.readouterr().out
  assert "9 grid points x 20 images, 10 outer steps" in out
  for phase in (*main_job.PHASES, "whole run"):
    line = next(line for line in out.splitlines() if line.startswith(phase))
    assert line.rstrip().endswith("x"), line
  deltas = dict(item.rsplit(" ", 1) for item in out.split("Newton–CG: ")[-1].strip().split(", "))
  assert {k: float(v) for k, v in deltas.items() if k.startswith("start_")} == {
      k: 0.0 for k in deltas if k.startswith("start_")}
  assert set(deltas) > {"upper_loss", "param_distance", "ssim_to_train"}
