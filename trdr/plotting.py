"""Figures, drawn from saved results only (landscape.json records, results.npz).

Every function returns a matplotlib Figure and never shows it; `trdr.io.save_figure`
writes PNG and PDF. The Agg backend is used, so no display is needed.
"""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

_SETS = (("train", "training set"), ("partition", "distinct partition"), ("noise", "noise set"))


def _grid_values(records, key, grid_shape) -> np.ndarray:
  """float[len(λ1), len(λ2)] of ``key`` from records ordered λ1 outer, λ2 inner."""
  return np.array([r[key] for r in records], np.float64).reshape(grid_shape)


def _axis_values(records, key, grid_shape):
  values = np.array([r[key] for r in records]).reshape(grid_shape)
  return values[:, 0] if key == "lambda1" else values[0, :]


def landscape_figures(records: list[dict], grid_shape) -> dict[str, plt.Figure]:
  """Fig. 10 (heatmaps of the mean L2 distance to the SSIM-nearest image of each set over
  the (λ1, λ2) grid), Fig. 11 (the λ2 = 1 row against λ1) and Fig. 12 (the λ1 = 1 column
  against λ2), for one attack.

  Args:
    records: landscape.json records (keys lambda1, lambda2, l2_to_{train,partition,noise}).
    grid_shape: (len(λ1), len(λ2)).
  Returns:
    {"fig10_heatmaps", "fig11_lambda2_eq_1", "fig12_lambda1_eq_1"} -> Figure; a curve
    figure is left out when its line (λ2 = 1 or λ1 = 1) is not on the grid.
  """
  l1 = _axis_values(records, "lambda1", grid_shape)
  l2 = _axis_values(records, "lambda2", grid_shape)
  figs = {}
  fig, axes = plt.subplots(1, 3, figsize=(13, 4), constrained_layout=True)
  for ax, (key, label) in zip(axes, _SETS):
    values = _grid_values(records, f"l2_to_{key}", grid_shape)
    im = ax.imshow(values.T, origin="lower", cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(l1)), [f"{v:g}" for v in l1])
    ax.set_yticks(range(len(l2)), [f"{v:g}" for v in l2])
    ax.set_xlabel("λ1  (0: partition, 1: ground truth)")
    ax.set_ylabel("λ2  (0: noise, 1: images)")
    ax.set_title(f"L2 to SSIM-nearest, {label}")
    for i in range(len(l1)):
      for j in range(len(l2)):
        ax.text(i, j, f"{values[i, j]:.2f}", ha="center", va="center", fontsize=7,
                color="white" if values[i, j] < values.mean() else "black")
    fig.colorbar(im, ax=ax)
  figs["fig10_heatmaps"] = fig

  for name, fixed_key, fixed, free_key, free in (
      ("fig11_lambda2_eq_1", "lambda2", 1.0, "lambda1", l1),
      ("fig12_lambda1_eq_1", "lambda1", 1.0, "lambda2", l2)):
    line = sorted((r for r in records if np.isclose(r[fixed_key], fixed)),
                  key=lambda r: r[free_key])
    if not line:
      continue
    fig, ax = plt.subplots(figsize=(5, 3.5), constrained_layout=True)
    for key, label in _SETS:
      ax.plot([r[free_key] for r in line], [r[f"l2_to_{key}"] for r in line], "o-",
              label=label)
    ax.set_xlabel(f"{'λ1' if free_key == 'lambda1' else 'λ2'}  ({fixed_key.replace('lambda', 'λ')} = 1)")
    ax.set_ylabel("mean L2 to SSIM-nearest image")
    ax.legend()
    figs[name] = fig
  return figs


def _framed(ax, image, color, title=None):
  ax.imshow(np.clip(image.squeeze(), 0.0, 1.0), cmap="gray" if image.shape[-1] == 1 else None,
            vmin=0.0, vmax=1.0)
  ax.set_xticks([])
  ax.set_yticks([])
  for spine in ax.spines.values():
    spine.set_edgecolor(color)
    spine.set_linewidth(2.5)
  if title:
    ax.set_title(title, fontsize=6)


def reconstruction_grid(results, grid_index: int, reference: str = "train", n_show: int = 16,
                        title: str = "", per_row: int = 8, fig=None) -> plt.Figure:
  """Reconstructions (black frame) beside their SSIM-nearest image (grey frame), sorted by
  SSIM, best first — the layout of the paper's Figs. 1–9.

  Args:
    results: results.npz contents (final_images, mean, {reference}_images,
      {reference}_index / _ssim).
    grid_index: which grid point's reconstructions to show.
    reference: "train", "partition" or "noise": the set the neighbours come from.
    n_show: number of (reconstruction, neighbour) pairs.
    fig: a Figure or SubFigure to draw into (a panel of a larger figure); default a new
      Figure.
  Returns:
    ``fig``, or the new Figure.
  """
  mean = results["mean"] if results["mean"].size else 0.0
  recon = results["final_images"][grid_index] + mean
  candidates = results[f"{reference}_images"] + mean
  index = results[f"{reference}_index"][grid_index]
  ssim = results[f"{reference}_ssim"][grid_index]
  order = np.argsort(-ssim)[:n_show]
  rows = int(np.ceil(len(order) / per_row))
  if fig is None:
    fig = plt.figure(figsize=(2 * per_row * 0.9, rows * 1.05))
  axes = fig.subplots(rows, 2 * per_row, squeeze=False)
  for ax in axes.ravel():
    ax.axis("off")
  for k, i in enumerate(order):
    r, c = divmod(k, per_row)
    for offset, (image, color, label) in enumerate(
        ((recon[i], "black", f"SSIM {ssim[i]:.2f}"), (candidates[index[i]], "grey", None))):
      ax = axes[r, 2 * c + offset]
      ax.axis("on")
      _framed(ax, image, color, label)
  fig.suptitle(f"{title}: reconstruction (black) | nearest {reference} image by SSIM (grey)",
               fontsize=9, y=1.0 + 0.1 / rows)
  return fig
