"""The numbers behind the report's verdicts, read from the runs: each artefact's records,
summaries and per-image arrays beside their start images' (the baseline), the same runs
repeated over seeds, both attacks' landscapes on one scale, and the counts table.
"""

import os

import ml_collections
import numpy as np

from trdr import experiment
from trdr.attacks import init as inits
from trdr.evaluation import evaluate, haim_match, records
from trdr.evaluation.evaluate import START
from trdr.report import artefacts
from trdr.report.runs import LANDSCAPE_ATTACKS, VICTIMS
from trdr.runtime import files

# The one display both attacks' landscapes are compared under (Figs. 10–12's claims compare
# the attacks): Haim et al.'s min-max view; an attack's images shown otherwise are rescored.
COMPARABLE_DISPLAY = "minmax"


# The runs that can be repeated for every seed of the report's ``repeat_seeds`` (the data
# draw, the victim's initialisation and the attack's start: config.data.seed =
# config.victim.seed = config.seed = s), into WORKDIR/seeds/seed_{s}/, as the report's
# ``repeat_runs`` choose: the numbers of Figs. 1–9 and Table 1 as mean ± std over seeds.
# The sweep is not repeated (seed 0's best.json sets every seed's DecoReco runs), nor are
# the two landscapes (minutes to hours).
SEED_RUNS = ("affine", "one_hidden", "untuned", "tuned", "partition")

# The DecoReco attack runs (Figs. 5–9) and every run whose reconstructions `collect` reads
# (keys of `trdr.report.artefacts.RUNS`): the victims' landscapes, those runs, and both
# attacks' landscapes (Figs. 10–12).
DECORECO_RUNS = ("untuned", "tuned", "partition")
COLLECTED_RUNS = (*VICTIMS, *DECORECO_RUNS, *(f"landscape_{a}" for a in LANDSCAPE_ATTACKS))


def make_seeds(config: ml_collections.ConfigDict, workdir: str) -> list[str]:
  """Runs (or reuses) ``config.repeat_runs`` (of `SEED_RUNS`) for every seed of
  ``config.repeat_seeds`` and writes each seed's table1.json (with both victims' runs);
  needs the main runs' sweep (`trdr.report.artefacts.make`) for the DecoReco runs.
  Returns the seeds' work dirs.

  Raises:
    ValueError: a seed is 0 or repeated, or a run is not in `SEED_RUNS`.
  """
  seeds, names = tuple(config.repeat_seeds), tuple(config.repeat_runs)
  if any(not isinstance(s, int) or s == 0 for s in seeds) or len(set(seeds)) != len(seeds):
    raise ValueError(f"repeat_seeds must be distinct ints other than 0 (the main runs' "
                     f"seed), got {seeds}")
  if set(names) - set(SEED_RUNS):
    raise ValueError(f"repeat_runs {names} may name only {SEED_RUNS}")
  sweep = os.path.join(artefacts.run_dir(workdir, "sweep"), experiment.BEST_FILE)
  dirs = []
  for seed in seeds:
    directory = artefacts.seed_workdir(workdir, seed)
    configs = artefacts.run_configs(config, directory)
    runs = {name: artefacts.run_dir(directory, name) for name in names}
    for name in names:
      c = artefacts.seed_config(configs[name], seed)
      if "hparams_file" in c.attack and c.attack.hparams_file:
        c.attack.hparams_file = sweep
      experiment.run_or_reuse(artefacts.RUNS[name][1], c, runs[name])
    if {"affine", "one_hidden"} <= set(names):
      files.write_json(os.path.join(directory, "paper_figures", "table1.json"),
                       artefacts.table1(runs, config)["table1.json"])
    dirs.append(directory)
  return dirs


def collect(workdir: str, repeats: bool = False) -> dict:
  """The numbers behind every verdict, read from the runs under ``workdir``, with the
  start images' numbers beside them (prefix `trdr.evaluation.evaluate.START`, the baseline).

  Args:
    workdir: the report's work directory, or with ``repeats`` a seed's
      (`artefacts.seed_workdir`), which holds some of `SEED_RUNS`.

  Returns:
    {"pure": {victim: records}, "partition_images": {victim: per-reconstruction arrays
     of its partition start}, "table1": table1.json, "summaries": {run: summary.json},
     "results": {run: {key: array}} for the untuned / tuned / partition DecoReco runs,
     "landscapes": {attack: records} of `artefacts.LANDSCAPE_ATTACKS` (each its own scale),
     "comparable": the same on one scale (`comparable_records`)}; with ``repeats`` only
    the parts the finished runs give (a seed's, or `make figN`'s before the others ran).
  Raises:
    ValueError: a run predates the start images' evaluation (delete it to recompute).
  """
  per_image = ("train_ssim", "partition_ssim", "train_l2", "partition_l2", "partition_index")
  per_train = ("best_ssim_per_train", "best_buddy_ssim_per_train")
  run = lambda name, file: os.path.join(artefacts.run_dir(workdir, name), file)
  arrays = lambda name, names, index=(): artefacts.run_arrays(
      artefacts.run_dir(workdir, name), names, index)

  done = lambda name: not repeats or artefacts.finished(workdir, name)
  pure = {v: files.read_json(run(v, "landscape.json")) for v in VICTIMS if done(v)}
  attack_runs = [n for n in DECORECO_RUNS if done(n)]
  evidence = {
      "pure": pure,
      "partition_images": {v: arrays(v, per_image, inits.pure_index(pure[v], "partition"))
                           for v in pure},
      "summaries": {name: files.read_json(run(name, "summary.json")) for name in attack_runs},
      "results": {name: arrays(name, (*per_image, *per_train, "public_ssim", "train_index"))
                  for name in attack_runs},
  }
  table = os.path.join(workdir, "paper_figures", "table1.json")
  if os.path.exists(table) or not repeats:
    evidence["table1"] = files.read_json(table)
  if not repeats or all(artefacts.finished(workdir, f"landscape_{a}")
                        for a in LANDSCAPE_ATTACKS):
    evidence["landscapes"] = {a: files.read_json(run(f"landscape_{a}", "landscape.json"))
                              for a in LANDSCAPE_ATTACKS}
    evidence["comparable"] = {a: comparable_records(artefacts.run_dir(workdir, f"landscape_{a}"))
                              for a in LANDSCAPE_ATTACKS}
  return evidence


