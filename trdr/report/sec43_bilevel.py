"""Runkel et al. Sec. 4.3, the bilevel attack from the pure eq. 10 starts: Figs. 1–4, Table 1
(with its readings of θ0), the outer step and the readings' attack, drawn from the report's
runs (`trdr.report.runs`)."""

import os

import ml_collections
import numpy as np

from trdr import experiment, plotting
from trdr.attacks import bilevel
from trdr.attacks import init as inits
from trdr.evaluation.evaluate import START
from trdr.report import claims, verdicts
from trdr.report.verdicts import RULES
from trdr.report.runs import (VICTIM_NAMES, parameter_count, records_of, results_of,
                              run_arrays, run_dir, seed_config, seed_workdir, summary_of)
from trdr.runtime import files
from trdr.studies import readings


# Table 1 columns: the paper's name -> the pure initialisation (`inits.PURE_INITS`).
TABLE1_COLUMNS = {"random": "noise", "ground truth": "ground_truth", "partition": "partition"}
# Runkel et al. 2024, Table 1: ||θ* − θ||² after the attack.
PAPER_TABLE1 = {
    "affine": {"random": 1.1214e-3, "ground truth": 1.3888e-3, "partition": 2.9749e-3},
    "one_hidden": {"random": 6.1157e-5, "ground truth": 1.7055e-3, "partition": 6.3629e-3},
}
_INIT_TITLES = {"noise": "random U(0,1) initialisation",
                "ground_truth": "ground-truth initialisation",
                "partition": "initialisation from the distinct partition"}



def pure_figure(name, panels):
  """Figs. 1–4: (victim, pure start, reference set, label) panels."""
  def draw(runs, config):
    def panel(subfig, p):
      victim_name, init, reference, label = p
      plotting.reconstruction_grid(
          results_of(runs, victim_name), reference, n_show=config.paper.n_show, title=label,
          grid_index=inits.pure_index(records_of(runs, victim_name), init), fig=subfig)
    title = f"Fig. {name[3:]}: {_INIT_TITLES[panels[0][1]]}"
    return {name: plotting.stacked(panels, title, panel, config.paper.n_show)}
  return draw


def _describe(c: ml_collections.ConfigDict) -> str:
  v = c.victim
  arch = f"width {v.width}, {v.activation}" if v.arch == "one_hidden" else "affine"
  return (f"{arch}, n = {2 * c.data.n_per_class}, {c.attack.steps} steps, "
          f"{'float64' if c.float64 else 'float32'}")


def table1(runs, config) -> dict:
  """Table 1: ||θ* − θ(x)||² at the end of the attack, θ(x) re-solved the way the attack's
  own lower level starts (`UNIFORM_STARTS`: from θ0 ~ U(0, 1), at the tightest tolerance of
  the victim's ``eval.uniform_start_tols``; a warm start, or no tolerances: from θ*), beside
  the paper's values,
  the re-solve from θ*, the whole tolerance sweep, the same numbers of the start images
  (``start_``: the verdict's baseline) and each start's SSIM to the three sets:
  table1.json and table1.md."""
  rows, sweeps = {}, {}
  for name in ("affine", "one_hidden"):
    sweeps[name] = sorted(config.paper[name].eval.uniform_start_tols, reverse=True)
    rows[name] = _table1_row(records_of(runs, name), summary_of(runs, name), sweeps[name])
    rows[name]["paper"] = PAPER_TABLE1[name]
    with experiment.load_results(runs[name]) as saved:
      image_shape = saved["train_images"].shape[1:]
    count = parameter_count(config.paper[name].victim, image_shape)
    rows[name]["parameters"] = count
    rows[name]["measured_per_parameter"] = {c: v / count for c, v in rows[name]["measured"].items()}
  sizes = {v: _describe(config.paper[v]) for v in rows}
  table = {"columns": list(TABLE1_COLUMNS), "rows": rows, "sizes": sizes}
  cols = table["columns"]
  lines = ["| victim | θ0 of the re-solve | " + " | ".join(
               f"{c}: measured | {c}: paper | {c}: from θ*" for c in cols) + " |",
           "|---|---|" + "---:|---:|---:|" * len(cols)]
  for name, row in rows.items():
    cells = [f"{row['measured'][c]:.4e} | {row['paper'][c]:.4e} | "
             f"{row['from_theta_star'][c]:.4e}" for c in cols]
    lines.append(f"| {VICTIM_NAMES[name]} ({sizes[name]}) | {row['theta0']} | "
                 + " | ".join(cells) + " |")
  lines += ["", "The same as the mean over the victim's P parameters (||θ* − θ||² / P; the "
            "paper speaks of \"the average distance\" without saying over what):", "",
            "| victim | P | " + " | ".join(f"{c}: measured / P" for c in cols) + " |",
            "|---|---:|" + "---:|" * len(cols)]
  for name, row in rows.items():
    lines.append(f"| {VICTIM_NAMES[name]} | {row['parameters']} | " + " | ".join(
        f"{row['measured_per_parameter'][c]:.4e}" for c in cols) + " |")
  lines += ["", "The attack's lower level (its θ0 at every outer step: uniform = U(0, 1), "
            "previous = warm start): " + "; ".join(
                f"{VICTIM_NAMES[v]}: {row['lower_level_start']}, "
                f"{row['lower_level'].get('fraction_converged', float('nan')):.0%} of its "
                "solves reached ||∇θE|| < tol" for v, row in rows.items()) + "."]
  lines += ["", "The tolerance sweep: ||θ* − θ(x)||² with θ(x) re-solved from θ0 ~ U(0, 1) "
            "until ||∇θE|| < t (or the evaluation's iteration cap), for the reconstructions "
            "and, in parentheses, for the start images.", ""]
  for name, row in rows.items():
    if not sweeps[name]:
      continue
    ts = [f"{t:g}" for t in sweeps[name]]
    lines += [f"| {VICTIM_NAMES[name]} | " + " | ".join(f"t = {t}" for t in ts) + " |",
              "|---|" + "---:|" * len(ts)]
    for c in cols:
      lines.append(f"| {c} | " + " | ".join(
          f"{row['uniform_start_sweep'][c][t]:.3e} "
          f"({row[START + 'uniform_start_sweep'][c][t]:.3e})"
          for t in ts) + " |")
    lines.append("")
  markdown = ("Table 1: ||θ* − θ||² after the attack (measured by trdr vs Runkel et al. "
              "2024)\n\n" + "\n".join(lines) + "\n")
  return {"table1.json": table, "table1.md": markdown}


