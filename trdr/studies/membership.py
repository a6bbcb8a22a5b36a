"""Membership ambiguity, measured the way an adversary would face it (Runkel et al. 2024,
Sec. 5: "even when reconstructing natural images that could be part of the training
dataset, an adversary yet cannot identify whether it is a valid or invalid training data
sample with certainty").

  run        one `trdr.experiment` run per attack and victim in mode "membership"
             (configs/membership.py: ≥ 5 victims, each its own data draw of one recipe;
             noise, public and controlled mixed starts, same budget), then `per_image` and
             `measure`; membership.json
  per_image  every reconstruction's (and every start image's) scores and ground truth;
             kept per victim (`per_image_or_reuse`), so a rerun computes them once
  measure    ROC AUC with its interval over victims (the Student t interval of the
             victims' own AUCs: the images of one victim are not independent; the bootstrap
             over victims and over images beside it), the AUC per victim and TPR at low FPR
             per (attack, start kind, stage, score, label window); natural-looking counts
             and member fractions

**Scores** (`SCORES`) are what an adversary holding θ* and the reconstruction can compute,
without the training set, each computed per image and oriented once (higher = "member").
The calibrated one, "lira", is offline LiRA (Carlini et al. 2022, "Membership Inference
Attacks From First Principles"): the margin at θ* standardised by the margins of shadow
victims (`shadow_victims`) trained with the same recipe on public images that never
contain the image scored.
**Labels** (evaluation only), with an excluded middle: a member is an image that
is best buddies by SSIM with a training image (each the other's SSIM-nearest) at SSIM ≥
``member_min_ssim``; a non-member one whose SSIM to every training image is below
``non_member_max_ssim``; the images between are excluded and counted (a near-random
label would pull every AUC towards 0.5). `label_calibration` measures what the two
thresholds do to genuine non-members. The older labels (the SSIM- or L2-nearest image of
training set ∪ partition, and L2 best buddies) are kept beside them for the fractions.
**Natural-looking**: SSIM ≥ t to the nearest image of the public
reference test[1::2] (never a start), so it needs no training set. **Stages**: the same
measurement on the reconstructions and on their start images ("start": an attack that
returns its start, the baseline).
"""

import functools
import os
import time
import zipfile
from typing import NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax.tree
from absl import logging
from flax import traverse_util

from trdr import data, experiment, victim
from trdr.attacks import bilevel
from trdr.attacks import init as inits
from trdr.configs import membership as membership_config
from trdr.evaluation import evaluate, metrics, roc, ssim
from trdr.runtime import files, rundir, sharding

MEASURED_FILE = "membership.json"
SCORES = {
    "neg_loss": "−softplus(−yΦ(x; θ*)): the victim's logistic loss at the image, negated",
    "margin": "yΦ(x; θ*): the victim's margin at the image",
    "neg_grad_norm": "−‖∇θ softplus(−yΦ(x; θ))‖₂ at θ*: the per-sample gradient norm, negated",
    "neg_moved": "−‖x − x0‖₂ (victim's input space): how little the attack moved the image",
    "lambda": "λ_i: DecoReco's KKT multiplier of the candidate",
    "loo": "‖θ* − θ(X∖x_i)‖² − ‖θ* − θ(X)‖²: how far θ(·) moves from θ* without the image "
           "(bilevel; θ(·) = argmin E re-solved from θ*; a subsample of the natural-looking "
           "reconstructions)",
    "lira": "(yΦ(x; θ*) − mean_k yΦ(x; θ_k)) / σ: offline LiRA, the margin standardised by "
            "the shadow victims θ_k's margins at the image (`lira_scores`)",
}
# The adversary also holds the start it attacked from: per image, the larger of a score at
# the start and at the reconstruction (both oriented higher = member), on the
# reconstruction stage: what a real adversary keeps, not what the attack leaves.
BOTH = ("neg_loss", "margin", "neg_grad_norm", "loo", "lira")
SCORES.update({f"best_of_{k}": f"max over the start and the reconstruction of {k}"
               for k in BOTH})
STAGES = ("reconstruction", "start")
# The start kind of `measure`'s rows restricted to reconstructions that left their start
# image (SSIM to it < ``config.left_start_max_ssim``): "public, left start".
LEFT_START = ", left start"


def gradient_norms(target: victim.Victim, images, labels, batch: int = 16) -> np.ndarray:
  """‖∇θ softplus(−yΦ(x; θ))‖₂ at θ = θ* of each image, one image at a time.

  Args:
    target: a binary victim (Φ float[n]).
    images: float[n, H, W, C] in the victim's input space.
    labels: float[n] in {−1, +1}.
    batch: images per vectorised block (memory: batch copies of θ*).
  Returns:
    float[n], non-negative.
  """
  def one(xy):
    x, y = xy
    loss = lambda p: jax.nn.softplus(-y * target.apply(p, x[None]).reshape(()))
    return optax.tree.norm(jax.grad(loss)(target.params))
  return np.asarray(jax.jit(lambda xs, ys: jax.lax.map(one, (xs, ys), batch_size=batch))(
      images, labels))


