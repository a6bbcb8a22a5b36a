"""Every figure of trdr, drawn from saved files only (landscape.json, results.npz, ...).

Every function returns a matplotlib Figure and never shows it; `save_figure` writes PNG
and PDF, and `run_figures` draws a finished run's figures into its directory. The backend
is the caller's choice (the scripts choose Agg, `trdr.cli`; a notebook keeps its inline
one). Reconstructions are shown through the one display transform of the evaluation
(`trdr.evaluation.evaluate.to_display`, the run's "display").
"""

import io as _bytes_io
import os

import matplotlib.colors
import matplotlib.pyplot as plt
import numpy as np

from trdr import experiment
from trdr.attacks import init as inits
from trdr.evaluation import evaluate, registry
from trdr.runtime import files, rundir

_SETS = (("train", "training set"), ("partition", "distinct partition"), ("noise", "noise set"))
# The paper's colours in Figs. 10–12 (Runkel et al. Sec. 4.5): red = training set,
# green = distinct partition, blue = noise.
SET_COLOURS = {"train": "tab:red", "partition": "tab:green", "noise": "tab:blue"}
# The frames of every figure that shows reconstructions beside real images (the pairs
# figures, `_pairs_figure`, and the quiz, `trdr.report.figures.quiz_figure`): a
# reconstruction in black, a real image (training, partition, noise) in grey.
RECONSTRUCTION_FRAME, REAL_FRAME = "black", "grey"


def _grid_values(records, key, grid_shape) -> np.ndarray:
  """float[len(λ1), len(λ2)] of ``key`` from records ordered λ1 outer, λ2 inner."""
  return np.array([r[key] for r in records], np.float64).reshape(grid_shape)


def _axis_values(records, key, grid_shape):
  values = np.array([r[key] for r in records]).reshape(grid_shape)
  return values[:, 0] if key == "lambda1" else values[0, :]


def _labels(metric: str, nearest: str) -> tuple[str, str]:
  """The labels of ``metric`` and of the search's metric ``nearest`` (`registry.METRICS`)."""
  return registry.get(metric).label, registry.get(nearest).label


def _heatmaps(fig, records, grid_shape, metric: str = "l2", nearest: str = "ssim") -> None:
  """Fig. 10: the mean ``metric`` (default L2) to the ``nearest``-nearest image of each set
  over the (λ1, λ2) grid (records' {metric}_to_{set})."""
  what, by = _labels(metric, nearest)
  l1 = _axis_values(records, "lambda1", grid_shape)
  l2 = _axis_values(records, "lambda2", grid_shape)
  axes = fig.subplots(1, 3)
  for ax, (key, label) in zip(axes, _SETS):
    values = _grid_values(records, f"{metric}_to_{key}", grid_shape)
    im = ax.imshow(values.T, origin="lower", cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(l1)), [f"{v:g}" for v in l1])
    ax.set_yticks(range(len(l2)), [f"{v:g}" for v in l2])
    ax.set_xlabel("λ1  (0: partition, 1: ground truth)")
    ax.set_ylabel("λ2  (0: noise, 1: images)")
    ax.set_title(f"{what} to {by}-nearest, {label}")
    for i in range(len(l1)):
      for j in range(len(l2)):
        ax.text(i, j, f"{values[i, j]:.2f}", ha="center", va="center", fontsize=7,
                color="white" if values[i, j] < values.mean() else "black")
    fig.colorbar(im, ax=ax, label=(
        "mean L2 distance (pixel values in [0, 1])" if metric == "l2" else f"mean {what}"))


def _heatmaps_title(metric: str = "l2", nearest: str = "ssim") -> str:
  what, by = _labels(metric, nearest)
  what = "L2 distance" if metric == "l2" else what
  return f"mean {what} to the {by}-nearest image of each set over the eq. 10 grid"


def _curve_title(fixed_key, fixed, metric: str = "l2", nearest: str = "ssim") -> str:
  what, by = _labels(metric, nearest)
  return (f"mean {what} to the {by}-nearest image along {fixed_key.replace('lambda', 'λ')} = "
          f"{fixed:g}")


# Fig. 11 and 12: (name, fixed key, fixed value, free key).
CURVES = (("fig11_lambda2_eq_1", "lambda2", 1.0, "lambda1"),
          ("fig12_lambda1_eq_1", "lambda1", 1.0, "lambda2"))


