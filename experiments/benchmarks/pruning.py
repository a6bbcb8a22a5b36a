"""Section: what an exact pruned search could save on the landscape's nearest-neighbour search.

An exact pruned search skips a (query, candidate) pair when a cheap upper bound on its
SSIM is below the query's best SSIM in that set so far, and computes the exact SSIM
(`trdr.evaluation.ssim`'s engine) on the rest. It can only be faster than the all-pairs
search if (a) the bound costs much less than the exact SSIM of a pair and (b) it rules
out most pairs. This section measures both on the main job's own queries, side by side
in one process:

* the pruning power of `cauchy_schwarz_bound` (the bound from per-image window statistics:
  local means and variances): for each grid point and candidate set, the fraction of
  candidates an oracle pruned search would still have to evaluate exactly, i.e. whose
  bound is not below the query's best SSIM in that set (even with the best known before
  the search starts);
* the time of the bound against the exact SSIM of the same pairs (alternating rounds, the
  fastest of each), and
  the time of the exact engine's pair products alone, i.e. how its time splits between
  the products (what a pruned search saves per pruned pair) and the SSIM map (what the
  bound itself costs per pair);
* from those, the most an exact Cauchy–Schwarz-pruned search could gain:
  1 / (t_bound / t_exact + kept).

The queries are the eq. 10 starts of ``config``'s grid (``n_images`` per point), and,
given ``reconstructions`` (a finished run's results.npz), its reconstructions.
"""

import functools

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax import lax

from benchmarks import common
from trdr import data
from trdr.attacks import init as inits
from trdr.evaluation import evaluate, ssim


@functools.partial(jax.jit, static_argnames=("max_val",))
def cauchy_schwarz_bound(queries: jax.Array, candidates: jax.Array, *,
                         max_val: float = 1.0) -> jax.Array:
  """float[n, M] upper bound (in the images' dtype) on the SSIM (`trdr.evaluation.ssim.ssim`)
  of each pair of n queries float[n, H, W, C] and M candidates float[M, H, W, C], images in
  [0, max_val], from per-image window statistics only (no pair product).

  Proof. At a position p and channel c, dm_pix's SSIM map is S = l · cs with the
  luminance term l = (2 μx μy + c1) / (μx² + μy² + c1) and the contrast-structure term
  cs = (2 σxy + c2) / (σx² + σy² + c2), where σxy = G*(x y) − μx μy is the Gaussian-
  weighted covariance of the two windows, clipped by dm_pix to |σxy| ≤ σx σy. (Without the
  clip the same holds: σxy is the inner product of the two windows' centred values under
  the weights g_k > 0, so |σxy| ≤ σx σy by the Cauchy–Schwarz inequality.) For images in
  [0, max_val] the local means are ≥ 0 and c1 > 0, so l > 0, and cs is increasing in σxy
  (its denominator is positive); hence

      S ≤ l · (2 σx σy + c2) / (σx² + σy² + c2) =: U,

  and the mean of U over positions and channels bounds the mean of S, which is the SSIM.
  U depends on the pair only through per-image statistics (μ, σ per window), so it costs
  no k²-term product per position, but it is still evaluated per pair, position and
  channel, like the SSIM map. Rounding: both sides are float32 evaluations of the same
  kind of expression; the bound is not widened here (this section counts kept pairs; a
  search built on it would add a rounding margin, which keeps more pairs, not fewer).

  Raises:
    Nothing beyond jnp's own errors: the section passes checked images.
  """
  dtype = jnp.result_type(queries.dtype, candidates.dtype)  # float64 under jax_enable_x64
  filt = ssim._gaussian_filter_1d(ssim.FILTER_SIZE, dtype)  # noqa: SLF001 -- dm_pix's window
  c1 = (0.01 * max_val) ** 2
  c2 = (0.03 * max_val) ** 2

  def stats(x):  # (μ, σ²) float[n, P·C], as dm_pix.ssim computes them
    x = x.astype(dtype)
    mu = ssim._blur(x, filt)  # noqa: SLF001
    var = jnp.maximum(jnp.finfo(jnp.float32).eps ** 2,  # dm_pix's clip
                      ssim._blur(x * x, filt) - mu * mu)  # noqa: SLF001
    return mu.reshape(len(x), -1), var.reshape(len(x), -1)

  mu0, v0 = stats(queries)
  mu1, v1 = stats(candidates)

  def one_query(args):
    m, v = args
    lum = (2 * m * mu1 + c1) / (m * m + mu1 * mu1 + c1)
    con = (2 * jnp.sqrt(v * v1) + c2) / (v + v1 + c2)
    return jnp.mean(lum * con, axis=1)

  return lax.map(one_query, (mu0, v0))


def _kept(bound: np.ndarray, exact: np.ndarray, bounds: list[tuple[int, int]]) -> list[float]:
  """Per set: the fraction of (query, candidate) pairs whose bound is not below the
  query's best exact SSIM in the set (the pairs any search pruned by this bound
  evaluates)."""
  out = []
  for start, stop in bounds:
    best = exact[:, start:stop].max(axis=1, keepdims=True)
    out.append(float(np.mean(bound[:, start:stop] >= best)))
  return out


