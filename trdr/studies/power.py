"""DecoReco's power: the training images it recovers against the training-set size n, at
fixed architecture, so along p / (d·n); the calibration of what a DecoReco zero is worth.

A negative is evidence only where the probe could have found the positive (issue 88).
Iurada et al. (ICLR 2026, "A Law of Data Reconstruction", arXiv 2509.22214) tie
reconstruction to p / (d·n): it needs p well above d·n. `run` trains Haim et al.'s MLP
(configs/power.py) at each n of ``config.ns`` for each seed, and attacks each victim by
DecoReco at Haim et al.'s published settings and at settings tuned for that n by trdr's
sweep. Per run it records the training images recovered (best buddies at SSIM ≥ the
level, windows 11 and 3) beside the same count for the start images, the KKT premise per
tensor (summary.json "kkt_premise"), the truth diagnostic (summary.json "truth",
`trdr.attacks.truth`, where the run has it) and Haim et al.'s protocol count (summary.json
"reconstructed_haim", where the run has it). `calibration` turns the rows into the table
`trdr.evaluation.power` reads; `markdown` and `figure` write the page, with the premise
warning's threshold derived from the cells (`trdr.evaluation.power.premise_threshold`).

Rows are written to WORKDIR/power_cells.json as each run finishes; a rerun skips those there
(a long run never loses finished work). The victim of (n, seed) is trained once, in
WORKDIR/victims/n<n>_seed<seed>/ (victim.checkpoint_dir), and shared by its runs; each run
is a `trdr.experiment` run in WORKDIR/runs/n<n>_seed<seed>_<setting>/, each sweep in
WORKDIR/sweeps/n<n>/ (`experiment.run_or_reuse`: resumed when interrupted, reused when
finished).
"""

import os

import jax
import matplotlib.figure
import matplotlib.ticker
import ml_collections
import numpy as np
from absl import logging

from trdr import experiment
from trdr.configs.power import TUNED
from trdr.evaluation import haim_match, power
from trdr.runtime import files, rundir
from trdr.studies.cnn import describe
from trdr.studies.victim_recipe import spread, summary_counts

ROWS_FILE = "power_cells.json"
TABLE_FILE = power.TABLE       # the calibration table, `make power-doc` ships it
FIGURE = "power"
HPARAMS = ("init_scale", "lr", "lambda_min", "alpha")   # (σ, lr, λ_min, α)


def _key(row: dict) -> tuple:
  return row["n"], row["seed"], row["setting"]


def settings(config: ml_collections.ConfigDict) -> list[str]:
  """The study's setting names in order: the fixed ones, then `TUNED` with ``tuned``."""
  return [*config.settings] + ([TUNED] if config.tuned else [])


def check(config: ml_collections.ConfigDict) -> None:
  """The grid is one a balanced binary task can draw.

  Raises:
    ValueError: an n that is odd or below 2 (n / 2 images per class group), a repeated n,
      no seeds, or a fixed setting named `TUNED` or without four values.
  """
  ns = [int(n) for n in config.ns]
  if not ns or any(n < 2 or n % 2 for n in ns) or len(set(ns)) != len(ns):
    raise ValueError(f"config.ns must be distinct even sizes ≥ 2 (n / 2 images per class "
                     f"group), got {tuple(config.ns)}")
  if not config.seeds:
    raise ValueError("config.seeds is empty")
  for name, values in config.settings.items():
    if name == TUNED or len(tuple(values)) != len(HPARAMS):
      raise ValueError(f"config.settings[{name!r}]: a name other than {TUNED!r} and four "
                       f"values {HPARAMS}, got {values}")


def cell_config(config: ml_collections.ConfigDict, n: int, seed: int
                ) -> ml_collections.ConfigDict:
  """The DecoReco experiment config of the victim at ``n`` training images and ``seed``:
  ``config.decoreco`` with n / 2 images per class group and every seed (the data draw, θ0,
  the attack's starts) set to ``seed``; the in-run score's k at most n."""
  c = config.decoreco.copy_and_resolve_references()
  c.data.n_per_class = int(n) // 2
  c.seed = c.data.seed = c.victim.seed = int(seed)
  c.eval.score_k = min(int(c.eval.score_k), int(n))
  return c


