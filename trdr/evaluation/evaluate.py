"""Evaluation of reconstructions, the same for every attack (no plotting).

  `to_display`      the one display transform: the mean added back ("pixels"), then, for
                    "minmax", each image min-max scaled to [0, 1] (Haim et al.'s view)
  `comparison_sets` the real images a reconstruction is compared to: the training set,
                    the distinct partition, (landscapes) the noise set and (optionally)
                    the public test split, in pixels
  `with_starts`     a run's evaluation: its reconstructions and (prefix `START`, the
                    verdicts' baseline) its start images, a landscape's as eq. 10 mixtures
  `reconstructions` each reconstruction's nearest image of every set (SSIM-nearest by
                    default) with the metrics of `trdr.evaluation.registry` to it; per
                    training image the SSIM of its best reconstruction and the counts at
                    SSIM thresholds
  `param_distances` ||θ* − θ(x)||² with θ(x) re-solved from θ* (eq. 2's upper
                    loss, Table 1), independent of the attack's warm starts
  `own_start_fraction` the share of partition-start reconstructions still nearest their
                    own start image (Figs. 3, 4, 9)
  `rescored`        a saved run evaluated again under another display (one scale for both
                    attacks)
  `in_run_score`    Haim et al.'s NCC score, which the sweep ranks settings by

`trdr.evaluation.records` turns these numbers into landscape.json records and summary counts.
"""

import math
import types

import jax
import jax.numpy as jnp
import numpy as np

from trdr import data, victim
from trdr.attacks import init as inits
from trdr.evaluation import metrics, registry, ssim
from trdr.runtime import sharding
from trdr.victim import solver

DISPLAYS = ("pixels", "minmax")
# Prefix of the start images' evaluation (the attack-free baseline of every verdict: the
# same numbers with the initial images x0 taken as the reconstructions).
START = "start_"
# The SSIM window side of the nearest neighbours and counts unless a config sets
# eval.ssim_window: dm_pix's default (Haim et al. count with 3; eval.count_windows adds it).
SSIM_WINDOW = ssim.FILTER_SIZE


def to_display(images, mean, display: str = "pixels") -> np.ndarray:
  """Reconstructions as shown and scored.

  Args:
    images: float[..., H, W, C] in the victim's input space.
    mean: float[H, W, C] task mean, or None / an empty array (no mean subtracted).
    display: "pixels" — the mean added back (dtype kept); "minmax" — then every image
      min-max scaled to [0, 1] (float32; non-finite pixels of a diverged attack become 0).
  Raises:
    ValueError: unknown display.
  """
  if display not in DISPLAYS:
    raise ValueError(f"unknown display {display!r}; known: {DISPLAYS}")
  has_mean = mean is not None and np.size(mean)
  if display == "pixels":
    return np.asarray(data.to_pixels(np.asarray(images), mean if has_mean else None))
  x = np.asarray(images, np.float64)
  if has_mean:
    x = x + np.asarray(mean)
  x = np.where(np.isfinite(x), x, 0.0)
  return np.asarray(metrics.minmax_scale(x), np.float32)


def comparison_sets(task, noise=None, public: bool = False) -> dict[str, np.ndarray]:
  """name -> float[M, H, W, C] real images in pixels: train, partition (and noise), and with
  ``public`` the test split ("public": images an adversary can hold, disjoint from the
  training set; the realism score of `trdr.evaluation.realism` is the SSIM to its nearest image)."""
  sets = {"train": data.to_pixels(task.train_images, task.mean),
          "partition": data.to_pixels(task.partition_images, task.mean)}
  if noise is not None:
    sets["noise"] = data.to_pixels(np.asarray(noise), task.mean)
  if public:
    sets["public"] = data.to_pixels(task.test_images, task.mean)
  return sets


