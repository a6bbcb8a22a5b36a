"""The membership rules (`trdr.report.membership_rules`) on planted scores: the paper's two
sentences, each tested as written; each reconstruction against its own start; the
controls, the oracle among them; the power each row states."""

import numpy as np
import pytest
import scipy.stats

from trdr.configs import membership as membership_config
from trdr.evaluation import roc
from trdr.report import claims, markdown
from trdr.report import membership_rules as rules
from trdr.studies import membership

RULES = claims.RULES
VICTIMS = 5          # configs/membership.py at :cpu
MEMBERS = 49         # per victim: the :cpu mixed starts' ~245 members over 5 victims
NON_MEMBERS = 48     # and ~238 non-members


def _row(scores, member, victims, *, stage="reconstruction", kind="mixed", score="s",
         min_per_class=10):
  """A row of `membership.measure` from per-image scores (the measurement's own code)."""
  row = {"attack": "a", "kind": kind, "stage": stage, "score": score, "window": 11,
         "members": int(member.sum()), "non_members": int((~member).sum()),
         "top": roc.precision_at_top(scores, member, (10, 20, 50, 100, 200, 500, 1000, 2000))}
  row["informative"] = min(row["members"], row["non_members"]) >= min_per_class
  if row["informative"]:
    row.update(roc.summary(scores, member, fprs=(0.001, 0.01), n_resamples=200,
                           clusters=victims))
    finite = [a for a in row["per_cluster"] if np.isfinite(a)]
    row |= {"victim_mean": float(np.mean(finite)), "victim_std": float(np.std(finite, ddof=1))}
  return row


def _labels(rng, members=MEMBERS, non_members=NON_MEMBERS, victims=VICTIMS):
  member = np.tile(np.repeat([True, False], [members, non_members]), victims)
  return member, np.repeat(np.arange(victims), members + non_members)


def _measured(*rows, controls=()):
  return {"rows": list(rows), "controls": list(controls), "labels": {"windows": [11]},
          "min_per_class": 10}


def test_a_score_better_than_chance_but_never_certain():
  """AUC 0.75 with no certainty at its top: (ii) can tell, (i) cannot tell with certainty.

  Members N(0.75, 0.5²), non-members N(0, 1): AUC = Φ(0.75 / √1.25) = 0.749, TPR at 0.1 %
  FPR = P(N(0.75, 0.5²) > 3.09) ≈ 1e-6, below 0.5 %. The members' thinner tail caps the
  precision of any top k: among the top 10 of 2,000 images (the non-members' top 1 %,
  above 2.33) the expected members are 1,000 · P(z > (2.33 − 0.75) / 0.5) ≈ 0.8, and at
  every larger k the precision stays below 0.8 (at most the members' share of the top
  half); the Clopper–Pearson upper bound of 4 of 10 is 0.74, so the rule's "cannot tell
  with certainty" (every upper bound < 0.95) holds unless ≥ 8 of the top 10 are members
  (Binomial(10, 0.08): p < 1e-6). Per victim the AUC's sd is ≈ 0.029 (Mann–Whitney,
  200 + 200 images): the victims' t statistic ≈ 0.25 / (0.029 / √5) ≈ 19 against a
  two-sided 5 % critical value of 2.8: it tells with p < 1e-4."""
  rng = np.random.default_rng(0)
  member, victims = _labels(rng, 200, 200)
  scores = np.where(member, rng.normal(0.75, 0.5, member.size), rng.normal(0, 1, member.size))
  row = _row(scores, member, victims)
  assert row["auc"] == pytest.approx(0.749, abs=0.03)     # sd of the pooled AUC: 0.007
  assert row["tpr_at_fpr"]["0.001"] <= 0.005
  assert rules.chance_answer(row) == rules.CAN_TELL
  assert rules.certainty(row, 10)["answer"] == rules.CANNOT_TELL
  start = {**row, "stage": "start", "informative": False}   # the start tells nothing
  chance = rules.verdict_membership_chance(_measured(row, start))
  certain = rules.verdict_membership(_measured(row, start))
  assert chance["checks"] == {"a, mixed: cannot tell": False}
  assert chance["verdict"] == "not reproduced"
  # (i) passes, but no oracle control vouches for the rule: underpowered, said why.
  assert certain["checks"] == {} and certain["verdict"] == "underpowered"
  assert "oracle control" in str(certain["measured"]["underpowered (no score tells; not "
                                                    "every score can say it cannot)"])


