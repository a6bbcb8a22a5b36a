"""Membership ambiguity of reconstructions, measured (Runkel et al. 2024, Sec. 5).

The paper's conclusion is that an attacker who holds a natural-looking reconstruction
cannot tell whether it shows a training image or merely a natural image that the
victim never saw. This module measures that on finished runs:

1. Every reconstruction is matched to its SSIM-nearest *real* image in the training set
   ∪ the distinct partition (the partition: images from the same distribution that the
   victim did not train on). The runs already hold the nearest image of each set
   (``train_ssim`` / ``partition_ssim``), so the nearest real image is the larger of the
   two; it is a member match when ``train_ssim >= partition_ssim`` (`nearest_real`).
2. A reconstruction is *natural-looking* at threshold t when that SSIM exceeds t.
   `fractions` counts, for each t, the natural-looking reconstructions and the fraction
   of them whose nearest real image is a training member.
3. Among the natural-looking reconstructions, `auc` (Mann–Whitney U, scipy) measures
   how well a score that the attacker can compute without the training set separates
   member matches from non-member matches: the victim's logistic loss
   softplus(−yΦ(x)) and margin yΦ(x) at the reconstruction, the grid point's
   ||θ* − θ||² (bilevel landscapes) and the DecoReco multiplier λ_i. An AUC near 0.5
   supports the paper; far from 0.5 (either way) refutes it.

`load_run` reads a finished `trdr.experiment` run (a landscape or a single attack, of
either attack) into a `Reconstructions`, reloading the victim θ* of the run to evaluate Φ
at the reconstructions.
"""

import os
from typing import NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import scipy.stats

from trdr import io, victim

RESULTS_FILE = "results.npz"
# Score name -> what it is; every score is computable without the training set.
SCORES = {
    "loss": "victim's logistic loss softplus(−yΦ(x)) at the reconstruction",
    "margin": "victim's margin yΦ(x) at the reconstruction",
    "param_distance": "||θ* − θ||² of the grid point the reconstruction came from",
    "lambda": "DecoReco multiplier λ_i of the reconstruction",
}


class Reconstructions(NamedTuple):
  """The reconstructions of one run, flattened over grid points and candidates.

  Attributes:
    name: the run's label.
    attack: "bilevel" or "decoreco".
    nearest_ssim: float[N], SSIM to the nearest real image (training set ∪ partition).
    is_member: bool[N], whether that nearest real image is a training image.
    scores: score name (a key of `SCORES`) -> float[N].
  """
  name: str
  attack: str
  nearest_ssim: np.ndarray
  is_member: np.ndarray
  scores: dict


def nearest_real(train_ssim, partition_ssim) -> tuple[np.ndarray, np.ndarray]:
  """The SSIM to the nearest real image and whether it is a training member.

  Args:
    train_ssim: float[...], SSIM of each reconstruction to its nearest training image.
    partition_ssim: float[...] (same shape), to its nearest partition image.
  Returns:
    (float[...] the larger of the two, bool[...] train_ssim >= partition_ssim; a tie
    counts as a member match).
  Raises:
    ValueError: the shapes differ.
  """
  train_ssim, partition_ssim = np.asarray(train_ssim), np.asarray(partition_ssim)
  if train_ssim.shape != partition_ssim.shape:
    raise ValueError(f"train_ssim {train_ssim.shape} and partition_ssim "
                     f"{partition_ssim.shape} must have the same shape")
  return np.maximum(train_ssim, partition_ssim), train_ssim >= partition_ssim


def margin_and_loss(logits, labels) -> tuple[np.ndarray, np.ndarray]:
  """The margin yΦ(x) and the logistic loss softplus(−yΦ(x)) = log(1 + exp(−yΦ(x))).

  Args:
    logits: float[...], the victim's output Φ(x).
    labels: float[...] in {−1, +1}, broadcastable to ``logits``.
  Returns:
    (margin float[...], loss float[...]), float64.
  """
  margin = np.asarray(logits, np.float64) * np.asarray(labels, np.float64)
  return margin, np.logaddexp(0.0, -margin)


def auc(scores, positive) -> float:
  """ROC AUC = P(score of a positive > score of a negative) + ½ P(tie) (Mann–Whitney U).

  Args:
    scores: float[n], finite.
    positive: bool[n], the class of each score.
  Returns:
    The AUC in [0, 1]; NaN when either class is empty.
  Raises:
    ValueError: shapes differ, not 1-D, or a non-finite score.
  """
  scores, positive = np.asarray(scores, np.float64), np.asarray(positive, bool)
  if scores.ndim != 1 or scores.shape != positive.shape:
    raise ValueError(f"scores {scores.shape} and positive {positive.shape} must be equal "
                     "1-D shapes")
  if not np.all(np.isfinite(scores)):
    raise ValueError("scores must be finite")
  n_pos, n_neg = int(positive.sum()), int((~positive).sum())
  if n_pos == 0 or n_neg == 0:
    return float("nan")
  u = scipy.stats.mannwhitneyu(scores[positive], scores[~positive]).statistic
  return float(u / (n_pos * n_neg))


def fractions(nearest_ssim, is_member, thresholds) -> list[dict]:
  """Natural-looking reconstructions (nearest real SSIM > t) and who they match, per t.

  Args:
    nearest_ssim: float[N], SSIM to the nearest real image.
    is_member: bool[N], whether that image is a training member.
    thresholds: SSIM levels t.
  Returns:
    One dict per t: threshold, natural (count), members, non_members, fraction_member
    (NaN when no reconstruction is natural-looking).
  Raises:
    ValueError: the shapes differ.
  """
  nearest_ssim, is_member = np.asarray(nearest_ssim), np.asarray(is_member, bool)
  if nearest_ssim.shape != is_member.shape:
    raise ValueError(f"nearest_ssim {nearest_ssim.shape} and is_member {is_member.shape} "
                     "must have the same shape")
  rows = []
  for t in thresholds:
    natural = nearest_ssim > t
    members = int(np.sum(natural & is_member))
    count = int(natural.sum())
    rows.append({"threshold": float(t), "natural": count, "members": members,
                 "non_members": count - members,
                 "fraction_member": members / count if count else float("nan")})
  return rows