def victim_dir(workdir: str, n: int, seed: int) -> str:
  return os.path.join(workdir, "victims", f"n{n}_seed{seed}")


def run_dir(workdir: str, n: int, seed: int, setting: str) -> str:
  return os.path.join(workdir, "runs", f"n{n}_seed{seed}_{setting}")


def sweep_dir(workdir: str, n: int) -> str:
  return os.path.join(workdir, "sweeps", f"n{n}")


def tuned_values(config: ml_collections.ConfigDict, workdir: str, n: int) -> tuple:
  """The sweep's best (σ, lr, λ_min, α) at ``n`` (mode "sweep", ``config.decoreco.sweep``)
  on the victim of seed ``config.sweep_seed``, trained there if it is not yet (reused:
  `experiment.run_or_reuse`)."""
  c = cell_config(config, n, config.sweep_seed)
  c.victim.checkpoint_dir = victim_dir(workdir, n, config.sweep_seed)
  directory = sweep_dir(workdir, n)
  with jax.enable_x64(bool(c.float64)):
    experiment.run_or_reuse("sweep", c, directory)
  best = files.read_json(os.path.join(directory, experiment.BEST_FILE))
  return tuple(float(best[k]) for k in HPARAMS)


def run(config: ml_collections.ConfigDict, workdir: str) -> list[dict]:
  """Every (seed, n, setting) run of ``config`` (configs/power.py), finished rows reused;
  seed by seed, so that an interrupted study has the whole curve of its first seeds.

  Returns:
    The rows {n, seed, setting, values [σ, lr, λ_min, α], same_as (the fixed setting whose
    run a tuned setting equal to it reuses, else None), tuned_on (the sweep's seed, for
    `TUNED`), signature (`trdr.evaluation.power.signature`), architecture (words), p
    (θ's entries), d (pixels per image), ratio p / (d·n), candidates, steps, kkt
    (`trdr.victim.kkt.KKTFit.to_json`), recovered and start_recovered ({"w11", "w3",
    "w11_bb", "w3_bb"}, `summary_counts`), truth (summary.json's "truth", or None where
    the run has none), haim and start_haim (Haim et al.'s protocol count at the level,
    `haim_match.protocol` on the final and the start images: summary.json's
    "reconstructed_haim" where the run counted it, else from its results.npz; None where
    the images are not finite), final_loss, victim_seconds,
    attack_seconds, truth_seconds (the truth diagnostic's, or None), run (the run directory,
    relative to ``workdir``)}, of ``config.seeds`` × ``config.ns`` × `settings` in that
    order; WORKDIR/power_cells.json keeps every row run there.
  Raises:
    FileExistsError: ``workdir`` holds rows of other settings (all but the seeds and ns,
      which may grow), or a run directory there holds a finished run of another config.
    ValueError: the grid is not one the task can draw (`check`).
  """
  check(config)
  path, rows = rundir.study_rows(workdir, config, ROWS_FILE, growing=("seeds", "ns"))
  done = {_key(r) for r in rows}
  for seed in config.seeds:
    for n in config.ns:
      n, seed = int(n), int(seed)
      for setting in settings(config):
        if (n, seed, setting) in done:
          continue
        row = _run_cell(config, workdir, n, seed, setting, rows)
        logging.info("power n = %d, seed %d, %s: recovered %s, start %s", n, seed, setting,
                     row["recovered"], row["start_recovered"])
        rows.append(row)
        done.add(_key(row))
        files.write_json(path, rows)
  order = {k: i for i, k in enumerate(
      (int(n), int(s), t) for s in config.seeds for n in config.ns for t in settings(config))}
  return sorted((r for r in rows if _key(r) in order), key=lambda r: order[_key(r)])


