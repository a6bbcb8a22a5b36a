"""DecoReco on convolutional victims beside Haim et al.'s MLP: what the attack recovers
from each, whether the victim's parameter count could hold its training set, and what the
attack's own objective says at the truth.

Haim et al. (2022) reconstruct from MLPs; Buzaglo et al. (2023) report reconstructions from
convolutional networks too. Iurada et al. (ICLR 2026, "A Law of Data Reconstruction", arXiv
2509.22214) tie reconstruction to p / (d·n), p the parameters, d the pixel values per image,
n the training images: at p far below d·n a count of zero is expected by parameter count and
says nothing about the attack or the victim. `run` trains, per pair of configs/cnn.py
(victims at the same n) and seed, each victim on the same training images by the same
gradient-descent recipe and attacks it by DecoReco (Haim et al.'s eq. 3,
`trdr.attacks.decoreco`) at each of the pair's settings: Haim et al.'s published b9dfyspx,
or "tuned" (trdr's sweep on that victim and seed, `experiment` mode "sweep", its best.json
read by the attack). Per row it records the training images recovered (SSIM ≥ the config's
level, windows 11 and 3, SSIM-nearest and best buddies) beside the same count for the
start images, p and p / (d·n), the KKT premise of θ* (`trdr.victim.kkt`, per tensor), the
truth diagnostic where the run made it (summary.json["truth"]: the attack's loss at the
true images, the truth-start run, the verdict), the test accuracy and the seconds.
`markdown` writes the page (the mean [min, max] over seeds per victim and setting, what
each count says, and a reading computed from the rows), `figure` the training images beside
their best reconstructions.

Each run is a `trdr.experiment` run (`experiment.run_or_reuse`: a finished run of the same
config is reused, an interrupted one resumed, one of another config refused):
WORKDIR/runs/<victim>_seed<seed>/ (b9dfyspx; θ* trained there), <victim>_seed<seed>_sweep/
and <victim>_seed<seed>_tuned/ (both on that θ*). Rows are derived from the runs' files and
written to WORKDIR/cnn.json as each run finishes (a long run never loses finished work).
"""

import os

import jax
import matplotlib.figure
import ml_collections
import numpy as np
from absl import logging

from trdr import experiment, models, plotting, victim
from trdr.attacks import truth
from trdr.configs.cnn import SETTINGS
from trdr.runtime import files, rundir
from trdr.studies.victim_recipe import spread, summary_counts

ROWS_FILE = "cnn.json"
FIGURE = "cnn"


def _key(row: dict) -> tuple:
  return row["victim"], row["seed"], row.get("setting", "b9dfyspx")


def plan(config: ml_collections.ConfigDict) -> list[tuple[str, str, int, str]]:
  """The rows of ``config`` in the order they run: (pair, victim, seed, setting) for each
  pair of ``config.pairs``, its seeds, its victims and its settings."""
  return [(pair, name, int(seed), setting)
          for pair, p in config.pairs.items() for seed in p.seeds for name in p.victims
          for setting in p.settings]


def run_config(config: ml_collections.ConfigDict, name: str, seed: int
               ) -> ml_collections.ConfigDict:
  """The DecoReco experiment config of victim ``name`` (a key of ``config.victims``) at
  ``seed`` and Haim et al.'s b9dfyspx: every seed of it (the data draw, θ0, the attack's
  starts) set to ``seed``.

  Raises:
    ValueError: ``name`` is not a victim of ``config``.
  """
  if name not in config.victims:
    raise ValueError(f"unknown victim {name!r}; configs/cnn.py has {list(config.victims)}")
  c = config.victims[name].copy_and_resolve_references()
  c.seed = c.data.seed = c.victim.seed = int(seed)
  return c


