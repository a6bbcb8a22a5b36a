"""DecoReco on a convolutional victim beside Haim et al.'s MLP: what the attack recovers from
each, and how near each θ* is to the KKT point it assumes.

Haim et al. (2022) reconstruct from MLPs; Buzaglo et al. (2023) report reconstructions from
convolutional networks too. `run` trains, per seed, the CNN and the MLP of
configs/cnn.py on the same training images by the same gradient-descent recipe and attacks
both by DecoReco (Haim et al.'s eq. 3, `trdr.attacks.decoreco`) at the same n, m,
iterations and settings. Per victim and seed it records the training images recovered
(SSIM ≥ the config's level, windows 11 and 3, SSIM-nearest and best buddies) beside the same
count for the start images, the KKT premise of θ* (`trdr.victim.kkt`, per tensor, from the
run's summary.json), the test accuracy and the seconds. `markdown` writes the page (the
mean [min, max] over seeds per victim, and a reading computed from the rows), `figure` the
training images beside their best reconstructions.

Rows are written to WORKDIR/cnn.json as each run finishes; a rerun skips those there (a long
run never loses finished work). Each run is a `trdr.experiment` run in
WORKDIR/runs/<victim>_seed<seed>/ (`experiment.run_or_reuse`: resumed when interrupted).
"""

import os

import jax
import matplotlib.figure
import ml_collections
import numpy as np
from absl import logging

from trdr import experiment, models, plotting, victim
from trdr.runtime import files, rundir
from trdr.studies.victim_recipe import spread, summary_counts

ROWS_FILE = "cnn.json"
FIGURE = "cnn"


def _key(row: dict) -> tuple:
  return row["victim"], row["seed"]


def run_config(config: ml_collections.ConfigDict, name: str, seed: int
               ) -> ml_collections.ConfigDict:
  """The DecoReco experiment config of victim ``name`` (a key of ``config.victims``) at
  ``seed``: every seed of it (the data draw, θ0, the attack's starts) set to ``seed``.

  Raises:
    ValueError: ``name`` is not a victim of ``config``.
  """
  if name not in config.victims:
    raise ValueError(f"unknown victim {name!r}; configs/cnn.py has {list(config.victims)}")
  c = config.victims[name].copy_and_resolve_references()
  c.seed = c.data.seed = c.victim.seed = int(seed)
  return c


def check_same_setting(config: ml_collections.ConfigDict) -> None:
  """The victims differ in their architecture alone: the same data, precision, training
  recipe and attack (what makes their counts comparable).

  Raises:
    ValueError: fewer than two victims, or two that differ elsewhere (naming the keys).
  """
  names = list(config.victims)
  if len(names) < 2:
    raise ValueError(f"configs/cnn.py compares victims: need two or more, got {names}")

  def setting(name):
    c = config.victims[name].to_dict()
    own = {"arch", *models.MODEL_FIELDS.get(c["victim"]["arch"], ())}
    c["victim"] = {k: v for k, v in c["victim"].items() if k not in own}
    return c
  for name in names[1:]:
    if change := rundir.config_change(setting(names[0]), setting(name), shown=6):
      raise ValueError(f"victims {names[0]!r} and {name!r} of configs/cnn.py differ beyond "
                       f"their architecture ({change}): set both alike")


def run_dir(workdir: str, name: str, seed: int) -> str:
  """The `trdr.experiment` run of victim ``name`` at ``seed``."""
  return os.path.join(workdir, "runs", f"{name}_seed{seed}")


