"""Figs. 6–8's quiz and realism AUC (trdr.evaluation.realism)."""

import numpy as np
import pytest

from trdr.evaluation import realism, roc


def test_ranks_put_the_most_similar_first_and_break_ties_by_index():
  np.testing.assert_array_equal(realism.ranks([0.2, 0.9, 0.2, 0.5]), [3, 1, 4, 2])


def test_quiz_takes_the_top_four_and_the_most_realistic_low_ranked_one_fourth():
  similarity = np.linspace(1.0, 0.0, 60)       # rank = index + 1
  nearest = np.arange(60)                      # every reconstruction its own training image
  real = np.zeros(60)
  real[57], real[20] = 0.9, 1.0                 # index 20 is ranked above 50: not eligible
  q = realism.quiz(similarity, nearest, real)
  np.testing.assert_array_equal(q.index, [0, 1, 2, 57, 3])
  np.testing.assert_array_equal(q.rank, [1, 2, 3, 58, 4])
  assert q.odd == 3
  with pytest.raises(ValueError, match="more than 50"):
    realism.quiz(similarity[:50], nearest[:50], real[:50])
  with pytest.raises(ValueError, match="1-D"):
    realism.quiz(similarity, nearest, real[:10])
  with pytest.raises(ValueError, match="nearest"):
    realism.quiz(similarity, nearest[:10], real)


def test_quiz_ranks_a_training_image_once():
  """Ranks 1–3 and 5 reconstruct training image 7, rank 4 image 2, rank 6 image 9 and rank
  7 image 2 again: the ranks are over distinct training images (each one's best
  reconstruction), so the top picks are indices 0, 3, 5 and 7 at ranks 1–4 (found: the
  :cpu report's quiz showed one training image four times)."""
  similarity = np.linspace(1.0, 0.0, 60)       # the index's order
  nearest = np.arange(60) + 100
  nearest[[0, 1, 2, 4]], nearest[[3, 6]], nearest[5] = 7, 2, 9
  np.testing.assert_array_equal(realism.distinct_order(similarity, nearest)[:5],
                                [0, 3, 5, 7, 8])
  q = realism.quiz(similarity, nearest, np.zeros(60))
  np.testing.assert_array_equal(np.delete(q.index, q.odd), [0, 3, 5, 7])
  np.testing.assert_array_equal(np.delete(q.rank, q.odd), [1, 2, 3, 4])
  assert q.rank[q.odd] == 51                   # 56 distinct images: the first below 50
  with pytest.raises(ValueError, match="distinct"):  # two training images in all
    realism.quiz(similarity, np.arange(60) % 2, np.zeros(60))


def test_scaled_ranks_are_the_papers_of_1000_candidates():
  assert realism.scaled_ranks(1000) == (10, 50)
  assert realism.scaled_ranks(200) == (4, 10)
  assert realism.scaled_ranks(20) == (4, 4)        # four must fit in the top
  assert realism.scaled_ranks(4000) == (40, 200)
  with pytest.raises(ValueError, match="positive"):
    realism.scaled_ranks(0)


def test_repeated_quiz_success_rate():
  """Top pool realism (0.1, 0.6, 0.7, 0.8, 0.9), four of them shown; low pool 0.5: the
  adversary finds the low-ranked one iff 0.1 is not shown, probability 1/5 exactly.
  Tolerance: 1,000 draws, binomial SE √(0.2 · 0.8 / 1000) = 0.013, five of them."""
  similarity = np.linspace(1.0, 0.0, 40)
  real = np.full(40, 0.5)
  real[:5] = (0.1, 0.6, 0.7, 0.8, 0.9)
  t = realism.repeated_quiz(similarity, np.arange(40), real, top_rank=5, low_rank=20)
  assert abs(t["success"] - 0.2) < 5 * np.sqrt(0.2 * 0.8 / 1000)
  assert t["low"] <= t["success"] <= t["high"] and t["chance"] == 0.2
  assert (t["n_top"], t["n_low"], t["draws"]) == (5, 20, 1000)
  # The low-ranked pool the least realistic: found every time, a degenerate interval.
  real[20:] = 0.0
  t = realism.repeated_quiz(similarity, np.arange(40), real, top_rank=5, low_rank=20)
  assert t["success"] == t["low"] == t["high"] == 1.0
  with pytest.raises(ValueError, match="top_rank"):
    realism.repeated_quiz(similarity, np.arange(40), real, top_rank=3, low_rank=20)
  with pytest.raises(ValueError, match="below 40"):
    realism.repeated_quiz(similarity, np.arange(40), real, top_rank=5, low_rank=40)


def test_auc_ci_covers_its_auc_and_separates_what_is_separated():
  """The one bootstrap AUC interval (`roc.auc_ci`), as `realism.top_vs_low` uses it."""
  rng = np.random.default_rng(0)
  scores = rng.standard_normal(400)
  positive = np.arange(400) < 200
  low, high = roc.auc_ci(scores, positive)
  assert low <= roc.auc(scores, positive) <= high
  # Positives shifted by 3 standard deviations: AUC ≈ Φ(3/√2) = 0.98, interval above 0.5.
  low, high = roc.auc_ci(scores + 3.0 * positive, positive)
  assert low > 0.9 and roc.auc(scores + 3.0 * positive, positive) > low
  assert all(np.isnan(roc.auc_ci(scores, np.zeros(400, bool))))


def test_top_vs_low_compares_ranks_1_to_10_with_ranks_above_50():
  similarity = np.linspace(1.0, 0.0, 100)
  t = realism.top_vs_low(similarity, similarity)   # realism = similarity: perfectly apart
  assert (t["auc"], t["n_top"], t["n_low"]) == (1.0, 10, 50)
  t = realism.top_vs_low(similarity, -similarity)
  assert t["auc"] == 0.0 and t["high"] <= 0.5