def tuning_configs(config: ml_collections.ConfigDict, workdir: str, name: str, seed: int
                   ) -> tuple[ml_collections.ConfigDict, ml_collections.ConfigDict]:
  """The sweep's config and the tuned attack's of victim ``name`` at ``seed``: both on the
  θ* of its b9dfyspx run (victim.checkpoint_dir), the attack reading the sweep's best.json
  (attack.hparams_file). The sweep ranks its settings (``victims[name].sweep``) by the
  in-run score."""
  c = run_config(config, name, seed)
  c.victim.checkpoint_dir = os.path.join(run_dir(workdir, name, seed), "victim")
  tuned = c.copy_and_resolve_references()
  tuned.attack.hparams_file = os.path.join(run_dir(workdir, name, seed, "sweep"),
                                           experiment.BEST_FILE)
  return c, tuned


def check_same_setting(config: ml_collections.ConfigDict) -> None:
  """The victims of each pair differ in their architecture alone: the same data (n
  included), precision, training recipe and attack (what makes their counts comparable);
  every pair names known victims and settings.

  Raises:
    ValueError: a pair with fewer than two victims, an unknown victim or setting, or two
      victims of a pair that differ elsewhere (naming the keys).
  """
  for pair, p in config.pairs.items():
    names = list(p.victims)
    if len(names) < 2:
      raise ValueError(f"configs/cnn.py's pair {pair!r} compares victims: need two or more, "
                       f"got {names}")
    for name in names:
      if name not in config.victims:
        raise ValueError(f"pair {pair!r} names the unknown victim {name!r}; configs/cnn.py "
                         f"has {list(config.victims)}")
    if unknown := [s for s in p.settings if s not in SETTINGS]:
      raise ValueError(f"pair {pair!r} has unknown settings {unknown}; known: {SETTINGS}")

    def setting(name):
      c = config.victims[name].to_dict()
      own = {"arch", *models.MODEL_FIELDS.get(c["victim"]["arch"], ())}
      c["victim"] = {k: v for k, v in c["victim"].items() if k not in own}
      return c
    for name in names[1:]:
      if change := rundir.config_change(setting(names[0]), setting(name), shown=6):
        raise ValueError(f"victims {names[0]!r} and {name!r} of configs/cnn.py's pair "
                         f"{pair!r} differ beyond their architecture ({change}): set both "
                         "alike")


def run_dir(workdir: str, name: str, seed: int, setting: str = "b9dfyspx") -> str:
  """The `trdr.experiment` run of victim ``name`` at ``seed``: its attack at ``setting``
  ("b9dfyspx", "tuned") or its sweep ("sweep")."""
  tail = "" if setting == "b9dfyspx" else f"_{setting}"
  return os.path.join(workdir, "runs", f"{name}_seed{seed}{tail}")