# The lower-level starts (`trdr.attacks.bilevel.LOWER_LEVEL_STARTS`) whose every solve
# starts from a U(0, 1) draw: Table 1 re-solves their final θ(x) from U(0, 1) too. The
# others (warm starts from θ* or the previous step, the victim's own θ0) are measured by the
# re-solve from θ*: the training images minimise l under those (table1_readings).
UNIFORM_STARTS = ("uniform", "uniform_once")


def _table1_row(records, summary, tols) -> dict:
  """One victim's row of table1.json (see `table1`); ``tols`` loosest first."""
  points = {col: records[inits.pure_index(records, init)]
            for col, init in TABLE1_COLUMNS.items()}
  uniform = bool(tols) and summary.get("lower_level_start") in UNIFORM_STARTS

  def sweep(prefix, col):
    return {f"{t:g}": points[col][f"{prefix}param_distance_uniform_tol_{t:g}"] for t in tols}

  def main(prefix, col):
    return sweep(prefix, col)[f"{tols[-1]:g}"] if uniform else points[col][
        f"{prefix}param_distance"]

  return {
      "measured": {col: main("", col) for col in points},
      START + "measured": {col: main(START, col) for col in points},
      "theta0": f"U(0, 1), tol {tols[-1]:g}" if uniform else "θ*",
      "from_theta_star": {col: r["param_distance"] for col, r in points.items()},
      "uniform_start_sweep": {col: sweep("", col) for col in points},
      START + "uniform_start_sweep": {col: sweep(START, col) for col in points},
      **{f"ssim_to_{s}": {col: r[f"ssim_to_{s}"] for col, r in points.items()}
         for s in ("train", "partition", "noise")},
      "lower_level_start": summary.get("lower_level_start"),
      "lower_level": summary.get("lower_level")}


# The numbers of each pure start that `outer_step` sets side by side.
_OUTER_STEP_FIELDS = ("upper_loss", "param_distance", "ssim_to_train", "ssim_to_partition",
                      "l2_to_train", START + "ssim_to_train", START + "ssim_to_partition")


# The outer steps `outer_step` sets side by side on the affine victim (Figs. 1–3), in words;
# "plain" and "linesearch_stop" are eq. 7's step, the paper's.
OUTER_STEPS = {
    "adam": "Adam, no stopping rule (trdr's bilevel runs)",
    "adam_stop": "Adam with the stopping rule",
    "plain": "eq. 7's plain step at the chosen η (the paper's step)",
    "linesearch_stop": "eq. 7's step with backtracking line search (step ≤ the chosen η) and "
                       "the stopping rule (the paper's step, kept at a stationary point)",
}