def _run_cell(config, workdir, n, seed, setting, rows) -> dict:
  """One (n, seed, setting) run (or, for a tuned setting equal to a fixed one, that run's
  row again) as a row."""
  tuned_on = None
  if setting == TUNED:
    values, tuned_on = tuned_values(config, workdir, n), int(config.sweep_seed)
    same = next((name for name, v in config.settings.items()
                 if np.allclose(np.asarray(v, float), values, rtol=1e-6, atol=0)), None)
    if same is not None:
      if not any(_key(r) == (n, seed, same) for r in rows):
        rows.append(_run_cell(config, workdir, n, seed, same, rows))
      first = next(r for r in rows if _key(r) == (n, seed, same))
      return {**first, "setting": setting, "same_as": same, "tuned_on": tuned_on}
  else:
    values = tuple(float(v) for v in config.settings[setting])
  c = cell_config(config, n, seed)
  c.victim.checkpoint_dir = victim_dir(workdir, n, seed)
  for name, value in zip(HPARAMS, values):
    c.attack[name] = float(value)
  if "truth_diagnostic" in c.attack:   # the switch of trdr.attacks.truth
    c.attack.truth_diagnostic = setting in config.truth_settings
  directory = run_dir(workdir, n, seed, setting)
  with jax.enable_x64(bool(c.float64)):
    experiment.run_or_reuse("attack", c, directory)
  return {"n": n, "seed": seed, "setting": setting, "values": list(values), "same_as": None,
          "tuned_on": tuned_on, **_row(c, directory, config.eval.ssim_level),
          "run": os.path.relpath(directory, workdir)}


def _row(c: ml_collections.ConfigDict, directory: str, level: float) -> dict:
  """One finished run's numbers (its summary.json and its shared θ*'s metadata)."""
  from trdr import victim   # noqa: PLC0415  (θ*'s metadata only)
  summary = files.read_json(os.path.join(directory, experiment.SUMMARY_FILE))
  saved = victim.load_metadata(c.victim.checkpoint_dir)
  image_shape = tuple(saved["config"]["image_shape"])
  model = _shapes(c, image_shape)
  p = int(sum(np.prod(s.shape) for s in jax.tree.leaves(model)))
  d = int(np.prod(image_shape))
  n = int(summary["n_train"])
  key = f"ssim_ge_{level:g}"
  # Haim et al.'s protocol count (`haim_match.protocol`): summary.json's
  # "reconstructed_haim" where the run counted it (eval.haim_protocol), else computed here
  # from its results.npz (the final and the start images; None where they are not finite).
  counted = {}
  if "reconstructed_haim" not in summary:
    results = experiment.load_results(directory)
    mean = results["mean"] if np.size(results["mean"]) else None
    for name, images in (("reconstructed_haim", "final_images"),
                         ("start_reconstructed_haim", "initial_images")):
      x = np.asarray(results[images])
      counted[name] = ({key: haim_match.protocol(x, results["train_images"], mean,
                                                 level=level).count}
                       if np.all(np.isfinite(x)) else None)
  haim = lambda name: ((summary | counted).get(name) or {}).get(key)
  return {"signature": power.signature(model), "architecture": describe(c.victim),
          "p": p, "d": d, "ratio": p / (d * n), "candidates": summary["candidates"],
          "steps": summary["steps"], "kkt": summary["kkt_premise"],
          **summary_counts(summary, level), "truth": summary.get("truth"),
          "haim": haim("reconstructed_haim"), "start_haim": haim("start_reconstructed_haim"),
          "final_loss": summary["final_loss"],
          "victim_seconds": float(saved.get("train_seconds", 0.0)),
          "attack_seconds": summary["attack_seconds"],
          "truth_seconds": (summary.get("truth") or {}).get("seconds")}


def _shapes(c: ml_collections.ConfigDict, image_shape) -> dict:
  """θ's shapes for the victim of ``c`` (a pytree of ShapeDtypeStructs, nothing computed)."""
  from trdr import models   # noqa: PLC0415
  model = models.build_model(c.victim)
  return jax.eval_shape(lambda: models.init_params(model, jax.random.key(0), image_shape))


def first_layer(row: dict) -> float:
  """The first layer's unexplained KKT fraction ‖r‖²/‖θ*‖² of a row's victim."""
  return float(row["kkt"]["relative"][row["kkt"]["first_layer"]])


def threshold(rows: list[dict]) -> dict:
  """The premise warning's threshold from every run of the study (`trdr.evaluation.power.
  premise_threshold`, its rule stated there): one cell per (n, seed, setting), a tuned
  setting that reused a fixed one's run counted once."""
  cells = [{"unexplained": first_layer(r), "recovered": r["recovered"]["w11_bb"],
            "start": r["start_recovered"]["w11_bb"]} for r in rows if not r.get("same_as")]
  return power.premise_threshold(cells)


