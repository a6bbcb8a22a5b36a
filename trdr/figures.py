"""The paper's Figs. 1–4 and Table 1 from two pure-initialisation landscape runs.

Runkel et al. 2024 attack an affine (eq. 8) and a one-hidden-layer (eq. 9) victim from the
three pure eq. 10 initialisations (`trdr.landscape.PURE_INITS`): U(0, 1) noise, the ground
truth and the distinct partition. Each victim is one `trdr.landscape.run` whose grid holds
those points (λ1, λ2 ∈ {0, 1}); this module runs or reuses the two runs and assembles

  fig1   noise initialisation: (a) affine, (b) one-hidden, beside the nearest training image
  fig2   ground-truth initialisation, same layout
  fig3   affine, partition initialisation: (a) beside the nearest training image,
         (b) beside the nearest image of the partition used for initialisation
  fig4   the same for the one-hidden victim
  table1 ||θ* − θ(x)||² after the attack, {affine, one-hidden} × {random, ground truth,
         partition}, beside the paper's values: table1.md and table1.json

in one work directory (figures as PNG and PDF). Each victim's run lives in a
sub-directory named after it and is reused when finished with the same config.
"""

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import ml_collections  # noqa: E402
import numpy as np  # noqa: E402

from trdr import io, landscape, plotting  # noqa: E402

VICTIMS = ("affine", "one_hidden")
VICTIM_NAMES = {"affine": "affine", "one_hidden": "one-hidden"}
# Table 1 columns: the paper's name -> the pure initialisation of `landscape.PURE_INITS`.
TABLE1_COLUMNS = {"random": "noise", "ground truth": "ground_truth", "partition": "partition"}
# Runkel et al. 2024, Table 1: ||θ* − θ||² after the attack.
PAPER_TABLE1 = {
    "affine": {"random": 1.1214e-3, "ground truth": 1.3888e-3, "partition": 2.9749e-3},
    "one_hidden": {"random": 6.1157e-5, "ground truth": 1.7055e-3, "partition": 6.3629e-3},
}
# Figure -> panels (victim, initialisation, reference set of the nearest neighbours, label).
FIGURES = {
    "fig1": (("affine", "noise", "train", "(a) affine"),
             ("one_hidden", "noise", "train", "(b) one-hidden")),
    "fig2": (("affine", "ground_truth", "train", "(a) affine"),
             ("one_hidden", "ground_truth", "train", "(b) one-hidden")),
    "fig3": (("affine", "partition", "train", "(a) affine, nearest training image"),
             ("affine", "partition", "partition", "(b) affine, nearest partition image")),
    "fig4": (("one_hidden", "partition", "train", "(a) one-hidden, nearest training image"),
             ("one_hidden", "partition", "partition",
              "(b) one-hidden, nearest partition image")),
}
ARTEFACTS = (*FIGURES, "table1")
_INIT_TITLES = {"noise": "random U(0,1) initialisation", "ground_truth": "ground-truth "
                "initialisation", "partition": "initialisation from the distinct partition"}


def victims_needed(artefacts) -> list[str]:
  """The victims whose runs the artefacts read, in `VICTIMS` order.

  Raises:
    ValueError: an unknown artefact name.
  """
  unknown = sorted(set(artefacts) - set(ARTEFACTS))
  if unknown:
    raise ValueError(f"unknown artefacts {unknown}; known: {list(ARTEFACTS)}")
  needed = set()
  for name in artefacts:
    needed |= set(VICTIMS) if name == "table1" else {p[0] for p in FIGURES[name]}
  return [v for v in VICTIMS if v in needed]


def run_or_reuse(config: ml_collections.ConfigDict, workdir: str) -> list[dict]:
  """`landscape.run` into ``workdir``, or its records if it already finished there.

  Raises:
    FileExistsError: ``workdir`` holds a finished run of a different config.
  """
  finished = os.path.join(workdir, landscape.LANDSCAPE_FILE)
  if os.path.exists(finished):
    saved = io.read_json(os.path.join(workdir, io.CONFIG_FILE))
    if saved != io.to_jsonable(config):
      raise FileExistsError(f"{workdir} holds a finished run of a different config; "
                            "remove it or use another --workdir")
    return io.read_json(finished)
  return landscape.run(config, workdir)


def _pure_index(records, init: str) -> int:
  l1, l2 = landscape.PURE_INITS[init]
  hits = [g for g, r in enumerate(records)
          if np.isclose(r["lambda1"], l1) and np.isclose(r["lambda2"], l2)]
  if not hits:
    raise ValueError(f"the run's grid has no {init} point (λ1, λ2) = ({l1}, {l2})")
  return hits[0]