def outer_step(runs, config) -> dict:
  """Eq. 7's plain gradient step x ← Π[0,1](x − η∇x l) beside trdr's Adam on the affine
  victim of Figs. 1–3: the affine run's config with attack.optimizer "sgd" at each constant
  η of ``config.paper.outer_step.lrs`` (its θ*: the affine run's), each run kept in
  paper_figures/outer_step/lr_<η> and reused while its config is unchanged. The η set
  beside Adam is the one whose noise start ends at the lowest upper loss l (the attack's
  own objective; a non-finite l never wins; ties: the smaller η). Beside them, both
  optimisers with the outer stopping rule (no step while l ≤ stop_loss, the l that the
  solves' tolerances cannot tell from 0: `bilevel.resolvable_loss`): Adam, and eq. 7's
  step with a backtracking line search at most the chosen η (`OUTER_STEPS`).

  Returns:
    outer_step.json ({"lrs": η -> the pure starts' numbers, "chosen": η, "adam": the
    affine run's numbers, "adam_attack": its optimiser settings, "steps", "stop_loss",
    "stopping": {"adam_stop", "linesearch_stop": the pure starts' numbers with the steps
    held by the rule ("held")}, "seeds": {seed: {step (`OUTER_STEPS`): `affine_verdicts`}}
    for seed 0 (every step) and the report's repeat seeds (Adam and
    ``config.paper.outer_step.seed_steps``)}) and outer_step.md.
  """
  affine = config.paper.affine
  per_lr = {}
  for lr in config.paper.outer_step.lrs:
    directory = _plain_step_run(affine, runs["affine"], lr)
    per_lr[f"{lr:g}"] = _pure_numbers(files.read_json(
        os.path.join(directory, experiment.LANDSCAPE_FILE)))
  chosen = chosen_lr({lr: rows["noise"]["upper_loss"] for lr, rows in per_lr.items()})
  stop_loss = bilevel.resolvable_loss(affine.victim.tol, affine.attack.lower_level.tol,
                                      affine.victim.weight_decay)
  table = {"lrs": per_lr, "chosen": chosen, "adam": _pure_numbers(records_of(runs, "affine")),
           "adam_attack": {k: affine.attack[k] for k in ("optimizer", "lr", "lr_schedule")},
           "steps": affine.attack.steps, "stop_loss": stop_loss, "stopping": {},
           "seeds": {}}
  if chosen is not None:
    # Seed 0 (the runs above), then the report's repeat seeds of the affine run (run here,
    # reused by `trdr.report.evidence.make_seeds`), the plain step at the same η.
    workdir = os.path.dirname(os.path.dirname(runs["affine"]))
    repeats = tuple(config.repeat_seeds) if "affine" in config.repeat_runs else ()
    for seed in (0, *repeats):
      adam_dir, adam_config = runs["affine"], affine   # seed 0's: finished by `make`
      if seed:
        adam_dir = run_dir(seed_workdir(workdir, seed), "affine")
        adam_config = seed_config(affine, seed)
        experiment.run_or_reuse("landscape", adam_config, adam_dir)
      steps = OUTER_STEPS if not seed else ("adam", *config.paper.outer_step.seed_steps)
      dirs = {"adam": adam_dir}
      if "plain" in steps:
        dirs["plain"] = _plain_step_run(adam_config, adam_dir, float(chosen))
      dirs |= _stopping_runs(adam_config, adam_dir, float(chosen), stop_loss,
                             [s for s in ("adam_stop", "linesearch_stop") if s in steps])
      table["seeds"][str(seed)] = {step: affine_verdicts(dirs[step])
                                   for step in OUTER_STEPS if step in dirs}
      if not seed:
        table["stopping"] = {step: _pure_numbers(files.read_json(os.path.join(
            dirs[step], experiment.LANDSCAPE_FILE))) for step in ("adam_stop", "linesearch_stop")}
        for step, rows in table["stopping"].items():
          for start, held in _held_steps(dirs[step]).items():
            rows[start]["held"] = held
  return {"outer_step.json": table, "outer_step.md": _outer_step_markdown(table)}


def _stopping_runs(affine: ml_collections.ConfigDict, adam_dir: str, lr: float,
                   stop_loss: float, names=("adam_stop", "linesearch_stop")) -> dict[str, str]:
  """The affine run ``affine`` (Adam, in ``adam_dir``) again with the outer stopping rule
  at ``stop_loss``: with Adam ("adam_stop") and with eq. 7's step and a backtracking line
  search, the step at most η = ``lr`` ("linesearch_stop"), those of ``names``; the Adam
  run's θ*, no Table 1 re-solves from U(0, 1) (Figs. 1–3 do not read them). Run or reused
  in the folder outer_step/ beside ``adam_dir``. Returns {name: directory}."""
  out = {}
  every = {"adam_stop": {}, "linesearch_stop": {"optimizer": "sgd_linesearch", "lr": float(lr),
                                                "lr_schedule": "constant"}}
  for name, overrides in ((n, every[n]) for n in names):
    c = affine.copy_and_resolve_references()
    c.attack.update(overrides)
    c.attack.stop_loss = float(stop_loss)
    c.eval.uniform_start_tols = ()
    c.victim.checkpoint_dir = affine.victim.checkpoint_dir or os.path.join(adam_dir, "victim")
    out[name] = os.path.join(os.path.dirname(adam_dir), "outer_step", name)
    experiment.run_or_reuse("landscape", c, out[name])
  return out