def collect_with_repeats(workdir: str, seed_dirs) -> tuple[dict, list[dict]]:
  """`collect` of the report's runs and of each seed's repeats (``seed_dirs``, in the
  report's seed order), the main evidence carrying the repeats' per-image arrays as
  "seeds" (the runs that Figs. 7 and 9 pool: `trdr.report.claims`).

  Returns:
    (the main evidence with "seeds": [each seed's "results"], [each seed's evidence]).
  """
  seeds = [collect(d, repeats=True) for d in seed_dirs]
  return collect(workdir) | {"seeds": [s["results"] for s in seeds]}, seeds


def over_seeds(per_seed: list[dict], seeds) -> dict:
  """Each artefact's verdict per seed and its measured numbers' mean and std over seeds.

  Args:
    per_seed: `trdr.report.claims.verdicts` output per seed (the main runs' first).
    seeds: the seeds, in the same order.
  Returns:
    artefact -> {"seeds", "verdicts", "mean", "std" (ddof 1; NaN for one seed), "lists"},
    for the artefacts every seed has; numbers are the scalar (not boolean) measured
    values every seed has (a "not tested" seed measures less), "lists" each list-valued
    one per seed (e.g. Fig. 6's quiz ranks).
  """
  out = {}
  for name, first in per_seed[0].items():
    if not all(name in p for p in per_seed):
      continue
    shared = [k for k in first["measured"] if all(k in p[name]["measured"] for p in per_seed)]
    keys = [k for k in shared if isinstance(x := first["measured"][k], (int, float, np.number))
            and not isinstance(x, (bool, np.bool_))]
    values = {k: np.asarray([p[name]["measured"][k] for p in per_seed], np.float64)
              for k in keys}
    out[name] = {"seeds": [int(s) for s in seeds],
                 "verdicts": [p[name]["verdict"] for p in per_seed],
                 "mean": {k: float(np.mean(v)) for k, v in values.items()},
                 "std": {k: float(np.std(v, ddof=1)) if v.size > 1 else float("nan")
                         for k, v in values.items()},
                 "lists": {k: [p[name]["measured"][k] for p in per_seed]
                           for k in shared if isinstance(first["measured"][k], list)}}
  return out


def comparable_records(run_dir: str) -> list[dict]:
  """A landscape run's records on the scale both attacks share (`COMPARABLE_DISPLAY`):
  its own records where it was scored so, else its saved images scored again
  (`trdr.evaluation.evaluate.rescored`)."""
  with experiment.load_results(run_dir) as saved:
    results = dict(saved)
  if str(results["display"]) == COMPARABLE_DISPLAY:
    return files.read_json(os.path.join(run_dir, "landscape.json"))
  return records.grid_records(results["lambda1"], results["lambda2"], None,
                               evaluate.rescored(results, COMPARABLE_DISPLAY))


def counts(summaries: dict) -> list[dict]:
  """Training images reconstructed by each DecoReco run on both scales: SSIM-nearest
  reconstruction vs Haim et al.'s best buddies, at every SSIM window the run counted with
  (`trdr.evaluation.evaluate.reconstructions`), and, where the run set eval.haim_protocol, Haim
  et al.'s whole protocol (`trdr.evaluation.haim_match.protocol`: window 3), beside the same
  counts of its start images.

  Returns:
    Rows {run, matching, window, counts: {"ssim_ge_t": int}, start: {...}, n_train}.
  """
  rows = []
  for name, summary in summaries.items():
    window = summary.get("ssim_window", evaluate.SSIM_WINDOW)
    for key in summary:
      if key == "reconstructed_haim" and summary[key] is not None:
        rows.append({"run": name, "window": haim_match.KORNIA_WINDOW,
                     "matching": "Haim et al.'s protocol (NCC match, kornia SSIM)",
                     "counts": summary[key], "start": summary[START + key],
                     "n_train": summary["n_train"]})
        continue
      base, _, suffix = key.partition("_w")
      if base not in ("reconstructed", "reconstructed_best_buddies"):
        continue
      rows.append({"run": name, "window": int(suffix) if suffix else window,
                   "matching": "best buddies (NCC)" if base.endswith("buddies")
                   else "SSIM-nearest", "counts": summary[key],
                   "start": summary[START + key], "n_train": summary["n_train"]})
  return sorted(rows, key=lambda r: (list(summaries).index(r["run"]), r["matching"],
                                     -r["window"]))