def figure(name: str, runs: dict, n_show: int) -> plt.Figure:
  """Fig. 1, 2, 3 or 4: two panels of `plotting.reconstruction_grid`, one above the other.

  Args:
    name: a key of `FIGURES`.
    runs: victim -> (records, results) with results the run's results.npz contents.
    n_show: reconstructions per panel.
  """
  panels = FIGURES[name]
  rows = int(np.ceil(n_show / 8))
  panel_height = rows * 1.05 + 0.6
  fig = plt.figure(figsize=(14.4, 2 * panel_height + 0.5))
  header, *subfigs = fig.subfigures(3, 1, height_ratios=(0.5, panel_height, panel_height))
  header.text(0.5, 0.5, f"{name[:3].capitalize()}. {name[3:]}: {_INIT_TITLES[panels[0][1]]}",
              ha="center", va="center", fontsize=12)
  for subfig, (victim_name, init, reference, label) in zip(subfigs, panels):
    records, results = runs[victim_name]
    plotting.reconstruction_grid(results, _pure_index(records, init), reference,
                                 n_show=n_show, title=label, fig=subfig)
  return fig


def table1(runs: dict, summaries: dict) -> dict:
  """Table 1: ||θ* − θ(x)||² at the end of the attack, measured and the paper's.

  Args:
    runs: victim -> (records, results); the measured value is the record's
      ``param_distance`` (a fresh lower-level solve from θ*, see `landscape.evaluate`).
    summaries: victim -> summary.json contents of its run.
  Returns:
    {"columns": [...], "rows": {victim: {"measured": {column: float}, "paper": {column:
    float}, "ssim_to_train"/"ssim_to_partition"/"ssim_to_noise": {column: float},
    "lower_level_start": str, "lower_level": {...}}}}.
  """
  rows = {}
  for victim_name, (records, _) in runs.items():
    points = {col: records[_pure_index(records, init)] for col, init in TABLE1_COLUMNS.items()}
    rows[victim_name] = {
        "measured": {col: r["param_distance"] for col, r in points.items()},
        "paper": PAPER_TABLE1[victim_name],
        **{f"ssim_to_{s}": {col: r[f"ssim_to_{s}"] for col, r in points.items()}
           for s in ("train", "partition", "noise")},
        "lower_level_start": summaries[victim_name].get("lower_level_start"),
        "lower_level": summaries[victim_name].get("lower_level"),
    }
  return {"columns": list(TABLE1_COLUMNS), "rows": rows}


def table1_markdown(table: dict, sizes: dict | None = None) -> str:
  """Table 1 as a Markdown table: one row per victim, measured | paper per column.

  Args:
    table: `table1` output.
    sizes: optional victim -> short description of the run (width, n, steps).
  """
  cols = table["columns"]
  lines = ["| victim | " + " | ".join(f"{c}: measured | {c}: paper" for c in cols) + " |",
           "|---|" + "---:|---:|" * len(cols)]
  for victim_name, row in table["rows"].items():
    label = VICTIM_NAMES[victim_name] + (f" ({sizes[victim_name]})" if sizes else "")
    cells = [f"{row['measured'][c]:.4e} | {row['paper'][c]:.4e}" for c in cols]
    lines.append(f"| {label} | " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def describe(config: ml_collections.ConfigDict) -> str:
  """Short description of a victim run's size for the table's row labels."""
  v = config.victim
  arch = f"width {v.width}, {v.activation}" if v.arch == "one_hidden" else "affine"
  return (f"{arch}, n = {2 * config.data.n_per_class}, {config.attack.steps} steps, "
          f"{'float64' if config.float64 else 'float32'}")


def run(config: ml_collections.ConfigDict, workdir: str, artefacts=ARTEFACTS) -> dict:
  """Runs (or reuses) the victims' attacks and writes the requested artefacts.

  Args:
    config: configs/paper_figures.py: sub-configs ``affine`` and ``one_hidden`` (full
      landscape configs whose grids contain the three pure initialisations) and n_show.
    workdir: output directory; the runs go to workdir/affine and workdir/one_hidden.
    artefacts: names from `ARTEFACTS`.
  Returns:
    Artefact name -> list of paths written.
  Raises:
    ValueError: unknown artefact, or a run without a pure initialisation it needs.
    FileExistsError: a sub-directory holds a finished run of another config.
  """
  victims = victims_needed(artefacts)
  os.makedirs(workdir, exist_ok=True)
  runs, summaries = {}, {}
  for victim_name in victims:
    run_dir = os.path.join(workdir, victim_name)
    records = run_or_reuse(config[victim_name], run_dir)
    with np.load(os.path.join(run_dir, landscape.RESULTS_FILE)) as saved:
      results = dict(saved)
    runs[victim_name] = (records, results)
    summaries[victim_name] = io.read_json(os.path.join(run_dir, landscape.SUMMARY_FILE))
  written = {}
  for name in artefacts:
    if name == "table1":
      table = table1(runs, summaries)
      sizes = {v: describe(config[v]) for v in runs}
      table["sizes"] = sizes
      md_path, json_path = (os.path.join(workdir, f"table1.{ext}") for ext in ("md", "json"))
      io.write_json(json_path, table)
      with open(md_path, "w") as f:
        f.write("Table 1: ||θ* − θ||² after the attack (measured by trdr vs Runkel et al. "
                "2024)\n\n" + table1_markdown(table, sizes))
      written[name] = [md_path, json_path]
    else:
      written[name] = io.save_figure(figure(name, runs, config.n_show), workdir, name)
  return written