def _held_steps(directory: str) -> dict[str, int]:
  """The outer steps the stopping rule held at each pure start of the run in ``directory``
  (results.npz's history_stopped)."""
  records = files.read_json(os.path.join(directory, experiment.LANDSCAPE_FILE))
  with experiment.load_results(directory) as saved:
    stopped = np.asarray(saved["history_stopped"])
  return {name: int(stopped[inits.pure_index(records, name)].sum())
          for name in inits.PURE_INITS}


def _plain_step_run(affine: ml_collections.ConfigDict, adam_dir: str, lr: float) -> str:
  """The affine run ``affine`` (Adam, in ``adam_dir``) with eq. 7's plain step at constant
  η = ``lr`` and the Adam run's θ*, run or reused in the folder beside ``adam_dir``:
  outer_step/lr_<η>. Returns its directory."""
  c = affine.copy_and_resolve_references()
  c.attack.optimizer, c.attack.lr, c.attack.lr_schedule = "sgd", float(lr), "constant"
  c.victim.checkpoint_dir = affine.victim.checkpoint_dir or os.path.join(adam_dir, "victim")
  directory = os.path.join(os.path.dirname(adam_dir), "outer_step", f"lr_{lr:g}")
  experiment.run_or_reuse("landscape", c, directory)
  return directory


def affine_verdicts(directory: str) -> dict:
  """The report's verdicts of Figs. 1–3 (`trdr.report.verdicts`) on the affine victim's
  landscape run in ``directory`` alone (the report's Figs. 1 and 2 also hold the one-hidden
  victim), each beside the same rule on its start images (`verdicts.with_baseline`)."""
  records = files.read_json(os.path.join(directory, experiment.LANDSCAPE_FILE))
  images = run_arrays(directory, ("train_ssim", "partition_ssim", "partition_index"),
                      inits.pure_index(records, "partition"))

  def of(records, images):
    return {"fig1": verdicts.verdict_fig1({"affine": records}),
            "fig2": verdicts.verdict_fig2({"affine": records}),
            "fig3": verdicts.verdict_partition_init("fig3", records, images)}
  start = of(verdicts.baseline_evidence(records), verdicts.baseline_evidence(images))
  return {k: claims.with_texts(k, verdicts.with_baseline(v, start[k]))
          for k, v in of(records, images).items()}


def chosen_lr(final_loss: dict[str, float]) -> str | None:
  """`outer_step`'s rule: the η (a key, η formatted as a number) whose noise start ends at
  the lowest upper loss l (the values); a non-finite l never wins; ties go to the smaller
  η. None when no l is finite."""
  finite = [lr for lr, loss in final_loss.items() if np.isfinite(loss)]
  return min(finite, key=lambda lr: (final_loss[lr], float(lr))) if finite else None


def _pure_numbers(records) -> dict:
  return {name: {k: records[inits.pure_index(records, name)][k] for k in _OUTER_STEP_FIELDS}
          for name in inits.PURE_INITS}


