"""The membership measurement: ROC statistics on planted scorers, the controlled and public
starts, and per-image scores on the :smoke membership runs."""

import os
import pathlib
import re
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
import scipy.stats

from trdr import assets, data, report
from trdr.attacks import init as inits
from trdr.configs import membership as membership_config
from trdr.evaluation import roc, ssim
from trdr.report import claims, markdown, membership_rules
from trdr.studies import membership
from trdr.runtime import files

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ------------------------------------------------------------------------------ ROC


def _pairwise_auc(scores, positive):
  """The AUC by its definition: over all (member, non-member) pairs, 1 if the member
  scores higher, ½ for a tie."""
  pos, neg = scores[positive], scores[~positive]
  diff = pos[:, None] - neg[None, :]
  return float(np.mean((diff > 0) + 0.5 * (diff == 0)))


def test_auc_of_separated_identical_reversed_and_random_scores():
  positive = np.array([True, True, True, False, False])
  assert roc.auc([5.0, 4.0, 3.0, 2.0, 1.0], positive) == 1.0
  assert roc.auc([1.0, 2.0, 3.0, 4.0, 5.0], positive) == 0.0
  assert roc.auc(np.full(5, 7.0), positive) == 0.5
  rng = np.random.default_rng(0)
  for _ in range(5):
    scores = rng.integers(0, 4, 30).astype(float)   # many ties
    positive = rng.random(30) < 0.5
    # Both are exact rationals with denominator n_pos · n_neg ≤ 225: equal to rounding.
    assert roc.auc(scores, positive) == pytest.approx(_pairwise_auc(scores, positive),
                                                      abs=1e-12)
  assert np.isnan(roc.auc([1.0, 2.0], [True, True]))
  with pytest.raises(ValueError, match="1-D"):
    roc.auc([1.0, 2.0], [True])
  with pytest.raises(ValueError, match="finite"):
    roc.auc([1.0, np.nan], [True, False])


def test_tpr_at_fpr_never_buys_a_true_positive_with_a_tie():
  # Non-members 10 … 1; members 10.5, 10, 9.5, 5. At FPR ≤ 0.1 one non-member (10) may
  # score above the threshold, so the threshold is 9: members 10.5, 10, 9.5 → 3/4.
  neg = np.arange(10.0, 0.0, -1.0)
  pos = np.array([10.5, 10.0, 9.5, 5.0])
  scores, positive = np.r_[pos, neg], np.r_[np.ones(4, bool), np.zeros(10, bool)]
  assert roc.tpr_at_fpr(scores, positive, 0.1) == 0.75
  assert roc.tpr_at_fpr(scores, positive, 0.0) == 0.25    # only 10.5 > 10
  assert roc.tpr_at_fpr(scores, positive, 1.0) == 1.0
  assert roc.tpr_at_fpr(np.full(14, 3.0), positive, 0.05) == 0.0
  with pytest.raises(ValueError, match="fpr"):
    roc.tpr_at_fpr(scores, positive, 1.5)


def test_tpr_p_value_is_fishers_exact_test_at_the_tpr_threshold():
  """The same example: at FPR ≤ 0.1 the threshold is 9, with 3 of 4 members and 1 of 10
  non-members above it; the p-value is the hypergeometric tail P(X ≥ 3) for 4 draws from
  14 with 4 above the threshold: [C(4,3)C(10,1) + C(4,4)C(10,0)] / C(14,4) = 41 / 1001."""
  neg = np.arange(10.0, 0.0, -1.0)
  pos = np.array([10.5, 10.0, 9.5, 5.0])
  scores, positive = np.r_[pos, neg], np.r_[np.ones(4, bool), np.zeros(10, bool)]
  assert roc.tpr_p_value(scores, positive, 0.1) == pytest.approx(41 / 1001, rel=1e-12)
  assert roc.tpr_p_value(np.full(14, 3.0), positive, 0.05) == 1.0   # nobody above
  row = roc.summary(scores, positive, fprs=(0.1,), n_resamples=100)
  assert row["p_tpr"] == {"0.1": roc.tpr_p_value(scores, positive, 0.1)}
  # The AUC's p-value is the two-sided Mann–Whitney U test's (U = AUC · 4 · 10 = 33).
  assert row["auc"] == 0.825
  assert row["p_auc"] == scipy.stats.mannwhitneyu(pos, neg, alternative="two-sided").pvalue


def test_roc_curve_runs_from_0_0_to_1_1_and_its_area_is_the_auc():
  rng = np.random.default_rng(1)
  scores = np.round(rng.normal(size=200), 1)                # ties between classes
  positive = rng.random(200) < 0.4
  scores[positive] += 0.5
  fpr, tpr = roc.roc_curve(scores, positive)
  assert (fpr[0], tpr[0], fpr[-1], tpr[-1]) == (0.0, 0.0, 1.0, 1.0)
  assert np.all(np.diff(fpr) >= 0) and np.all(np.diff(tpr) >= 0)
  # The trapezoid through every tie block counts a tie as ½, as the AUC does; both are
  # sums of ≤ 200² terms of size 1/(n_pos·n_neg): equal to 1e-12.
  area = float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2))
  assert area == pytest.approx(roc.auc(scores, positive), abs=1e-12)


def _clustered(k=6, rng_seed=0):
  """Scores of k victims whose members sit above their non-members in half the victims and
  below in the other half: pooled, an AUC near 0.5 with a narrow i.i.d. interval; over
  victims, a spread of ±0.76 (a unit shift of two normals: AUC Φ(1/√2) = 0.76 or 0.24)."""
  rng = np.random.default_rng(rng_seed)
  scores, positive, clusters = [], [], []
  for c in range(k):
    n = int(rng.integers(150, 250))
    member = rng.random(n) < 0.4
    scores.append(rng.normal(size=n) + (1.0 if c % 2 else -1.0) * member)
    positive.append(member)
    clusters.append(np.full(n, c))
  return tuple(map(np.concatenate, (scores, positive, clusters)))