def _oracle_per_image(n_images=60, seeds=(0, 1, 2, 3, 4), rng_seed=0):
  """`membership.per_image`-shaped mixed starts: half training images, half partition
  images; the reconstructions ignore their start."""
  rng = np.random.default_rng(rng_seed)
  n = n_images * len(seeds)
  start_member = (np.arange(n) % 2).astype(np.int8)
  member = rng.random(n) < 0.5
  stage = {"member": member, "non_member": ~member, "member_ssim": member,
           "member_l2": member, "best_buddy": np.zeros(n, bool),
           "natural_ssim": np.full(n, 0.9), "scores": {"random": rng.normal(size=n)}}
  start = {**stage, "member": start_member == 1, "non_member": start_member == 0,
           "scores": {"random": rng.normal(size=n)}}
  return {"kind": np.full(n, "mixed"), "seed": np.repeat(seeds, n_images),
          "victim": np.repeat(seeds, n_images), "start_member": start_member,
          "grid_point": np.repeat(seeds, n_images), "reconstruction": stage, "start": start}


def test_the_oracle_is_told_with_certainty():
  """An attack that returns training images only (the oracle control: the 150 training-image
  starts, every one a member, no non-member) must come out "can tell with certainty",
  although it has no AUC. Its 150 images named without a non-member give the lower bound
  α^(1/150) with α = 0.05 / 5 (one score at k = 10, 20, 50, 100 and all 150): 0.970 ≥
  0.95, exactly."""
  config = membership_config.get_config("smoke")
  measured = membership.measure({"a": _oracle_per_image()}, config)
  oracle = [r for r in measured["controls"] if r["control"] == "oracle"]
  assert oracle and all(r["non_members"] == 0 and not r["informative"] for r in oracle)
  answer = rules.certainty(oracle[0], 10)
  assert answer["answer"] == rules.CAN_TELL and answer["precision"] == 1.0
  tests = len([p for p in oracle[0]["top"] if p[1] >= 10])
  assert answer["lower"] == pytest.approx((0.05 / tests) ** (1 / 150))
  assert rules.membership_controls(measured)["a"]["oracle"] is True
  # The oracle's reconstructions as an attack's: (i) names them with certainty, and the
  # report says so, where the old rule found no non-member and said "uninformative".
  rows = [{**r, "stage": "reconstruction", "kind": "mixed", "window": 11} for r in oracle]
  assert rules.verdict_membership(_measured(*rows))["verdict"] == "not reproduced"


def test_what_the_start_already_tells_is_not_counted_against_the_paper():
  """Start images at AUC 0.78, their reconstructions at 0.69 (per victim, five victims):
  the reconstructions tell better than chance, but the paired difference 0.69 − 0.78 is
  negative on every victim: "the attack adds nothing", reported, neither a failure nor a
  pass. The same reconstructions from starts that tell nothing (0.5) do count."""
  def row(aucs, stage):
    return {"attack": "a", "kind": "mixed", "stage": stage, "score": "lira", "window": 11,
            "members": 245, "non_members": 238, "informative": True,
            "auc": float(np.mean(aucs)), "ci": list(roc.mean_ci(aucs)),
            "tpr_at_fpr": {"0.01": 0.05}, "per_cluster": list(aucs),
            "cluster_ids": list(range(5)), "clusters": 5, "victim_mean": float(np.mean(aucs)),
            "top": [[10, 10, 7], [483, 483, 245]]}
  after = row([0.68, 0.70, 0.69, 0.67, 0.71], "reconstruction")
  start = row([0.77, 0.79, 0.78, 0.76, 0.80], "start")
  paired = rules.paired_difference(after, start)
  assert paired["difference"] == pytest.approx(-0.09) and not paired["adds"]
  out = rules.verdict_membership_chance(_measured(after, start))
  assert out["checks"] == {} and out["verdict"] == "uninformative"
  assert out["measured"]["the start already tells (the attack adds nothing; not counted)"] == [
      "a, mixed"]
  assert "not counted against the paper" in out["reason"]
  assert out["baseline"]["verdict"] == "not reproduced"    # the start images tell
  blind_start = {**start, "informative": False}
  assert rules.verdict_membership_chance(_measured(after, blind_start))["checks"] == {
      "a, mixed: cannot tell": False}


