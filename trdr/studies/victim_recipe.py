"""DecoReco's victim recipe, ablated: does θ* reach the KKT point the attack assumes, and do
the recovered images follow?

DecoReco (Haim et al. 2022) rests on θ* ≈ Σ λ_i y_i ∇θΦ(x_i; θ*), λ ≥ 0, which gradient
descent approaches only slowly. Haim et al. train 10⁶ epochs at lr 0.01 (gradient-flow time
10⁴) from PyTorch's default initialisation in every layer after the first; trdr trained
to a train loss of 1e-4 from Flax's. `run` crosses the later layers' initialisation
(``config.inits``) with the training time (``config.times``) over seeds, and measures per
cell the premise (`trdr.victim.kkt`) and what DecoReco recovers (configs/victim_recipe.py).
`markdown` writes the page: the mean and range over seeds per cell.

Cells are written to WORKDIR/victim_recipe.json as each finishes; a rerun skips those
there (a long run never loses finished work). Victims go to WORKDIR/victims/, attacks to
WORKDIR/attacks/ (each a resumable `trdr.experiment` run).
"""

import os
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging

from trdr import data, experiment, models, victim
from trdr.attacks import truth
from trdr.runtime import files, rundir
from trdr.victim import training

ROWS_FILE = "victim_recipe.json"


def _key(row: dict) -> tuple:
  return row["init"], str(row["time"]), row["seed"], row["setting"]


def cell_config(config: ml_collections.ConfigDict, init: str, time_: str | float, seed: int
                ) -> ml_collections.ConfigDict:
  """The DecoReco experiment config of one cell: ``config.decoreco`` with the later layers'
  initialisation ``init``, stopped at the train-loss threshold (``time_`` "loss") or at
  gradient-flow time ``time_``, and every seed set to ``seed``."""
  c = config.decoreco.copy_and_resolve_references()
  c.seed = c.data.seed = c.victim.seed = int(seed)
  c.victim.later_init = init
  if time_ != "loss":
    c.victim.flow_time, c.victim.loss_threshold = float(time_), 0.0
  return c


def _train_continued(c, model, params, task, epochs_done: int):
  """θ continued by gradient descent from ``epochs_done`` epochs to the cell's stop.

  Raises:
    ValueError: the cell's time is not past the time already trained.
  """
  v = c.victim.copy_and_resolve_references()
  if v.get("flow_time") is not None:
    if not v.flow_time > v.lr * epochs_done:
      raise ValueError(f"config.times must increase: time {v.flow_time:g} is not past the "
                       f"{v.lr * epochs_done:g} already trained (the cell before it)")
    v.flow_time = v.flow_time - v.lr * epochs_done
  return training.train_gd(model, params, task, v)


def run(config: ml_collections.ConfigDict, workdir: str) -> list[dict]:
  """Every (init, time, seed, setting) cell of ``config`` (configs/victim_recipe.py),
  finished cells reused.

  Returns:
    The rows {init, time ("loss" or the gradient-flow time), seed, setting, flow_time,
    epochs, train_loss, victim_seconds (cumulative: the training up to this time), kkt
    (`trdr.victim.kkt.KKTFit.to_json`), recovered and start_recovered ({"w11", "w3",
    "w11_bb", "w3_bb"}: training images whose best reconstruction, resp. start image, has
    SSIM ≥ the level; "_bb": best buddies), final_loss (the attack's, from the starts),
    attack_seconds}, also in WORKDIR/victim_recipe.json.
  Raises:
    FileExistsError: ``workdir`` holds cells of other settings.
  """
  # A workdir holds cells of one set of settings (all but the seeds, which may grow).
  path, rows = rundir.study_rows(workdir, config, ROWS_FILE, what="cells")
  done = {_key(r) for r in rows}
  for seed in config.seeds:
    for init in config.inits:
      todo = [t for t in config.times for s in config.settings
              if (init, str(t), int(seed), s) not in done]
      if not todo:
        continue
      params, epochs, seconds = None, 0, 0.0
      for time_ in config.times:
        c = cell_config(config, init, time_, seed)
        with jax.enable_x64(bool(c.float64)):
          task = data.make_task(c.data)
          dtype = jnp.float64 if c.float64 else jnp.float32
          model = models.build_model(c.victim)
          directory = os.path.join(workdir, "victims", f"{init}_t{time_}_seed{seed}")
          began = time.time()
          if params is None:
            params = victim.cache.initial_params(c.victim, model, task.train_images.shape[1:],
                                                 dtype)
          cast = task._replace(train_images=task.train_images.astype(dtype),
                               test_images=task.test_images.astype(dtype))
          params, report = _train_continued(c, model, params, cast, epochs)
          epochs += report.epochs
          seconds += time.time() - began
          report = report._replace(epochs=epochs, flow_time=c.victim.lr * epochs)._asdict()
          victim.save(directory, params, {"config": victim.metadata(c, task),
                                          "report": files.to_jsonable(report),
                                          "train_seconds": seconds})
          for setting, values in config.settings.items():
            if (init, str(time_), int(seed), setting) in done:
              continue
            row = {"init": init, "time": time_, "seed": int(seed), "setting": setting,
                   "flow_time": report["flow_time"], "epochs": epochs,
                   "train_loss": report["train_loss"], "victim_seconds": seconds,
                   **_attack(c, values, directory, os.path.join(
                       workdir, "attacks", f"{init}_t{time_}_seed{seed}_{setting}"),
                       config.eval.ssim_level)}
            logging.info("victim recipe %s, time %s, seed %d, %s: recovered %s, start %s",
                         init, time_, seed, setting, row["recovered"], row["start_recovered"])
            rows.append(row)
            done.add(_key(row))
            files.write_json(path, rows)
  return rows