def test_the_cluster_bootstraps_resample_auc_is_the_auc_of_the_pooled_images():
  """`roc.auc_cluster_ci` scores a resample w (draws per victim) as wᵀUw / ((wᵀP)(wᵀN)):
  exactly the AUC of the images of the drawn victims pooled, repeats included. Both are
  sums of ≤ 1,500² counts of ½ over one product of counts: equal to float64 rounding."""
  scores, positive, clusters = _clustered()
  k = 6
  u = roc._pair_counts(scores, positive, clusters, k)
  n_pos, n_neg = (np.bincount(clusters[m], minlength=k) for m in (positive, ~positive))
  for w in ([2, 0, 1, 1, 0, 2], [0, 0, 0, 0, 6, 0], [1, 1, 1, 1, 1, 1]):
    w = np.asarray(w, np.float64)
    pooled = np.concatenate([np.flatnonzero(clusters == c) for c in range(k)
                             for _ in range(int(w[c]))])
    assert w @ u @ w / ((w @ n_pos) * (w @ n_neg)) == pytest.approx(
        roc.auc(scores[pooled], positive[pooled]), abs=1e-12)


def test_the_ci_over_victims_carries_the_spread_the_image_ci_leaves_out():
  """Half the victims leak one way, half the other: the pooled AUC is near 0.5 and the
  i.i.d. interval over ~1,200 images is narrow (half-width ≈ 1.96 · 0.017 for n₊ ≈ 480,
  n₋ ≈ 720 under the null), while the victims' own AUCs are 0.76 or 0.24 (sd ≈ 0.035 each
  over ~80 members and ~120 non-members). The interval over victims, Student t of the six
  AUCs (sd ≈ 0.28, t₅ = 2.57: half-width ≈ 0.29), must reach far beyond the image CI on
  both sides; so must the cluster bootstrap's: a resample draws a +1 victim with
  probability ½ six times, and at least five of one kind (pooled AUC beyond ≈ 0.33 or
  0.67) has probability 2 · 7/64 ≈ 0.22, so its 2.5 % and 97.5 % percentiles lie beyond
  0.4 and 0.6."""
  scores, positive, clusters = _clustered()
  row = roc.summary(scores, positive, clusters=clusters)
  assert row["clusters"] == 6 and row["cluster_ids"] == list(range(6))
  for c, a in zip(row["cluster_ids"], row["per_cluster"]):
    assert abs(a - (0.76 if c % 2 else 0.24)) < 0.12, (c, a)   # 3.5 sd
  image_low, image_high = row["ci_images"]
  assert image_high - image_low < 0.1
  for low, high in (row["ci"], row["ci_bootstrap"]):
    assert low < 0.4 < 0.6 < high and low < image_low and high > image_high
  assert row["ci"][0] <= np.mean(row["per_cluster"]) <= row["ci"][1]
  # With one victim there is no interval over victims, and no "cannot tell".
  one = roc.summary(scores[clusters == 0], positive[clusters == 0],
                    clusters=clusters[clusters == 0])
  assert one["clusters"] == 1 and np.isnan(one["ci"]).all()
  assert membership_rules.chance_answer({**one, "informative": True}) != (
      membership_rules.CANNOT_TELL)


def test_the_interval_over_victims_of_a_random_score_covers_0_5_at_its_level():
  """Three victims, a score that knows nothing: the t interval of the three AUCs covers 0.5
  in about 95 % of 200 experiments (binomial sd 1.5 %: 89 % is 4 sd below), where the
  cluster bootstrap's percentile interval (ten distinct resamples of three victims) covers
  it markedly less often (about three in four): the reason the rule uses the t interval."""
  rng = np.random.default_rng(1)
  clusters = np.repeat(np.arange(3), 100)
  covered = {"t": 0, "bootstrap": 0}
  for _ in range(200):
    scores, positive = rng.normal(size=300), rng.random(300) < 0.5
    per_victim = list(roc.auc_per_cluster(scores, positive, clusters).values())
    for k, (low, high) in (("t", roc.mean_ci(per_victim)), ("bootstrap", roc.auc_cluster_ci(
        scores, positive, clusters, n_resamples=200))):
      covered[k] += low <= 0.5 <= high
  assert covered["t"] >= 0.89 * 200, covered
  assert covered["bootstrap"] < covered["t"] - 0.05 * 200, covered


def _planted(n_images=600, seeds=(0, 1, 3, 2), natural_fraction=0.8, rng_seed=0):
  """`membership.per_image`-shaped images of one attack whose membership is random, with a
  scorer that knows it, one that ignores it, and images that are not natural-looking.
  Victim 2 is the adversary's shadow at ":smoke" (``selection_victims``): three targets."""
  rng = np.random.default_rng(rng_seed)
  n = n_images * len(seeds)
  member = rng.random(n) < 0.5
  natural = np.where(rng.random(n) < natural_fraction, 0.9, 0.0)
  knows = member + 0.01 * rng.normal(size=n)
  knows[natural == 0.0] = -1.0           # would spoil the AUC if the unnatural ones counted
  stage = {"member": member, "non_member": ~member, "member_ssim": member, "member_l2": member,
           "best_buddy": np.zeros(n, bool),
           "natural_ssim": natural,
           "scores": {"knows": knows, "random": rng.normal(size=n)}}
  return {"kind": np.full(n, "noise"), "seed": np.repeat(seeds, n_images),
          "victim": np.repeat(seeds, n_images),   # one start seed per victim, as configured
          "start_member": np.full(n, -1, np.int8), "grid_point": np.repeat(seeds, n_images),
          "reconstruction": stage, "start": {**stage, "scores": {
              "random": rng.normal(size=n), "knows": rng.normal(size=n)}}}