def test_a_random_score_at_the_cpu_sizes_can_reach_cannot_tell():
  """Five victims of 49 members and 48 non-members (the :cpu mixed starts): a random score's
  victims' t interval lies inside 0.5 ± 0.1 with probability ≈ 0.65 (the victims' AUC sd
  √((m + n + 1) / (12 m n)) = 0.059, the interval's half-width 2.78 · s / √5 with s² ~
  0.059² χ²₄ / 4; 20,000 simulations of that model give 0.655). Over 20 seeds the test
  asks for ≥ 8 (P(Binomial(20, 0.65) < 8) < 0.01), and at most 5 false "can tell" (level
  5 %: P(Binomial(20, 0.05) > 5) < 4e-4). Its stated power: the detectable |AUC − 0.5|
  at 80 % power, (t₀.₉₇₅,₄ + t₀.₈,₄) · s / √5, ≈ 0.1 at s = 0.059."""
  answers = []
  for seed in range(20):
    rng = np.random.default_rng(seed)
    member, victims = _labels(rng)
    answers.append(rules.chance_answer(_row(rng.uniform(size=member.size), member, victims)))
  assert answers.count(rules.CANNOT_TELL) >= 8, answers
  assert answers.count(rules.CAN_TELL) <= 5, answers
  row = {"per_cluster": [0.5 + 0.059 * z for z in (-1.2, -0.5, 0.0, 0.5, 1.2)]}
  s = float(np.std(row["per_cluster"], ddof=1))
  expected = (scipy.stats.t.ppf(0.975, 4) + scipy.stats.t.ppf(0.8, 4)) * s / np.sqrt(5)
  assert rules.victims_test(row)["detectable"] == pytest.approx(expected)


def test_pooled_images_do_not_decide_the_victims_do():
  """Five victims whose own AUCs scatter (0.52 … 0.80: mean 0.66, t-test p = 0.015 over
  victims) while the pooled p over 2,000 images would be tiny: with 11 scores in the group
  the Bonferroni level is 0.05 / 11 = 0.0045, so no "can tell"; the interval is too wide
  for "cannot tell": underpowered."""
  aucs = [0.52, 0.60, 0.66, 0.72, 0.80]
  row = {"informative": True, "per_cluster": aucs, "ci": list(roc.mean_ci(aucs)),
         "p_auc": 1e-9}
  assert rules.victims_test(row)["p"] == pytest.approx(
      scipy.stats.ttest_1samp(aucs, 0.5).pvalue)
  assert rules.chance_answer(row, tests=1) == rules.CAN_TELL
  assert rules.chance_answer(row, tests=11) == rules.UNDERPOWERED


def test_too_few_images_read_as_too_few_in_every_table_and_figure():
  """A group without members (or non-members) has no AUC: the sentences, membership.md and
  the ROC figure say "too few" instead of failing on an undefined AUC (the review's
  traceback: a window's row without an AUC beside another window's curve)."""
  pytest.importorskip("matplotlib")
  from trdr.report import figures   # noqa: PLC0415  (matplotlib)
  rng = np.random.default_rng(0)
  member, victims = _labels(rng)
  good = _row(rng.normal(size=member.size) + member, member, victims)
  thin = {**good, "window": 3, "informative": False, "members": 0}
  for k in ("auc", "ci", "per_cluster", "cluster_ids"):
    thin.pop(k)
  none = _row(rng.normal(size=member.size), np.zeros(member.size, bool), victims, kind="b")
  measured = _measured(good, thin, none)
  measured |= {"roc": {"a/mixed/s": [c.tolist() for c in roc.roc_curve(
      rng.normal(size=member.size) + member, member)], "a/b/s": [[0.0, 1.0], [0.0, 1.0]]},
               "fprs": [0.001, 0.01], "natural_threshold": 0.15, "confidence": 0.95,
               "fractions": [{"attack": "a", "kind": "b", "stage": "reconstruction", "rows": [
                   {"threshold": 0.15, "natural": 0, "fraction_member": float("nan"),
                    "start_member_agree": None}]}],
               "labels": {"windows": [11, 3], "member_min_ssim": 0.4,
                          "non_member_max_ssim": 0.3}}
  figures.membership_figure(measured)
  results = claims.verdicts({"membership": measured})
  page = markdown.membership_page(measured, results)
  assert "too few natural-looking members" in page
  assert "| a | b | reconstruction | s | 11 | 0 |" in page