def _curve(ax, records, fixed_key, fixed, free_key, metric: str = "l2",
           nearest: str = "ssim") -> bool:
  """The mean ``metric`` (default L2) to the ``nearest``-nearest image of each set along one
  grid line; False if the line is not on the grid."""
  line = sorted((r for r in records if np.isclose(r[fixed_key], fixed)),
                key=lambda r: r[free_key])
  if not line:
    return False
  for key, label in _SETS:
    ax.plot([r[free_key] for r in line], [r[f"{metric}_to_{key}"] for r in line], "o-",
            label=label, color=SET_COLOURS[key])
  ax.set_xlabel(f"{'λ1' if free_key == 'lambda1' else 'λ2'}  "
                f"({fixed_key.replace('lambda', 'λ')} = {fixed:g})")
  ax.set_ylabel("mean {} to {}-nearest image".format(*_labels(metric, nearest)))
  ax.legend(fontsize=7)
  return True


def landscape_figures(records: list[dict], grid_shape, metric: str = "l2",
                      nearest: str = "ssim") -> dict[str, plt.Figure]:
  """Fig. 10 (heatmaps of the mean L2 distance to the SSIM-nearest image of each set over
  the (λ1, λ2) grid), Fig. 11 (the λ2 = 1 row against λ1) and Fig. 12 (the λ1 = 1 column
  against λ2), for one attack.

  Args:
    records: landscape.json records (keys lambda1, lambda2, l2_to_{train,partition,noise}).
    grid_shape: (len(λ1), len(λ2)).
    metric, nearest: the metric shown (records' {metric}_to_{set}) and the run's search
      metric (``eval.nearest``), names of `registry.METRICS`; the paper's: L2 and SSIM.
  Returns:
    {"fig10_heatmaps", "fig11_lambda2_eq_1", "fig12_lambda1_eq_1"} -> Figure; a curve
    figure is left out when its line (λ2 = 1 or λ1 = 1) is not on the grid.
  """
  figs = {}
  fig = plt.figure(figsize=(13, 4), layout="constrained")
  _heatmaps(fig, records, grid_shape, metric, nearest)
  fig.suptitle(f"Fig. 10: {_heatmaps_title(metric, nearest)}")
  figs["fig10_heatmaps"] = fig
  for name, fixed_key, fixed, free_key in CURVES:
    fig, ax = plt.subplots(figsize=(5, 3.5), constrained_layout=True)
    if _curve(ax, records, fixed_key, fixed, free_key, metric, nearest):
      ax.set_title(f"Fig. {name[3:5]}: {_curve_title(fixed_key, fixed, metric, nearest)}",
                   fontsize=9)
      figs[name] = fig
    else:
      plt.close(fig)
  return figs


def combined_landscape_figures(panels: dict[str, tuple[list[dict], tuple]]
                               ) -> dict[str, plt.Figure]:
  """Figs. 10–12 with one panel per attack, e.g. (a) bilevel and (b) DecoReco.

  Args:
    panels: label -> (landscape.json records, grid shape), in panel order.
  Returns:
    {"fig10", "fig11", "fig12"} -> Figure.
  """
  figs = {}
  fig = plt.figure(figsize=(13, 4 * len(panels)), layout="constrained")
  for sub, (label, (records, shape)) in zip(np.atleast_1d(fig.subfigures(len(panels), 1)),
                                           panels.items()):
    _heatmaps(sub, records, shape)
    sub.suptitle(label)
  fig.suptitle(f"Fig. 10: {_heatmaps_title()}", fontsize=13)
  figs["fig10"] = fig
  for (_, fixed_key, fixed, free_key), short in zip(CURVES, ("fig11", "fig12")):
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.5),
                             constrained_layout=True, squeeze=False)
    for ax, (label, (records, _)) in zip(axes[0], panels.items()):
      _curve(ax, records, fixed_key, fixed, free_key)
      ax.set_title(label)
    fig.suptitle(f"Fig. {short[3:]}: {_curve_title(fixed_key, fixed)}")
    figs[short] = fig
  return figs


def framed(ax, image, color, title=None):
  """Shows ``image`` float[H, W, C] in [0, 1] on ``ax`` in a frame of ``color``."""
  ax.imshow(np.clip(image.squeeze(), 0.0, 1.0), cmap="gray" if image.shape[-1] == 1 else None,
            vmin=0.0, vmax=1.0)
  ax.set_xticks([])
  ax.set_yticks([])
  for spine in ax.spines.values():
    spine.set_edgecolor(color)
    spine.set_linewidth(2.5)
  if title:
    ax.set_title(title, fontsize=6)