def reconstructions(images, mean, sets: dict[str, np.ndarray], *, display: str = "pixels",
                    thresholds=(), chunk_size: int = 500, ssim_window: int = SSIM_WINDOW,
                    count_windows=(), mixture: dict | None = None,
                    progress=None, metric_names=registry.DEFAULT_METRICS,
                    nearest: str = registry.DEFAULT_NEAREST) -> dict[str, np.ndarray]:
  """Nearest neighbours of the reconstructions in every comparison set.

  Args:
    images: float[..., m, H, W, C] reconstructions (the victim's input space).
    mean: the task mean (see `to_display`).
    sets: name -> float[M, H, W, C] real images in [0, 1] (`comparison_sets`).
    display: `to_display`'s transform before comparing.
    thresholds: SSIM levels at which training images count as reconstructed; empty:
      no per-training-image evaluation.
    chunk_size: queries per SSIM block.
    ssim_window: the SSIM window side of the nearest neighbours and the counts (11:
      dm_pix's default; 3: Haim et al.'s counts).
    count_windows: further windows w for the per-training-image counts only: their
      fields as below with the suffix `_w{w}` (counts on Haim et al.'s scale beside ours).
    mixture: None, or set name -> float[G] weights when the images float[G, m, H, W, C]
      are, displayed ("pixels"), the mixtures Σ_s w_s[g] · sets[s] of sets of m images
      each (a landscape's eq. 10 starts: `trdr.attacks.init.mixture_weights` of the
      training set, the partition and the noise set). The SSIM search then computes its
      pair products once per set instead of once per grid point
      (`ssim.pairwise_ssim_of_mixtures`), with the same results up to float32 rounding.
    progress: None, or called as ``progress(done, total)`` as the SSIM blocks finish,
      counted in (image, candidate) pairs over all of this call's searches: the nearest
      neighbours, then the per-training-image counts of each window.
    metric_names: the metrics of `registry.METRICS` recorded at each nearest pair
      (``config.eval.metrics``).
    nearest: the metric whose nearest image is found (``config.eval.nearest``, one that
      `registry.Metric.searches`): "ssim" is the exact SSIM engine at ``ssim_window``
      (`ssim.nearest_neighbours_per_set`, which gives the pair's SSIM and L2 itself);
      another searches by its ``pairwise`` (`registry.nearest`).
  Returns:
    For each set s: s_index int (every reconstruction's nearest image of s) and, for each
    metric of ``metric_names``, s_{metric} float (its value at that pair), each [..., m];
    by default s_ssim and s_l2 (the SSIM-nearest image's SSIM and L2 distance). With
    thresholds: best_ssim_per_train float[..., n] and best_index_per_train int[..., n]
    (each training image's best reconstruction) and count_ssim_ge int[..., len(thresholds)];
    Haim et al.'s matching beside: best_buddy_ssim_per_train float[..., n] (the SSIM of
    training image i and its nearest reconstruction under `metrics.ncc_distances` when
    the two are best buddies, `metrics.best_buddies`; NaN otherwise) and
    count_best_buddies_ssim_ge int[..., len(thresholds)]. For every window w of
    ``count_windows`` other than ``ssim_window``, the same fields but best_index_per_train
    with the suffix `_w{w}` (the best buddies are the same pairs: NCC does not depend on it).

  Grid points (leading indices) whose reconstructions are bit-identical are evaluated
  once: e.g. the five λ2 = 0 points of a landscape all start from the same noise.

  Raises:
    ValueError: a mixture under another display than "pixels", of images that are not
      float[G, m, H, W, C], of unknown sets, or images that are not its mixtures; an
      unknown metric, or a ``nearest`` that cannot search (`registry.check`).
  """
  metric_names = registry.check(metric_names, nearest)
  recon = to_display(images, mean, display)
  lead = recon.shape[:-4]
  if mixture is not None and (display != "pixels" or len(lead) != 1 or not mixture
                              or not set(mixture) <= set(sets)):
    raise ValueError(f"a mixture needs display 'pixels' (got {display!r}), images float[G, "
                     f"m, H, W, C] (got {recon.shape}) and weights of comparison sets "
                     f"{sorted(sets)} (got {sorted(mixture)})")
  if len(lead):
    points = recon.reshape((-1, *recon.shape[-4:]))
    unique, inverse = sharding.distinct_points(points)
    if len(unique) < len(points):
      once = reconstructions(points[unique], None, sets, display="pixels",
                             thresholds=thresholds, chunk_size=chunk_size,
                             ssim_window=ssim_window, count_windows=count_windows,
                             mixture=None if mixture is None else {
                                 k: np.asarray(w)[unique] for k, w in mixture.items()},
                             progress=progress, metric_names=metric_names, nearest=nearest)
      return {k: v[inverse].reshape((*lead, *v.shape[1:])) for k, v in once.items()}
  mixed = None if mixture is None else (
      np.stack([np.asarray(w, np.float64) for w in mixture.values()], axis=1),
      np.stack([np.asarray(sets[name], recon.dtype) for name in mixture]))
  windows = (ssim_window, *(w for w in count_windows if w != ssim_window))
  # Candidates per query of each search: the nearest neighbours', then each window's counts.
  searched = [sum(len(c) for c in sets.values())] + [len(sets["train"])] * (
      len(windows) if len(thresholds) else 0)
  n_queries = math.prod(recon.shape[:-3])

  def stage(k):  # search k's progress(done, total) in queries -> this call's, in pairs
    if progress is None:
      return None
    before, total = n_queries * sum(searched[:k]), n_queries * sum(searched)
    return lambda done, _: progress(before + done * searched[k], total)

  out = {}
  candidates = {name: np.asarray(c, recon.dtype) for name, c in sets.items()}
  if nearest == registry.ENGINE:
    found = {name: (np.asarray(nn.index), nn) for name, nn in ssim.nearest_neighbours_per_set(
        recon, candidates, chunk_size=chunk_size, filter_size=ssim_window, mixture=mixed,
        progress=stage(0)).items()}
  else:
    found = {name: (registry.nearest(nearest, recon, c)[0], None)
             for name, c in candidates.items()}
  for name, (index, nn) in found.items():
    out[f"{name}_index"] = index
    for m in metric_names:
      out[f"{name}_{m}"] = (np.asarray(getattr(nn, m)) if nn is not None
                            and m in registry.ENGINE_FIELDS else
                            registry.of_pairs(m, recon, candidates[name][index]))
  if len(thresholds):
    buddies = _best_buddies(recon, sets["train"])
    for k, w in enumerate(windows, start=1):
      suffix = "" if w == ssim_window else f"_w{w}"
      train = np.asarray(sets["train"], recon.dtype)
      similarity = np.asarray(
          ssim.pairwise_ssim(recon, train, chunk_size=chunk_size, filter_size=w,
                             progress=stage(k))
          if mixed is None else ssim.pairwise_ssim_of_mixtures(
              recon, train, *mixed, chunk_size=chunk_size, filter_size=w,
              progress=stage(k)))
      counts = _per_train(similarity, buddies, thresholds)
      if suffix:
        counts.pop("best_index_per_train")
      out.update({k + suffix: v for k, v in counts.items()})
  return out


