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


def test_quiz_shows_a_training_image_once():
  """Ranks 1–3 and 5 reconstruct training image 7, rank 4 image 2, rank 6 image 9 and rank
  7 image 2 again: the top picks are the best-ranked reconstruction of each distinct
  training image in rank order, ranks 1, 4, 6 and 8 (found: the :cpu report's quiz showed
  one training image four times)."""
  similarity = np.linspace(1.0, 0.0, 60)       # rank = index + 1
  nearest = np.arange(60) + 100
  nearest[[0, 1, 2, 4]], nearest[[3, 6]], nearest[5] = 7, 2, 9
  q = realism.quiz(similarity, nearest, np.zeros(60))
  np.testing.assert_array_equal(np.delete(q.rank, q.odd), [1, 4, 6, 8])
  assert len(set(nearest[np.delete(q.index, q.odd)])) == 4
  # Two training images in all: two top picks, the odd one after them.
  q = realism.quiz(similarity, np.arange(60) % 2, np.zeros(60))
  np.testing.assert_array_equal(q.rank, [1, 2, 51])
  assert q.odd == 2


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