def run(config: ml_collections.ConfigDict, workdir: str) -> list[dict]:
  """Every (pair, seed, victim, setting) run of ``config`` (configs/cnn.py), finished runs
  reused.

  Returns:
    The rows {pair, victim, seed, setting, arch, architecture (words), parameters (θ's
    entries), pixels (d: values per image), ratio (p / (d·n)), n, candidates, steps,
    hyperparameters (the attack's (σ, lr, λ_min, α)), train_accuracy, test_accuracy,
    epochs, kkt (`trdr.victim.kkt.KKTFit.to_json`: relative, residual, norm per tensor,
    relative_total, residual_total, first_layer, positive, n, form), recovered and
    start_recovered ({"w11", "w3", "w11_bb", "w3_bb"}: training images whose best
    reconstruction, resp. start image, has SSIM ≥ config.eval.ssim_level; "_bb": best
    buddies), final_loss, truth (summary.json["truth"], the truth diagnostic, or None where
    the run has none), victim_seconds (θ*'s training), attack_seconds, sweep_seconds (the
    sweep's, "tuned" only, else 0), evaluation_seconds, run (the run directory, relative to
    ``workdir``)}, in `plan` order; WORKDIR/cnn.json keeps every row run there (a row
    dropped from the config stays, and returns when added back).
  Raises:
    FileExistsError: a run directory there holds a finished run of another config.
    ValueError: a pair's victims differ beyond their architecture (`check_same_setting`),
      or a victim's config is not a DecoReco run that counts at config.eval.ssim_level with
      windows 11 and 3 (`summary_counts`).
  """
  check_same_setting(config)
  os.makedirs(workdir, exist_ok=True)
  path = os.path.join(workdir, ROWS_FILE)
  kept = files.read_json(path) if os.path.exists(path) else []
  order = plan(config)
  keys = {(name, seed, setting) for _, name, seed, setting in order}
  rows = {_key(r): r for r in kept if _key(r) not in keys}
  out = []
  for pair, name, seed, setting in order:
    directory = run_dir(workdir, name, seed, setting)
    sweep_seconds = 0.0
    if setting == "tuned":
      c_sweep, c = tuning_configs(config, workdir, name, seed)
      with jax.enable_x64(bool(c.float64)):
        sweep_dir = run_dir(workdir, name, seed, "sweep")
        experiment.run_or_reuse("sweep", c_sweep, sweep_dir)
      sweep_seconds = float(files.read_json(
          os.path.join(sweep_dir, experiment.SUMMARY_FILE)).get("seconds", 0.0))
    else:
      c = run_config(config, name, seed)
    with jax.enable_x64(bool(c.float64)):
      experiment.run_or_reuse("attack", c, directory)
    row = {"pair": pair, "victim": name, "seed": seed, "setting": setting,
           **_row(c, directory, config.eval.ssim_level), "sweep_seconds": sweep_seconds,
           "run": os.path.relpath(directory, workdir)}
    logging.info("cnn study %s, seed %d, %s: recovered %s, start %s, p / (d·n) %.3g, "
                 "test accuracy %.3f", name, seed, setting, row["recovered"],
                 row["start_recovered"], row["ratio"], row["test_accuracy"])
    out.append(row)
    rows[_key(row)] = row
    files.write_json(path, list(rows.values()))
  return out


def describe(victim_config: ml_collections.ConfigDict) -> str:
  """The victim's architecture in words (configs/decoreco_cnn.py, configs/decoreco_cifar.py)."""
  v = victim_config
  if v.arch == "cnn":
    return (f"CNN, 3 × 3 convolutions with channels {tuple(v.channels)}, {v.activation}"
            f"{', 2 × 2 average pooling' if v.pool else ''}, a linear head")
  if v.arch == "haim_mlp":
    return f"MLP, hidden widths {tuple(v.widths)}, {v.activation}"
  return v.arch


def parameter_count(c: ml_collections.ConfigDict, image_shape) -> int:
  """The entries of θ for the victim of ``c`` on images of ``image_shape`` (H, W, C)."""
  model = models.build_model(c.victim)
  shapes = jax.eval_shape(lambda: models.init_params(model, jax.random.key(0), image_shape))
  return int(sum(np.prod(x.shape) for x in jax.tree.leaves(shapes)))


def _row(c: ml_collections.ConfigDict, directory: str, level: float) -> dict:
  """One finished run's numbers (its summary.json and its saved θ*'s metadata)."""
  summary = files.read_json(os.path.join(directory, experiment.SUMMARY_FILE))
  report = summary["victim"]
  saved = victim.load_metadata(c.victim.checkpoint_dir or os.path.join(directory, "victim"))
  image_shape = tuple(saved["config"]["image_shape"])
  phases = summary.get("phase_seconds", {})
  p, d = parameter_count(c, image_shape), int(np.prod(image_shape))
  return {"arch": c.victim.arch, "architecture": describe(c.victim),
          "parameters": p, "pixels": d, "ratio": p / (d * summary["n_train"]),
          "n": summary["n_train"], "candidates": summary["candidates"],
          "steps": summary["steps"], "hyperparameters": summary.get("hyperparameters"),
          "truth": summary.get("truth"), "train_accuracy": report["train_accuracy"],
          "test_accuracy": report["test_accuracy"], "epochs": report.get("epochs"),
          "kkt": summary["kkt_premise"], **summary_counts(summary, level),
          "final_loss": summary["final_loss"],
          # θ*'s training, as saved with it (a resumed run's phase_seconds would say 0)
          "victim_seconds": float(saved.get("train_seconds", phases.get("victim", 0.0))),
          "attack_seconds": summary["attack_seconds"],
          "evaluation_seconds": phases.get("evaluation", float("nan"))}