def run(config: ml_collections.ConfigDict, workdir: str) -> list[dict]:
  """Every (seed, victim) run of ``config`` (configs/cnn.py), finished rows reused.

  Returns:
    The rows {victim, seed, arch, architecture (words), parameters (θ's entries), n,
    candidates, steps, train_accuracy, test_accuracy (the victim's on the test split),
    epochs, kkt (`trdr.victim.kkt.KKTFit.to_json`: relative, residual, norm per tensor,
    relative_total, residual_total, first_layer, positive, n, form), recovered and
    start_recovered ({"w11", "w3", "w11_bb", "w3_bb"}: training images whose best
    reconstruction, resp. start image, has SSIM ≥ config.eval.ssim_level; "_bb": best
    buddies), final_loss, victim_seconds (θ*'s training), attack_seconds,
    evaluation_seconds, run (the run directory, relative to ``workdir``)}, of
    ``config.seeds`` × ``config.victims`` in that order; WORKDIR/cnn.json keeps every row
    run there (a seed dropped from the config stays, and returns when added back).
  Raises:
    FileExistsError: ``workdir`` holds rows of other settings (all but the seeds, which may
      grow), or a run directory there holds a finished run of another config.
    ValueError: the victims differ beyond their architecture (`check_same_setting`), or a
      victim's config is not a DecoReco run that counts at config.eval.ssim_level with
      windows 11 and 3 (`summary_counts`).
  """
  check_same_setting(config)
  path, rows = rundir.study_rows(workdir, config, ROWS_FILE)
  done = {_key(r) for r in rows}
  for seed in config.seeds:
    for name in config.victims:
      if (name, int(seed)) in done:
        continue
      c = run_config(config, name, seed)
      directory = run_dir(workdir, name, int(seed))
      with jax.enable_x64(bool(c.float64)):
        experiment.run_or_reuse("attack", c, directory)
      row = {"victim": name, "seed": int(seed),
             **_row(c, directory, config.eval.ssim_level),
             "run": os.path.relpath(directory, workdir)}
      logging.info("cnn study %s, seed %d: recovered %s, start %s, test accuracy %.3f, "
                   "%.0f s", name, seed, row["recovered"], row["start_recovered"],
                   row["test_accuracy"], row["victim_seconds"] + row["attack_seconds"])
      rows.append(row)
      done.add(_key(row))
      files.write_json(path, rows)
  order = {(n, int(s)): i for i, (s, n) in enumerate(
      (s, n) for s in config.seeds for n in config.victims)}
  return sorted((r for r in rows if _key(r) in order), key=lambda r: order[_key(r)])


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
  return {"arch": c.victim.arch, "architecture": describe(c.victim),
          "parameters": parameter_count(c, image_shape),
          "n": summary["n_train"], "candidates": summary["candidates"],
          "steps": summary["steps"], "train_accuracy": report["train_accuracy"],
          "test_accuracy": report["test_accuracy"], "epochs": report.get("epochs"),
          "kkt": summary["kkt_premise"], **summary_counts(summary, level),
          "final_loss": summary["final_loss"],
          # θ*'s training, as saved with it (a resumed run's phase_seconds would say 0)
          "victim_seconds": float(saved.get("train_seconds", phases.get("victim", 0.0))),
          "attack_seconds": summary["attack_seconds"],
          "evaluation_seconds": phases.get("evaluation", float("nan"))}


def figure(rows: list[dict], workdir: str, config: ml_collections.ConfigDict
           ) -> matplotlib.figure.Figure | None:
  """The first seed with every victim finished: per victim, its training images (black)
  beside their best reconstruction (grey), best first (`plotting.best_per_train_grid`);
  None before such a seed exists."""
  for seed in config.seeds:
    mine = [r for r in rows if r["seed"] == int(seed)]
    if {r["victim"] for r in mine} >= set(config.victims):
      break
  else:
    return None
  panels = [next(r for r in mine if r["victim"] == name) for name in config.victims]

  def draw(subfig, row):
    plotting.best_per_train_grid(
        experiment.load_results(os.path.join(workdir, row["run"])), config.eval.n_show,
        title=f"{row['victim']}: {row['architecture']}", fig=subfig)
  return plotting.stacked(panels, f"DecoReco on each victim, seed {seed}: the best-recovered "
                          "training images", draw, config.eval.n_show)