def leave_one_out(config: ml_collections.ConfigDict, target: victim.Victim, images, labels,
                  base, count: int, seed: int = 0, devices=None, eligible=None) -> np.ndarray:
  """The bilevel leave-one-out score of ``count`` images per grid point (the others NaN):
  ‖θ* − θ(X∖x_i)‖² − ‖θ* − θ(X)‖², θ(·) = argmin_θ E(·, y; θ) (`trdr.victim.energy`, the
  victim's own training objective: the bilevel attack's lower level) re-solved from θ* by
  L-BFGS to ``config.eval.lower_level_tol`` — the setting ``base`` was computed with.

  Args:
    config: the run's config (victim.weight_decay, victim.memory_size, eval.lower_level_*).
    target: the victim.
    images: float[G, m, H, W, C] (input space).
    labels: float[m].
    base: float[G], ‖θ* − θ(X)‖² of each grid point (the run's param_distance).
    count: images per grid point, drawn without replacement among its eligible images
      (all of them where fewer).
    seed: the draw's seed.
    devices: the re-solves are split into one block per device, computed at once
      (`sharding.round_robin`: each re-solve the same program on any device); None: all
      local devices.
    eligible: bool[G, m], the images that may be drawn (`per_image`: those whose
      reconstruction looks natural, the only ones the rule scores); None: all. With all
      eligible, the draw is the one of earlier versions.
  Returns:
    float[G, m], NaN where not drawn.
  """
  grid, m = images.shape[:2]
  eligible = np.ones((grid, m), bool) if eligible is None else np.asarray(eligible, bool)
  if eligible.shape != (grid, m):
    raise ValueError(f"eligible must be bool[{grid}, {m}], got shape {eligible.shape}")
  rng = np.random.default_rng(seed)
  picked = [rng.choice(np.flatnonzero(e), min(count, int(e.sum())), replace=False)
            for e in eligible]
  out = np.full((grid, m), np.nan)
  points = np.concatenate([np.full(len(p), g) for g, p in enumerate(picked)]).astype(int)
  drawn = np.concatenate(picked).astype(int)
  if not len(drawn):
    return out
  energy = functools.partial(victim.energy, apply_fn=target.apply,
                             weight_decay=config.victim.weight_decay)
  images, labels = jnp.asarray(images), jnp.asarray(labels)

  def one(point):
    g, i = point
    keep = jnp.arange(m - 1) + (jnp.arange(m - 1) >= i)
    x, y = images[g][keep], labels[keep]
    theta = victim.minimize_energy(lambda p: energy(p, x, y), target.params,
                                   max_iter=config.eval.lower_level_max_iter,
                                   tol=config.eval.lower_level_tol,
                                   memory_size=config.victim.memory_size)[0]
    return bilevel.param_distance(target.params, theta)

  pairs = np.stack([points, drawn], axis=1)
  devices = list(jax.local_devices() if devices is None else devices)
  # Equal blocks (one program), dealt out in turn so that each holds as many of every grid
  # point's re-solves (a noise start's take longer), the last padded with a repeat.
  k = len(devices)
  size = -(-len(pairs) // k)
  padded = np.concatenate([pairs, np.repeat(pairs[-1:], size * k - len(pairs), 0)])
  solve = jax.jit(lambda _, block: jax.lax.map(one, (block[:, 0], block[:, 1])))
  blocks = sharding.round_robin(solve, [(padded[i::k],) for i in range(k)], None, devices)
  removed = np.stack([np.asarray(b) for b in blocks], axis=1).reshape(-1)[:len(pairs)]
  out[points, drawn] = removed - np.asarray(base, np.float64)[points]
  return out


class Shadow(NamedTuple):
  """A shadow victim of offline LiRA: θ_k trained with a victim's recipe on other data.

  Attributes:
    target: the trained `trdr.victim.Victim`.
    mean: float32[H, W, C], the per-pixel mean its own training set subtracts from its
      inputs (its input space), or None.
    train_index: int64[2n], its training images' indices in the source's train split.
  """
  target: victim.Victim
  mean: np.ndarray | None
  train_index: np.ndarray


def shadow_seed(victim_seed: int, k: int) -> int:
  """The data and initialisation seed of shadow ``k`` of the victim of ``data.seed`` =
  ``victim_seed``: 1000 · (victim_seed + 1) + k, apart from every victim's (< 1000)."""
  if not 0 <= k < 1000:
    raise ValueError(f"shadow index must be in 0 … 999, got {k}")
  return 1000 * (int(victim_seed) + 1) + int(k)


def shadow_victims(config: ml_collections.ConfigDict, count: int, directory: str
                   ) -> list[Shadow]:
  """Offline LiRA's shadow victims of one victim (Carlini et al. 2022): ``count`` victims of
  the same recipe (``config.victim``, ``n_per_class``, classes, weight decay or GD
  schedule), shadow k trained on a data draw of seed `shadow_seed` from the public pool:
  the source's train split without the victim's training set and partition. So no shadow
  was trained on any image the membership run scores (the training and partition images
  of the mixed starts; the public starts are test-split images, the noise starts and the
  reconstructions in no split). Each is saved in ``directory``/shadow_k and reused when
  its config and data are unchanged (`trdr.victim.load_or_train`).

  Args:
    config: one victim's attack config (configs/membership.py `victim_config`).
    count: shadows (≥ 2: `lira_scores` estimates a spread).
    directory: where the shadows are saved.
  Returns:
    ``count`` `Shadow`.
  Raises:
    ValueError: count < 2; θ* loaded from a file (``victim.load``: no recipe to repeat);
      the public pool too small for a draw (`trdr.data.make_task`).
  """
  if count < 2:
    raise ValueError(f"offline LiRA needs at least 2 shadow victims, got {count}")
  if config.victim.get("load"):
    raise ValueError(f"θ* was loaded from {config.victim.load}: shadow victims need the "
                     "recipe that trained it")
  task = data.make_task(config.data)
  taken = np.concatenate([task.train_index, task.partition_index])
  taken = taken[taken >= 0]   # a given training set (data.training_set) has no indices
  shadows = []
  for k in range(count):
    one = config.copy_and_resolve_references()
    one.data.seed = one.victim.seed = shadow_seed(config.data.seed, k)
    shadow_task = data.make_task(one.data, exclude=taken)
    with jax.enable_x64(bool(one.float64)):
      target = victim.load_or_train(one, shadow_task, os.path.join(directory, f"shadow_{k}"))
    shadows.append(Shadow(target, shadow_task.mean, shadow_task.train_index))
  return shadows


def lira_scores(target: victim.Victim, shadows, pixels, labels, victim_mean=None
                ) -> np.ndarray:
  """Offline LiRA's score (Carlini et al. 2022) of each image: its margin yΦ(x; θ*) (the
  logit of the victim's confidence in y, the statistic LiRA fits) minus the mean of its
  margins under the shadow victims, divided by σ, the shadows' spread about those means
  pooled over all the images given (one σ: a per-image σ from a few shadows is noise).
  Higher = more likely a member; 0: as the shadows, which never saw the image.

  Args:
    target: the binary victim θ*.
    shadows: `Shadow` (≥ 2), from `shadow_victims`.
    pixels: float[N, H, W, C], the images in pixels (the victim's inputs plus its mean).
    labels: float[N] in {−1, +1}.
    victim_mean: float[H, W, C] the victim subtracts from its inputs, or None.
  Returns:
    float64[N].
  Raises:
    ValueError: fewer than 2 shadows.
  """
  if len(shadows) < 2:
    raise ValueError(f"offline LiRA needs at least 2 shadow victims, got {len(shadows)}")
  pixels, y = np.asarray(pixels), np.asarray(labels, np.float64)

  def margins(model: victim.Victim, mean) -> np.ndarray:
    x = pixels if mean is None else pixels - mean
    dtype = jax.tree.leaves(model.params)[0].dtype
    return y * np.asarray(jax.jit(model.apply)(model.params, jnp.asarray(x, dtype)), np.float64)

  own = margins(target, victim_mean)
  under = np.stack([margins(s.target, s.mean) for s in shadows])   # [K, N]
  centre = under.mean(0)
  spread = np.sqrt(np.sum(np.square(under - centre)) / (under.size - under.shape[1]))
  return (own - centre) / spread


def _ground_truth(display, pool, n_train: int, train_ssim, partition_ssim, levels: tuple,
                  chunk_size: int, windows: tuple = (ssim.FILTER_SIZE,)) -> dict:
  """Each bool[G, m] (display float[G, m, ...]): the labels the AUCs use, "member" (the
  image and a training image are best buddies by SSIM, each the other's SSIM-nearest, at
  SSIM ≥ levels[0]) and "non_member" (SSIM < levels[1] to every training image; neither:
  excluded), under the SSIM window ``windows[0]``, and as "member_w{w}" / "non_member_w{w}"
  under each further window w (Haim et al. count with 3); beside them member by the
  nearest pool image (SSIM, L2) and L2 best buddies in the pool."""
  flat = display.reshape((-1, *display.shape[-3:]))
  d = np.asarray(metrics.pairwise_l2(flat, pool)).reshape((*display.shape[:2], -1))
  buddy = np.stack([np.asarray(metrics.best_buddies(dg.T)[0]) for dg in d])
  out = {"member_ssim": np.asarray(train_ssim) >= np.asarray(partition_ssim),
         "member_l2": d.argmin(-1) < n_train, "best_buddy": buddy}
  for i, window in enumerate(windows):
    member, nearest = [], []
    for images in display:  # per grid point: its m images against the n training images
      s = np.asarray(ssim.pairwise_ssim(images, pool[:n_train], chunk_size=chunk_size,
                                        filter_size=window), np.float64)
      mutual = s.argmax(0)[s.argmax(1)] == np.arange(len(s))
      member.append(mutual & (s.max(1) >= levels[0]))
      nearest.append(s.max(1))
    suffix = "" if i == 0 else f"_w{window}"
    out["member" + suffix] = np.stack(member)
    out["non_member" + suffix] = np.stack(nearest) < levels[1]
  return out


def label_calibration(config: ml_collections.ConfigDict, levels: tuple, chunk_size: int) -> dict:
  """How the labels treat genuine non-members: the victim's distinct partition images (same
  distribution, never trained on) scored as reconstructions would be, by their SSIM to the
  nearest training image: the fraction labelled non-member (< levels[1]) and the fraction
  that would pass the member level (≥ levels[0]; an upper bound on false members, as a
  best buddy needs more)."""
  task = data.make_task(config.data)
  nearest = np.asarray(ssim.nearest_neighbours(
      task.to_pixels(task.partition_images), task.to_pixels(task.train_images),
      chunk_size=chunk_size).ssim, np.float64)
  return {"images": int(nearest.size), "labelled_non_member": float(np.mean(nearest < levels[1])),
          "at_member_level": float(np.mean(nearest >= levels[0]))}


def per_image(run_dir: str, chunk_size: int = 500, loo_per_start: int = 0,
              levels: tuple = (0.4, 0.3), windows: tuple = (ssim.FILTER_SIZE,),
              shadows=(), loo_natural_threshold: float | None = None) -> dict:
  """Scores and ground truth of every image of a finished "membership" run.

  Args:
    run_dir: a `trdr.experiment` run of mode "membership" (binary victim).
    chunk_size: SSIM queries per block.
    loo_per_start: images per grid point scored by `leave_one_out` (bilevel runs; 0: none),
      the same images at both stages (so that `best_of_loo` has both).
    loo_natural_threshold: drawn among the images whose reconstruction looks natural
      ("natural_ssim" ≥ it; configs/membership.py ``natural_threshold``): the rule scores
      no other. None: among all.
    levels: (member SSIM level, non-member SSIM bound) of `_ground_truth`.
    windows: the SSIM windows of the labels, the first unsuffixed (`_ground_truth`).
    shadows: this victim's `shadow_victims`; with them the "lira" score (`lira_scores`),
      without none.
  Returns:
    {"kind": str[N], "seed": int[N], "victim": int[N] (the run's data draw, ``data.seed``),
     "start_member": int8[N] (`init.start_membership`), "grid_point": int[N], and per stage
     of `STAGES`: {"member", "non_member", "member_ssim", "member_l2", "best_buddy":
     bool[N], "natural_ssim": float[N], "scores": {name: float[N]}}; the reconstruction
     stage also "start_ssim": float[N], each reconstruction's SSIM to its own start},
    N = G · m images, grid point-major. Every score is a function of its own image (and,
    for λ_i, of its own candidate's multiplier): nothing is broadcast from a grid point.
  Raises:
    FileNotFoundError: not a finished run.
    ValueError: its files fail their SHA256SUMS, or the victim is not binary.
  """
  rundir.check_finished(run_dir, experiment.MEMBERSHIP_FILE)
  config = ml_collections.ConfigDict(files.read_json(os.path.join(run_dir, rundir.CONFIG_FILE)))
  with experiment.load_results(run_dir) as saved:
    results = dict(saved)
  task = data.make_task(config.data)
  if len(np.unique(task.train_labels)) != 2:
    raise ValueError("the membership measurement needs a binary victim (two class groups)")
  mean = None if results["mean"].size == 0 else results["mean"]
  display = str(results["display"])
  n_train = len(task.train_images)
  pool = np.concatenate([task.to_pixels(task.train_images),
                         task.to_pixels(task.partition_images)])
  reference = task.to_pixels(task.test_images[inits.PUBLIC_REFERENCE])
  grid, m = results["final_images"].shape[:2]
  labels = np.broadcast_to(results["labels"], (grid, m))
  out = {"kind": np.repeat(results["start_kind"], m), "seed": np.repeat(results["start_seed"], m),
         "victim": np.full(grid * m, int(config.data.seed)),
         "start_member": results["start_member"].reshape(-1),
         "grid_point": np.repeat(np.arange(grid), m)}
  eligible = None  # the images leave_one_out may draw, set at the reconstruction stage
  with jax.enable_x64(bool(config.float64)):
    target = victim.load_saved(config, config.victim.checkpoint_dir
                               or os.path.join(run_dir, "victim"),
                               results["final_images"].shape[-3:])
    dtype = jnp.float64 if config.float64 else jnp.float32
    for stage, key, prefix in (("reconstruction", "final_images", ""),
                               ("start", "initial_images", evaluate.START)):
      images = results[key]
      flat = jnp.asarray(images.reshape((-1, *images.shape[-3:])), dtype)
      y = jnp.asarray(labels.reshape(-1), dtype)
      margin = np.asarray(y * jax.jit(target.apply)(target.params, flat), np.float64)
      scores = {"neg_loss": -np.logaddexp(0.0, -margin), "margin": margin,
                "neg_grad_norm": -gradient_norms(target, flat, y).astype(np.float64)}
      if stage == "reconstruction":
        moved = images - results["initial_images"]
        scores["neg_moved"] = -np.sqrt(np.sum(np.square(moved, dtype=np.float64),
                                              axis=(-3, -2, -1))).reshape(-1)
        if "final_lambdas" in results:
          scores["lambda"] = np.asarray(results["final_lambdas"], np.float64).reshape(-1)
      if shadows:
        scores["lira"] = lira_scores(target, shadows, data.to_pixels(images, mean).reshape(
            flat.shape), labels.reshape(-1), mean)
      shown = evaluate.to_display(images, mean, display)
      natural = np.asarray(ssim.nearest_neighbours(
          shown.reshape((-1, *shown.shape[-3:])), reference, chunk_size=chunk_size).ssim,
                           np.float64)
      if stage == "reconstruction" and loo_natural_threshold is not None:
        eligible = natural.reshape(grid, m) >= loo_natural_threshold
      if loo_per_start and config.attack.name == "bilevel":
        began = time.perf_counter()
        scores["loo"] = leave_one_out(config, target, images, results["labels"],
                                      results[prefix + "param_distance"], loo_per_start,
                                      eligible=eligible).reshape(-1)
        logging.info("Membership: leave-one-out of the %s images, %d re-solves: %.1f s", stage,
                     int(np.sum(np.isfinite(scores["loo"]))), time.perf_counter() - began)
      truth = _ground_truth(shown, pool, n_train, results[prefix + "train_ssim"],
                            results[prefix + "partition_ssim"], levels, chunk_size, windows)
      out[stage] = {**{k: v.reshape(-1) for k, v in truth.items()},
                    "natural_ssim": natural, "scores": scores}
  out["reconstruction"]["start_ssim"] = _start_ssim(results, mean, display)
  both = out["reconstruction"]["scores"], out["start"]["scores"]
  for k in BOTH:
    if k in both[0] and k in both[1]:  # NaN (a score not computed for the image) stays NaN
      both[0][f"best_of_{k}"] = np.maximum(both[0][k], both[1][k])
  return out


def _start_ssim(results, mean, display: str) -> np.ndarray:
  """SSIM (window 11, the labels' first) of each reconstruction to its own start image, both
  as displayed: float64[G · m], grid point-major. How far the attack moved the image away
  from what the adversary started from (`measure`'s "left start" rows)."""
  shown = [np.asarray(evaluate.to_display(results[k], mean, display))
           for k in ("final_images", "initial_images")]
  flat = [x.reshape((-1, *x.shape[-3:])) for x in shown]
  return np.asarray(ssim.ssim(*flat), np.float64).reshape(-1)


def start_ssim_of_run(run_dir: str) -> np.ndarray:
  """`_start_ssim` of a finished "membership" run (for a scores file written before
  `per_image` kept it): float64[G · m]."""
  rundir.check_finished(run_dir, experiment.MEMBERSHIP_FILE)
  with experiment.load_results(run_dir) as saved:
    results = dict(saved)
  mean = None if results["mean"].size == 0 else results["mean"]
  return _start_ssim(results, mean, str(results["display"]))


def _victim_spread(row: dict) -> dict:
  """Mean ± std (ddof 1) of the AUC over the victims that have both classes."""
  finite = [a for a in row["per_cluster"] if np.isfinite(a)]
  return {"victim_mean": float(np.mean(finite)) if finite else float("nan"),
          "victim_std": float(np.std(finite, ddof=1)) if len(finite) > 1 else float("nan")}


def _summary(values, label, victims, config) -> dict:
  """`roc.summary` with the victims as clusters, and the spread over them."""
  row = roc.summary(values, label, fprs=config.fprs, confidence=config.confidence,
                    n_resamples=config.n_resamples, clusters=victims)
  return {**row, **_victim_spread(row)}


def concatenate(parts: list[dict]) -> dict:
  """`per_image` outputs of several runs (victims) as one, images in the given order."""
  first = parts[0]
  return {k: concatenate([p[k] for p in parts]) if isinstance(first[k], dict)
          else np.concatenate([p[k] for p in parts]) for k in first}


def _subset(per: dict, keep) -> dict:
  """`per_image` output (or `concatenate`'s) restricted to the images ``keep`` (bool[N])."""
  return {k: _subset(v, keep) if isinstance(v, dict) else np.asarray(v)[keep]
          for k, v in per.items()}


def _fraction(x, mask) -> float:
  return float(np.mean(x[mask])) if mask.any() else float("nan")


def _fractions(stage: dict, kind_mask, thresholds, start_member) -> list[dict]:
  rows = []
  for t in thresholds:
    natural = kind_mask & (stage["natural_ssim"] >= t)
    agree_start = stage["member_ssim"] == (start_member == 1)
    rows.append({"threshold": float(t), "natural": int(natural.sum()),
                 "fraction_member": _fraction(stage["member_ssim"], natural),
                 "ssim_l2_agree": _fraction(stage["member_ssim"] == stage["member_l2"], natural),
                 "best_buddies": int(np.sum(stage["best_buddy"][natural])),
                 "start_member_agree": (_fraction(agree_start, natural)
                                        if np.all(start_member[natural] >= 0) else None)})
  return rows


def _control_rows(per: dict, config, attack: str) -> list[dict]:
  """The three controls of one attack, on its mixed starts (`init.start_membership`: each
  start a training image or a partition image, at random and recorded). Positive: its
  natural-looking reconstructions labelled by the start's membership, through the same
  attack and scores; an experiment that cannot tell these apart cannot detect membership
  at all. Negative: the reconstructions from partition starts (all non-members) split at
  random (a fixed seed) into two halves, one labelled "member"; any score that tells them
  apart is a false alarm of the rule. Oracle: an attack that returns training images
  only, a total breach (the mixed starts that are training images, natural-looking, with
  their start-stage scores: every image a member, so no AUC, and the rule "with
  certainty" must say the adversary can tell)."""
  s, start = per["reconstruction"], per["start_member"]
  natural = (per["kind"] == "mixed") & (s["natural_ssim"] >= config.natural_threshold)
  halves = np.random.default_rng(0).random(start.size) < 0.5
  oracle = (per["kind"] == "mixed") & (start == 1) & (
      per["start"]["natural_ssim"] >= config.natural_threshold)
  rows = []
  for control, keep, label, stage in (
      ("positive", natural & (start >= 0), start == 1, s),
      ("negative", natural & (start == 0), halves, s),
      ("oracle", oracle, np.ones(start.size, bool), per["start"])):
    for score, values in stage["scores"].items():
      use = keep & np.isfinite(values)
      row = {"attack": attack, "control": control, "score": score,
             "members": int(np.sum(label[use])), "non_members": int(np.sum(~label[use])),
             "top": roc.precision_at_top(values[use], label[use], config.precision_sizes)}
      row["informative"] = min(row["members"], row["non_members"]) >= config.min_per_class
      if row["informative"]:
        row.update(_summary(values[use], label[use], per["victim"][use], config))
      rows.append(row)
  return rows


def _label_windows(config, stage: dict) -> list[tuple[int, str]]:
  """(window, key suffix) of the labels in ``stage``: ``config.label_windows``' first
  (the rule's, unsuffixed), then each further one that `per_image` computed."""
  first, *others = config.label_windows
  return [(first, "")] + [(w, f"_w{w}") for w in others if f"member_w{w}" in stage]


def measure(images: dict, config: ml_collections.ConfigDict) -> dict:
  """The membership tables from `per_image` output of each attack.

  Args:
    images: attack name -> `per_image` output.
    config: configs/membership.py (natural_threshold, natural_thresholds, fprs,
      confidence, n_resamples, min_per_class, precision_sizes).
  Returns:
    {"rows": [{"attack", "kind", "stage", "score", "informative", "top" (the
      members among the top k: `roc.precision_at_top` at ``precision_sizes``), and when
      informative the `roc.summary` fields over the victims as clusters (ci over victims, ci_images,
      ci_bootstrap, clusters, cluster_ids, per_cluster) and victim_mean, victim_std; one
      row per label window of ``config.label_windows`` that `per_image` computed}], "controls":
      [{"attack", "control" (positive | negative | oracle), "score", "informative", the
      same}] (`_control_rows`), "selection": the rows of the reconstructions of the shadow
      victims ``config.selection_victims`` (one window, the first; the adversary selects
      its score on them: `trdr.report.membership_rules.select`), "selection_victims",
      "left_start_max_ssim", "fractions": [{"attack",
      "kind", "stage", "rows": [...]}], "roc": {"attack/kind/score": [fpr, tpr]} (the
      reconstructions' curves), "natural_threshold", "fprs", "confidence", "min_per_class"}.
    AUCs count natural-looking images with a finite score only; fewer than min_per_class
    members or non-members: "informative" False and no AUC. Every row but "selection"'s
    counts the target victims only (``config.victims``: the images of a victim of
    ``selection_victims`` are the adversary's, never tested). The public starts have
    further rows, kind "public, left start" ("restricted_from": "public"): the
    reconstructions whose SSIM to their own start (`per_image`'s "start_ssim") is below
    ``config.left_start_max_ssim``.
  """
  rows, fractions, curves, controls, selection = [], [], {}, [], []
  shadows = tuple(config.get("selection_victims", ()))
  left = config.get("left_start_max_ssim")

  def row_of(attack, kind, stage, score, window, suffix, values, mask, per, s):
    scored = mask & (s["natural_ssim"] >= config.natural_threshold) & np.isfinite(values)
    keep = scored & (s["member" + suffix] | s["non_member" + suffix])
    label = s["member" + suffix][keep]
    row = {"attack": attack, "kind": kind, "stage": stage, "score": score,
           "window": window, "members": int(label.sum()),
           "non_members": int((~label).sum()), "excluded": int(np.sum(scored & ~keep)),
           "top": roc.precision_at_top(values[keep], label, config.precision_sizes)}
    row["informative"] = min(row["members"], row["non_members"]) >= config.min_per_class
    if row["informative"]:
      row.update(_summary(values[keep], label, per["victim"][keep], config))
    return row, keep, label

  for attack, per in images.items():
    shadow = np.isin(per["victim"], shadows)
    per_all, per = per, _subset(per, ~shadow)   # the target victims; the shadows select
    if "mixed" in per["kind"]:
      controls += _control_rows(per, config, attack)
    for kind in dict.fromkeys(per["kind"].tolist()):
      in_kind = per["kind"] == kind
      for stage in STAGES:
        s = per[stage]
        fractions.append({"attack": attack, "kind": kind, "stage": stage, "rows": _fractions(
            s, in_kind, config.natural_thresholds, per["start_member"])})
        for window, suffix in _label_windows(config, s):
          for score, values in s["scores"].items():
            row, keep, label = row_of(attack, kind, stage, score, window, suffix, values,
                                      in_kind, per, s)
            if row["informative"] and stage == "reconstruction" and not suffix:
              curves[f"{attack}/{kind}/{score}"] = [
                  c.tolist() for c in roc.roc_curve(values[keep], label)]
            rows.append(row)
      # The public starts again, on the reconstructions that left their start image
      # (`trdr.report.membership_rules`: the public-start confound).
      restricted = []
      if kind == "public" and left is not None and "start_ssim" in per["reconstruction"]:
        restricted = [(f"{kind}{LEFT_START}", per["reconstruction"]["start_ssim"] < left)]
      for name, extra in restricted:
        s = per["reconstruction"]
        for score, values in s["scores"].items():
          rows.append({**row_of(attack, name, "reconstruction", score,
                                config.label_windows[0], "", values, in_kind & extra, per,
                                s)[0], "restricted_from": kind})
      # What the adversary sees on its shadow victims (`config.selection_victims`): the same
      # rows of the reconstructions, from which it selects its score.
      if shadow.any():
        sel = _subset(per_all, shadow)
        s, in_sel = sel["reconstruction"], sel["kind"] == kind
        groups = [(kind, in_sel)] + [
            (f"{kind}{LEFT_START}", in_sel & (s["start_ssim"] < left))
            for _ in restricted]
        for name, mask in groups:
          for score, values in s["scores"].items():
            selection.append(row_of(attack, name, "reconstruction", score,
                                    config.label_windows[0], "", values, mask, sel, s)[0])
  return {"rows": rows, "controls": controls, "fractions": fractions, "roc": curves,
          "selection": selection, "selection_victims": [int(v) for v in shadows],
          "left_start_max_ssim": None if left is None else float(left),
          "natural_threshold": float(config.natural_threshold),
          "labels": {"member_min_ssim": float(config.member_min_ssim),
                     "non_member_max_ssim": float(config.non_member_max_ssim),
                     "windows": [int(w) for w in config.label_windows]},
          "fprs": [float(f) for f in config.fprs], "confidence": float(config.confidence),
          "min_per_class": int(config.min_per_class)}


def run_dir(workdir: str, attack: str, victim: int) -> str:
  """The directory of one attack's membership run on one victim."""
  return os.path.join(workdir, attack, f"victim_{int(victim)}")


def shadow_dir(workdir: str, attack: str, victim: int) -> str:
  """The directory of one victim's shadow victims (`shadow_victims`)."""
  return os.path.join(workdir, attack, f"shadows_{int(victim)}")


def scores_path(workdir: str, attack: str, victim: int) -> str:
  """The file of one victim's `per_image` output (`per_image_or_reuse`)."""
  return os.path.join(workdir, attack, f"scores_{int(victim)}.npz")


_KEY = "__inputs__"  # the array of a scores file that holds `_scoring_inputs`


def _scoring_inputs(run_dir: str, chunk_size: int, loo_per_start: int, levels: tuple,
                    windows: tuple, shadows, loo_natural_threshold: float | None) -> str:
  """JSON of what `per_image` reads besides trdr's code: the run's results (their SHA-256),
  the scoring settings and each shadow victim's θ_k, mean and training indices (digests)."""
  return files.dumps_json({
      "results_sha256": files.sha256_file(os.path.join(run_dir, experiment.RESULTS_FILE)),
      "chunk_size": int(chunk_size), "loo_per_start": int(loo_per_start),
      "loo_natural_threshold": (None if loo_natural_threshold is None
                                else float(loo_natural_threshold)),
      "levels": [float(x) for x in levels], "windows": [int(w) for w in windows],
      "shadows": [files.array_digest(*jax.tree.leaves(s.target.params), s.train_index,
                                     *(() if s.mean is None else (s.mean,)))
                  for s in shadows]})


def per_image_or_reuse(path: str, run_dir: str, chunk_size: int = 500, loo_per_start: int = 0,
                       levels: tuple = (0.4, 0.3), windows: tuple = (ssim.FILTER_SIZE,),
                       shadows=(), loo_natural_threshold: float | None = None) -> dict:
  """`per_image` of a finished run, kept in ``path`` (an .npz, written atomically) and read
  back instead of computed while the run's results, these settings and the shadow victims
  are unchanged: a rerun of a membership experiment (after a crash, or to write its tables
  again) does not re-solve its leave-one-out scores. Like a finished run
  (`trdr.experiment.run_or_reuse`), the file is keyed by its inputs, not by trdr's
  code: delete it to score again with changed code. A file of other inputs, or one that
  cannot be read, is computed again (with a log line) and replaced once that succeeds.

  Args and Raises: as `per_image`, and ``path``, the file.
  Returns:
    `per_image`'s dict, its arrays numpy arrays.
  """
  inputs = _scoring_inputs(run_dir, chunk_size, loo_per_start, levels, windows, shadows,
                           loo_natural_threshold)
  if os.path.exists(path):
    try:
      with open(path, "rb") as f, np.load(f) as saved:  # f: closed if np.load fails
        if str(saved[_KEY]) == inputs:
          logging.info("Reusing the per-image scores %s", path)
          flat = {k: saved[k] for k in saved.files if k != _KEY}
          if "reconstruction/start_ssim" not in flat:   # written before it was kept
            flat["reconstruction/start_ssim"] = start_ssim_of_run(run_dir)
            files.save_npz(path, **flat, **{_KEY: np.asarray(inputs)})
          return traverse_util.unflatten_dict(flat, sep="/")
      logging.info("%s holds the scores of other results or settings: scoring again", path)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
      logging.warning("%s cannot be read (%s: %s): scoring again", path, type(e).__name__, e)
  out = per_image(run_dir, chunk_size, loo_per_start, levels, windows, shadows,
                  loo_natural_threshold)
  flat = traverse_util.flatten_dict(out, sep="/")  # "reconstruction/scores/loo": float[N]
  files.save_npz(path, **{k: np.asarray(v) for k, v in flat.items()},
                 **{_KEY: np.asarray(inputs)})
  return out


def run(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Runs (or reuses) every attack's membership run on every victim of ``config.victims``
  and ``config.shadows`` shadow victims of each (`shadow_victims`, in `shadow_dir`),
  scores each victim's images (or reuses its scores: `per_image_or_reuse`, in
  `scores_path`), and writes WORKDIR/membership.json.

  Args:
    config: configs/membership.py.
    workdir: output directory; one sub-directory per attack and victim (`run_dir`;
      `trdr.experiment.run_or_reuse`: finished runs of the same config are reused,
      unfinished ones resumed).
  Returns:
    `measure` output, with "victims" (the data draws) and "label_calibration".
  Raises:
    FileExistsError: a sub-directory holds a finished run of another config, or an
      attack's directory holds a run of the one-victim layout (trdr before the victims).
    ValueError: as `per_image`.
  """
  os.makedirs(workdir, exist_ok=True)
  levels = (config.member_min_ssim, config.non_member_max_ssim)
  images, calibration = {}, {}
  for name, attack in config.attacks.items():
    if os.path.exists(os.path.join(workdir, name, rundir.CONFIG_FILE)):
      raise FileExistsError(
          f"{os.path.join(workdir, name)} holds a membership run of one victim (the layout "
          "before config.victims); delete it or choose another work directory")
    parts, counts = [], []
    for v in (*config.victims, *config.get("selection_victims", ())):
      one = membership_config.victim_config(attack, v)
      directory = run_dir(workdir, name, v)
      seconds = [time.perf_counter()]
      experiment.run_or_reuse("membership", one, directory)
      seconds.append(time.perf_counter())
      shadows = shadow_victims(one, config.shadows, shadow_dir(workdir, name, v))
      seconds.append(time.perf_counter())
      parts.append(per_image_or_reuse(scores_path(workdir, name, v), directory,
                                      config.chunk_size, config.loo_per_start, levels,
                                      tuple(config.label_windows), shadows,
                                      config.natural_threshold))
      seconds.append(time.perf_counter())
      counts.append(label_calibration(one, levels, config.chunk_size))
      seconds.append(time.perf_counter())
      logging.info("Membership: %s, victim %d: seconds: run %.1f, shadows %.1f, scores and "
                   "labels %.1f, label calibration %.1f", name, v,
                   *(b - a for a, b in zip(seconds, seconds[1:])))
    images[name] = concatenate(parts)
    total = sum(c["images"] for c in counts)
    calibration[name] = {"images": total, **{
        k: sum(c[k] * c["images"] for c in counts) / total
        for k in ("labelled_non_member", "at_member_level")}}
  measured = measure(images, config)
  measured["victims"] = [int(v) for v in config.victims]
  measured["label_calibration"] = calibration
  measured["config"] = files.to_jsonable(config)
  files.write_json(os.path.join(workdir, MEASURED_FILE), measured)
  return measured


def _differing_keys(had: dict, wanted: dict) -> list[str]:
  """The dotted keys where the configuration membership.json recorded (``had``) and the one
  asked for (``wanted``), both as `files.to_jsonable` makes them, differ; an attack's run
  key added to trdr after the measurement (`rundir.ADDED_KEYS`: absent from ``had``, at
  its added value, the behaviour of before, in ``wanted``) is the same run, not a change."""
  ours = traverse_util.flatten_dict(wanted, sep=".")
  theirs = traverse_util.flatten_dict(had, sep=".")

  def added(key):
    parts = key.split(".", 2)   # attacks.<name>.<the run config's key>
    return (key not in theirs and len(parts) == 3 and parts[0] == "attacks"
            and rundir.added_key(parts[2], ours[key]))
  return sorted(k for k in ours.keys() | theirs.keys()
                if ours.get(k) != theirs.get(k) and not added(k))


def read(config: ml_collections.ConfigDict, workdir: str) -> dict | None:
  """What `run` measured under ``config`` into ``workdir`` (its membership.json), or None
  when it has not finished there. The report (`trdr.report.run`) reads it rather than
  running the membership experiment itself (`make membership`, about an hour at ":cpu").

  Raises:
    ValueError: WORKDIR/membership.json was measured under another configuration (or by
      trdr before membership.json recorded it), naming the differing keys: rerun
      `make membership` (its finished runs and scores are reused).
  """
  path = os.path.join(workdir, MEASURED_FILE)
  if not os.path.exists(path):
    return None
  measured = files.read_json(path)
  wanted, had = files.to_jsonable(config), measured.get("config")
  why = None
  if had is None:
    why = "it was written before membership.json recorded its configuration"
  elif keys := _differing_keys(had, wanted):
    why = f"its configuration differs in {', '.join(keys[:8])}" + (
        f" and {len(keys) - 8} more" if len(keys) > 8 else "")
  if why:
    raise ValueError(f"{path} was not measured under this configuration ({why}); rerun "
                     "the membership experiment into that directory (`make membership`, or "
                     "experiments/membership.py with the same config: finished runs and "
                     "scores are reused), or remove it")
  return measured