def test_planted_scorers_give_auc_1_and_0_5_with_cis_that_cover_them():
  """Acceptance 1: a scorer that knows membership and one that is random."""
  config = membership_config.get_config("smoke")
  measured = membership.measure({"planted": _planted()}, config)
  rows = {(r["stage"], r["score"]): r for r in measured["rows"]}
  knows, random = rows["reconstruction", "knows"], rows["reconstruction", "random"]
  assert knows["auc"] == 1.0 and knows["ci"][0] <= 1.0 <= knows["ci"][1]
  assert knows["tpr_at_fpr"]["0.01"] == 1.0 and knows["per_cluster"] == [1.0, 1.0, 1.0]
  assert random["ci"][0] <= 0.5 <= random["ci"][1]
  # Under the null the AUC has sd √((n₊ + n₋ + 1) / (12 n₊ n₋)) (Mann–Whitney); 4 sd
  # bounds it with probability > 0.9999.
  n_pos, n_neg = random["members"], random["non_members"]
  assert abs(random["auc"] - 0.5) <= 4 * np.sqrt((n_pos + n_neg + 1) / (12 * n_pos * n_neg))
  assert n_pos + n_neg < 0.9 * 1800            # the unnatural ones left out
  assert "knows" in {k.split("/")[-1] for k in measured["roc"]}
  out = membership_rules.verdict_membership_chance(measured)
  assert out["checks"] == {"planted, noise: cannot tell": False}


def test_each_attack_and_start_kind_reads_as_one_plain_sentence():
  """The report's sentence per attack × start kind and claim says what the rule answers and
  why: a scorer that knows membership tells better than chance (the smallest p over
  victims named), and with certainty (its top k all members, the lower bound named); no
  natural image: too few."""
  config = membership_config.get_config("smoke")
  measured = membership.measure({"planted": _planted()}, config)
  chance = membership_rules.verdict_membership_chance(measured)
  (sentence,) = chance["sentences"]
  assert sentence.startswith("planted, noise starts: an adversary can tell better than "
                             "chance (knows: can tell (AUC 1.000"), sentence
  assert "p over 3 victims" in sentence
  # What the attack adds over the same score on each victim's own start images (there
  # random: its AUC within 4 sd ≈ 0.1 of 0.5 over about 240 + 240 images a victim).
  (added,) = re.findall(r"reconstruction − start \+(\d\.\d+)", sentence)
  assert 0.4 < float(added) < 0.6, sentence   # 0.5 − (start AUC − 0.5), signed
  (certain,) = membership_rules.verdict_membership(measured)["sentences"]
  assert certain.startswith("planted, noise starts: an adversary can tell with certainty "
                            "(knows: can tell (top "), certain
  blind = membership.measure({"planted": _planted(natural_fraction=0.0)}, config)
  for verdict in (membership_rules.verdict_membership(blind),
                  membership_rules.verdict_membership_chance(blind)):
    (sentence,) = verdict["sentences"]
    assert sentence.startswith("planted, noise starts: too few natural-looking members"), (
        sentence)
    assert verdict["verdict"] == "uninformative"


def test_tpr_at_low_fpr_is_shown_only_where_the_non_members_resolve_it():
  """The tables show TPR at an FPR only with ≥ 1 / FPR non-members (with fewer, the
  threshold that allows FPR ≤ α allows no false positive: the TPR at FPR 0); the ROC is on
  log-log axes, every point at or above the floor (Carlini et al. 2022's convention)."""
  from trdr.report import figures, markdown  # noqa: PLC0415  (matplotlib)

  row = {"non_members": 238, "tpr_at_fpr": {"0.001": 0.25, "0.01": 0.125, "0.1": 0.5}}
  assert markdown.tpr_cell(row, "0.001") == "—, N too small (238 < 1000)"
  assert markdown.tpr_cell(row, "0.01") == "0.125"
  assert markdown.tpr_cell({**row, "non_members": 99}, "0.01") == "—, N too small (99 < 100)"
  assert markdown.tpr_cell({**row, "non_members": 100}, "0.01") == "0.125"
  config = membership_config.get_config("smoke")
  measured = membership.measure({"planted": _planted()}, config)
  table = "\n".join(markdown.membership_markdown(measured))
  non_members = {r["non_members"] for r in measured["rows"] if r["informative"]}
  assert max(non_members) < 1000 and "N too small" in table   # 0.1 % is not resolved here
  fig = figures.membership_figure(measured)
  try:
    drawn = [ax for ax in fig.axes if ax.lines]
    assert drawn and all(ax.get_xscale() == ax.get_yscale() == "log" for ax in drawn)
    for ax in drawn:
      for line in ax.lines:
        assert np.min(line.get_xdata()) >= figures.ROC_FLOOR
        assert np.min(line.get_ydata()) >= figures.ROC_FLOOR
  finally:
    import matplotlib.pyplot as plt  # noqa: PLC0415

    plt.close(fig)


def test_the_random_scorers_ci_covers_0_5_about_95_percent_of_the_time():
  """The bootstrap CI is calibrated: over 40 planted draws of a random scorer, the 95 % CI
  covers 0.5 at least 33 times (P(X < 33) < 1e-3 for X ~ Binomial(40, 0.95); a badly
  undercovering CI, e.g. one at 80 %, fails with probability > 0.9)."""
  covered = 0
  for seed in range(40):
    rng = np.random.default_rng(100 + seed)
    positive = rng.random(200) < 0.5
    low, high = roc.auc_ci(rng.normal(size=200), positive, n_resamples=500, seed=seed)
    covered += low <= 0.5 <= high
  assert covered >= 33


def test_measure_needs_min_per_class_members_and_non_members():
  config = membership_config.get_config("smoke")
  planted = _planted(n_images=20, seeds=(0,))
  config.min_per_class = 100
  rows = membership.measure({"planted": planted}, config)["rows"]
  assert not any(r["informative"] for r in rows) and not any("auc" in r for r in rows)