def _outer_step_markdown(table: dict) -> str:
  adam, chosen = table["adam_attack"], table["chosen"]
  lines = ["Eq. 7 is a plain gradient step on the images with a learning rate η that the paper "
           f"does not give; trdr's bilevel runs use {adam['optimizer']} (lr {adam['lr']:g}, "
           f"{adam['lr_schedule']} schedule), trdr's choice. Here the affine run of Figs. 1–3 "
           f"is repeated with the plain step (the projection onto [0, 1] kept, "
           f"{table['steps']} steps) at each constant η below; the η set beside "
           f"{adam['optimizer']} is the one whose noise start ends at the lowest upper loss l, "
           "the attack's own objective, which an attacker can compute: chosen without "
           "looking at a training image.", "",
           "| η | noise start's final l | ground truth's final l | partition's final l |",
           "|---:|---:|---:|---:|"]
  for lr, rows in table["lrs"].items():
    mark = " (chosen)" if lr == chosen else ""
    lines.append(f"| {lr}{mark} | " + " | ".join(
        f"{rows[s]['upper_loss']:.3g}" for s in ("noise", "ground_truth", "partition")) + " |")
  if chosen is None:
    return "\n".join(lines + ["", "Every η diverged: no plain-step run to set beside."]) + "\n"
  grid = sorted(map(float, table["lrs"]))
  if len(grid) > 1 and float(chosen) in (grid[0], grid[-1]):
    lines += ["", f"η = {chosen} lies at the grid's edge: the grid does not bracket the η "
              "that the rule would choose, which may lie beyond it."]
  lines += ["", "| start | outer step | ‖θ*−θ‖² | SSIM to the nearest training image "
            "(start) | SSIM to the nearest partition image (start) | L2 to train |",
            "|---|---|---:|---:|---:|---:|"]
  sides = {adam["optimizer"]: table["adam"], f"plain, η = {chosen}": table["lrs"][chosen]}
  for start in inits.PURE_INITS:
    for side, rows in sides.items():
      r = rows[start]
      lines.append(f"| {start} | {side} | {r['param_distance']:.3g} | "
                   f"{r['ssim_to_train']:.3f} ({r[START + 'ssim_to_train']:.3f}) | "
                   f"{r['ssim_to_partition']:.3f} ({r[START + 'ssim_to_partition']:.3f}) | "
                   f"{r['l2_to_train']:.3g} |")
  if table.get("stopping"):   # outer_step.json written before the stopping rule: none
    lines += ["", f"Both optimisers again with the outer stopping rule: no step while l ≤ "
              f"{table['stop_loss']:.3g}, the l that the solves' tolerances cannot tell from "
              "0 (E is weight_decay-strongly convex: θ* and θ(x_GT), each solved to its "
              "tolerance, lie within (tol_victim + tol_lower) / weight_decay of one minimiser; "
              "`trdr.attacks.bilevel.resolvable_loss`). Held: the steps the rule held, of "
              f"{table['steps']}.", "",
              "| start | outer step | held | final l | ‖θ*−θ‖² | SSIM to the nearest training "
              "image (start) | L2 to train |", "|---|---|---:|---:|---:|---:|---:|"]
    for start in inits.PURE_INITS:
      for step, rows in table["stopping"].items():
        r = rows[start]
        lines.append(f"| {start} | {OUTER_STEPS[step]} | {r['held']} | {r['upper_loss']:.3g} | "
                     f"{r['param_distance']:.3g} | {r['ssim_to_train']:.3f} "
                     f"({r[START + 'ssim_to_train']:.3f}) | {r['l2_to_train']:.3g} |")
  seeds = table["seeds"]
  # Every step seed 0 ran (the repeat seeds may run fewer: paper_figures.py's seed_steps).
  steps = [s for s in OUTER_STEPS if s in seeds[min(seeds, key=int)]]
  lines += ["", "The report's rules on the affine victim alone under each outer step (the "
            "start images' verdict in brackets), per seed (the data draw, the victim's "
            f"initialisation and the starts; the same η = {chosen} on every seed). Eq. 7, "
            "the paper's step, is the plain gradient step; the paper gives no η and no "
            "stopping rule.", "",
            "| seed | artefact | " + " | ".join(OUTER_STEPS[s] for s in steps) + " |",
            "|---|---|" + "---|" * len(steps)]
  for seed, both in seeds.items():
    for name in both["adam"]:
      lines.append(f"| {seed} | {name} | " + " | ".join(
          f"{both[s][name]['verdict']} ({both[s][name]['baseline']['verdict']})"
          if s in both else "not repeated" for s in steps) + " |")
  lines += ["", f"The checks on which eq. 7's plain step disagrees with {adam['optimizer']}:",
            "", "| seed | artefact | checks that differ |", "|---|---|---|"]
  for seed, both in seeds.items():
    for name, v in both["adam"].items():
      p = both["plain"][name]
      differ = [f"{check}: {'passes' if ok else 'fails'} → "
                f"{'passes' if p['checks'][check] else 'fails'}"
                for check, ok in v["checks"].items() if ok != p["checks"][check]]
      cell = "; ".join(differ).replace("|", "\\|") or "none"   # || would split the cell
      lines.append(f"| {seed} | {name} | {cell} |")
  return "\n".join(lines) + "\n"


def fig2_steps(outer: dict) -> list[dict]:
  """Fig. 2's verdict on the affine victim under each outer step of outer_step.json, in
  `OUTER_STEPS`' order (a list: report.json's keys are sorted): [{"step", "words",
  "verdict" (seed 0's), "baseline", "seeds": {seed: verdict}}]; [] where the table has no
  seeds (every η diverged)."""
  seeds = outer.get("seeds", {})
  if not seeds:
    return []
  first = seeds[min(seeds, key=int)]
  return [{"step": step, "words": OUTER_STEPS[step], "verdict": first[step]["fig2"]["verdict"],
           "baseline": first[step]["fig2"]["baseline"]["verdict"],
           "seeds": {seed: both[step]["fig2"]["verdict"] for seed, both in seeds.items()
                     if step in both}}
          for step in OUTER_STEPS if step in first]