def with_starts(evaluation_of, images, x0, weights=None) -> dict[str, np.ndarray]:
  """A run's evaluation: ``evaluation_of(x, mixture)`` (`reconstructions` with the run's
  settings) of its reconstructions float[G, m, H, W, C] and, under keys prefixed `START`,
  of its start images x0 float[G, m, H, W, C] (every verdict's attack-free baseline).

  With a landscape's eq. 10 weights float[G, 3] (of the train, partition and noise sets;
  `trdr.attacks.init.mixture_weights`; display "pixels"), the starts are searched as
  mixtures, and a reconstruction the attack left unchanged (the ground-truth start) gets
  its start's numbers. Without, both in one call, which evaluates such a point once too.
  """
  images, x0 = np.asarray(images), np.asarray(x0)
  if weights is None:
    both = evaluation_of(np.concatenate([images, x0]), None)
    return {**{k: v[:len(x0)] for k, v in both.items()},
            **{START + k: v[len(x0):] for k, v in both.items()}}
  start = evaluation_of(x0, dict(zip(("train", "partition", "noise"), np.asarray(weights).T)))
  moved = ~np.all(images == x0, axis=tuple(range(1, images.ndim)))
  own = evaluation_of(images[moved], None) if moved.any() else {}
  out = {}
  for k, v in start.items():
    out[START + k], out[k] = v, v.copy()
    out[k][moved] = own.get(k, v[moved])
  return out


def _best_buddies(recon, train) -> tuple[np.ndarray, np.ndarray]:
  """Haim et al.'s matching under their half-resolution NCC distance: bool[..., n] (training
  image i and its nearest reconstruction are best buddies) and that reconstruction's index
  int[..., n]."""
  flat = recon.reshape((-1, *recon.shape[-4:]))
  train = np.asarray(train, np.float32)
  buddy, index = zip(*(metrics.best_buddies(metrics.ncc_distances(x, train)) for x in flat))
  lead = recon.shape[:-4]
  return np.stack(buddy).reshape((*lead, -1)), np.stack(index).reshape((*lead, -1))