def markdown(rows: list[dict], config: ml_collections.ConfigDict, provenance: dict,
             figure_written: bool = True) -> str:
  """The page: what was run, the table per victim (mean [min, max] over seeds), the KKT
  premise per tensor, the figure and the reading; ``provenance`` (`trdr.report.provenance`)
  in its header."""
  level = config.eval.ssim_level
  runs = len(config.seeds) * len(config.victims)
  first = {name: next((r for r in rows if r["victim"] == name), None)
           for name in config.victims}
  c = next(iter(config.victims.values()))
  a = c.attack
  n = next((r["n"] for r in rows), 2 * c.data.n_per_class)
  lines = [
      "# DecoReco on a convolutional victim beside Haim et al.'s MLP",
      "",
      f"Written by `make cnn` (configs/cnn.py:{config.variant}) on {provenance['machine']}, "
      f"jax {provenance['jax']}, {provenance['utc']}, from cnn.json; do not edit by hand. "
      f"{len(rows)} runs of {runs} ({len(config.seeds)} seed"
      f"{'s' if len(config.seeds) > 1 else ''}) finished.",
      "",
      f"Per seed, both victims are trained on the same n = {n} training images "
      f"({'mean subtracted, ' if c.data.subtract_mean else ''}from {c.data.source}) by "
      f"{_recipe(c.victim)}. Both are attacked by DecoReco "
      f"at the same settings: {a.steps:,} iterations on m = {a.candidates_per_image * n} "
      f"candidates from N(0, σ²) starts, (σ, lr, λ_min, α) = ({a.init_scale:g}, {a.lr:g}, "
      f"{a.lambda_min:g}, {a.alpha:g}) (Haim et al.'s published CIFAR-10 run), "
      f"{'float64' if c.float64 else 'float32'}. The victims: "
      + "; ".join(f"**{name}**: {r['architecture']}, {r['parameters']:,} parameters"
                  for name, r in first.items() if r is not None) + ".",
      "",
      f"**Recovered**: training images whose best reconstruction has SSIM ≥ {level} (window "
      "11, dm-pix's default, and 3, Haim et al.'s); **best buddies**: the same where the "
      "training image and that reconstruction are each the other's SSIM-nearest; "
      "**start**: the same counts for the start images (the baseline: what an attack that "
      "does nothing scores). **KKT unexplained**: ‖r_t‖²/‖θ*_t‖², the part of θ* that no "
      "non-negative combination of the true training images' gradients explains "
      "(`trdr.victim.kkt`; DecoReco's premise is 0), for the first layer's kernel, where "
      "the images enter, and for the whole θ*. Each entry: the mean over seeds [min, max].",
      "",
      "| victim | test accuracy | recovered w11 / w3 | best buddies w11 / w3 | start w11 / w3 "
      "| start best buddies w11 / w3 | KKT unexplained: first layer / whole θ* | "
      "victim s | attack s |",
      "|---|---|---|---|---|---|---|---|---|",
  ]
  for name in config.victims:
    rs = [r for r in rows if r["victim"] == name]
    if not rs:
      continue
    lines.append(
        f"| {name} | {_over(rs, lambda r: r['test_accuracy'])} | "
        f"{_windows(rs, 'recovered', '')} | {_windows(rs, 'recovered', '_bb')} | "
        f"{_windows(rs, 'start_recovered', '')} | {_windows(rs, 'start_recovered', '_bb')} | "
        f"{_over(rs, lambda r: r['kkt']['relative'][r['kkt']['first_layer']])} / "
        f"{_over(rs, lambda r: r['kkt']['relative_total'])} | "
        f"{_over(rs, lambda r: r['victim_seconds'], '.0f')} | "
        f"{_over(rs, lambda r: r['attack_seconds'], '.0f')} |")
  lines += ["", "The KKT premise per tensor (the unexplained fraction ‖r_t‖²/‖θ*_t‖²; the "
            "residual floor ‖r‖² is DecoReco's loss at the true training images, beside the "
            "attack's final loss from its starts):", "",
            "| victim | " + "tensor | unexplained | " + "floor ‖r‖² | attack's final loss |",
            "|---|---|---|---|---|"]
  for name in config.victims:
    rs = [r for r in rows if r["victim"] == name]
    if not rs:
      continue
    for k, tensor in enumerate(rs[0]["kkt"]["relative"]):
      tail = (f"{spread([r['kkt']['residual_total'] for r in rs])} | "
              f"{spread([r['final_loss'] for r in rs])}" if k == 0 else " | ")
      lines.append(f"| {name if k == 0 else ''} | {tensor} | "
                   f"{spread([r['kkt']['relative'][tensor] for r in rs])} | {tail} |")
  missing = [(s, name) for s in config.seeds for name in config.victims
             if not any(_key(r) == (name, int(s)) for r in rows)]
  if missing:
    lines += ["", "Not run yet (rerun `make cnn`; finished runs are kept): "
              + ", ".join(f"{name} / seed {s}" for s, name in missing) + "."]
  if figure_written:
    lines += ["", "## Reconstructions", "",
              f"The first seed's {config.eval.n_show} best-recovered training images of "
              "each victim (black), each beside its best reconstruction (grey), with its "
              f"SSIM (window 11): [{FIGURE}.png]({FIGURE}.png).", "",
              f"![DecoReco on each victim]({FIGURE}.png)"]
  lines += ["", "## Reading", "", reading(rows, config)]
  return "\n".join(lines) + "\n"