def calibration(rows: list[dict], config: ml_collections.ConfigDict, provenance: dict
                ) -> dict:
  """The calibration table of the rows (`trdr.evaluation.power`'s format): one cell per
  (architecture, n, setting) with its seeds' counts summarised, the premise threshold, and
  ``provenance`` (`trdr.report.provenance`) with the config's variant and settings."""
  cells = []
  for n in config.ns:
    for setting in settings(config):
      rs = [r for r in rows if (r["n"], r["setting"]) == (int(n), setting)]
      if not rs:
        continue
      values = rs[0]["values"] if len({tuple(r["values"]) for r in rs}) == 1 else []
      cells.append(power.calibration_cell(
          signature_=rs[0]["signature"], architecture=rs[0]["architecture"], p=rs[0]["p"],
          d=rs[0]["d"], n=int(n), setting=setting, values=values,
          seeds=[r["seed"] for r in rs],
          recovered=[r["recovered"]["w11_bb"] for r in rs],
          start=[r["start_recovered"]["w11_bb"] for r in rs],
          recovered_w3=[r["recovered"]["w3_bb"] for r in rs],
          start_w3=[r["start_recovered"]["w3_bb"] for r in rs]))
  return {"format": power.FORMAT,
          "provenance": {**provenance, "study": f"configs/power.py:{config.variant}",
                         "steps": int(config.decoreco.attack.steps),
                         "float64": bool(config.decoreco.float64)},
          "criterion": {"count": "best buddies", "ssim_level": float(config.eval.ssim_level),
                        "window": 11},
          "cells": cells,
          "premise_threshold": threshold(rows) if rows else None}


def _over(rows: list[dict], value, fmt: str = ".3g") -> str:
  return spread([value(r) for r in rows], fmt) if rows else "—"


def _truth_cell(row: dict) -> str:
  """A run's truth diagnostic in a few words: the verdict, the loss at the truth against
  the loss reached, and what the truth-start run kept."""
  t = row.get("truth")
  if not t:
    return "not run"
  ts = t.get("truth_start", {})
  # the verdict's comparison: the lower of the loss reached and the same with λ fitted
  reached = min(v for v in (t["loss_reached"], t.get("loss_reached_lambda_fitted"))
                if v is not None and np.isfinite(v))
  return (f"{t['verdict']} (at truth {t['loss_at_truth']:.4g} vs reached "
          f"{reached:.4g}; kept {ts.get('kept', '?')} of {ts.get('n', row['n'])})")


def figure(rows: list[dict], config: ml_collections.ConfigDict, derived: dict | None
           ) -> matplotlib.figure.Figure:
  """(a) best buddies recovered (window 11) against n, the mean over seeds with its
  [min, max], per setting, the start images' count dashed beside, p / (d·n) on the top axis;
  (b) the first layer's unexplained KKT fraction against the best buddies recovered, one
  point per run, with the derived threshold (``derived``, `threshold`) as a line."""
  fig = matplotlib.figure.Figure(figsize=(11, 4.4))
  ax, scatter = fig.subplots(1, 2)
  names = settings(config)
  markers = dict(zip(names, "os^vD"))
  colors = {name: f"C{i}" for i, name in enumerate(names)}
  # Settings side by side around each n (a log axis: a factor), so equal counts stay visible.
  shift = {name: 1.0 + 0.03 * (i - (len(names) - 1) / 2) for i, name in enumerate(names)}
  for setting in names:
    ns = [int(n) for n in config.ns if any(r["n"] == int(n) and r["setting"] == setting
                                           for r in rows)]
    if not ns:
      continue
    per = [[r for r in rows if (r["n"], r["setting"]) == (n, setting)] for n in ns]
    for field, style in (("recovered", "-"), ("start_recovered", "--")):
      counts = [np.asarray([r[field]["w11_bb"] for r in rs], float) for rs in per]
      mean = np.asarray([c.mean() for c in counts])
      err = np.asarray([[m - c.min() for m, c in zip(mean, counts)],
                        [c.max() - m for m, c in zip(mean, counts)]])
      label = f"{setting}" + (", start images" if field == "start_recovered" else "")
      ax.errorbar(np.asarray(ns) * shift[setting], mean, yerr=err, ls=style,
                  marker=markers[setting], color=colors[setting], capsize=3,
                  mfc=None if field == "recovered" else "none",
                  alpha=1.0 if field == "recovered" else 0.6, label=label)
  ax.plot([], [], color="none", label="mean over seeds, bars [min, max]")
  ax.set_xscale("log")
  ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
  ax.set_xticks([int(n) for n in config.ns], [str(int(n)) for n in config.ns])
  ax.set_ylim(bottom=0)
  ax.set_xlabel("n, training images")
  ax.set_ylabel(f"recovered (best buddies, SSIM ≥ {config.eval.ssim_level:g}, window 11)")
  ax.set_title("DecoReco's power against n (Haim et al.'s MLP)")
  if rows:
    ratio = {r["n"]: r["ratio"] for r in rows}
    top = ax.secondary_xaxis("top")
    top.set_xticks(sorted(ratio), [f"{ratio[n]:.3g}" for n in sorted(ratio)])
    top.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    top.set_xlabel("p / (d·n)")
  ax.legend(fontsize=7)
  for setting in settings(config):
    rs = [r for r in rows if r["setting"] == setting and not r.get("same_as")]
    if rs:
      scatter.scatter([first_layer(r) for r in rs], [r["recovered"]["w11_bb"] for r in rs],
                      marker=markers[setting], color=colors[setting], label=setting, alpha=0.8)
  if derived and derived.get("threshold") is not None:
    scatter.axvline(derived["threshold"], color="0.3", ls=":",
                    label=f"derived threshold {derived['threshold']:.3f}")
  scatter.set_xlabel("first layer's unexplained KKT fraction ‖r‖²/‖θ*‖²")
  scatter.set_ylabel("recovered (best buddies, window 11)")
  scatter.set_ylim(bottom=0)
  scatter.set_title("The premise's residual against what the attack recovers\n(one point "
                    "per run, every n and seed)")
  scatter.legend(fontsize=7)
  fig.tight_layout()
  return fig


