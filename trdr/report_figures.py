"""The report's own figures, beside the runs' (`trdr.plotting`): Runkel et al.'s quiz (Figs.
6 and 7), the partition starts along the attack, and the membership measurements.

Every function returns a matplotlib Figure (`trdr.plotting.save_figure` writes it).
"""

import matplotlib.pyplot as plt
import numpy as np

from trdr import plotting


def quiz_figure(results, quiz, *, reveal: bool = False, title: str = "") -> plt.Figure:
  """Runkel et al. Fig. 6 (the quiz: five reconstructions, one of them low-ranked) and,
  with ``reveal``, Fig. 7 (the same with their SSIM-nearest training images below, ranks
  and SSIMs named).

  Args:
    results: a DecoReco run's results.npz contents (final_images, train_index / _ssim,
      train_images, mean, display; public_ssim with ``reveal``).
    quiz: `trdr.realism.quiz` output.
  """
  recon = plotting.shown_images(results, results["final_images"][quiz.index])
  rows = 2 if reveal else 1
  fig, axes = plt.subplots(rows, len(quiz.index), figsize=(1.4 * len(quiz.index), 1.5 * rows),
                           squeeze=False, constrained_layout=True)
  train = plotting.real_images(results, "train")
  for k, i in enumerate(quiz.index):
    label = f"{k + 1}"
    if reveal:
      label += (f": #{quiz.rank[k]}, SSIM {results['train_ssim'][i]:.2f}\n"
                f"realism {results['public_ssim'][i]:.2f}")
    plotting.framed(axes[0, k], recon[k], "black", label)
    if reveal:
      plotting.framed(axes[1, k], train[results["train_index"][i]], "grey")
  fig.suptitle(title, fontsize=8)
  return fig


def trajectories(panels: dict, title: str = "") -> plt.Figure:
  """Mean L2 distance of the partition starts' reconstructions to the nearest training image
  (red), the nearest partition image (green) and their own start (black, dashed) against the
  attack's iterations, one panel per run.

  Args:
    panels: label -> a run's results.npz contents with trace_step int[K] and trace_l2_to_*
      float[K] (or [G, K], the traced grid point's row taken: the first finite one).
  """
  fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 2.8), squeeze=False,
                           constrained_layout=True)
  for ax, (label, results) in zip(axes[0], panels.items()):
    for name, colour, text in (("train", plotting.SET_COLOURS["train"], "nearest training"),
                               ("partition", plotting.SET_COLOURS["partition"],
                                "nearest partition"), ("start", "black", "own start")):
      curve = np.atleast_2d(results[f"trace_l2_to_{name}"])
      curve = curve[np.isfinite(curve).all(axis=1)][0]
      ax.plot(results["trace_step"], curve, color=colour, marker=".", label=text,
              ls="--" if name == "start" else "-")
    ax.set_xlabel("iteration")
    ax.set_title(label, fontsize=8)
  axes[0, 0].set_ylabel("mean L2 (display space)")
  axes[0, 0].legend(fontsize=6)
  fig.suptitle(title, fontsize=9)
  return fig


def membership_figure(measured: dict) -> plt.Figure:
  """Fraction of member matches vs threshold (one curve per run) and the AUC bars.

  Args:
    measured: `trdr.membership.measure` output.
  Returns:
    A Figure with two panels; uninformative AUCs are drawn hatched and pale.
  """
  fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.2), constrained_layout=True)
  for name, run in measured["runs"].items():
    rows = run["fractions"]
    left.plot([r["threshold"] for r in rows], [r["fraction_member"] for r in rows], marker="o",
              label=name, linestyle="-" if run["attack"] == "bilevel" else "--")
  left.axhline(0.5, color="grey", lw=0.8)
  left.set_xlabel("natural-looking: SSIM to nearest real image > t")
  left.set_ylabel("fraction whose nearest real image is a member")
  left.set_ylim(-0.05, 1.05)
  left.legend(fontsize=7)
  left.set_title("Nearest real image: training set or partition?")
  labels, values, informative = [], [], []
  for name, run in measured["runs"].items():
    for row in run["auc"]:
      labels.append(f"{name}: {row['score']}")
      values.append(row["auc"])
      informative.append(row["informative"] and np.isfinite(row["auc"]))
  y = np.arange(len(labels))
  for i, (v, ok) in enumerate(zip(values, informative)):
    if not np.isfinite(v):
      right.text(0.52, y[i], "n/a (a class is empty)", va="center", fontsize=6, color="grey")
      continue
    right.barh(y[i], v - 0.5, left=0.5, color="C0" if ok else "lightgrey",
               hatch="" if ok else "//", edgecolor="grey")
  right.axvline(0.5, color="black", lw=0.8)
  right.set_yticks(y, labels, fontsize=6)
  right.set_xlim(0, 1)
  right.invert_yaxis()
  right.set_xlabel("AUC, member vs non-member matches (hatched: < "
                   f"{measured['min_per_class']} per class or undefined)")
  right.set_title(f"Membership scores, natural-looking at t = {measured['auc_threshold']:g}")
  return fig