def separation(recon: Reconstructions, threshold: float, min_per_class: int = 10
               ) -> list[dict]:
  """AUC of each score for member vs non-member matches among natural-looking ones.

  Args:
    recon: one run's reconstructions.
    threshold: natural-looking means nearest real SSIM > threshold.
    min_per_class: fewer members or non-members than this marks the AUC uninformative.
  Returns:
    One dict per score of ``recon``: score, auc (P(member's score > non-member's)),
    separability (max(auc, 1 − auc): the AUC of the better orientation, optimistic for the
    attacker), members, non_members, informative (bool). Reconstructions with a
    non-finite score (a diverged attack) are left out of that score's AUC.
  """
  natural = recon.nearest_ssim > threshold
  rows = []
  for name, values in recon.scores.items():
    values = np.asarray(values, np.float64)
    keep = natural & np.isfinite(values)
    member = recon.is_member[keep]
    value = auc(values[keep], member)
    rows.append({"score": name, "auc": value,
                 "separability": max(value, 1.0 - value) if np.isfinite(value) else value,
                 "members": int(member.sum()), "non_members": int((~member).sum()),
                 "informative": bool(min(member.sum(), (~member).sum()) >= min_per_class)})
  return rows


# ------------------------------------------------------------------------ loading runs


def victim_logits(config: ml_collections.ConfigDict, run_dir: str, images) -> np.ndarray:
  """Φ(x; θ*) of the run's saved victim at ``images``.

  θ* is read from ``config.victim.checkpoint_dir`` (or RUN_DIR/victim) into the
  architecture of ``config.victim``, in float64 when ``config.float64`` (inside a
  `jax.enable_x64` context, so the process-wide setting is left as it was).

  Args:
    config: the run's config (its config.json).
    run_dir: the run's directory.
    images: float[..., H, W, C], in the space the victim was trained on (mean-subtracted
      when the task subtracts the mean).
  Returns:
    float[...] logits (binary victims).
  Raises:
    FileNotFoundError: no saved victim.
  """
  images = np.asarray(images)
  directory = config.victim.get("checkpoint_dir") or os.path.join(run_dir, "victim")
  with jax.enable_x64(bool(config.float64)):
    target = victim.load_saved(config, directory, images.shape[-3:])
    dtype = jnp.float64 if config.float64 else jnp.float32
    flat = jnp.asarray(images.reshape((-1, *images.shape[-3:])), dtype)
    logits = np.asarray(jax.jit(target.apply)(target.params, flat))
  return logits.reshape(images.shape[:-3])


def load_run(run_dir: str, name: str) -> Reconstructions:
  """A finished bilevel landscape run or DecoReco run as `Reconstructions`.

  Bilevel (``attack.name != "decoreco"``): every grid point's reconstructions, labels
  of the training set (candidate i has label y_i), scores loss, margin, param_distance.
  DecoReco (a single run, results float[m, ...], or its landscape, float[G, m, ...]):
  labels and λ from results.npz, scores loss, margin, lambda.

  Raises:
    FileNotFoundError: no results.npz or config.json in ``run_dir``.
    ValueError: the run's files fail their SHA256SUMS (`trdr.io.check_finished`).
  """
  landscape = os.path.exists(os.path.join(run_dir, "landscape.json"))
  io.check_finished(run_dir, "landscape.json" if landscape else "summary.json")
  config = ml_collections.ConfigDict(io.read_json(os.path.join(run_dir, io.CONFIG_FILE)))
  with np.load(os.path.join(run_dir, RESULTS_FILE)) as saved:
    results = dict(saved)
  images = results["final_images"]
  nearest, member = nearest_real(results["train_ssim"], results["partition_ssim"])
  decoreco = config.attack.name == "decoreco"
  labels = np.broadcast_to(results["labels"], images.shape[:-3])
  margin, loss = margin_and_loss(victim_logits(config, run_dir, images), labels)
  scores = {"loss": loss, "margin": margin}
  if decoreco:
    scores["lambda"] = np.broadcast_to(results["final_lambdas"], images.shape[:-3])
  else:
    distance = np.asarray(results["param_distance"])  # one per grid point (or run)
    scores["param_distance"] = np.broadcast_to(distance.reshape(distance.shape + (1,)),
                                               images.shape[:-3])
  return Reconstructions(
      name=name, attack="decoreco" if decoreco else "bilevel",
      nearest_ssim=nearest.reshape(-1), is_member=member.reshape(-1),
      scores={k: np.asarray(v, np.float64).reshape(-1) for k, v in scores.items()})


def measure(runs: list[Reconstructions], thresholds, auc_threshold: float,
            min_per_class: int = 10) -> dict:
  """`fractions` and `separation` for every run: the numbers of the report's table.

  Returns:
    {"thresholds": [...], "auc_threshold": float, "min_per_class": int,
     "runs": {name: {"attack": str, "total": int, "fractions": [...], "auc": [...]}}}.
  """
  return {
      "thresholds": [float(t) for t in thresholds], "auc_threshold": float(auc_threshold),
      "min_per_class": int(min_per_class),
      "runs": {r.name: {"attack": r.attack, "total": int(r.nearest_ssim.size),
                        "fractions": fractions(r.nearest_ssim, r.is_member, thresholds),
                        "auc": separation(r, auc_threshold, min_per_class)}
               for r in runs}}