def readings_attack(runs, config) -> dict:
  """Figs. 1, 2, 4 and Table 1 under each reading of the paper's random θ0
  (`trdr.studies.readings.ATTACK_READINGS`): the bilevel attack on the one-hidden victim run
  from the pure starts under each (`readings.attack_runs`, in paper_figures/readings_attack/),
  each artefact's rule beside the same rule on the start images, ||θ* − θ||² read as l under
  the reading itself (`readings.reading_records`), Table 1's cells beside the paper's with
  its order (random < ground truth < partition) checked after the attack, and the
  headline reading picked by `readings.headline_reading` from Table 1's readings. Each
  reading's verdicts twice: the one-hidden victim alone ("verdicts") and the claim as the
  report judges it ("claim_verdicts", `claim_verdicts`: with the affine victim of the main
  runs, whose θ(x) is the same under every reading). The main runs' one-hidden run, read
  the same way, is trdr's variant ("main").

  Returns:
    readings_attack.json ({"readings": {reading: {"words", "verdicts", "claim_verdicts":
    {artefact: verdict with baseline}, "table1": {column: {"measured", "start", "paper"}},
    "paper_order", "victim_grad_norm", "lower_level", "directory"}}, "main": the same for
    trdr's variant, "variant": {"words", "steps"}, "headline": `headline_reading`'s,
    "steps", "main_steps", "max_iter", "tol"}) and readings_attack.md.
  """
  r = config.paper.reading_runs
  paper_figures = os.path.dirname(runs["affine"])
  dirs = readings.attack_runs(config.paper.one_hidden, r, os.path.join(paper_figures,
                                                                       "readings_attack"))
  measured = readings.table1_readings(
      config.paper.readings, os.path.join(paper_figures, "readings"),
      PAPER_TABLE1["one_hidden"], RULES["small_param_distance"])["table1_readings.json"]
  activation = config.paper.one_hidden.victim.activation
  tol = float(config.paper.readings.victim.attack.lower_level.tol)
  if activation in measured["activations"]:
    headline = readings.headline_reading(measured, activation, tol, tuple(dirs))
  else:
    headline = {"reading": "e", "rule": readings.HEADLINE_RULE, "default": True,
                "why": {"all": f"Table 1's readings do not measure the {activation} victim"}}
  affine = (runs["affine"], sorted(config.paper.affine.eval.uniform_start_tols, reverse=True))
  rows = {reading: _reading_row(directory, readings.READINGS[reading][2], paper_figures,
                                affine)
          for reading, directory in dirs.items()}
  main = config.paper.one_hidden
  variant = {"words": variant_words(main.attack.lower_level.start, int(main.attack.steps)),
             "steps": int(main.attack.steps)}
  main_row = _reading_row(runs["one_hidden"], variant["words"], paper_figures, affine)
  table = {"readings": rows, "main": main_row, "variant": variant, "headline": headline,
           "steps": int(r.steps), "main_steps": int(main.attack.steps),
           "max_iter": int(r.max_iter), "tol": float(main.attack.lower_level.tol),
           "activation": activation, "width": int(main.victim.width)}
  return {"readings_attack.json": table, "readings_attack.md": _readings_attack_markdown(table)}


def variant_words(start: str, steps: int) -> str:
  """trdr's variant of the bilevel attack in words: the one-hidden victim's lower-level
  ``start`` (configs/bilevel_one_hidden.py) and the main runs' ``steps`` outer steps."""
  how = ("warm-started from the previous outer step, the first solve from θ*"
         if start == "previous" else f"started {start!r}")
  return f"trdr's variant (the one-hidden victim's lower level {how}; {steps} outer steps)"


def _reading_row(directory: str, words: str, paper_figures: str, affine: tuple) -> dict:
  """One row of readings_attack.json: the one-hidden landscape run in ``directory``, with
  the claims judged beside the affine run ``affine`` (directory, Table 1's tolerances)."""
  records = readings.reading_records(directory)
  summary = files.read_json(os.path.join(directory, experiment.SUMMARY_FILE))
  cells = {col: {"measured": verdicts.pure_record(records, init)["param_distance"],
                 "start": verdicts.pure_record(records, init)[START + "param_distance"],
                 "paper": PAPER_TABLE1["one_hidden"][col]}
           for col, init in TABLE1_COLUMNS.items()}
  return {"words": words, "verdicts": one_hidden_verdicts(directory),
          "claim_verdicts": claim_verdicts(*affine, directory), "table1": cells,
          "paper_order": bool(cells["random"]["measured"] < cells["ground truth"]["measured"]
                              < cells["partition"]["measured"]),
          "victim_grad_norm": summary["victim"]["grad_norm"],
          "lower_level": summary["lower_level"],
          "directory": os.path.relpath(directory, os.path.dirname(paper_figures))}