_FRAME = 2  # pixels of each image's frame in a pairs mosaic
_PAIR_GAP, _GAP, _LABEL = 2, 8, 9  # pixels between a pair's images, between pairs, label band


def _pair_title(title: str, real: str) -> str:
  """A pairs figure's header: ``title`` (none when empty), then which frame is which."""
  legend = (f"reconstruction ({RECONSTRUCTION_FRAME}) | {real} ({REAL_FRAME})")
  return f"{title}: {legend}" if title else legend


def _pairs_figure(pairs, title: str, per_row: int = 8, fig=None) -> plt.Figure:
  """Rows of (reconstruction, `RECONSTRUCTION_FRAME`, label) | (real image, `REAL_FRAME`)
  pairs: ``pairs`` [(reconstruction, real image, label)], images float[H, W, C] in [0, 1].

  Drawn as one mosaic in one Axes (frames as pixels, labels as text above the left
  images): one Axes per image made building and saving a figure of 32 pairs slow.
  """
  rows = max(1, int(np.ceil(len(pairs) / per_row)))
  h, w = (pairs[0][0].shape[:2] if pairs else (1, 1))
  cell_h, cell_w = h + 2 * _FRAME, w + 2 * _FRAME
  pair_w = 2 * cell_w + _PAIR_GAP
  canvas = np.ones((rows * (_LABEL + cell_h), per_row * (pair_w + _GAP) - _GAP, 3))
  if fig is None:
    width = 2 * per_row * 0.9
    fig = plt.figure(figsize=(width, width * canvas.shape[0] / canvas.shape[1]))
  ax = fig.add_axes((0, 0, 1, 1))
  ax.axis("off")
  ax.set_anchor("N")  # under the title; a taller panel leaves its space below
  frames = [matplotlib.colors.to_rgb(c) for c in (RECONSTRUCTION_FRAME, REAL_FRAME)]
  for k, (left, right, label) in enumerate(pairs):
    r, c = divmod(k, per_row)
    top, x = r * (_LABEL + cell_h) + _LABEL, c * (pair_w + _GAP)
    for offset, (image, frame) in enumerate(zip((left, right), frames)):
      x0 = x + offset * (cell_w + _PAIR_GAP)
      canvas[top:top + cell_h, x0:x0 + cell_w] = frame
      rgb = np.clip(np.asarray(image, np.float64), 0.0, 1.0)
      canvas[top + _FRAME:top + _FRAME + h, x0 + _FRAME:x0 + _FRAME + w] = (
          rgb if rgb.shape[-1] == 3 else np.repeat(rgb[..., :1], 3, axis=-1))
    if label:
      ax.text(x + cell_w / 2, top - 1, label, fontsize=6, ha="center", va="bottom")
  ax.imshow(canvas, interpolation="nearest")
  fig.suptitle(title, fontsize=9, y=1.0, va="bottom")
  return fig


def shown_images(results, images):
  """``images`` as the run shows and scores them (its display,
  `trdr.evaluation.evaluate.to_display`)."""
  mean = results["mean"]
  display = str(results["display"]) if "display" in results else "pixels"
  return evaluate.to_display(images, mean, display)


def real_images(results, name):
  """The run's ``name`` images (train, partition, noise) in pixels, clipped to [0, 1]."""
  mean = results["mean"] if results["mean"].size else 0.0
  return np.clip(results[f"{name}_images"] + mean, 0.0, 1.0)