def markdown(rows: list[dict], config: ml_collections.ConfigDict, provenance: dict,
             figure_written: bool = True) -> str:
  """The page: what was run, the table per n × setting (mean [min, max] over seeds), the
  per-seed truth verdicts, the threshold's derivation, the figure and the reading;
  ``provenance`` (`trdr.report.provenance`) in its header."""
  level = config.eval.ssim_level
  c = config.decoreco
  names = settings(config)
  total = len(config.seeds) * len(config.ns) * len(names)
  first = rows[0] if rows else None
  tensors = list(first["kkt"]["relative"]) if first else []
  lines = [
      "# What a DecoReco zero is worth: the attack's power against n",
      "",
      f"Written by `make power` (configs/power.py:{config.variant}) on "
      f"{provenance['machine']}, jax {provenance['jax']}, {provenance['utc']}, from "
      f"{ROWS_FILE}; do not edit by hand. {len(rows)} runs of {total} "
      f"({len(config.seeds)} seed{'s' if len(config.seeds) > 1 else ''} × "
      f"{len(config.ns)} sizes × {len(names)} settings) finished.",
      "",
      f"Per seed and n, the victim is {describe(c.victim)}"
      + (f" ({first['p']:,} parameters, d = {first['d']:,} pixel values per image)"
         if first else "")
      + f", trained on n images drawn balanced from {c.data.source} (n / 2 per class group"
      f"{', mean subtracted' if c.data.subtract_mean else ''}) by full-batch gradient "
      f"descent on {c.victim.loss.upper()} at lr {c.victim.lr:g}, "
      + (f"to the gradient-flow time {c.victim.flow_time:g}" if c.victim.get("flow_time")
         is not None else f"stopped at train loss {c.victim.loss_threshold:g}")
      + f" (configs/decoreco_cifar.py:{config.variant}, the victim of the report's DecoReco "
      f"runs). DecoReco from N(0, σ²) starts, {c.attack.steps:,} iterations on m = "
      f"{c.attack.candidates_per_image}n candidates, "
      f"{'float64' if c.float64 else 'float32'}, at each setting (σ, lr, λ_min, α): "
      + "; ".join(f"**{k}** {tuple(v)}" for k, v in config.settings.items())
      + (f"; **{TUNED}**: the best of trdr's sweep ({c.sweep.num_settings} settings × "
         f"{c.sweep.steps:,} iterations, {c.sweep.steps / c.attack.steps:.2g} of the "
         f"attack's), one sweep per n on the victim of seed {config.sweep_seed}, used "
         "unchanged on the other seeds' victims. The sweep ranks its settings by Haim et "
         "al.'s in-run score, the matched NCC distance to the training images (as their "
         "W&B sweep did), so the tuned column is the attack's power when its settings are "
         "chosen knowing one victim's training set: an upper bound for an adversary without "
         "it" if config.tuned else "") + ".",
      "",
      f"**Recovered**: training images that are best buddies (each the other's SSIM-nearest) "
      f"with a reconstruction at SSIM ≥ {level} (window 11, dm-pix's default, and 3, Haim "
      "et al.'s); **start**: the same count for the start images, the baseline an attack "
      "that does nothing scores. **Unexplained**: the KKT residual ‖r_t‖²/‖θ*_t‖² per tensor "
      "t, and of θ* as a whole, for the best λ ≥ 0 on the true training images "
      "(`trdr.victim.kkt`; DecoReco's premise is 0). **Haim protocol**: Haim et al.'s "
      "notebook's count (summary.json \"reconstructed_haim\"), where the runs have it. Each "
      "entry: the mean over seeds [min, max].",
      "",
      "| n | p / (d·n) | setting | best buddies w11 / w3 | start w11 / w3 | "
      + "".join(f"unexplained {t} | " for t in tensors)
      + "unexplained, whole θ* | Haim protocol (start) | attack's loss | attack s / truth s |",
      "|---|---|---|---|---|" + "---|" * len(tensors) + "---|---|---|---|",
  ]
  for n in config.ns:
    for setting in names:
      rs = [r for r in rows if (r["n"], r["setting"]) == (int(n), setting)]
      if not rs:
        continue
      same = {r["same_as"] for r in rs if r.get("same_as")}
      label = setting + (f" (= {', '.join(sorted(same))} on "
                         f"{sum(bool(r.get('same_as')) for r in rs)} seed"
                         f"{'s' if len(rs) > 1 else ''})" if same else "")
      haim = [r for r in rs if r.get("haim") is not None]
      timed = [r for r in rs if r.get("truth_seconds") is not None]
      lines.append(
          f"| {n} | {rs[0]['ratio']:.3g} | {label} | "
          f"{_over(rs, lambda r: r['recovered']['w11_bb'])} / "
          f"{_over(rs, lambda r: r['recovered']['w3_bb'])} | "
          f"{_over(rs, lambda r: r['start_recovered']['w11_bb'])} / "
          f"{_over(rs, lambda r: r['start_recovered']['w3_bb'])} | "
          + "".join(f"{_over(rs, lambda r, t=t: r['kkt']['relative'][t])} | " for t in tensors)
          + f"{_over(rs, lambda r: r['kkt']['relative_total'])} | "
          + (f"{_over(haim, lambda r: r['haim'])} ({_over(haim, lambda r: r['start_haim'])})"
             if haim else "—")
          + f" | {_over(rs, lambda r: r['final_loss'])} | "
          f"{_over(rs, lambda r: r['attack_seconds'], '.0f')} / "
          f"{_over(timed, lambda r: r['truth_seconds'], '.0f')} |")
  if config.tuned:
    tuned = {r["n"]: r["values"] for r in rows if r["setting"] == TUNED}
    if tuned:
      lines += ["", "The tuned settings (σ, lr, λ_min, α) per n: "
                + "; ".join(f"n = {n}: ({', '.join(f'{v:.4g}' for v in vs)})"
                            for n, vs in sorted(tuned.items())) + "."]
  missing = [(int(s), int(n), t) for s in config.seeds for n in config.ns for t in names
             if not any(_key(r) == (int(n), int(s), t) for r in rows)]
  if missing:
    lines += ["", "Not run yet (rerun `make power`; finished runs are kept): "
              + ", ".join(f"n = {n} / seed {s} / {t}" for s, n, t in missing) + "."]
  lines += ["", "## The truth diagnostic per seed", "",
            "Per run: the attack's own loss at the true training images (λ fitted for them, "
            "`trdr.attacks.truth`) against the loss it reached from its starts, and the run "
            "started at the truth: **search** (the truth is lower and the truth start keeps "
            "at least n / 2 training images: the search failed) or **objective** (the "
            "objective does not single out the truth). Runs at "
            f"{', '.join(config.truth_settings) or 'no setting'} carry it.", ""]
  truth_lines = []
  for n in config.ns:
    for setting in names:
      # a tuned setting that reused a fixed one's run shows under that one
      by = {r["seed"]: r for r in rows if (r["n"], r["setting"]) == (int(n), setting)
            and not r.get("same_as")}
      if by and any(r.get("truth") for r in by.values()):
        truth_lines.append(f"| {n} | {setting} | " + " | ".join(
            _truth_cell(by[int(s)]) if int(s) in by else "—" for s in config.seeds) + " |")
  if truth_lines:
    lines += ["| n | setting | " + " | ".join(f"seed {int(s)}" for s in config.seeds) + " |",
              "|---|---|" + "---|" * len(config.seeds), *truth_lines]
  else:
    lines.append("No finished run carries it (summary.json has no \"truth\": the runs "
                 "predate `trdr.attacks.truth`, or none is at those settings).")
  derived = threshold(rows) if rows else None
  lines += ["", "## The premise warning's threshold", "",
            "The rule, stated before the cells were looked at: "
            + power.RULE
            + ". Each run (n, seed, setting) is one cell; a tuned setting that reused a "
            "fixed one's run counts once.", ""]
  if derived:
    t = derived["threshold"]
    lines += [f"Cells: {derived['cells']}, recovering: {derived['recovering']}; first-layer "
              f"unexplained fractions from {derived['range'][0]:.3f} to "
              f"{derived['range'][1]:.3f}. Threshold: "
              + ("none" if t is None else f"{t:.3f}") + f". {derived['reading']}", "",
              f"The warning's wording this supports: \"{derived['warning']}\"."]
  if figure_written:
    lines += ["", "## Figure", "",
              f"[{FIGURE}.png]({FIGURE}.png): (a) the best buddies recovered against n, per "
              "setting, the start images dashed; (b) the first layer's unexplained fraction "
              "against the best buddies recovered, one point per run, the derived threshold "
              "dotted.", "", f"![DecoReco's power against n]({FIGURE}.png)"]
  lines += ["", "## Reading", "", reading(rows, config)]
  return "\n".join(lines) + "\n"