def figure(rows: list[dict], workdir: str, config: ml_collections.ConfigDict
           ) -> matplotlib.figure.Figure | None:
  """Per (victim, setting) of `plan`, the first seed's row: its training images (grey),
  best recovered first, each beside its best reconstruction (black)
  (`plotting.best_per_train_grid`); None before any row exists."""
  by = {_key(r): r for r in rows}
  panels, seen = [], set()
  for _, name, seed, setting in plan(config):
    if (name, setting) not in seen and (name, seed, setting) in by:
      seen.add((name, setting))
      panels.append(by[(name, seed, setting)])
  if not panels:
    return None

  def draw(subfig, row):
    plotting.best_per_train_grid(
        experiment.load_results(os.path.join(workdir, row["run"])), config.eval.n_show,
        title=(f"{row['victim']} ({row['setting']}, seed {row['seed']}, n = {row['n']}): "
               f"{row['architecture']}"), fig=subfig)
  return plotting.stacked(panels, "DecoReco on each victim: the best-recovered training "
                          "images", draw, config.eval.n_show)


def cells(rows: list[dict], config: ml_collections.ConfigDict) -> list[dict]:
  """One entry per (pair, victim, setting) of ``config`` with rows: {pair, victim,
  setting, rows (its seeds' rows)}, in `plan` order."""
  out = []
  for pair, p in config.pairs.items():
    for name in p.victims:
      for setting in p.settings:
        mine = [r for r in rows if r.get("pair") == pair and _key(r)[0::2] == (name, setting)]
        if mine:
          out.append({"pair": pair, "victim": name, "setting": setting, "rows": mine})
  return out


def _buddies(r: dict) -> int:
  return r["recovered"]["w11_bb"]


def _start_buddies(r: dict) -> int:
  return max(r["start_recovered"]["w11_bb"], r["start_recovered"]["w3_bb"])


def recovers(cell_rows: list[dict]) -> bool:
  """Whether a cell's attack recovered: its best buddies (window 11) exceed its start
  images' (either window) in at least one seed."""
  return any(_buddies(r) > _start_buddies(r) for r in cell_rows)


def label(cell: dict, pair_cells: list[dict]) -> str:
  """What a cell's count says, in words: it recovers; or its zero is uninformative by
  parameter count (p / (d·n) < 1, Iurada et al.); or uninformative since no victim of its
  pair (the same n) recovered at any setting (no positive control); or a negative beside a
  positive control at the same n (naming it)."""
  rs = cell["rows"]
  ratio = rs[0]["ratio"]
  if recovers(rs):
    return "recovers"
  if ratio < 1:
    return f"uninformative by parameter count (p / (d·n) = {ratio:.2g})"
  positive = [c for c in pair_cells if c is not cell and recovers(c["rows"])]
  if not positive:
    return ("uninformative: no victim at this n recovered at any setting (no positive "
            "control)")
  shown = ", ".join(f"{c['victim']} at {c['setting']}" for c in positive)
  return f"a negative beside a positive control at the same n ({shown})"


def _truth(rs: list[dict], value, fmt: str = ".3g") -> str:
  """A truth-diagnostic entry over a cell's seeds; "–" where no run made it."""
  have = [r["truth"] for r in rs if r.get("truth")]
  if not have:
    return "–"
  return spread([value(t) for t in have], fmt) + ("" if len(have) == len(rs) else
                                                   f" ({len(have)} of {len(rs)} seeds)")