def _per_train(ssim, buddies, thresholds) -> dict[str, np.ndarray]:
  """The per-training-image fields of `reconstructions` from SSIM float[..., m, n]."""
  best, index = metrics.best_per_candidate(ssim)
  best = np.asarray(best)
  buddy, buddy_index = buddies
  pair_ssim = np.take_along_axis(ssim, buddy_index[..., None, :], axis=-2)[..., 0, :]
  pair_ssim = np.where(buddy, pair_ssim, np.nan)
  at_least = lambda x: np.stack([np.sum(np.nan_to_num(x, nan=-np.inf) >= t, axis=-1)
                                 for t in thresholds], axis=-1)
  return {"best_ssim_per_train": best, "best_index_per_train": np.asarray(index),
          "count_ssim_ge": at_least(best), "best_buddy_ssim_per_train": pair_ssim,
          "count_best_buddies_ssim_ge": at_least(pair_ssim)}


def rescored(results: dict, display: str, *, chunk_size: int = 500) -> dict[str, np.ndarray]:
  """A saved run's reconstructions and start images evaluated again under ``display``:
  to compare runs that were scored under different displays on one scale (Runkel et al.
  Figs. 10–12 compare the bilevel attack, scored in pixels, with DecoReco, min-max).

  Args:
    results: a run's results.npz as a dict (final_images, initial_images, train_images,
      partition_images, mean, and noise_images for a landscape).
    display: a key of `DISPLAYS`.
    chunk_size: queries per SSIM block.
  Returns:
    `reconstructions` output of final_images, and of initial_images under keys prefixed
    `START`; the same as the run's own evaluation when ``display`` is the run's.
  """
  mean = results["mean"] if np.size(results["mean"]) else None
  task = types.SimpleNamespace(train_images=results["train_images"],
                               partition_images=results["partition_images"], mean=mean)
  sets = comparison_sets(task, results.get("noise_images"))
  # A landscape's starts in pixels are eq. 10 mixtures of the sets, whatever its attack.
  weights = (inits.mixture_weights(results["lambda1"], results["lambda2"])
             if "lambda1" in results and display == "pixels" else None)
  # In the run's precision, whatever the process's jax_enable_x64 is now (it changes the
  # float32 SSIM in the last bits: measured 1e-5).
  with jax.enable_x64(np.asarray(results["final_images"]).dtype == np.float64):
    return with_starts(lambda x, mixture: reconstructions(
        x, mean, sets, display=display, chunk_size=chunk_size, mixture=mixture),
        results["final_images"], results["initial_images"], weights)


def param_distances(energy_fn, theta_star, images, labels, *, tol, max_iter: int,
                    memory_size: int, batch: int, theta_init=None, devices=None
                    ) -> np.ndarray:
  """||θ* − θ(x)||² per grid point, θ(x) = argmin E(x, y; θ) re-solved by L-BFGS to
  ||∇θE|| < ``tol`` (Table 1's number, independent of the attack's warm starts).

  Args:
    energy_fn: E(params, images, labels) -> float[] (`trdr.victim.energy` bound).
    theta_star: θ*.
    images: float[G, n, H, W, C] reconstructions (input space).
    labels: float[n].
    tol: the lower-level tolerance, a float, or a sequence of T of them (a tolerance
      sweep: one re-solve to the tightest, read where each would have stopped it,
      `trdr.victim.solver.observe_at_tolerances`).
    max_iter, memory_size: the lower-level L-BFGS settings.
    batch: grid points per vmapped batch and device (`trdr.experiment.loop.batch_size`).
    theta_init: the re-solves' start θ0 (like θ*); None: θ* itself. Runkel et al. start
      from θ0 ~ U(0, 1) (`trdr.models.uniform_params`; Table 1: "for a random
      initialisation of θ").
    devices: the devices the grid is sharded over (None: all local ones; a run passes
      `trdr.experiment.loop.grid_layout`'s).
  Returns:
    float[G] for a float ``tol``, float[G, T] for a sequence. Bit-identical grid points
    (a landscape's λ2 = 0 points share one noise start, and then one trajectory) are
    re-solved once and their distance copied, so they are equal.
  """
  images = np.asarray(images)
  distinct, spread = sharding.distinct_points(images)
  labels = jnp.asarray(labels)
  start = theta_star if theta_init is None else theta_init

  def fn(x):
    energy = lambda p: energy_fn(p, x, labels)
    if np.ndim(tol) == 0:
      theta = victim.minimize_energy(energy, start, max_iter=max_iter, tol=tol,
                                     memory_size=memory_size)[0]
      return victim.param_distance(theta_star, theta)
    # A sweep is one re-solve to the tightest tolerance, observed where each would stop.
    return solver.observe_at_tolerances(
        energy, start, lambda theta: victim.param_distance(theta_star, theta),
        tols=tol, max_iter=max_iter, memory_size=memory_size)

  # Each device's shard is copied out on its own, and replicated only where ``devices``
  # hold another process's (this process could not read those shards): an all-gather would
  # make the devices that finish first wait for the slowest (the one-hidden victim's
  # re-solves from U(0, 1): long enough that XLA logs a rendezvous "may be stuck").
  others = any(d.process_index != jax.process_index() for d in devices or ())
  grid = jax.jit(lambda xs: sharding.grid_map(fn, xs, batch, devices, replicate=others))
  solved = np.asarray(grid(images[distinct]))[:len(distinct)]  # padding rows dropped
  return solved[spread]