def one_hidden_verdicts(directory: str) -> dict:
  """The report's verdicts of Figs. 1, 2, 4 and Table 1 on the one-hidden victim's
  landscape run in ``directory`` alone, ||θ* − θ||² read as l under the run's own lower
  level (`readings.reading_records`), each beside the same rule on its start images."""
  records = readings.reading_records(directory)
  images = run_arrays(directory, ("train_ssim", "partition_ssim", "partition_index"),
                      inits.pure_index(records, "partition"))

  def of(records, images):
    row = {"measured": {col: verdicts.pure_record(records, init)["param_distance"]
                        for col, init in TABLE1_COLUMNS.items()}}
    return {"fig1": verdicts.verdict_fig1({"one_hidden": records}),
            "fig2": verdicts.verdict_fig2({"one_hidden": records}),
            "fig4": verdicts.verdict_partition_init("fig4", records, images),
            "table1": verdicts.verdict_table1({"rows": {"one_hidden": row}})}
  start = of(verdicts.baseline_evidence(records), verdicts.baseline_evidence(images))
  return {k: claims.with_texts(k, verdicts.with_baseline(v, start[k]))
          for k, v in of(records, images).items()}


def claim_verdicts(affine_dir: str, affine_tols, one_hidden_dir: str) -> dict:
  """The claims of Figs. 1, 2, 4 and Table 1 judged as the report judges them
  (`claims.verdicts`, both victims where the claim names both), the affine victim from its
  main run ``affine_dir`` (its E is strongly convex: θ(x) is the same from any θ0, so it
  is the same under every reading; Table 1's row as `table1` reads it, ``affine_tols``
  loosest first) and the one-hidden victim from the landscape run ``one_hidden_dir``, its
  ||θ* − θ||² the l of the run's own lower level (`readings.reading_records`).

  Returns:
    {artefact of `READING_ARTEFACTS`: verdict with baseline and texts}.
  """
  affine = files.read_json(os.path.join(affine_dir, experiment.LANDSCAPE_FILE))
  records = readings.reading_records(one_hidden_dir)
  per_image = ("train_ssim", "partition_ssim", "partition_index")
  at = lambda col: verdicts.pure_record(records, TABLE1_COLUMNS[col])
  evidence = {
      "pure": {"affine": affine, "one_hidden": records},
      "partition_images": {
          "affine": run_arrays(affine_dir, per_image, inits.pure_index(affine, "partition")),
          "one_hidden": run_arrays(one_hidden_dir, per_image,
                                   inits.pure_index(records, "partition"))},
      "table1": {"rows": {
          "affine": _table1_row(affine, files.read_json(os.path.join(
              affine_dir, experiment.SUMMARY_FILE)), list(affine_tols)),
          "one_hidden": {"measured": {c: at(c)["param_distance"] for c in TABLE1_COLUMNS},
                         START + "measured": {c: at(c)[START + "param_distance"]
                                              for c in TABLE1_COLUMNS}}}}}
  return {k: v for k, v in claims.verdicts(evidence).items() if k in READING_ARTEFACTS}


def registered_verdicts(results: dict, table: dict) -> dict:
  """The report's verdicts with Figs. 1, 2, 4 and Table 1 read under the registered
  (headline) reading of the paper's random θ0: each of those artefacts' verdict, baseline,
  numbers and checks become the headline reading's claim verdict (readings_attack.json's
  "claim_verdicts"), and the main runs' own verdict (with its repeats over seeds) moves to
  "variant", named as trdr's variant. Beside them: "registered" {"reading", "words",
  "default", "steps" (its outer steps), "main_steps" (trdr's variant's)} and "readings"
  {reading: {"verdict", "baseline", "one_hidden" (the one-hidden victim alone)}}.

  Args:
    results: artefact -> verdict dict (`claims.verdicts` of the main runs, with "seeds").
    table: readings_attack.json (`readings_attack`).
  Returns:
    A copy of ``results``; artefacts not in ``results`` stay absent.
  Raises:
    KeyError: a readings_attack.json written before "claim_verdicts" (rerun `make figures`:
      finished runs are reused).
  """
  headline = table["headline"]["reading"]
  chosen = table["readings"][headline]
  out = dict(results)
  for name in READING_ARTEFACTS:
    if name not in results:
      continue
    main = results[name]
    out[name] = {
        **chosen["claim_verdicts"][name],
        "registered": {"reading": headline, "words": chosen["words"],
                       "default": bool(table["headline"].get("default", False)),
                       "steps": table["steps"], "main_steps": table["main_steps"]},
        "variant": {"words": table["variant"]["words"],
                    **{k: v for k, v in main.items()
                       if k not in ("artefact", "claim", "source", "rule")}},
        "readings": {r: {"verdict": row["claim_verdicts"][name]["verdict"],
                         "baseline": row["claim_verdicts"][name]["baseline"]["verdict"],
                         "one_hidden": row["verdicts"][name]["verdict"]}
                     for r, row in table["readings"].items()},
        "headline_reading": headline}
  return out