def _attack(c: ml_collections.ConfigDict, values, victim_dir: str, workdir: str,
            level: float) -> dict:
  """DecoReco at (σ, lr, λ_min, α) = ``values`` on the victim saved in ``victim_dir``."""
  c = c.copy_and_resolve_references()
  c.victim.checkpoint_dir = victim_dir
  c.attack.init_scale, c.attack.lr, c.attack.lambda_min, c.attack.alpha = map(float, values)
  finished = os.path.join(workdir, "summary.json")
  if not os.path.exists(finished):
    experiment.run(c, workdir, mode="attack")
  summary = files.read_json(finished)
  # The run's KKT premise of θ* (`trdr.attacks.decoreco.kkt_premise`, logged there).
  return {"kkt": summary["kkt_premise"], **summary_counts(summary, level),
          "final_loss": summary["final_loss"], "attack_seconds": summary["attack_seconds"],
          "n": summary["n_train"], "truth": summary.get("truth")}


def summary_counts(summary: dict, level: float) -> dict:
  """The training images recovered by a finished DecoReco run (its summary.json, with
  eval.ssim_window 11 and eval.count_windows (3,), as configs/decoreco_cifar.py), and by
  its start images (the baseline).

  Args:
    summary: the run's summary.json.
    level: an SSIM threshold of the run's eval.ssim_thresholds.
  Returns:
    {"recovered": c, "start_recovered": c}, each c = {"w11", "w3", "w11_bb", "w3_bb"}: the
    training images whose best reconstruction (start image) has SSIM ≥ ``level`` at window
    11 or 3; "_bb": best buddies (each the other's SSIM-nearest), ints in [0, n].
  Raises:
    ValueError: the run did not count at that level or window (naming what is missing).
  """
  key = f"ssim_ge_{level:g}"
  names = {"w11": "reconstructed", "w3": "reconstructed_w3",
           "w11_bb": "reconstructed_best_buddies", "w3_bb": "reconstructed_best_buddies_w3"}
  out = {}
  for prefix, field in (("", "recovered"), ("start_", "start_recovered")):
    out[field] = {}
    for short, name in names.items():
      if key not in summary.get(prefix + name, {}):
        raise ValueError(f"the run's summary.json has no {prefix + name}[{key!r}]: it needs "
                         f"eval.ssim_thresholds with {level:g}, eval.ssim_window 11 and "
                         "eval.count_windows (3,)")
      out[field][short] = summary[prefix + name][key]
  return out


def spread(values, fmt: str = ".3g") -> str:
  """The mean over seeds and [min, max], formatted by ``fmt``; one value alone (the
  studies' pages: this one and `trdr.studies.cnn`)."""
  values = np.asarray(values, float)
  if values.size == 1:
    return f"{values[0]:{fmt}}"
  return f"{values.mean():{fmt}} [{values.min():{fmt}}, {values.max():{fmt}}]"