# ----------------------------------------------------------------------- the starts


@pytest.fixture(scope="module")
def task():
  config = data.default_data_config()
  config.n_per_class = 10
  return data.make_task(config)


def test_mixed_starts_are_training_or_partition_images_as_recorded(task):
  key = jax.random.key(3)
  images, labels = inits.candidates("mixed", key, task, jnp.float32)
  member = inits.start_membership("mixed", key, len(labels))
  assert set(np.unique(member)) == {0, 1}                 # both occur at n = 20
  for i, m in enumerate(member):
    expected = task.train_images[i] if m == 1 else task.partition_images[i]
    np.testing.assert_array_equal(images[i], expected)
  np.testing.assert_array_equal(labels, task.train_labels)
  assert (inits.start_membership("public", key, 3) == 0).all()
  assert (inits.start_membership("uniform", key, 3) == -1).all()


def test_public_starts_are_distinct_test_images_of_each_label(task):
  images, labels = inits.candidates("public", jax.random.key(0), task, jnp.float32)
  pool = task.test_images[inits.PUBLIC_STARTS]
  pool_labels = task.test_labels[inits.PUBLIC_STARTS]
  index = [int(np.flatnonzero((pool == x).all(axis=(1, 2, 3)))[0]) for x in np.asarray(images)]
  assert len(set(index)) == len(index)
  np.testing.assert_array_equal(pool_labels[index], labels)
  reference = task.test_images[inits.PUBLIC_REFERENCE]
  assert not any((reference == x).all(axis=(1, 2, 3)).any() for x in np.asarray(images))
  few = task._replace(test_images=task.test_images[:6], test_labels=task.test_labels[:6])
  with pytest.raises(ValueError, match="test images of class"):
    inits.candidates("public", jax.random.key(0), few, jnp.float32)


# ----------------------------------------------------------- per image, on :smoke runs


def _assert_per_image(values, grid_point):
  """Fails when a score is one number per grid point (a per-run number broadcast)."""
  for g in np.unique(grid_point):
    assert np.unique(values[grid_point == g]).size > 1, f"constant within grid point {g}"


def test_labels_have_an_excluded_middle(task):
  """A training image itself is a member (its own best buddy at SSIM 1); U(0, 1) noise is a
  non-member (SSIM to every training image far below 0.3); a blend 0.45 · training image +
  0.55 · noise lands between the two levels (checked below) and is excluded, as is a copy
  of a training image when another copy is that image's best buddy (only one of two
  duplicates can be)."""
  train = task.to_pixels(task.train_images)
  noise = np.random.default_rng(0).uniform(size=train[:3].shape).astype(train.dtype)
  blend = 0.45 * train[3] + 0.55 * noise[0]
  assert 0.3 <= float(np.max(ssim.pairwise_ssim(blend[None], train))) < 0.4
  images = np.stack([train[0], noise[1], blend, train[2], train[2]])[None]
  truth = membership._ground_truth(images, train, len(train), np.zeros((1, 5)),
                                   np.zeros((1, 5)), (0.4, 0.3), chunk_size=8)
  member, non_member = truth["member"][0], truth["non_member"][0]
  assert member.tolist()[:3] == [True, False, False]
  assert non_member.tolist() == [False, True, False, False, False]
  assert member[3] != member[4]


def test_the_per_image_check_fails_on_a_broadcast_number():
  grid_point = np.repeat(np.arange(3), 4)
  with pytest.raises(AssertionError, match="constant within grid point"):
    _assert_per_image(np.repeat([0.1, 0.2, 0.3], 4), grid_point)


@pytest.mark.parametrize("attack", sorted(membership_config.get_config("smoke").attacks))
def test_every_score_is_computed_per_image(smoke_membership_dir, attack):
  """Acceptance 3, on the :smoke membership runs: no score is constant within a
  grid point, and the loss and margin are the victim's at that very image."""
  runs = smoke_membership_dir
  run_dir = membership.run_dir(runs, attack, 0)
  smoke = membership_config.get_config("smoke")
  shadows = membership.shadow_victims(  # the report's, reused
      membership_config.victim_config(smoke.attacks[attack], 0), smoke.shadows,
      membership.shadow_dir(runs, attack, 0))
  per = membership.per_image(run_dir, shadows=shadows)
  assert "lira" in per["reconstruction"]["scores"] and "lira" in per["start"]["scores"]
  n = per["grid_point"].size
  for stage in membership.STAGES:
    assert set(per[stage]) >= {"member", "non_member", "member_ssim", "member_l2",
                               "best_buddy", "natural_ssim"}
    assert not np.any(per[stage]["member"] & per[stage]["non_member"])
  # The levels reach the labels: none can pass SSIM ≥ 2, none is below −1.
  unreachable = membership.per_image(run_dir, levels=(2.0, -1.0))
  for stage in membership.STAGES:
    assert not unreachable[stage]["member"].any() and not unreachable[stage]["non_member"].any()
    for name, values in per[stage]["scores"].items():
      assert name in membership.SCORES and values.shape == (n,), (stage, name)
      _assert_per_image(values, per["grid_point"])
  # One image's score from scratch: Φ at that image only.
  from trdr import victim
  from trdr.runtime import rundir

  config = ml_collections.ConfigDict(files.read_json(os.path.join(run_dir, rundir.CONFIG_FILE)))
  with np.load(os.path.join(run_dir, "results.npz")) as saved:
    image, label = saved["final_images"][1, 3], saved["labels"][3]
  with jax.enable_x64(bool(config.float64)):
    target = victim.load_saved(config, os.path.join(run_dir, "victim"), image.shape)
    x = jnp.asarray(image[None])
    logit = float(target.apply(target.params, x)[0])
    # Forward error of a ReLU network computed in another order (a batch of one vs of all):
    # |fl(Φ) − Φ| ≤ γ · Φ(x; |θ|) evaluated at |x|, γ = layers · fan-in · ε (Higham's
    # |fl(Wx) − Wx| ≤ γ_n |W||x| per layer; with |θ| and |x| no ReLU cuts a term).
    bound = float(target.apply(jax.tree.map(jnp.abs, target.params), jnp.abs(x))[0])
    gamma = 3 * image.size * float(jnp.finfo(x.dtype).eps)
  m = per["grid_point"].tolist().count(0)
  assert abs(per["reconstruction"]["scores"]["margin"][m + 3] - label * logit) <= (
      gamma * bound)