def reconstruction_grid(results, reference: str = "train", n_show: int = 32,
                        order: str = "ssim", title: str = "", grid_index: int | None = None,
                        fig=None) -> plt.Figure:
  """Reconstructions (`RECONSTRUCTION_FRAME`) beside their SSIM-nearest ``reference`` image
  (`REAL_FRAME`): the layout of Runkel et al.'s Figs. 1–9, for every attack (shown by the
  run's display).

  Args:
    results: results.npz contents (final_images [m, …] or, with ``grid_index``,
      [G, m, …]; mean; display; {reference}_images; {reference}_index / _ssim).
    reference: "train", "partition" or "noise".
    n_show: number of pairs.
    order: "ssim" — best match first, labelled with its rank among all reconstructions;
      "index" — the first reconstructions in candidate order (Fig. 8).
    grid_index: which grid point, for landscape results.
    fig: a Figure or SubFigure to draw into; default a new Figure.
  Returns:
    ``fig`` or a new Figure.
  Raises:
    ValueError: unknown order.
  """
  if order not in ("ssim", "index"):
    raise ValueError(f"order must be 'ssim' or 'index', got {order!r}")
  pick = (lambda a: a) if grid_index is None else (lambda a: a[grid_index])
  recon = shown_images(results, pick(results["final_images"]))
  candidates = real_images(results, reference)
  index, ssim = pick(results[f"{reference}_index"]), pick(results[f"{reference}_ssim"])
  ranking = np.argsort(-ssim, kind="stable")
  rank = np.empty_like(ranking)
  rank[ranking] = np.arange(1, len(ranking) + 1)
  shown = ranking[:n_show] if order == "ssim" else np.arange(min(n_show, len(ssim)))
  pairs = [(recon[i], candidates[index[i]], f"#{rank[i]} SSIM {ssim[i]:.2f}") for i in shown]
  return _pairs_figure(pairs, _pair_title(title, f"nearest {reference} image by SSIM") +
                       ", #rank", fig=fig)


def best_per_train_grid(results, n_show: int = 32, title: str = "", fig=None) -> plt.Figure:
  """The training images, best recovered first, each with its best reconstruction
  (`RECONSTRUCTION_FRAME`, left) beside it (`REAL_FRAME`, right) and the training image's
  rank by that SSIM (Haim et al.'s per-training-image view)."""
  recon = shown_images(results, results["final_images"])
  train = real_images(results, "train")
  best, index = results["best_ssim_per_train"], results["best_index_per_train"]
  order = np.argsort(-best, kind="stable")[:n_show]
  pairs = [(recon[index[i]], train[i], f"#{r + 1} SSIM {best[i]:.2f}")
           for r, i in enumerate(order)]
  return _pairs_figure(pairs, _pair_title(title, "the training image it is best for") +
                       ", #rank of the training image", fig=fig)


def ssim_vs_output(results, thresholds=(0.3, 0.4, 0.5)) -> plt.Figure:
  """Best-reconstruction SSIM of each training image against the victim's output Φ(x_i)
  (Haim et al. 2022, Fig. 4), coloured by label, with the SSIM thresholds as lines."""
  fig, ax = plt.subplots(figsize=(5, 3.5), constrained_layout=True)
  phi, best, labels = results["phi_train"], results["best_ssim_per_train"], results["train_labels"]
  for value, name, color in ((-1.0, "y = −1", "tab:blue"), (1.0, "y = +1", "tab:orange")):
    keep = labels == value
    ax.scatter(phi[keep], best[keep], s=8, color=color, label=name)
  for t in thresholds:
    ax.axhline(t, color="grey", lw=0.6, ls="--")
  ax.set_xlabel("victim output Φ(x_i)")
  ax.set_ylabel("SSIM of the best reconstruction")
  ax.set_title("Each training image's best SSIM against the victim's output", fontsize=9)
  ax.legend(fontsize=7)
  return fig


def stacked(panels, title: str, draw, n_show: int = 32) -> plt.Figure:
  """One figure of panels stacked vertically under a title (Runkel et al.'s Figs. 1–4, 9).

  Args:
    panels: sequence of panel arguments; ``draw(subfigure, panel)`` draws one.
    title: the header line.
    n_show: pairs per panel (8 per row), which sets the panel height.
  """
  # A mosaic row of 8 pairs is 1.0 in high at this width; 0.4 in below it for the next
  # panel's title.
  heights = [0.5] + [int(np.ceil(n_show / 8)) * 1.0 + 0.4] * len(panels)
  fig = plt.figure(figsize=(14.4, sum(heights)))
  header, *subfigs = fig.subfigures(len(panels) + 1, 1, height_ratios=heights)
  header.text(0.5, 0.5, title, ha="center", va="center", fontsize=12)
  for subfig, panel in zip(subfigs, panels):
    draw(subfig, panel)
  return fig