READING_ARTEFACTS = ("fig1", "fig2", "fig4", "table1")


def _readings_attack_markdown(table: dict) -> str:
  rows, headline = table["readings"], table["headline"]
  steps, main_steps = table["steps"], table["main_steps"]
  fewer = (f" The readings' runs took {steps} outer steps and trdr's variant {main_steps}: "
           f"no reading ran at {main_steps} steps here, so a difference between a reading's "
           "row and trdr's variant's mixes the reading with the step count, and which of "
           "the two changes a verdict is not measured." if steps != main_steps else "")
  lines = [f"The bilevel attack on the one-hidden victim (width {table['width']}, "
           f"{table['activation']}) from the pure starts under each reading of the paper's "
           f"random θ0, {steps} outer steps (trdr's variant, the main runs: {main_steps}), "
           f"each solve L-BFGS to ||∇θE|| < {table['tol']:g} or {table['max_iter']} "
           "iterations. ||θ* − θ||² is l under the reading itself (the last step's, θ(x) "
           "solved as the reading says; the start images': the first step's). The affine "
           "victim's E is strongly convex, so θ(x) is the same from any θ0: each claim is "
           "judged as the report judges it, with the affine victim of the main runs under "
           "every reading. Each verdict with the start images' in brackets. The headline "
           "reading's verdicts are the report's first table's; the last row is trdr's "
           "variant (the main runs' one-hidden run read the same way), whose own verdicts "
           "the first table shows below them." + fewer, "",
           "| reading | victim's ‖∇θE(θ*)‖ | solves at tolerance | max ‖∇θE‖ | "
           + " | ".join(READING_ARTEFACTS) + " |",
           "|---|---:|---:|---:|" + "---|" * len(READING_ARTEFACTS)]
  named = {f"({reading}) {row['words']}": row for reading, row in rows.items()}
  named[table["variant"]["words"]] = table["main"]
  marked = lambda label: label + (" **(headline)**" if label.startswith(
      f"({headline['reading']}) ") else "")
  for label, row in named.items():
    ll = row["lower_level"]
    lines.append(f"| {marked(label)} | {row['victim_grad_norm']:.1e} | "
                 f"{ll.get('fraction_converged', float('nan')):.0%} | "
                 f"{ll.get('grad_norm_max', float('nan')):.1e} | " + " | ".join(
                     f"{row['claim_verdicts'][a]['verdict']} "
                     f"({row['claim_verdicts'][a]['baseline']['verdict']})"
                     for a in READING_ARTEFACTS) + " |")
  lines += ["", "The one-hidden victim alone (the rules of Figs. 1, 2 and Table 1 on its "
            "run only; Fig. 4 is the one-hidden victim's):", "",
            "| reading | " + " | ".join(READING_ARTEFACTS) + " |",
            "|---|" + "---|" * len(READING_ARTEFACTS)]
  for label, row in named.items():
    lines.append(f"| {marked(label)} | " + " | ".join(
        f"{row['verdicts'][a]['verdict']} ({row['verdicts'][a]['baseline']['verdict']})"
        for a in READING_ARTEFACTS) + " |")
  named = {label.split(" ")[0] if label.startswith("(") else "trdr's variant": row
           for label, row in named.items()}
  cols = list(TABLE1_COLUMNS)
  lines += ["", "Table 1's one-hidden row under each reading: ||θ* − θ||² after the attack / "
            "the paper's (the start images' in brackets), and whether the paper's order "
            "(random < ground truth < partition) holds after the attack.", "",
            "| reading | " + " | ".join(f"{c}: measured / paper (start)" for c in cols)
            + " | the paper's order |", "|---|" + "---:|" * len(cols) + "---|"]
  for label, row in named.items():
    lines.append(f"| {label} | " + " | ".join(
        f"{row['table1'][c]['measured']:.3e} / {row['table1'][c]['paper']:.3e} "
        f"({row['table1'][c]['start']:.3e})" for c in cols)
        + f" | {'holds' if row['paper_order'] else 'does not hold'} |")
  chosen = headline["reading"]
  lines += ["", f"**Headline reading: ({chosen})**" + (
      " (chosen by default: no reading met the rule)" if headline.get("default") else "")
      + f". The rule, fixed in docs/paper.md before the verdicts: {headline['rule']}. "
      + "; ".join(f"({k}): {v}" if len(k) == 1 else v for k, v in headline["why"].items())
      + "."]
  return "\n".join(lines) + "\n"




# Figs. 1–4: (victim, pure start, reference set, label) panels.
PURE_FIGURES = {
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