def _reached(truth: dict) -> float:
  """The loss the attack reached as the truth diagnostic's verdict compares it: the lower
  of its own (at its λ) and at its final images with λ fitted, a non-finite one left out
  (`trdr.attacks.truth.diagnose`)."""
  values = [truth["loss_reached"], truth.get("loss_reached_lambda_fitted", float("inf"))]
  finite = [v for v in values if v is not None and np.isfinite(v)]
  return min(finite) if finite else float("inf")


def _verdicts(rs: list[dict]) -> str:
  have = [r["truth"]["verdict"] for r in rs if r.get("truth")]
  if not have:
    return "–"
  return ", ".join(f"{v} {have.count(v)}" for v in sorted(set(have)))


def markdown(rows: list[dict], config: ml_collections.ConfigDict, provenance: dict,
             figure_written: bool = True) -> str:
  """The page: what was run, the table per victim and setting (mean [min, max] over
  seeds) with p / (d·n), the truth diagnostic and what each count says, the KKT premise
  per tensor, the figure and the reading; ``provenance`` (`trdr.report.provenance`) in its
  header."""
  level = config.eval.ssim_level
  planned = plan(config)
  by = {_key(r): r for r in rows}
  done = sum((name, seed, setting) in by for _, name, seed, setting in planned)
  c = next(iter(config.victims.values()))
  a = c.attack
  table = cells(rows, config)
  lines = [
      "# DecoReco on convolutional victims beside Haim et al.'s MLP",
      "",
      f"Written by `make cnn` (configs/cnn.py:{config.variant}) on {provenance['machine']}, "
      f"jax {provenance['jax']}, {provenance['utc']}, from cnn.json; do not edit by hand. "
      f"{done} runs of {len(planned)} finished.",
      "",
      "Iurada et al. (ICLR 2026, \"A Law of Data Reconstruction\", arXiv 2509.22214) tie "
      "reconstruction from θ* to p / (d·n): p parameters, d pixel values per image (3,072 "
      "for CIFAR-10), n training images; recovery needs p well above d·n. Each pair below "
      "trains its victims on the same n training images per seed "
      f"({'mean subtracted, ' if c.data.subtract_mean else ''}from {c.data.source}) by "
      f"{_recipe(c.victim)}, and attacks them by DecoReco at the same settings: "
      f"{a.steps:,} iterations on m = {a.candidates_per_image}n candidates from N(0, σ²) "
      "starts, at Haim et al.'s published CIFAR-10 run b9dfyspx (σ, lr, λ_min, α) = "
      f"({a.init_scale:g}, {a.lr:g}, {a.lambda_min:g}, {a.alpha:g}) and, where the pair "
      "says so, at the settings trdr's sweep tuned for that victim and seed (its in-run "
      f"score; {c.sweep.num_settings} settings × {c.sweep.steps:,} iterations, b9dfyspx "
      f"among them), {'float64' if c.float64 else 'float32'}. Pairs: "
      + "; ".join(f"**{pair}**: {', '.join(p.victims)} at "
                  f"n = {2 * config.victims[p.victims[0]].data.n_per_class}, seeds "
                  f"{', '.join(str(s) for s in p.seeds)}, settings {', '.join(p.settings)}"
                  for pair, p in config.pairs.items()) + ".",
      "",
      f"**Recovered**: training images whose best reconstruction has SSIM ≥ {level} (window "
      "11, dm-pix's default, and 3, Haim et al.'s); **best buddies**: the same where the "
      "training image and that reconstruction are each the other's SSIM-nearest; "
      "**start**: the same best-buddy counts for the start images (the baseline: what an "
      "attack that does nothing scores). **Truth diagnostic** (summary.json[\"truth\"], "
      "where the run made it): the attack's own loss at the true training images, λ fitted "
      "(L(x_true)), beside the loss it reached from its starts (the lower of its own λ and "
      "λ fitted, as the verdict compares them); the training images kept "
      "by DecoReco started at the truth; the verdict per seed (\"search\": the truth is "
      "lower and stays, the search failed; \"objective\": the objective does not single out "
      "the truth). **Says**: what the count is evidence of: a zero reads uninformative by "
      "parameter count where p < d·n, and uninformative where no victim at the same n "
      "recovered (no positive control). Each entry: the mean over seeds [min, max].",
      "",
      "| victim | setting | n | p | p / (d·n) | test accuracy | recovered w11 / w3 "
      "| best buddies w11 / w3 | start best buddies w11 / w3 | L(x_true) / loss reached "
      "| truth start kept | verdict | says | victim s | sweep s | attack s |",
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
  ]
  for cell in table:
    rs = cell["rows"]
    pair_cells = [x for x in table if x["pair"] == cell["pair"]]
    lines.append(
        f"| {cell['victim']} | {cell['setting']} | {rs[0]['n']} | {rs[0]['parameters']:,} "
        f"| {rs[0]['ratio']:.2g} | {_over(rs, lambda r: r['test_accuracy'])} | "
        f"{_windows(rs, 'recovered', '')} | {_windows(rs, 'recovered', '_bb')} | "
        f"{_windows(rs, 'start_recovered', '_bb')} | "
        f"{_truth(rs, lambda t: t['loss_at_truth'])} / "
        f"{_truth(rs, _reached)} | "
        f"{_truth(rs, lambda t: t['truth_start']['kept'], '.2g')} | {_verdicts(rs)} | "
        f"{label(cell, pair_cells)} | "
        f"{_over(rs, lambda r: r['victim_seconds'], '.0f')} | "
        f"{_over(rs, lambda r: r.get('sweep_seconds', 0.0), '.0f')} | "
        f"{_over(rs, lambda r: r['attack_seconds'], '.0f')} |")
  tuned = [r for r in rows if r.get("setting") == "tuned" and r.get("hyperparameters")]
  if tuned:
    lines += ["", "The sweep's choice per tuned run (σ, lr, λ_min, α):", ""]
    lines += [f"- {r['victim']}, seed {r['seed']}: ("
              + ", ".join(f"{r['hyperparameters'][k]:.4g}" for k in
                          ("init_scale", "lr", "lambda_min", "alpha")) + ")"
              for r in tuned]
  lines += ["", "The KKT premise per tensor (the unexplained fraction ‖r_t‖²/‖θ*_t‖², "
            "`trdr.victim.kkt`, fitted with the plain ReLU derivative and no λ_min term: "
            "not the attack's own objective, whose value at the truth is the truth "
            "diagnostic's L(x_true) above), at b9dfyspx:", "",
            "| victim | n | tensor | unexplained | residual ‖r‖² |", "|---|---|---|---|---|"]
  for cell in table:
    if cell["setting"] != "b9dfyspx":
      continue
    rs = cell["rows"]
    for k, tensor in enumerate(rs[0]["kkt"]["relative"]):
      tail = spread([r["kkt"]["residual_total"] for r in rs]) if k == 0 else ""
      lines.append(f"| {cell['victim'] if k == 0 else ''} | {rs[0]['n'] if k == 0 else ''} "
                   f"| {tensor} | {spread([r['kkt']['relative'][tensor] for r in rs])} | "
                   f"{tail} |")
  missing = [(name, seed, setting) for _, name, seed, setting in planned
             if (name, seed, setting) not in by]
  if missing:
    lines += ["", "Not run yet (rerun `make cnn`; finished runs are kept): "
              + ", ".join(f"{name} / seed {s} / {setting}" for name, s, setting in missing)
              + "."]
  if figure_written:
    lines += ["", "## Reconstructions", "",
              f"Per victim and setting, the first seed's {config.eval.n_show} best-recovered "
              "training images (grey), each beside its best reconstruction (black), with its "
              f"SSIM (window 11): [{FIGURE}.png]({FIGURE}.png).", "",
              f"![DecoReco on each victim]({FIGURE}.png)"]
  lines += ["", "## Reading", "", reading(rows, config)]
  return "\n".join(lines) + "\n"