def _over(rows: list[dict], value, fmt: str = ".3g") -> str:
  """``value(row)`` over ``rows`` (a victim's seeds): the mean [min, max]."""
  return spread([value(r) for r in rows], fmt)


def _windows(rows: list[dict], field: str, suffix: str) -> str:
  """A count of ``field`` at window 11 / window 3 over ``rows``; ``suffix`` "_bb": best
  buddies."""
  return " / ".join(_over(rows, lambda r, w=w: r[field][w + suffix]) for w in ("w11", "w3"))


def _recipe(v: ml_collections.ConfigDict) -> str:
  """The victims' training in words (the first victim's config; configs/cnn.py gives
  both the same)."""
  stop = (f"to the gradient-flow time {v.flow_time:g}" if v.get("flow_time") is not None
          else f"stopped at train loss {v.loss_threshold:g}")
  later = {"pytorch": "PyTorch's default", "flax": "Flax's default"}.get(v.later_init,
                                                                         v.later_init)
  return (f"full-batch gradient descent on {v.loss.upper()} at lr {v.lr:g}, {stop}, "
          f"{'a bias in every layer' if v.all_biases else 'a bias in the first layer only'}"
          f", the first layer N(0, 1e-8) and the later layers at {later} (Haim et al.'s "
          "recipe for their MLP)")


def reading(rows: list[dict], config: ml_collections.ConfigDict) -> str:
  """The comparison, computed from the rows (per seed, paired), stated as measured."""
  names = list(config.victims)
  if len(names) != 2:
    return "No pair of victims to compare."
  one, other = names
  pairs = []
  for seed in config.seeds:
    by = {r["victim"]: r for r in rows if r["seed"] == int(seed)}
    if {one, other} <= set(by):
      pairs.append(by)
  if not pairs:
    return "No seed with both victims finished yet."
  s = "s" if len(pairs) > 1 else ""
  buddies = lambda r: r["recovered"]["w11_bb"]
  more = sum(buddies(p[one]) > buddies(p[other]) for p in pairs)
  fewer = sum(buddies(p[one]) < buddies(p[other]) for p in pairs)
  mean = lambda v, f: float(np.mean([f(p[v]) for p in pairs]))
  first = lambda r: r["kkt"]["relative"][r["kkt"]["first_layer"]]
  start = max(max(p[v]["start_recovered"]["w11_bb"], p[v]["start_recovered"]["w3_bb"])
              for p in pairs for v in (one, other))
  nearer = mean(one, first) < mean(other, first)
  below = lambda v: sum(p[v]["final_loss"] < p[v]["kkt"]["residual_total"] for p in pairs)
  gap = lambda r: (r["kkt"]["residual_total"] - r["final_loss"]) / r["kkt"]["residual_total"]
  return " ".join([
      f"Over {len(pairs)} seed{s} with both victims, the {one} yields more best buddies "
      f"(window 11, SSIM ≥ {config.eval.ssim_level}) than the {other} in {more}, fewer in "
      f"{fewer} and as many in {len(pairs) - more - fewer}; means {mean(one, buddies):.1f} "
      f"and {mean(other, buddies):.1f} of n = {pairs[0][one]['n']} (SSIM-nearest, window "
      f"11: {mean(one, lambda r: r['recovered']['w11']):.1f} and "
      f"{mean(other, lambda r: r['recovered']['w11']):.1f}).",
      f"The start images reach at most {start} best buddies at either window in any run.",
      f"The first layer's unexplained KKT fraction is {mean(one, first):.3f} for the {one} "
      f"and {mean(other, first):.3f} for the {other} (means): the {one}'s θ* is "
      f"{'nearer to' if nearer else 'no nearer to'} the KKT point DecoReco assumes where "
      "the images enter.",
      f"DecoReco's final loss from its starts lies below the floor (its value at the true "
      f"training images, λ fitted) in {below(one)} of {len(pairs)} seed{s} for the {one} "
      f"and {below(other)} for the {other} (mean relative gap (floor − final) / floor "
      f"{mean(one, gap):.3g} and {mean(other, gap):.3g}): with m = "
      f"{pairs[0][one]['candidates']} candidates for n = {pairs[0][one]['n']} images, a "
      "loss below the floor is reachable without the training images, so the loss alone "
      "does not tell a reconstruction from a fit elsewhere.",
      f"Test accuracy: {mean(one, lambda r: r['test_accuracy']):.3f} ({one}) and "
      f"{mean(other, lambda r: r['test_accuracy']):.3f} ({other})."])