def table(rows: list[dict], config: ml_collections.ConfigDict) -> list[dict]:
  """One entry per (init, time, setting) cell with its seeds' rows: the mean and range."""
  cells = []
  for init in config.inits:
    for time_ in config.times:
      for setting in config.settings:
        mine = [r for r in rows if _key(r)[:2] == (init, str(time_)) and r["setting"] == setting]
        if mine:
          cells.append({"init": init, "time": time_, "setting": setting, "rows": mine})
  return cells


def markdown(rows: list[dict], config: ml_collections.ConfigDict, provenance: dict) -> str:
  """The page: what was run, the table per cell (mean [min, max] over seeds), the reading."""
  level = config.eval.ssim_level
  n = rows[0]["n"] if rows else 0
  cells = len(config.seeds) * len(config.inits) * len(config.times) * len(config.settings)
  tensors = list(rows[0]["kkt"]["relative"]) if rows else []
  lines = [
      "# DecoReco's victim recipe: the KKT premise and what the attack recovers",
      "",
      f"Written by `make victim-recipe` (configs/victim_recipe.py:{config.variant}) on "
      f"{provenance['machine']}, jax {provenance['jax']}, {provenance['utc']}. "
      f"{len(rows)} cells of {cells} ({len(config.seeds)} seeds) finished.",
      "",
      "Haim et al.'s MLP (a bias in the first layer only), n = "
      f"{n} training images, DecoReco from N(0, σ²) starts at the settings "
      + ", ".join(f"{k} (σ, lr, λ_min, α) = {tuple(v)}" for k, v in config.settings.items())
      + f", {config.decoreco.attack.steps:,} iterations on m = "
      f"{config.decoreco.attack.candidates_per_image * n} candidates, "
      f"{'float64' if config.decoreco.float64 else 'float32'}; victim lr "
      f"{config.decoreco.victim.lr}. Time \"loss\": stopped at train loss "
      f"{config.decoreco.victim.loss_threshold:g}; a number: the gradient-flow time "
      "lr × epochs (Haim et al.: 0.01 × 10⁶ = 10⁴). Not in this ablation: settings tuned by a "
      "sweep on each victim (only the published ones above), and times beyond the last "
      "column (configs/victim_recipe.py says why).",
      "",
      f"**Recovered**: training images whose best reconstruction has SSIM ≥ {level} (window "
      "11, dm-pix's default, and 3, Haim et al.'s), and best buddies (each the other's "
      "nearest neighbour); **start**: the same count for the start images (the baseline). "
      "**KKT unexplained**: ‖r_t‖²/‖θ*_t‖² per tensor for the best λ ≥ 0 on the true "
      "training images (`trdr.victim.kkt`); **floor**: ‖r‖², that fit's residual (the "
      "plain ReLU derivative, no λ_min prior): the premise, not the attack's objective, so "
      "it is not compared with the attack's loss; whether the attack's own objective "
      "prefers the training images is the truth diagnostic's (`trdr.attacks.truth`, in "
      "the reading). Each entry: the mean over seeds [min, max].",
      "",
      "| later layers | time | setting | epochs | recovered w11 / w3 | best buddies w11 / w3 | "
      "start w11 / w3 | " + " | ".join(f"unexplained {t}" for t in tensors)
      + " | floor ‖r‖² | attack's loss | victim s |",
      "|---|---|---|---|---|---|---|" + "---|" * len(tensors) + "---|---|---|",
  ]
  for cell in table(rows, config):
    rs = cell["rows"]
    get = lambda f, rs=rs: [f(r) for r in rs]
    lines.append(
        f"| {cell['init']} | {cell['time']} | {cell['setting']} | "
        f"{spread(get(lambda r: r['epochs']), ',.0f')} | "
        f"{spread(get(lambda r: r['recovered']['w11']))} / "
        f"{spread(get(lambda r: r['recovered']['w3']))} | "
        f"{spread(get(lambda r: r['recovered']['w11_bb']))} / "
        f"{spread(get(lambda r: r['recovered']['w3_bb']))} | "
        f"{spread(get(lambda r: r['start_recovered']['w11']))} / "
        f"{spread(get(lambda r: r['start_recovered']['w3']))} | "
        + " | ".join(spread(get(lambda r, t=t: r["kkt"]["relative"][t])) for t in tensors)
        + f" | {spread(get(lambda r: r['kkt']['residual_total']))} | "
        f"{spread(get(lambda r: r['final_loss']))} | "
        f"{spread(get(lambda r: r['victim_seconds']), '.0f')} |")
  missing = [(i, t, s) for s in config.seeds for i in config.inits for t in config.times
             if not any(_key(r)[:3] == (i, str(t), int(s)) for r in rows)]
  if missing:
    lines += ["", "Not run yet (rerun `make victim-recipe`; finished cells are kept): "
              + ", ".join(f"{i} / {t} / seed {s}" for i, t, s in missing) + "."]
  lines += ["", "## Reading", "", reading(rows, config)]
  return "\n".join(lines) + "\n"