def reading(rows: list[dict], config: ml_collections.ConfigDict) -> str:
  """Where the attack recovers more than its start images, computed from the rows, stated
  as measured."""
  if not rows:
    return "No run finished yet."
  out = []
  for setting in settings(config):
    above, nothing = [], []
    for n in config.ns:
      rs = [r for r in rows if (r["n"], r["setting"]) == (int(n), setting)]
      if not rs:
        continue
      wins = sum(r["recovered"]["w11_bb"] > r["start_recovered"]["w11_bb"] for r in rs)
      (above if wins else nothing).append(f"n = {n} ({wins} of {len(rs)} seed"
                                          f"{'s' if len(rs) > 1 else ''})")
    out.append(f"At {setting}, DecoReco recovers more best buddies (window 11) than its "
               "start images at " + (", ".join(above) if above else "no n")
               + (f", and no more at {', '.join(nothing)}" if nothing else "") + ".")
  verdicts = [r["truth"]["verdict"] for r in rows if r.get("truth") and not r.get("same_as")]
  if verdicts:
    out.append(f"The truth diagnostic reads \"search\" in {verdicts.count('search')} and "
               f"\"objective\" in {verdicts.count('objective')} of {len(verdicts)} runs.")
  ratios = sorted({r["ratio"] for r in rows})
  side = ("every one has p above d·n" if ratios[0] > 1 else
          "every one has p at or below d·n" if ratios[-1] <= 1 else "they cross p = d·n")
  out.append(f"p / (d·n) spans {ratios[0]:.3g} to {ratios[-1]:.3g} on these cells: {side} "
             "(Iurada et al. 2025: reconstruction needs p well above d·n); p = d·n is n = "
             f"{rows[0]['p'] / rows[0]['d']:,.0f} for this victim.")
  derived = threshold(rows)
  out.append(derived["reading"])
  out.append("A count of 0 on a victim of this architecture is evidence of privacy only at "
             "an n where the attack recovers more than its start images here; elsewhere it "
             "is uninformative (the power statement of `trdr.evaluation.power`).")
  return " ".join(out)