@pytest.mark.parametrize("size", ["cpu", "smoke"])
def test_make_membership_and_make_figures_share_their_runs(size):
  """`make membership` writes where `make figures` runs the membership experiment
  (runs/report_SIZE/membership), with the config the report runs there, so either reuses
  the runs the other finished (`experiment.run_or_reuse` refuses a finished run of another
  config rather than recompute it)."""
  from trdr.configs import report  # noqa: PLC0415

  assert files.dumps_json(report.get_config(size).membership.to_dict()) == files.dumps_json(
      membership_config.get_config(size).to_dict())
  commands = {target: subprocess.run(
      ["make", "-n", target, f"SIZE={size}", "RUNS=R"], cwd=REPO, check=True,
      capture_output=True, text=True).stdout for target in ("membership", "figures")}
  assert f"--workdir=R/report_{size}/membership" in commands["membership"].split()
  # and trdr.report.run runs membership in its work dir's membership/
  assert f"--workdir=R/report_{size}" in commands["figures"].split()
  assert f"--config=configs/membership.py:{size}" in commands["membership"].split()


def test_a_victims_scores_are_kept_and_reused_while_their_inputs_are_unchanged(
    smoke_membership_dir, like_the_runs, tmp_path, monkeypatch):
  """`membership.run` keeps each victim's `per_image` (`per_image_or_reuse`): the :smoke
  membership run's kept scores are the arrays `per_image` computes now (the same programs on the
  same inputs, compiled as the run's were, `like_the_runs`: the same bits), a rerun reads
  them instead of scoring again and writes the same membership.json byte for byte, and
  other settings or an unreadable file are scored again."""
  smoke = membership_config.get_config("smoke")
  source = smoke_membership_dir
  attack = "bilevel_affine"
  computed = tmp_path / "per_image.npz"
  like_the_runs(
      "import numpy as np\n"
      "from flax import traverse_util\n"
      "from trdr.configs import membership as membership_config\n"
      "from trdr.studies import membership\n"
      "smoke = membership_config.get_config('smoke')\n"
      f"source, attack = {source!r}, {attack!r}\n"
      "shadows = membership.shadow_victims(membership_config.victim_config(\n"
      "    smoke.attacks[attack], 0), smoke.shadows, membership.shadow_dir(source, attack, 0))\n"
      "fresh = membership.per_image(\n"
      "    membership.run_dir(source, attack, 0), smoke.chunk_size, smoke.loo_per_start,\n"
      "    (smoke.member_min_ssim, smoke.non_member_max_ssim), tuple(smoke.label_windows),\n"
      "    shadows, smoke.natural_threshold)\n"
      f"np.savez({str(computed)!r}, **traverse_util.flatten_dict(fresh, sep='/'))\n")
  with np.load(computed) as saved:
    fresh = {name: saved[name] for name in saved.files}
  assert "reconstruction/scores/loo" in fresh and "start/scores/lira" in fresh
  # Leave-one-out only at natural-looking reconstructions (the rule scores no other), the
  # same images at both stages.
  loo = np.isfinite(fresh["reconstruction/scores/loo"])
  assert loo.any()
  assert np.all(fresh["reconstruction/natural_ssim"][loo] >= smoke.natural_threshold)
  np.testing.assert_array_equal(loo, np.isfinite(fresh["start/scores/loo"]))
  with np.load(membership.scores_path(source, attack, 0)) as kept:
    assert set(kept.files) == {*fresh, membership._KEY}
    for name, value in fresh.items():
      assert kept[name].dtype == np.asarray(value).dtype, name
      np.testing.assert_array_equal(kept[name], value, err_msg=name)

  workdir = tmp_path / "membership"
  shutil.copytree(source, workdir)

  def scored_again(*args, **kwargs):
    raise AssertionError("scored again")

  monkeypatch.setattr(membership, "per_image", scored_again)
  membership.run(smoke, str(workdir))
  measured = membership.MEASURED_FILE
  assert (workdir / measured).read_bytes() == pathlib.Path(source, measured).read_bytes()
  smoke.loo_per_start += 1
  with pytest.raises(AssertionError, match="scored again"):
    membership.run(smoke, str(workdir))
  smoke.loo_per_start -= 1
  with open(membership.scores_path(str(workdir), attack, 0), "r+b") as f:
    f.truncate(100)
  with pytest.raises(AssertionError, match="scored again"):
    membership.run(smoke, str(workdir))
  assert (workdir / measured).read_bytes() == pathlib.Path(source, measured).read_bytes()