def _more_or_fewer(difference: int, what: str) -> str:
  """A signed count difference in words: "18 fewer best buddies", "3 more …", "as many …"."""
  if difference == 0:
    return f"as many {what}"
  return f"{abs(difference)} {'more' if difference > 0 else 'fewer'} {what}"


def reading(rows: list[dict], config: ml_collections.ConfigDict) -> str:
  """Which initialisation leaves the smaller first-layer residual and recovers more, at each
  time, computed from the rows (per seed, paired), stated as measured."""
  out = []
  for time_ in config.times:
    for setting in config.settings:
      pairs = []
      for seed in config.seeds:
        by = {r["init"]: r for r in rows if _key(r)[1:] == (str(time_), int(seed), setting)}
        if {"pytorch", "flax"} <= set(by):
          pairs.append(by)
      if not pairs:
        continue
      first = lambda r: r["kkt"]["relative"][r["kkt"]["first_layer"]]
      smaller = sum(first(p["pytorch"]) < first(p["flax"]) for p in pairs)
      more = sum(p["pytorch"]["recovered"]["w11_bb"] - p["flax"]["recovered"]["w11_bb"]
                 for p in pairs)
      out.append(
          f"Time {time_}, {setting}: PyTorch's initialisation leaves the smaller first-layer "
          f"residual in {smaller} of {len(pairs)} seed{'s' if len(pairs) > 1 else ''}; "
          f"it recovers {_more_or_fewer(more, 'best buddies (w11)')} in total "
          + ("as" if more == 0 else "than") + " Flax's there.")
  for init in config.inits:
    for setting in config.settings:
      trend = []
      for time_ in config.times:
        mine = [r for r in rows if _key(r)[:2] == (init, str(time_)) and r["setting"] == setting]
        if mine:
          first = np.mean([r["kkt"]["relative"][r["kkt"]["first_layer"]] for r in mine])
          buddies = np.mean([r["recovered"]["w11_bb"] for r in mine])
          trend.append(f"time {time_}: {first:.3f} and {buddies:.1f} ({len(mine)} seed"
                       f"{'s' if len(mine) > 1 else ''})")
      if len(trend) > 1:
        out.append(f"With {init}'s initialisation ({setting}), the first layer's unexplained "
                   "fraction and the best buddies (w11), means over seeds, by training time: "
                   + "; ".join(trend) + ".")
  truths = [r["truth"] for r in rows if r.get("truth")]
  if truths:
    search = sum(t["verdict"] == "search" for t in truths)
    out.append(f"The truth diagnostic (the attack's own loss at the true training images "
               "with λ fitted, beside the loss it reached, and the attack run from them) "
               f"reads \"search\" (the objective prefers the truth and the search missed it) "
               f"in {search} of {len(truths)} cells and \"objective\" (the objective does not "
               f"single out the training images) in {len(truths) - search}"
               + (f"; {len(rows) - len(truths)} cells ran before the diagnostic existed"
                  if len(truths) < len(rows) else "") + ".")
    lower = sum(truth.start_lower(t) for t in truths)
    if lower:
      out.append(f"In {lower} of these cells the attack started at the training images ends "
                 "below the loss its search reached and keeps at least half of them: a "
                 "lower point beside the truth that the search missed.")
  elif rows:
    out.append("No cell has the truth diagnostic (they ran before it existed): whether the "
               "attack's objective prefers the training images is not measured here.")
  return " ".join(out) if out else "No paired cells yet."