def _over(rows: list[dict], value, fmt: str = ".3g") -> str:
  """``value(row)`` over ``rows`` (a cell's seeds): the mean [min, max]."""
  return spread([value(r) for r in rows], fmt)


def _windows(rows: list[dict], field: str, suffix: str) -> str:
  """A count of ``field`` at window 11 / window 3 over ``rows``; ``suffix`` "_bb": best
  buddies."""
  return " / ".join(_over(rows, lambda r, w=w: r[field][w + suffix]) for w in ("w11", "w3"))


def _recipe(v: ml_collections.ConfigDict) -> str:
  """The victims' training in words (the first victim's config; configs/cnn.py gives
  every victim the same)."""
  stop = (f"to the gradient-flow time {v.flow_time:g}" if v.get("flow_time") is not None
          else f"stopped at train loss {v.loss_threshold:g}")
  later = {"pytorch": "PyTorch's default", "flax": "Flax's default"}.get(v.later_init,
                                                                         v.later_init)
  return (f"full-batch gradient descent on {v.loss.upper()} at lr {v.lr:g}, {stop}, "
          f"{'a bias in every layer' if v.all_biases else 'a bias in the first layer only'}"
          f", the first layer N(0, 1e-8) and the later layers at {later} (Haim et al.'s "
          "recipe for their MLP)")