def test_a_scores_file_without_start_ssim_gains_it_without_scoring_again(
    smoke_membership_dir, tmp_path, monkeypatch):
  """A victim's kept scores written before `per_image` kept "start_ssim" (each
  reconstruction's SSIM to its own start, the public-start confound's input) gain it from
  the run's images, without scoring again (no leave-one-out re-solve), equal to what
  `per_image` kept, and the file is rewritten with it."""
  smoke = membership_config.get_config("smoke")
  attack = "bilevel_affine"
  workdir = tmp_path / "membership"
  shutil.copytree(smoke_membership_dir, workdir)
  path = membership.scores_path(str(workdir), attack, 0)
  with np.load(path) as kept:
    flat = {k: kept[k] for k in kept.files}
  expected = flat.pop("reconstruction/start_ssim")
  files.save_npz(path, **flat)   # as trdr before "start_ssim" wrote it

  def scored_again(*args, **kwargs):
    raise AssertionError("scored again")

  monkeypatch.setattr(membership, "per_image", scored_again)
  shadows = membership.shadow_victims(membership_config.victim_config(
      smoke.attacks[attack], 0), smoke.shadows, membership.shadow_dir(str(workdir), attack, 0))
  out = membership.per_image_or_reuse(
      path, membership.run_dir(str(workdir), attack, 0), smoke.chunk_size,
      smoke.loo_per_start, (smoke.member_min_ssim, smoke.non_member_max_ssim),
      tuple(smoke.label_windows), shadows, smoke.natural_threshold)
  np.testing.assert_array_equal(out["reconstruction"]["start_ssim"], expected)
  with np.load(path) as kept:
    np.testing.assert_array_equal(kept["reconstruction/start_ssim"], expected)
  assert np.all((expected >= -1) & (expected <= 1 + 1e-6))


def test_the_controls_see_membership_at_smoke(smoke_membership_dir):
  """On the :smoke membership runs: after each attack, training-image starts are told from
  partition-image starts by the pooled test (the positive control's signal is there), and
  the oracle (the training-image starts, every one a member) is told with certainty.

  Why :smoke can: ~40 natural-looking reconstructions per side over its two victims
  (configs/membership.py). Under the null, the AUC's standard error is
  √((m + n + 1) / (12 m n)) ≈ 0.066 at m = n = 40, so a score that keeps an AUC of 0.75
  (the start images' scores are at ≈ 0.9 at :smoke) has z ≈ 3.8, p ≈ 1e-4, below the
  Bonferroni level 0.05 / (2 · scores) ≈ 2.5e-3. The rule's own test is over victims, and
  two victims cannot decide it, so its answer is only required to be measured. The oracle
  names every one of its images correctly (precision 1 at every k), and the rule calls
  that certain exactly when there are enough of them: all-member selections of m images
  have the lower bound α^(1/m), ≥ 0.95 from the row's stated "needed" on (:smoke's ~39
  training-image starts fall short of it; :cpu's ~250 do not). The negative control must
  be measured (enough non-members on both sides), and its answer is reported, not
  asserted: under the null it may raise an alarm with probability ≤ 0.05
  (tests/test_membership_rules.py checks the rules on planted scores)."""
  measured = files.read_json(
      os.path.join(smoke_membership_dir, membership.MEASURED_FILE))
  answers = membership_rules.membership_controls(measured)
  assert set(answers) == set(membership_config.get_config("smoke").attacks)
  for attack, answer in answers.items():
    positive = [r for r in measured["controls"]
                if r["attack"] == attack and r["control"] == "positive" and r["informative"]]
    # The pooled test finds the signal; the rule's test over two victims cannot decide
    # (a t-test with one degree of freedom), so the rule's answer is only measured here.
    assert min(r["p_auc"] for r in positive) < 0.05 / (2 * len(positive)), attack
    assert answer["positive"] is not None and answer["negative"] is not None, attack
    oracle = [r for r in measured["controls"] if r["attack"] == attack
              and r["control"] == "oracle" and r["members"] >= measured["min_per_class"]]
    assert oracle and all(r["non_members"] == 0 and all(m == n for _, n, m in r["top"])
                          for r in oracle), attack
    said = [membership_rules.certainty(r, measured["min_per_class"], scores=len(oracle))
            for r in oracle]
    assert answer["oracle"] == any(s["selected"] >= s["needed"] for s in said), (attack, said)


def test_membership_md_says_where_its_numbers_come_from(smoke_membership_dir):
  """membership.md's header names the size, the victims (data draws), the machine and the
  JAX version it was written with: the page `make membership-doc` copies into docs/."""
  measured = files.read_json(
      os.path.join(smoke_membership_dir, membership.MEASURED_FILE))
  results = claims.verdicts({"membership": measured})
  page = markdown.membership_page(measured, results, report.provenance("smoke"))
  header = page.splitlines()[2]
  assert header.startswith("Generated by `make membership`"), header
  assert "Size `smoke`, 2 victims per attack (data draws 0, 1)." in header, header
  assert f"jax {jax.__version__}" in header, header


def test_membership_md_answers_first_and_says_each_sentence_once(smoke_membership_dir):
  """membership.md opens with the answers (per claim: verdict, baseline, one sentence per
  attack and start kind; each attack's controls) before the rules and the tables, and
  says each of those sentences once."""
  measured = files.read_json(
      os.path.join(smoke_membership_dir, membership.MEASURED_FILE))
  results = claims.verdicts({"membership": measured})
  assert list(results) == list(claims.MEMBERSHIP) == ["membership", "membership_chance"]
  page = markdown.membership_page(measured, results, report.provenance("smoke"))
  answer, rest = page.split("## Membership: with certainty")
  for verdict in results.values():
    assert f"**Verdict: {verdict['verdict']}** (baseline, the same rule on the start " \
           f"images: {verdict['baseline']['verdict']})" in answer
    assert verdict["sentences"]
    for sentence in verdict["sentences"]:
      assert page.count(sentence) == 1 and sentence in answer, sentence
  for attack in membership_rules.membership_controls(measured):
    assert answer.count(f"- {attack}: the positive control ") == 1, attack
  assert "- **Rule:**" in rest and "| attack | start | stage | score |" in rest
  assert "## Membership: better than chance" in rest


