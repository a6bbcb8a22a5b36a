"""The metric registry (trdr/evaluation/registry.py) and the evaluation that reads it: each
entry ranks an image's own copy nearest, the generic search agrees with the SSIM engine,
``eval.metrics`` adds fields and records, ``eval.nearest`` changes the search, and bad
names are refused."""

import numpy as np
import pytest

from trdr.evaluation import evaluate, records, registry


def _images(seed, n, shape=(32, 32, 3)):
  return np.random.default_rng(seed).uniform(0.0, 1.0, (n, *shape)).astype(np.float32)


def test_every_metric_ranks_an_images_own_copy_nearest():
  """Candidates: 6 independent U(0, 1) images (32 × 32, CIFAR's size, which every trunk
  takes); each query is one of them plus noise of std 0.02, far below the spread between
  independent images (per pixel std 0.41), so under any sensible metric the query's own
  image is the nearest, in the entry's direction."""
  candidates = _images(0, 6)
  own = np.array([4, 0, 5, 2])
  queries = np.clip(candidates[own] + np.random.default_rng(1).normal(
      0.0, 0.02, candidates[own].shape), 0.0, 1.0).astype(np.float32)
  for name, metric in registry.METRICS.items():
    try:
      values = np.asarray(metric.pairwise(queries, candidates))
    except ImportError:   # a metric of an optional extra that is not installed
      continue
    assert values.shape == (4, 6), name
    best = values.argmax(1) if metric.higher_is_nearer else values.argmin(1)
    np.testing.assert_array_equal(best, own, err_msg=name)
    index, value = registry.nearest(name, queries, candidates, chunk_size=3)
    np.testing.assert_array_equal(index, own, err_msg=name)
    # Chunks of 3 queries instead of 4 compile another program (the SSIM engine pads each
    # block to its size), which may reorder float32 sums: a few ulps (2^-23 relative each)
    # of the value, and for the distances formed as |q|² + |c|² − 2 q·c (ncc, lpips) a few
    # ulps of the expanded terms: ≤ 2·768 for ncc (D = 768 standardised entries), 2.4e-4
    # per ulp at 3072, so atol 1e-3.
    np.testing.assert_allclose(value, values[np.arange(4), own], rtol=1e-6, atol=1e-3,
                               err_msg=name)


def test_the_default_evaluation_is_the_ssim_engines_and_extra_metrics_add_fields():
  """The default metrics give the fields {set}_index, _ssim, _l2 of the SSIM engine; adding
  "ncc" leaves them bitwise unchanged and adds {set}_ncc, the pair's own NCC distance; the
  records carry ncc_to_{set} beside l2_to and ssim_to, in the registry's order."""
  sets = {"train": _images(2, 5), "partition": _images(3, 4)}
  recon = _images(4, 2 * 3).reshape(2, 3, 32, 32, 3)   # G = 2 grid points of m = 3
  plain = evaluate.reconstructions(recon, None, sets)
  assert sorted(plain) == sorted(f"{s}_{f}" for s in sets for f in ("index", "ssim", "l2"))
  more = evaluate.reconstructions(recon, None, sets, metric_names=("ssim", "l2", "ncc"))
  for k, v in plain.items():
    np.testing.assert_array_equal(more[k], v, err_msg=k)
  for s, c in sets.items():
    pairs = c[more[f"{s}_index"]]
    expected = np.asarray(registry.METRICS["ncc"].pairwise(
        recon.reshape(-1, 32, 32, 3), pairs.reshape(-1, 32, 32, 3))).diagonal()
    # The same pairwise function on the same 6 pairs (one chunk of `of_pairs`): the same
    # program up to XLA's order of the D = 768-term sums; unrelated images are ~1.5e3 apart.
    np.testing.assert_allclose(more[f"{s}_ncc"].ravel(), expected, rtol=1e-5, atol=1e-3)
  lam = np.zeros(2)
  record = records.grid_records(lam, lam, {}, more)[0]
  assert [k for k in record if k.endswith(("_train", "_partition"))] == [
      "l2_to_train", "l2_to_partition", "ssim_to_train", "ssim_to_partition",
      "ncc_to_train", "ncc_to_partition"]
  assert record["ncc_to_train"] == pytest.approx(float(more["train_ncc"][0].mean()))


def test_another_metric_can_drive_the_search():
  """eval.nearest = "l2": each reconstruction's nearest image is its L2-nearest, and its
  "l2" field is that smallest distance (the pairwise values themselves)."""
  sets = {"train": _images(5, 7)}
  recon = _images(6, 4)
  out = evaluate.reconstructions(recon, None, sets, nearest="l2")
  d = np.asarray(registry.METRICS["l2"].pairwise(recon, sets["train"]))
  np.testing.assert_array_equal(out["train_index"], d.argmin(1))
  np.testing.assert_allclose(out["train_l2"], d.min(1), rtol=1e-6)


def test_unknown_or_unsearchable_metrics_are_refused():
  sets = {"train": _images(7, 2)}
  with pytest.raises(ValueError, match="unknown metric 'psnr'"):
    evaluate.reconstructions(_images(8, 1), None, sets, metric_names=("psnr",))
  with pytest.raises(ValueError, match="twice"):
    registry.check(("l2", "l2"), "ssim")
  registry.METRICS["_test"] = registry.Metric("_test", lambda q, c: None, True, False, "")
  try:
    with pytest.raises(ValueError, match="cannot drive"):
      registry.check(("l2",), "_test")
  finally:
    del registry.METRICS["_test"]