def reading(rows: list[dict], config: ml_collections.ConfigDict) -> str:
  """What the rows say, per cell (victim and setting) and from its own rows only: its
  best buddies beside its start images', p / (d·n), what its count is evidence of
  (`label`: a zero is uninformative unless a victim at the same n recovered), and the truth
  diagnostic's verdicts where the runs made them. No count is compared across victims
  whose measured power differs."""
  table = cells(rows, config)
  if not table:
    return "No run finished yet."
  level = config.eval.ssim_level
  out, diagnosed = [], False
  for pair in config.pairs:
    pair_cells = [c for c in table if c["pair"] == pair]
    if not pair_cells:
      continue
    n = pair_cells[0]["rows"][0]["n"]
    parts = []
    for cell in pair_cells:
      rs = cell["rows"]
      k = len(rs)
      says = label(cell, pair_cells)
      text = (f"the {cell['victim']} at {cell['setting']} (p = {rs[0]['parameters']:,}, "
              f"p / (d·n) = {rs[0]['ratio']:.2g}) yields {_over(rs, _buddies, '.2g')} best "
              f"buddies (window 11, SSIM ≥ {level}; the start images "
              f"{_over(rs, _start_buddies, '.2g')}) over {k} seed{'s' if k > 1 else ''}: "
              f"{says}")
      verdicts = [r["truth"]["verdict"] for r in rs if r.get("truth")]
      if verdicts:
        lower = sum(truth.start_lower(r["truth"]) for r in rs if r.get("truth"))
        text += (f" (truth diagnostic: \"search\" in {verdicts.count('search')}, "
                 f"\"objective\" in {verdicts.count('objective')} of {len(verdicts)} seeds"
                 + (f"; on {lower} the attack started at the training images ends below the "
                    "loss its search reached and keeps at least half: a lower point beside "
                    "the truth that the search missed" if lower else "") + ")")
        diagnosed = True
      parts.append(text)
    out.append(f"Pair {pair} (n = {n}): " + "; ".join(parts) + ".")
  if diagnosed:
    out.append("The truth diagnostic's \"search\": the attack's loss at the true training "
               "images is below the loss it reached and DecoReco started there keeps them (the "
               "search failed); \"objective\": it is not, or the truth drifts away (the "
               "objective does not single out the truth).")
  out.append("A count at or below its start images' is not evidence that a victim's "
             "training images are safe from reconstruction: it reads uninformative where "
             "p < d·n or where no victim at the same n recovered, and even beside a "
             "positive control it measures this attack at these settings only.")
  return " ".join(out)