def test_a_work_directory_of_the_one_victim_layout_is_refused_by_name(tmp_path):
  """A membership run of one victim (before config.victims) sits where the victims' runs
  now have their directories: `membership.run` names it instead of mixing the two."""
  config = membership_config.get_config("smoke")
  name = next(iter(config.attacks))
  (tmp_path / name).mkdir()
  (tmp_path / name / "config.json").write_text("{}")
  with pytest.raises(FileExistsError, match="one victim"):
    membership.run(config, str(tmp_path))


@pytest.mark.parametrize("variant", membership_config.VARIANTS)
def test_every_attack_runs_as_its_own_configuration_tunes_it(variant):
  """Issue 47: budgets as they were tuned, not cut for wall-clock time. Every membership
  attack's settings (steps, learning rates, lower level, hypergradient) equal those of the
  configuration it comes from at the same size; only the number of candidates per image
  differs (membership attacks one start per image, as its design says)."""
  from trdr.configs import bilevel_affine, bilevel_one_hidden, decoreco_cifar  # noqa: PLC0415

  sources = {
      "bilevel_affine": bilevel_affine.get_config("smoke" if variant == "smoke" else None),
      "bilevel_one_hidden": bilevel_one_hidden.get_config(variant),
      "decoreco_mlp": decoreco_cifar.get_config(variant)}
  config = membership_config.get_config(variant)
  assert set(config.attacks) == set(sources)
  for name, attack in config.attacks.items():
    own = sources[name]
    for key in own.attack:
      if key != "candidates_per_image":
        assert attack.attack[key] == own.attack[key], (variant, name, key)
    assert attack.victim == own.victim, (variant, name)
  assert config.attacks.bilevel_one_hidden.attack.lower_level.start == "previous"


def test_each_victim_is_its_own_data_draw_initialisation_and_start_draw():
  config = membership_config.get_config("cpu")
  assert len(config.victims) >= 5
  for attack in config.attacks.values():
    drawn = [membership_config.victim_config(attack, v) for v in config.victims]
    assert [(c.data.seed, c.victim.seed, tuple(c.init.seeds)) for c in drawn] == [
        (v, v, (v,)) for v in config.victims]
    # Everything else is the attack's recipe, unchanged.
    for c in drawn:
      for section in ("attack", "eval"):
        assert c[section].to_dict() == attack[section].to_dict()
  # Another draw is another training set (of the same size and classes).
  first, second = (data.make_task(membership_config.victim_config(attack, v).data)
                   for v in config.victims[:2])
  assert first.train_images.shape == second.train_images.shape
  assert not np.array_equal(first.train_images, second.train_images)


# ------------------------------------------------------------------- offline LiRA


@pytest.mark.slow  # trains a victim and four shadows
def test_shadows_never_saw_a_scored_image_and_lira_tells_members_from_non_members(tmp_path):
  """Offline LiRA (Carlini et al. 2022) on the affine recipe: every shadow's training set
  avoids the victim's training set and partition (the images a membership run scores) and
  is its own draw; the calibrated score then tells the victim's training images from its
  partition images (same distribution, never trained on). Sensitivity: with 40 members and
  40 non-members, a one-sided Mann–Whitney p < 1e-3 needs an AUC of about 0.7; a broken
  calibration (shadows trained on the victim's own data, or scoring at the wrong input
  space) leaves members and non-members exchangeable, where p < 1e-3 has chance 1e-3."""
  smoke = membership_config.get_config("smoke")
  config = membership_config.victim_config(smoke.attacks["bilevel_affine"], 0)
  config.data.n_per_class = 20
  from trdr import victim
  with jax.enable_x64(bool(config.float64)):
    task = data.make_task(config.data)
    target = victim.load_or_train(config, task, str(tmp_path / "victim"))
  shadows = membership.shadow_victims(config, 4, str(tmp_path / "shadows"))
  scored = set(task.train_index) | set(task.partition_index)
  assert all(not scored & set(s.train_index.tolist()) for s in shadows)
  assert len({tuple(s.train_index.tolist()) for s in shadows}) == len(shadows)
  with jax.enable_x64(bool(config.float64)):
    members = membership.lira_scores(target, shadows, task.to_pixels(task.train_images),
                                     task.train_labels, task.mean)
    others = membership.lira_scores(target, shadows, task.to_pixels(task.partition_images),
                                    task.partition_labels, task.mean)
  assert scipy.stats.mannwhitneyu(members, others, alternative="greater").pvalue < 1e-3
  # A second call reuses the saved shadows: the same θ_k, not trained again.
  stamp = [os.path.getmtime(tmp_path / "shadows" / f"shadow_{k}" / "victim.msgpack")
           for k in range(4)]
  again = membership.shadow_victims(config, 4, str(tmp_path / "shadows"))
  assert stamp == [os.path.getmtime(tmp_path / "shadows" / f"shadow_{k}" / "victim.msgpack")
                   for k in range(4)]
  for a, b in zip(shadows, again):
    jax.tree.map(np.testing.assert_array_equal, a.target.params, b.target.params)


def test_lira_is_the_margin_standardised_by_the_shadows_and_needs_two():
  """`lira_scores` by its definition on linear victims whose margins are known: the margin
  at θ*, minus the shadows' mean margin, over their spread pooled over the images."""
  from trdr import models, victim
  rng = np.random.default_rng(0)
  x = rng.uniform(size=(5, 2, 2, 1))
  y = np.array([1.0, -1.0, 1.0, 1.0, -1.0])

  def linear(w, b):  # the affine victim of eq. 8 at θ = (w, b)
    params = {"dense": {"kernel": jnp.asarray(w)[:, None], "bias": jnp.asarray([b])}}
    return victim.Victim(models.Affine(), params, None, {})

  weights = [rng.normal(size=4) for _ in range(4)]
  mean = np.full((2, 2, 1), 0.25)
  with jax.enable_x64(True):
    target, *shadow_targets = [linear(w, 0.1) for w in weights]   # float64 θ
    shadows = [membership.Shadow(t, mean * k, np.arange(2))
               for k, t in enumerate(shadow_targets)]
    got = membership.lira_scores(target, shadows, x, y, None)
    with pytest.raises(ValueError, match="at least 2 shadow"):
      membership.lira_scores(target, shadows[:1], x, y, None)
  flat = x.reshape((5, -1))
  own = y * (flat @ weights[0] + 0.1)
  under = np.stack([y * ((flat - (mean * k).reshape(-1)) @ w + 0.1)
                    for k, w in enumerate(weights[1:])])
  sigma = np.sqrt(np.sum((under - under.mean(0)) ** 2) / (under.size - 5))
  # float64 of sums of 4 products: rounding ~1e-16 relative; 1e-12 leaves 1e4 of it.
  np.testing.assert_allclose(got, (own - under.mean(0)) / sigma, rtol=1e-12)