def save_figure(fig, directory: str, name: str, stamp: str = "") -> list[str]:
  """Saves ``fig`` as ``name``.png and ``name``.pdf in ``directory`` (atomically), closes
  it; returns the paths. Both are cropped to the box that ``bbox_inches="tight"`` finds
  for the PNG (found once: each search is a draw of its own). ``stamp``: a grey line
  under the figure's bottom-right corner, the run's size (`run_stamp`) or the report's."""
  paths = []
  if stamp:
    fig.text(1.0, 0.0, stamp, ha="right", va="top", fontsize=7, color="0.35")
  fig.draw_without_rendering()  # lays it out (constrained layout) as savefig would
  box = fig.get_tightbbox().padded(plt.rcParams["savefig.pad_inches"])
  for ext in ("png", "pdf"):
    path = os.path.join(directory, f"{name}.{ext}")
    buf = _bytes_io.BytesIO()
    fig.savefig(buf, format=ext, dpi=150, bbox_inches=box)
    files.atomic_write(path, buf.getvalue())
    paths.append(path)
  plt.close(fig)
  return paths


def size_stamp(variant: str) -> str:
  """The stamp of a figure of the report or of membership: its config's size."""
  return f"trdr · size {variant or 'paper'}"


def run_stamp(config: dict, results) -> str:
  """The size of a run, as its figures say it: attack, victim, training images, steps and
  starts (from config.json and results.npz; what a smoke, a :cpu or a paper-size run
  differ in)."""
  n_train = results["train_images"].shape[0]
  starts = results["final_images"].shape
  grid = f"{starts[0]} grid points × {starts[1]}" if "lambda1" in results else f"{starts[0]}"
  return (f"trdr · {config['attack']['name']} on {config['victim']['arch']} · n = {n_train} "
          f"training images · {config['attack']['steps']} steps · {grid} starts")


def run_figures(workdir: str, check: bool = True) -> list[str]:
  """Draws a finished run's figures into its directory, from its files alone.

  A landscape run (landscape.json): Figs. 10–12 of its grid and, for each pure eq. 10
  start on the grid, its reconstructions beside the nearest training image (the
  partition start also beside the nearest partition image). One attack (summary.json
  with "init"): reconstructions vs the training set and the partition, an overview in
  candidate order, each training image's best reconstruction and, when counted, its SSIM
  against Φ(x_i). A sweep writes no figures.

  Args:
    workdir: the run's directory.
    check: verify its files against their SHA256SUMS first (False: the caller has just
      written them).
  Returns:
    The paths written.
  Raises:
    ValueError: the run's files fail their SHA256SUMS (`trdr.runtime.rundir.check_finished`).
  """
  landscape = os.path.exists(os.path.join(workdir, "landscape.json"))
  if check:
    rundir.check_finished(workdir, "landscape.json" if landscape else "summary.json")
  config = files.read_json(os.path.join(workdir, rundir.CONFIG_FILE))
  n_show = config["eval"]["n_show"]
  figures = {}
  if landscape:
    records = files.read_json(os.path.join(workdir, "landscape.json"))
    results = experiment.load_results(workdir)
    figures.update(landscape_figures(records, tuple(results["grid_shape"]), nearest=config[
        "eval"].get("nearest", registry.DEFAULT_NEAREST)))
    for name in inits.PURE_INITS:
      try:
        g = inits.pure_index(records, name)
      except ValueError:
        continue
      title = f"{name.replace('_', ' ')} initialisation"
      figures[f"reconstructions_{name}"] = reconstruction_grid(
          results, "train", n_show=n_show, grid_index=g, title=title)
      if name == "partition":
        figures["reconstructions_partition_vs_partition"] = reconstruction_grid(
            results, "partition", n_show=n_show, grid_index=g, title=title)
  elif "init" in files.read_json(os.path.join(workdir, "summary.json")):
    results = experiment.load_results(workdir)
    title = f"{config['attack']['name']}, {config['init']['kind']} initialisation"
    for reference in ("train", "partition"):
      figures[f"reconstructions_vs_{reference}"] = reconstruction_grid(
          results, reference, n_show=n_show, title=title)
    figures["overview"] = reconstruction_grid(results, "train", n_show=n_show, order="index",
                                              title="the first reconstructions")
    if "best_ssim_per_train" in results:
      figures["best_per_train"] = best_per_train_grid(results, n_show=n_show)
      figures["ssim_vs_output"] = ssim_vs_output(results, config["eval"]["ssim_thresholds"])
  stamp = run_stamp(config, results) if figures else ""
  return [p for name, fig in figures.items() for p in save_figure(fig, workdir, name, stamp)]
