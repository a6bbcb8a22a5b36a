"""Section: the landscape's nearest-neighbour evaluation, as trdr ran it before and now.

The start images of the config's eq. 10 grid (G points × n images; the λ2 = 0 points
share one noise start) are searched for their SSIM-nearest image in the training set,
the partition and the noise set: "per set", one `trdr.evaluation.ssim.nearest_neighbours`
search per set over every grid point (how trdr once evaluated); "images",
`trdr.evaluation.evaluate.reconstructions` of the start images: one search against all
three sets, each distinct grid point once (how reconstructions are searched); "mixtures",
the same with the starts' eq. 10 weights (how a landscape searches its starts: the pair
products of the three sets once, then each point's SSIM map), its chunks on one
device and on all local ones (`trdr.runtime.sharding.round_robin`). Timed in ``repeats``
alternating rounds (median, min–max), with the largest difference of each to "per set"
(SSIM, recomputed by dm_pix in another program, to float32 rounding; an index may differ
only where two candidates tie within it).

Then the floor of the search of G' distinct points on this CPU, measured in the same run:
its pair products (2·C·k²·H'W' multiply-adds and adds per query–candidate pair,
`trdr.evaluation.ssim`) divided by the rate of a 2048³ float32 matmul timed here, against
the time "images" took. The main job searches its reconstructions this way; its starts, as mixtures,
need the products of the three sets only.
"""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from benchmarks import common
from trdr import data
from trdr.attacks import init as inits
from trdr.evaluation import evaluate, ssim
from trdr.runtime import sharding


def run(config: ml_collections.ConfigDict, repeats: int) -> None:
  """Prints the section for the landscape ``config`` (its data, grid and eval chunk size)."""
  task = data.make_task(config.data)
  grid = inits.make_grid(config.init.lambda1, config.init.lambda2)
  x_gt = jnp.asarray(task.train_images)
  x_rnd = inits.uniform(jax.random.key(config.seed), x_gt.shape, task.mean)
  x0 = np.asarray(inits.grid_images(grid, x_gt, jnp.asarray(task.partition_images), x_rnd))
  sets = evaluate.comparison_sets(task, x_rnd)
  chunk = config.eval.ssim_chunk_size
  shown = evaluate.to_display(x0, task.mean)
  per_set = lambda: {name: ssim.nearest_neighbours(shown, c, chunk_size=chunk)
                     for name, c in sets.items()}
  weights = dict(zip(sets, inits.mixture_weights(grid.lambda1, grid.lambda2).T))
  unique = sharding.distinct_points(x0)[0]
  bases = (np.stack([w[unique] for w in weights.values()], axis=1), np.stack(list(sets.values())))
  on = lambda devices: lambda: ssim.nearest_neighbours_per_set(  # "mixtures" on devices
      shown[unique], sets, chunk_size=chunk, mixture=bases, devices=devices)
  calls = {"per set": per_set,
           "images": lambda: evaluate.reconstructions(x0, task.mean, sets, chunk_size=chunk),
           "mixtures": lambda: evaluate.reconstructions(x0, task.mean, sets, chunk_size=chunk,
                                                        mixture=weights),
           "one device": on(jax.local_devices()[:1]), "all devices": on(None)}
  times = common.timed_alternately(calls, repeats)
  old = calls["per set"]()
  print(f"\n== nearest neighbours of the eq. 10 grid's starts: {x0.shape[0]} points "
        f"({len(unique)} distinct) x {x0.shape[1]} images against "
        f"{' + '.join(str(len(c)) for c in sets.values())} ==")
  print(f"{'':40s} {'median s':>9s} {'min–max s':>13s} {'per set / this':>15s}")
  t_old = float(np.median(times["per set"]))
  for name, label in (("per set", "one search per set, every point"),
                      ("images", "evaluate.reconstructions of the images"),
                      ("mixtures", "… as eq. 10 mixtures of the sets")):
    t = float(np.median(times[name]))
    print(f"{label:40s} {t:9.2f} {min(times[name]):6.2f}–{max(times[name]):<6.2f} "
          f"{t_old / t:14.2f}x")
  for name in ("images", "mixtures"):
    new = calls[name]()
    moved = sum(int(np.sum(np.asarray(old[s].index) != new[f"{s}_index"])) for s in sets)
    worst = {field: max(float(np.max(np.abs(np.asarray(getattr(old[s], field), np.float64)
                                            - new[f"{s}_{field}"]))) for s in sets)
             for field in ("l2", "ssim")}
    print(f"{name}: indices that differ {moved} of {3 * x0.shape[0] * x0.shape[1]}; "
          f"max |Δ l2| {worst['l2']:.1e}, max |Δ ssim| {worst['ssim']:.1e}")
  one, every = (float(np.median(times[k])) for k in ("one device", "all devices"))
  same = all(np.array_equal(a, b) for x, y in zip(*(calls[k]().values() for k in (
      "one device", "all devices"))) for a, b in zip(x, y))
  print(f"the mixtures' search on 1 device {one:.2f} s, alternating over all "
        f"{jax.local_device_count()} local devices {every:.2f} s: {one / every:.2f}x (bitwise "
        f"equal: {same})")
  print(f"(median of {repeats} alternating rounds)")
  _floor(shown, sum(len(c) for c in sets.values()), len(unique),
         float(np.median(times["images"])), repeats)


def _floor(shown: np.ndarray, candidates: int, distinct: int, seconds: float,
           repeats: int) -> None:
  """Prints the search's pair products at this CPU's float32 matmul rate, beside ``seconds``."""
  h, w, c = shown.shape[-3:]
  k = ssim.FILTER_SIZE
  flop = 2.0 * c * k * k * (h - k + 1) * (w - k + 1) * distinct * shown.shape[1] * candidates
  a = jax.random.normal(jax.random.key(0), (2048, 2048), jnp.float32)
  peak = 2.0 * 2048**3 / common.median_time(lambda: jnp.dot(a, a), max(repeats, 5))
  three = 3 * flop / distinct
  print(f"its pair products: {flop / 1e9:.0f} GFLOP; this CPU's float32 matmul (2048³): "
        f"{peak / 1e9:.0f} GFLOP/s -> at least {flop / peak:.1f} s (\"images\" took "
        f"{seconds / (flop / peak):.2f}x that); the main job's evaluation, reconstructions "
        f"and starts (as mixtures: the products of the three sets, {three / 1e9:.0f} GFLOP): "
        f"at least {(flop + three) / peak:.1f} s")