def run(config: ml_collections.ConfigDict, repeats: int, n_images: int = 50,
        reconstructions: str = "") -> None:
  """Prints the section for the landscape ``config``; ``reconstructions``: a results.npz
  whose reconstructions are measured too ("" for the starts only)."""
  grid = inits.make_grid(config.init.lambda1, config.init.lambda2)
  if reconstructions:  # the run's own images (its noise set is its own draw)
    with np.load(reconstructions) as f:
      mean, display = f["mean"], str(f["display"])
      sets = {k: f[f"{k}_images"] for k in ("train", "partition", "noise")}
      spread = np.asarray(f["grid_spread"])
      final = f["final_images_distinct"][:, :n_images]
  else:
    task = data.make_task(config.data)
    mean, display = task.mean, "pixels"
    key_noise = jax.random.split(jax.random.key(config.seed))[0]  # the main job's noise
    sets = {"train": task.train_images, "partition": task.partition_images,  # (its starts.py)
            "noise": np.asarray(inits.uniform(key_noise, task.train_images.shape, task.mean))}
  x0 = np.asarray(inits.grid_images(grid, *(jnp.asarray(sets[k][:n_images]) for k in sets)))
  sets = {k: evaluate.to_display(v, mean) for k, v in sets.items()}
  names = list(sets)
  candidates = jnp.asarray(np.concatenate(list(sets.values())))
  bounds, end = [], 0
  for c in sets.values():
    bounds.append((end, end + len(c)))
    end += len(c)
  points = list(range(len(x0)))
  queries = {"starts": (points, evaluate.to_display(x0, mean))}
  if reconstructions:  # the run's distinct grid points; grid point g is distinct spread[g]
    queries["reconstructions"] = ([int(np.argmax(spread == d)) for d in range(len(final))],
                                  evaluate.to_display(final, mean, display))
  print(f"\n== pruning the exact SSIM search with the Cauchy–Schwarz bound: {n_images} images "
        f"per grid point against {' + '.join(f'{len(c)} {n}' for n, c in sets.items())} ==")
  kept_all = []
  for what, (points, images) in queries.items():
    print(f"\n{what}: per grid point (λ1, λ2) and set, the median best SSIM and the fraction "
          "of candidates the bound cannot rule out")
    print(f"{'(λ1, λ2)':12s} " + " ".join(f"{n + ' best':>16s} {'kept':>6s}" for n in names))
    for g, q in zip(points, images):
      q = jnp.asarray(q)
      exact = np.asarray(ssim.pairwise_ssim(q, candidates))
      bound = np.asarray(cauchy_schwarz_bound(q, candidates))
      kept = _kept(bound, exact, bounds)
      kept_all.append(np.mean(kept))
      best = [float(np.median(exact[:, a:b].max(axis=1))) for a, b in bounds]
      print(f"({grid.lambda1[g]:.2f}, {grid.lambda2[g]:.2f}) " + " ".join(
          f"{s:16.3f} {k:6.3f}" for s, k in zip(best, kept)))
  kept = float(np.mean(kept_all))
  q = jnp.asarray(queries["starts"][1][-1])
  prepared_q, prepared_c = ssim._prepare(q), ssim._prepare(candidates)  # noqa: SLF001
  calls = {"exact": lambda: ssim._ssim_block(prepared_q, prepared_c, max_val=1.0),  # noqa: SLF001
           "products": lambda: _products(prepared_q, prepared_c),
           "bound": lambda: cauchy_schwarz_bound(q, candidates)}
  # The fastest of the rounds: each call is a fixed computation, which load from elsewhere
  # can only slow down (medians of a few rounds on a shared machine can even put the
  # products alone above the whole SSIM).
  rounds = max(repeats, 5)
  times = {k: float(np.min(v)) for k, v in common.timed_alternately(calls, rounds).items()}
  print(f"\nper {len(q)} × {len(candidates)} pairs, fastest of {rounds} alternating rounds: "
        f"exact SSIM {times['exact']:.2f} s, its pair products alone {times['products']:.2f} s "
        f"(the SSIM map: {1 - times['products'] / times['exact']:.0%} of the exact time), "
        f"the bound {times['bound']:.2f} s ({times['bound'] / times['exact']:.2f} of the exact)")
  share = 1 - times["products"] / times["exact"]
  print(f"pairs kept over all grid points and sets: {kept:.3f}; an exact search pruned by this "
        f"bound could run at most {1 / kept:.2f}x as fast as the all-pairs search with the "
        f"bound free, {1 / (share + kept):.2f}x with the bound as cheap as the SSIM map, "
        f"{1 / (times['bound'] / times['exact'] + kept):.2f}x at the bound's measured cost")


@jax.jit
def _products(q, c):
  """The exact engine's pair products G*(x'y') at every position, summed (so that none is
  dropped), without the SSIM map: `trdr.evaluation.ssim._ssim_block` less its map."""
  ch, h, w, n = q.centred.shape
  m = c.centred.shape[-1]
  k = ssim.FILTER_SIZE
  wo = w - k + 1
  filt = ssim._gaussian_filter_1d(k)  # noqa: SLF001
  g = (filt[:, None] * filt[None, :])[None, :, :, None]

  def body(p, acc):
    hp, wp = p // wo, p % wo
    xs = lax.dynamic_slice(q.centred, (0, hp, wp, 0), (ch, k, k, n)) * g
    ys = lax.dynamic_slice(c.centred, (0, hp, wp, 0), (ch, k, k, m))
    return acc + lax.dot_general(xs.reshape(ch, k * k, n), ys.reshape(ch, k * k, m),
                                 (((1,), (1,)), ((0,), (0,))), precision=lax.Precision.HIGHEST)

  return lax.fori_loop(0, (h - k + 1) * wo, body, jnp.zeros((ch, n, m), jnp.float32))
