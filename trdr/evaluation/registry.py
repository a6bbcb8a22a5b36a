"""The image metrics of the evaluation, one `Metric` entry each in `METRICS`.

A metric compares two batches of images in pixels, every pair: ``pairwise(queries float[Q, H,
W, C], candidates float[M, H, W, C]) -> float32[Q, M]``, with a direction (a higher or a
lower value is nearer) and a flag that says whether it can drive the nearest-neighbour
search. The evaluation (`trdr.evaluation.evaluate.reconstructions`) finds each
reconstruction's nearest image of every comparison set under ``config.eval.nearest`` and
records every metric of ``config.eval.metrics`` of that pair as ``{set}_{metric}``; the
landscape records (`trdr.evaluation.records`) carry their means as ``{metric}_to_{set}``.

  ssim     SSIM (Wang et al. 2004) with dm-pix's 11 × 11 Gaussian window (`ssim.pairwise_ssim`)
  ssim_w3  the same with a 3 × 3 window (Haim et al.'s counts)
  l2       the Euclidean distance over all pixel values (`metrics.pairwise_l2`)
  ncc      Haim et al.'s half-resolution NCC distance (`metrics.ncc_distances`)
  haim     Haim et al.'s match distance as their notebook computes it (`haim_match.pairwise`)
  lpips    LPIPS, AlexNet v0.1 (`perceptual.pairwise`; the optional extra ``lpips``)

A new metric is one module here and one entry below; the evaluation, the records, the
runner and the figures read it from here.
"""

import functools
from typing import Any, Callable, NamedTuple

import jax
import numpy as np

from trdr.evaluation import haim_match, metrics, perceptual, ssim


class Metric(NamedTuple):
  """One image metric.

  Attributes:
    name: its key in `METRICS`, and the suffix of its evaluation fields ``{set}_{name}``.
    pairwise: (queries float[Q, H, W, C], candidates float[M, H, W, C], both in pixels)
      -> float32[Q, M], every pair's value.
    higher_is_nearer: True for a similarity (SSIM), False for a distance (L2).
    searches: True when it can drive the nearest-neighbour search (``config.eval.nearest``).
    label: how figures and tables name it.
  """
  name: str
  pairwise: Callable[[Any, Any], jax.Array]
  higher_is_nearer: bool
  searches: bool
  label: str


# The order is the order of a record's fields ({metric}_to_{set}, `trdr.evaluation.records`).
METRICS: dict[str, Metric] = {m.name: m for m in (
    Metric("l2", metrics.pairwise_l2, False, True, "L2"),
    Metric("ssim", functools.partial(ssim.pairwise_ssim, filter_size=ssim.FILTER_SIZE), True,
           True, "SSIM"),
    Metric("ssim_w3", functools.partial(ssim.pairwise_ssim, filter_size=3), True, True,
           "SSIM (3 × 3 window)"),
    Metric("ncc", metrics.ncc_distances, False, True, "NCC distance (½ resolution)"),
    Metric("haim", haim_match.pairwise, False, True, "Haim et al.'s match distance"),
    Metric("lpips", perceptual.pairwise, False, True, "LPIPS"),
)}

# The metric whose search is the exact SSIM engine (`ssim.nearest_neighbours_per_set`, at
# ``eval.ssim_window``), which gives the pair's SSIM and L2 itself.
ENGINE = "ssim"
ENGINE_FIELDS = ("ssim", "l2")
# ``config.eval.metrics`` and ``config.eval.nearest`` of a config that sets none (a run
# written before they existed): today's evaluation.
DEFAULT_METRICS = ENGINE_FIELDS
DEFAULT_NEAREST = ENGINE


def get(name: str) -> Metric:
  """The entry ``name`` of `METRICS`.

  Raises:
    ValueError: an unknown name (the message lists the known ones).
  """
  if name not in METRICS:
    raise ValueError(f"unknown metric {name!r}; known: {list(METRICS)}")
  return METRICS[name]


def check(names, nearest: str) -> tuple[str, ...]:
  """``config.eval.metrics`` and ``config.eval.nearest`` checked: the metric names as a tuple.

  Raises:
    ValueError: an unknown or repeated name, or a ``nearest`` that cannot drive the search.
  """
  names = tuple(names)
  for name in (*names, nearest):
    get(name)
  if len(set(names)) != len(names):
    raise ValueError(f"eval.metrics names a metric twice: {names}")
  if not METRICS[nearest].searches:
    raise ValueError(f"eval.nearest {nearest!r} cannot drive the nearest-neighbour search; "
                     f"those that can: {[m for m, e in METRICS.items() if e.searches]}")
  return names


def suffixes() -> tuple[str, ...]:
  """The evaluation fields' suffixes of every metric: ``_{name}``."""
  return tuple(f"_{name}" for name in METRICS)


def _chunks(n: int, size: int):
  return ((a, min(a + size, n)) for a in range(0, n, size))


def nearest(name: str, queries, candidates, chunk_size: int = 256
            ) -> tuple[np.ndarray, np.ndarray]:
  """Each query's nearest candidate under metric ``name``: the best value of its row of
  ``pairwise`` (the highest for a similarity, the lowest for a distance; the first on
  ties), a chunk of queries at a time.

  Args:
    queries: float[..., H, W, C]; candidates: float[M, H, W, C], M ≥ 1, in pixels.
    chunk_size: queries per ``pairwise`` call.
  Returns:
    (index int32[...], value float32[...]).
  Raises:
    ValueError: an unknown metric, or one that cannot drive the search.
  """
  metric = get(name)
  if not metric.searches:
    raise ValueError(f"metric {name!r} cannot drive the nearest-neighbour search")
  queries, candidates = np.asarray(queries), np.asarray(candidates)
  lead = queries.shape[:-3]
  flat = queries.reshape((-1, *queries.shape[-3:]))
  index, value = [], []
  for a, b in _chunks(len(flat), chunk_size):
    d = np.asarray(metric.pairwise(flat[a:b], candidates))
    i = np.argmax(d, axis=1) if metric.higher_is_nearer else np.argmin(d, axis=1)
    index.append(i.astype(np.int32))
    value.append(np.take_along_axis(d, i[:, None], axis=1)[:, 0].astype(np.float32))
  if not index:
    return np.zeros(lead, np.int32), np.zeros(lead, np.float32)
  return np.concatenate(index).reshape(lead), np.concatenate(value).reshape(lead)


def of_pairs(name: str, queries, partners, chunk_size: int = 64) -> np.ndarray:
  """Metric ``name`` of each query and its own partner (e.g. its nearest neighbour).

  Args:
    queries, partners: float[..., H, W, C] of one shape, in pixels.
    chunk_size: pairs per ``pairwise`` call (which computes chunk_size² values).
  Returns:
    float32[...].
  Raises:
    ValueError: an unknown metric, or shapes that differ.
  """
  metric = get(name)
  queries, partners = np.asarray(queries), np.asarray(partners)
  if queries.shape != partners.shape:
    raise ValueError(f"queries {queries.shape} and partners {partners.shape} differ in shape")
  lead = queries.shape[:-3]
  q = queries.reshape((-1, *queries.shape[-3:]))
  p = partners.reshape(q.shape)
  out = [np.diagonal(np.asarray(metric.pairwise(q[a:b], p[a:b])))
         for a, b in _chunks(len(q), chunk_size)]
  return (np.concatenate(out) if out else np.zeros(0)).astype(np.float32).reshape(lead)


__all__ = ["DEFAULT_METRICS", "DEFAULT_NEAREST", "ENGINE", "METRICS", "Metric", "check",
           "get", "nearest", "of_pairs", "suffixes"]
