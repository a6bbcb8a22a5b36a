"""Section: the landscape's nearest-neighbour evaluation, as trdr ran it before and now.

The start images of the config's eq. 10 grid (G points × n images; the λ2 = 0 points
share one noise start) are searched for their SSIM-nearest image in the training set,
the partition and the noise set: "per set", one `trdr.metrics.nearest_neighbours` search
per set over every grid point (the evaluation before 2026-11-22), and "now",
`trdr.evaluate.reconstructions`: one search against all three sets, each distinct grid
point once. Timed in ``repeats`` alternating rounds (median, min–max), with the largest
difference of the two results (indices and L2 equal; SSIM, recomputed by dm_pix in
another program, to float32 rounding).

Then the floor of this search on this CPU, measured in the same run: its pair products
(2·C·k²·H'W' multiply-adds and adds per query–candidate pair, `trdr.ssim`) divided by the
rate of a 2048³ float32 matmul timed here, against the time "now" took. The main job
evaluates its reconstructions and these starts, twice the distinct points.
"""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from benchmarks import common
from trdr import data, evaluate, metrics
from trdr.attacks import init as inits


def run(config: ml_collections.ConfigDict, repeats: int) -> None:
  """Prints the section for the landscape ``config`` (its data, grid and eval chunk size)."""
  task = data.make_binary_task(config.data)
  grid = inits.make_grid(config.init.lambda1, config.init.lambda2)
  x_gt = jnp.asarray(task.train_images)
  x_rnd = inits.uniform(jax.random.key(config.seed), x_gt.shape, task.mean)
  x0 = np.asarray(inits.grid_images(grid, x_gt, jnp.asarray(task.partition_images), x_rnd))
  sets = evaluate.comparison_sets(task, x_rnd)
  chunk = config.eval.ssim_chunk_size
  shown = evaluate.to_display(x0, task.mean)
  per_set = lambda: {name: metrics.nearest_neighbours(shown, c, chunk_size=chunk)
                     for name, c in sets.items()}
  now = lambda: evaluate.reconstructions(x0, task.mean, sets, chunk_size=chunk)
  times = common.timed_alternately({"per set": per_set, "now": now}, repeats)
  old, new = per_set(), now()
  distinct = len({x.tobytes() for x in x0})
  print(f"\n== nearest neighbours of the eq. 10 grid's starts: {x0.shape[0]} points "
        f"({distinct} distinct) x {x0.shape[1]} images against "
        f"{' + '.join(str(len(c)) for c in sets.values())} ==")
  print(f"{'':34s} {'median s':>9s} {'min–max s':>13s} {'per set / this':>15s}")
  t_old = float(np.median(times["per set"]))
  for name, label in (("per set", "one search per set, every point"),
                      ("now", "evaluate.reconstructions")):
    t = float(np.median(times[name]))
    print(f"{label:34s} {t:9.2f} {min(times[name]):6.2f}–{max(times[name]):<6.2f} "
          f"{t_old / t:14.2f}x")
  for field in ("index", "l2", "ssim"):
    worst = max(float(np.max(np.abs(np.asarray(getattr(old[s], field), np.float64)
                                    - new[f"{s}_{field}"]))) for s in sets)
    print(f"max |Δ {field}| over the sets: {worst:.1e}")
  print(f"(median of {repeats} alternating rounds)")
  _floor(shown, sum(len(c) for c in sets.values()), distinct, float(np.median(times["now"])),
         repeats)


def _floor(shown: np.ndarray, candidates: int, distinct: int, seconds: float,
           repeats: int) -> None:
  """Prints the search's pair products at this CPU's float32 matmul rate, beside ``seconds``."""
  h, w, c = shown.shape[-3:]
  k = metrics.FILTER_SIZE
  flop = 2.0 * c * k * k * (h - k + 1) * (w - k + 1) * distinct * shown.shape[1] * candidates
  a = jax.random.normal(jax.random.key(0), (2048, 2048), jnp.float32)
  peak = 2.0 * 2048**3 / common.median_time(lambda: jnp.dot(a, a), max(repeats, 5))
  print(f"its pair products: {flop / 1e9:.0f} GFLOP; this CPU's float32 matmul (2048³): "
        f"{peak / 1e9:.0f} GFLOP/s -> at least {flop / peak:.1f} s (\"now\" took "
        f"{seconds / (flop / peak):.2f}x that); the main job's evaluation, reconstructions "
        f"and starts: at least {2 * flop / peak:.1f} s")
