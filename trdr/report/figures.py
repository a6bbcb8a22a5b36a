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
    quiz: `trdr.evaluation.realism.quiz` output.
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
    plotting.framed(axes[0, k], recon[k], plotting.RECONSTRUCTION_FRAME, label)
    if reveal:
      plotting.framed(axes[1, k], train[results["train_index"][i]], plotting.REAL_FRAME)
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


# The log-log ROC's lower limit: 0.1 % FPR, the lowest FPR the membership tables report.
ROC_FLOOR = 1e-3


def membership_figure(measured: dict) -> plt.Figure:
  """ROC curves of every membership score on the natural-looking reconstructions, one
  panel per attack (row) and start kind (column), on log-log axes (Carlini et al. 2022:
  the low-FPR regime is where an adversary's confidence shows), chance dashed. Both axes
  start at ``ROC_FLOOR``; a curve's points below it (FPR or TPR 0) are drawn at the floor.

  Args:
    measured: `trdr.studies.membership.measure` output ("roc": "attack/kind/score" -> [fpr, tpr]).
  Returns:
    A Figure; a panel without an informative score says so.
  """
  keys = [k.split("/") for k in measured["roc"]]
  rows = list(dict.fromkeys(r["attack"] for r in measured["rows"]))
  kinds = {a: list(dict.fromkeys(r["kind"] for r in measured["rows"] if r["attack"] == a))
           for a in rows}
  cols = max(len(k) for k in kinds.values())
  fig, axes = plt.subplots(len(rows), cols, figsize=(3.4 * cols, 3.0 * len(rows)),
                           squeeze=False, constrained_layout=True)
  # The curves are the rule's label window's (the first): the AUCs beside them too.
  window = measured.get("labels", {}).get("windows", [None])[0]
  auc = {(r["attack"], r["kind"], r["score"]): r.get("auc") for r in measured["rows"]
         if r["stage"] == "reconstruction" and r.get("window") == window}
  chance = np.geomspace(ROC_FLOOR, 1.0, 201)
  for i, attack in enumerate(rows):
    for j in range(cols):
      if j >= len(kinds[attack]):
        axes[i, j].axis("off")
        continue
      kind = kinds[attack][j]
      ax = axes[i, j]
      ax.plot(chance, chance, color="grey", lw=0.8, ls="--")
      scores = [s for a, k, s in keys if a == attack and k == kind]
      for score in scores:
        fpr, tpr = measured["roc"][f"{attack}/{kind}/{score}"]
        value = auc.get((attack, kind, score))
        ax.plot(np.maximum(fpr, ROC_FLOOR), np.maximum(tpr, ROC_FLOOR), lw=1.2,
                label=f"{score} ({'too few' if value is None else f'{value:.2f}'})")
      if scores:
        ax.legend(fontsize=6, loc="lower right")
      else:
        ax.text(0.5, 0.5, "too few natural-looking\nmembers or non-members", ha="center",
                va="center", fontsize=7, transform=ax.transAxes)
      ax.set_xscale("log")
      ax.set_yscale("log")
      ax.set_xlim(ROC_FLOOR, 1)
      ax.set_ylim(ROC_FLOOR, 1)
      ax.set_title(f"{attack}, {kind} starts", fontsize=8)
      ax.set_xlabel("FPR", fontsize=7)
      ax.set_ylabel("TPR", fontsize=7)
  fig.suptitle("Membership of natural-looking reconstructions: ROC per score (AUC)", fontsize=9)
  return fig