def trajectory(x0, mean, sets: dict[str, np.ndarray], traced, display: str = "pixels"):
  """The ``trace`` of `trdr.experiment.loop.run` that follows the reconstructions of some
  grid points along the attack: the mean L2 distance (display space) of their images to the nearest
  training and partition image, and to their own start.

  Args:
    x0: float[G, m, H, W, C] start images (the victim's input space).
    mean: the task mean (`to_display`).
    sets: `comparison_sets` (train and partition used).
    traced: int[k] grid points followed (e.g. the partition start's).
    display: `to_display`'s transform.
  Returns:
    (traced, fn): ``fn`` maps their images float[k, m, H, W, C] to {"l2_to_train",
    "l2_to_partition", "l2_to_start": float[k]}.
  """
  traced = np.asarray(traced, np.int64)
  start = to_display(np.asarray(x0)[traced], mean, display)

  def fn(images):
    shown = to_display(np.asarray(images), mean, display)
    out = {f"l2_to_{s}": metrics.nearest_l2(shown, np.asarray(sets[s], shown.dtype)).mean(-1)
           for s in ("train", "partition")}
    moved = (shown - start).reshape(*shown.shape[:2], -1)
    out["l2_to_start"] = np.sqrt(np.sum(moved.astype(np.float64) ** 2, axis=-1)).mean(-1)
    return out
  return traced, fn


def own_start_fraction(images: dict) -> float:
  """The fraction of reconstructions whose SSIM-nearest image of training set ∪ partition
  is their own start image (a partition image: the partition image nearest to the start):
  Runkel et al. Figs. 3, 4 and 9 ("the majority of the resulting images reflects the
  initialisation").

  Args:
    images: per-reconstruction arrays of one partition-start run, float/int[m] each:
      partition_index, partition_ssim, train_ssim and start_partition_index.
  """
  own = (np.asarray(images["partition_index"]) == np.asarray(images[START + "partition_index"]))
  nearer = np.asarray(images["partition_ssim"]) > np.asarray(images["train_ssim"])
  return float(np.mean(own & nearer))


def in_run_score(images, train_images, k: int) -> jax.Array:
  """Haim et al.'s score of reconstructions float[..., m, H, W, C] (lower is better).

  `metrics.matched_score` of `metrics.ncc_distances` to the training images float[n, H,
  W, C] (standardised per image and channel, so the mean and the min-max scaling do not
  matter); non-finite reconstructions score +inf. Returns float[...].
  """
  images = jnp.asarray(images)
  flat = images.reshape((-1, *images.shape[-4:]))
  train = jnp.asarray(train_images, jnp.float32)
  scores = jnp.stack([
      metrics.matched_score(metrics.ncc_distances(jnp.asarray(x, jnp.float32), train), k)
      for x in flat])
  finite = jnp.all(jnp.isfinite(flat.reshape(flat.shape[0], -1)), axis=1)
  return jnp.where(finite & jnp.isfinite(scores), scores, jnp.inf).reshape(images.shape[:-4])