def test_leave_one_out_re_solves_without_the_image_in_blocks_of_any_split():
  """`leave_one_out` by its definition on a small affine victim (float64): E re-solved
  without image i from θ*, its ||θ* − θ||² less the grid point's base; and the same bits
  whether the re-solves run as one block or split into padded blocks, one per device (here
  one device listed four times: 6 re-solves dealt into 4 blocks of 2, two padded, on any
  machine)."""
  from trdr import models, victim
  from trdr.attacks import bilevel
  rng = np.random.default_rng(0)
  x = rng.uniform(size=(2, 5, 3, 3, 1))   # 2 grid points of 5 images
  y = np.array([1.0, -1.0, 1.0, -1.0, 1.0])
  config = ml_collections.ConfigDict({"victim": {"weight_decay": 1e-2, "memory_size": 10},
                                      "eval": {"lower_level_max_iter": 500,
                                               "lower_level_tol": 1e-10}})
  base = np.array([0.5, 0.25])
  with jax.enable_x64(True):
    params = {"dense": {"kernel": jnp.asarray(rng.normal(size=(9, 1))),
                        "bias": jnp.asarray([0.1])}}
    target = victim.Victim(models.Affine(), params, None, {})
    device = jax.local_devices()[0]
    one = membership.leave_one_out(config, target, x, y, base, 3, devices=[device])
    split = membership.leave_one_out(config, target, x, y, base, 3, devices=[device] * 4)
    np.testing.assert_array_equal(one, split)
    assert np.all(np.sum(np.isfinite(one), axis=1) == 3)
    # Drawn among the eligible images only: all of them where fewer than the count, none at
    # a grid point without one; the re-solves themselves unchanged.
    eligible = np.array([[False] * 5, [True, False, True, False, False]])
    some = membership.leave_one_out(config, target, x, y, base, 3, devices=[device],
                                    eligible=eligible)
    np.testing.assert_array_equal(np.isfinite(some), eligible)
    again = membership.leave_one_out(config, target, x, y, base, 5, devices=[device])
    np.testing.assert_array_equal(some[eligible], again[eligible])
    with pytest.raises(ValueError, match="eligible must be bool"):
      membership.leave_one_out(config, target, x, y, base, 3, eligible=eligible[:1])
    g, i = 1, int(np.flatnonzero(np.isfinite(one[1]))[0])
    keep = np.delete(np.arange(5), i)
    energy = lambda p: victim.energy(p, jnp.asarray(x[g][keep]), jnp.asarray(y[keep]),
                                     apply_fn=target.apply, weight_decay=1e-2)
    theta, _ = victim.minimize_energy(energy, params, max_iter=500, tol=1e-10, memory_size=10)
    distance = float(bilevel.param_distance(params, theta))
  # Both re-solves stop at ||∇E|| < 1e-10 on one 1e-2-strongly convex E: each θ within
  # δ = 1e-8 of its minimiser, so the two ||θ* − θ|| differ by ≤ 2δ and their squares by
  # ≤ 2δ (2 ||θ* − θ|| + 2δ).
  delta = 2 * 1e-10 / 1e-2
  assert abs(one[g, i] - (distance - base[g])) <= delta * (2 * np.sqrt(distance) + delta)


@pytest.mark.slow  # the membership command at :smoke, three attacks, two victims each
def test_the_membership_command_runs_on_a_users_grey_28x28_npz(tmp_path, subprocess_env):
  """A user's data set: the shipped sample as 28×28 grey images (the channel mean, the
  centre crop) in a .npz, given to every attack of the membership command at :smoke. It
  runs to the end and writes membership.md with both claims; a group without members or
  non-members reads "too few", never a traceback (the review found one at the ROC
  figure's AUC label)."""
  with np.load(assets.sample_path()) as sample:
    grey = {k: np.round(sample[k][:, 2:30, 2:30].mean(-1)).astype(np.uint8)
            for k in ("train_images", "test_images")}
    labels = {k: sample[k] for k in ("train_labels", "test_labels")}
  path = tmp_path / "grey.npz"
  np.savez(path, **grey, **labels)
  workdir = tmp_path / "membership"
  overrides = [f"--config.attacks.{name}.data.{key}={value}"
               for name in membership_config.get_config("smoke").attacks
               for key, value in (("source", "npz"), ("path", path))]
  done = subprocess.run(
      [sys.executable, os.path.join(REPO, "experiments", "membership.py"),
       f"--config={os.path.join(REPO, 'configs', 'membership.py')}:smoke",
       f"--workdir={workdir}", *overrides], capture_output=True, text=True, cwd=tmp_path,
      env=subprocess_env, timeout=1200)
  assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
  page = (workdir / "membership.md").read_text(encoding="utf-8")
  assert "## Membership: with certainty" in page and "## Membership: better than chance" in page
  measured = files.read_json(workdir / membership.MEASURED_FILE)
  assert measured["config"]["attacks"]["decoreco_mlp"]["data"]["source"] == "npz"
