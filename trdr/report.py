"""The reproduction report: every figure and Table 1 beside the paper's claim, with a verdict.

`run` regenerates Figs. 1–12 and Table 1 (`trdr.paper.make`, into WORKDIR/paper_figures
and WORKDIR/decoreco_figures; finished runs of an unchanged config are reused), reads the
numbers behind every verdict (`collect`), applies the rules of `trdr.verdicts`, measures
membership ambiguity (`trdr.membership`) and writes WORKDIR/report.md, report.json and
membership.{png,pdf}.
"""

import os

import ml_collections
import numpy as np

from trdr import evaluate, experiment, io, membership, paper, plotting, records, report_figures
from trdr import verdicts
from trdr.attacks import init as inits
from trdr.evaluate import START
from trdr.verdicts import ATTACKS, RULES, VICTIMS

ARTEFACTS = ("fig1", "fig2", "fig3", "fig4", "table1", "fig5", "fig6", "fig7", "fig8",
             "fig9", "fig10", "fig11", "fig12")
# Artefact -> image files (relative to the report's work dir).
IMAGES = {
    **{f"fig{i}": [f"paper_figures/fig{i}.png"] for i in range(1, 5)},
    **{f"fig{i}": [f"decoreco_figures/fig{i}.png"] for i in range(5, 13)},
    "table1": [],
}
IMAGES["fig7"].append("decoreco_figures/fig7_ssim_vs_output.png")
IMAGES["fig9"].append("decoreco_figures/trajectories.png")
# The one display both attacks' landscapes are compared under (Figs. 10–12's claims compare
# the attacks): Haim et al.'s min-max view, DecoReco's own; bilevel images are rescored.
COMPARABLE_DISPLAY = "minmax"


# The runs that can be repeated for every seed of the report's ``repeat_seeds`` (the data
# draw, the victim's initialisation and the attack's start: config.data.seed =
# config.victim.seed = config.seed = s), into WORKDIR/seeds/seed_{s}/, as the report's
# ``repeat_runs`` choose: the numbers of Figs. 1–4, 6–9 and Table 1 as mean ± std over
# seeds. The sweep is not repeated (seed 0's best.json sets every seed's tuned and
# partition runs), nor are the untuned run and the two landscapes (minutes to hours).
SEED_RUNS = ("affine", "one_hidden", "tuned", "partition")


def seed_workdir(workdir: str, seed: int) -> str:
  """The work directory of seed ``seed``'s repeats (`SEED_RUNS`)."""
  return os.path.join(workdir, "seeds", f"seed_{seed}")


def make_seeds(config: ml_collections.ConfigDict, workdir: str) -> list[str]:
  """Runs (or reuses) ``config.repeat_runs`` (of `SEED_RUNS`) for every seed of
  ``config.repeat_seeds`` and writes each seed's table1.json (with both victims' runs);
  needs the main runs' sweep (`trdr.paper.make`) for the DecoReco runs. Returns the seeds'
  work dirs.

  Raises:
    ValueError: a seed is 0 or repeated, or a run is not in `SEED_RUNS`.
  """
  seeds = tuple(config.get("repeat_seeds", ()))
  names = tuple(config.get("repeat_runs", SEED_RUNS))
  if any(not isinstance(s, int) or s == 0 for s in seeds) or len(set(seeds)) != len(seeds):
    raise ValueError(f"repeat_seeds must be distinct ints other than 0 (the main runs' "
                     f"seed), got {seeds}")
  if set(names) - set(SEED_RUNS):
    raise ValueError(f"repeat_runs {names} may name only {SEED_RUNS}")
  sweep = os.path.join(paper.run_dir(workdir, "sweep"), experiment.BEST_FILE)
  dirs = []
  for seed in seeds:
    directory = seed_workdir(workdir, seed)
    configs = paper.run_configs(config, directory)
    runs = {name: paper.run_dir(directory, name) for name in names}
    for name in names:
      c = configs[name]
      c.seed = c.data.seed = c.victim.seed = int(seed)
      if "hparams_file" in c.attack and c.attack.hparams_file:
        c.attack.hparams_file = sweep
      paper.run_or_reuse(paper.RUNS[name][1], c, runs[name])
    if {"affine", "one_hidden"} <= set(names):
      io.write_json(os.path.join(directory, "paper_figures", "table1.json"),
                    paper.table1(runs, config)["table1.json"])
    dirs.append(directory)
  return dirs


def collect(workdir: str, repeats: bool = False) -> dict:
  """The numbers behind every verdict, read from the runs under ``workdir``, with the
  start images' numbers beside them (prefix `trdr.evaluate.START`, the baseline).

  Args:
    workdir: the report's work directory, or with ``repeats`` a seed's
      (`seed_workdir`), which holds some of `SEED_RUNS`.

  Returns:
    {"pure": {victim: records}, "partition_images": {victim: per-reconstruction arrays
     of its partition start}, "table1": table1.json, "summaries": {run: summary.json},
     "results": {run: {key: array}} for the untuned / tuned / partition DecoReco runs,
     "landscapes": {"bilevel": records, "decoreco": records} (each attack's own scale),
     "comparable": the same on one scale (`comparable_records`)}; with ``repeats`` only
    the parts the seed's runs give (no untuned run, no landscapes).
  Raises:
    ValueError: a run predates the start images' evaluation (delete it to recompute).
  """
  per_image = ("train_ssim", "partition_ssim", "train_l2", "partition_l2", "partition_index")
  per_train = ("best_ssim_per_train", "best_buddy_ssim_per_train")
  run = lambda name, file: os.path.join(paper.run_dir(workdir, name), file)

  def arrays(name, names, index=()):
    """Run ``name``'s results.npz arrays ``names`` and their start twins (at grid point
    ``index``), and phi_train where saved."""
    keys = (*names, *(START + k for k in names))
    path = run(name, "results.npz")
    with np.load(path) as saved:
      missing = [k for k in keys if k not in saved]
      if missing:
        raise ValueError(f"{path} lacks {missing}: the run predates the evaluation of its "
                         "start images; delete its directory to recompute it")
      return {k: saved[k][index] for k in keys} | (
          {"phi_train": saved["phi_train"]} if "phi_train" in saved else {})

  done = lambda name: not repeats or paper.finished(workdir, name)
  pure = {v: io.read_json(run(v, "landscape.json")) for v in VICTIMS if done(v)}
  decoreco = [n for n in ("untuned", "tuned", "partition") if done(n)]
  evidence = {
      "pure": pure,
      "partition_images": {v: arrays(v, per_image, inits.pure_index(pure[v], "partition"))
                           for v in pure},
      "summaries": {name: io.read_json(run(name, "summary.json")) for name in decoreco},
      "results": {name: arrays(name, (*per_image, *per_train, "public_ssim", "train_index"))
                  for name in decoreco},
  }
  table = os.path.join(workdir, "paper_figures", "table1.json")
  if os.path.exists(table) or not repeats:
    evidence["table1"] = io.read_json(table)
  if not repeats:
    evidence["landscapes"] = {a: io.read_json(run(f"landscape_{a}", "landscape.json"))
                              for a in ATTACKS}
    evidence["comparable"] = {a: comparable_records(paper.run_dir(workdir, f"landscape_{a}"))
                              for a in ATTACKS}
  return evidence


def over_seeds(per_seed: list[dict], seeds) -> dict:
  """Each artefact's verdict per seed and its measured numbers' mean and std over seeds.

  Args:
    per_seed: `trdr.verdicts.verdicts` output per seed (the main runs' first).
    seeds: the seeds, in the same order.
  Returns:
    artefact -> {"seeds", "verdicts", "mean", "std" (ddof 1; NaN for one seed), "lists"},
    for the artefacts every seed has; numbers are the scalar (not boolean) measured
    values, "lists" each list-valued one per seed (e.g. Fig. 6's quiz ranks).
  """
  out = {}
  for name, first in per_seed[0].items():
    if not all(name in p for p in per_seed):
      continue
    keys = [k for k, x in first["measured"].items()
            if isinstance(x, (int, float, np.number)) and not isinstance(x, (bool, np.bool_))]
    values = {k: np.asarray([p[name]["measured"][k] for p in per_seed], np.float64)
              for k in keys}
    out[name] = {"seeds": [int(s) for s in seeds],
                 "verdicts": [p[name]["verdict"] for p in per_seed],
                 "mean": {k: float(np.mean(v)) for k, v in values.items()},
                 "std": {k: float(np.std(v, ddof=1)) if v.size > 1 else float("nan")
                         for k, v in values.items()},
                 "lists": {k: [p[name]["measured"][k] for p in per_seed]
                           for k, x in first["measured"].items() if isinstance(x, list)}}
  return out


def comparable_records(run_dir: str) -> list[dict]:
  """A landscape run's records on the scale both attacks share (`COMPARABLE_DISPLAY`):
  its own records where it was scored so, else its saved images scored again
  (`trdr.evaluate.rescored`)."""
  with np.load(os.path.join(run_dir, "results.npz")) as saved:
    results = dict(saved)
  if str(results["display"]) == COMPARABLE_DISPLAY:
    return io.read_json(os.path.join(run_dir, "landscape.json"))
  return records.grid_records(results["lambda1"], results["lambda2"], None,
                               evaluate.rescored(results, COMPARABLE_DISPLAY))


# -------------------------------------------------------------------------------- writing


def _fmt(value) -> str:
  if isinstance(value, (bool, np.bool_)):
    return "yes" if value else "no"
  if isinstance(value, (int, np.integer)):
    return str(int(value))
  if isinstance(value, float):
    if not np.isfinite(value):
      return "n/a"
    return f"{value:.3e}" if value != 0 and (abs(value) < 1e-2 or abs(value) >= 1e4) else (
        f"{value:.3f}")
  if isinstance(value, (list, tuple)):
    return "[" + ", ".join(_fmt(v) for v in value) + "]"
  return str(value)


def _section(title: str, v: dict, images: list[str], extra: list[str] = ()) -> list[str]:
  lines = [f"## {title}", ""]
  lines += [f"![{title}]({path})" for path in images]
  if images:
    lines.append("")
  if extra:
    lines += [*extra, ""]
  lines += [f"- **Paper** ({v['source']}): {v['claim']}", f"- **Rule:** {v['rule']}",
            "- **Measured:** " + _pairs(v["measured"]), "- **Checks:** " + _pairs(v["checks"])]
  if "seeds" in v:
    s = v["seeds"]
    lines.append(f"- **Over seeds** {_fmt(s['seeds'])}: verdicts {', '.join(s['verdicts'])}; "
                 "mean ± std: " + "; ".join(f"{k} = {_fmt(m)} ± {_fmt(s['std'][k])}"
                                            for k, m in s["mean"].items())
                 + "".join(f"; {k} per seed: " + " | ".join(map(_fmt, per))
                           for k, per in s.get("lists", {}).items()))
  if "baseline" in v:
    b = v["baseline"]
    lines += ["- **Baseline** (the same rule on the start images): " + _pairs(b["measured"]),
              "- **Baseline checks:** " + _pairs(b["checks"]) + f" (baseline: {b['verdict']})"]
  lines += ["", f"**Verdict: {v['verdict']}**", ""]
  return lines


def _pairs(values: dict) -> str:
  return "; ".join(f"{k} = {_fmt(x)}" for k, x in values.items()) or "none"


def counts(summaries: dict) -> list[dict]:
  """Training images reconstructed by each DecoReco run on both scales: SSIM-nearest
  reconstruction vs Haim et al.'s best buddies, at every SSIM window the run counted with
  (`trdr.evaluate.reconstructions`), beside the same counts of its start images.

  Returns:
    Rows {run, matching, window, counts: {"ssim_ge_t": int}, start: {...}, n_train}.
  """
  rows = []
  for name, summary in summaries.items():
    window = summary.get("ssim_window", evaluate.SSIM_WINDOW)
    for key in summary:
      base, _, suffix = key.partition("_w")
      if base not in ("reconstructed", "reconstructed_best_buddies"):
        continue
      rows.append({"run": name, "window": int(suffix) if suffix else window,
                   "matching": "best buddies (NCC)" if base.endswith("buddies")
                   else "SSIM-nearest", "counts": summary[key],
                   "start": summary[START + key], "n_train": summary["n_train"]})
  return sorted(rows, key=lambda r: (list(summaries).index(r["run"]), r["matching"],
                                     -r["window"]))


def counts_markdown(rows: list[dict]) -> list[str]:
  """The counts table of `counts`: "count (start count)" per threshold."""
  if not rows:
    return []
  levels = list(rows[0]["counts"])
  lines = ["Training images reconstructed (of n): a training image counts when its SSIM to "
           "its SSIM-nearest reconstruction, or to its best buddy (Haim et al.'s mutual "
           "nearest neighbours under their NCC distance), reaches t; SSIM with an 11×11 "
           "window (dm-pix's default) and a 3×3 window (Haim et al.'s counts; theirs pads "
           "'same', ours 'valid'). In parentheses: the same count for the start images.", "",
           "| run | matching | window | n | " + " | ".join(
               f"SSIM ≥ {k.removeprefix('ssim_ge_')}" for k in levels) + " |",
           "|---|---|---:|---:|" + "---:|" * len(levels)]
  for r in rows:
    cells = [f"{r['counts'][k]} ({r['start'][k]})" for k in levels]
    lines.append(f"| {r['run']} | {r['matching']} | {r['window']} | {r['n_train']} | "
                 + " | ".join(cells) + " |")
  return lines + [""]


def membership_markdown(measured: dict) -> list[str]:
  """The membership tables (`trdr.membership.measure`): AUC per attack × start kind × score
  with its bootstrap CI, spread over seeds and TPR at low FPR, on the reconstructions and
  on their start images; natural-looking counts and member fractions."""
  fprs = [f"{f:g}" for f in measured["fprs"]]
  lines = [f"Natural-looking: SSIM ≥ {measured['natural_threshold']:g} to the nearest public "
           "reference image (test[1::2], never a start). Member: the nearest real image "
           "(SSIM) in training set ∪ partition is a training image. AUC = P(score of a member "
           f"> score of a non-member), {measured['confidence']:.0%} stratified bootstrap CI "
           "over images (all seeds pooled); seeds: the AUC per seed, mean ± std. Scores are "
           f"oriented before running (higher = member); fewer than {measured['min_per_class']}"
           " members or non-members: no AUC.", "",
           "| attack | start | stage | score | members | non-members | AUC [CI] | per seed "
           "(mean ± std) | " + " | ".join(f"TPR at {f} FPR" for f in fprs) + " |",
           "|---|---|---|---|---:|---:|---|---|" + "---:|" * len(fprs)]
  for r in measured["rows"]:
    if not r["informative"]:
      cells = ["too few", "—", *("—" for _ in fprs)]
    else:
      cells = [f"{_fmt(r['auc'])} [{_fmt(r['ci'][0])}, {_fmt(r['ci'][1])}]",
               f"{_fmt(r['per_seed'])} ({_fmt(r['seed_mean'])} ± {_fmt(r['seed_std'])})",
               *(_fmt(r["tpr_at_fpr"][f]) for f in fprs)]
    lines.append(f"| {r['attack']} | {r['kind']} | {r['stage']} | {r['score']} | "
                 f"{r['members']} | {r['non_members']} | " + " | ".join(cells) + " |")
  ts = [row["threshold"] for row in measured["fractions"][0]["rows"]]
  lines += ["", "Natural-looking images at SSIM ≥ t: count (member fraction; for mixed starts "
            "also the fraction whose nearest real image has the start's membership).", "",
            "| attack | start | stage | " + " | ".join(f"t = {t:g}" for t in ts) + " |",
            "|---|---|---|" + "---|" * len(ts)]
  for f in measured["fractions"]:
    cells = [f"{x['natural']} ({_fmt(x['fraction_member'])}"
             + (f"; {_fmt(x['start_member_agree'])}" if x["start_member_agree"] is not None
                else "") + ")" for x in f["rows"]]
    lines.append(f"| {f['attack']} | {f['kind']} | {f['stage']} | " + " | ".join(cells) + " |")
  return lines


def membership_page(measured: dict, verdict: dict) -> str:
  """membership.md of experiments/membership.py: the claim, rule, verdict and tables."""
  return "\n".join(["# trdr membership ambiguity", "",
                    *_section("Membership ambiguity", verdict, ["membership.png"],
                              membership_markdown(measured))]) + "\n"


def markdown(results: dict, table1_md: str, measured: dict, variant: str,
             count_rows: list[dict] = ()) -> str:
  """report.md from the verdicts, Table 1's Markdown and the membership measurements.

  Args:
    results: artefact -> verdict dict (`verdicts`, plus "membership").
    table1_md: Table 1 as Markdown (`trdr.paper.table1`, table1.md).
    measured: `trdr.membership.measure` output.
    variant: the config variant ("", "cpu" or "smoke"), named in the header.
    count_rows: `counts` output (the counts table; none: no table).
  """
  size = variant or "paper"
  lines = [f"# trdr reproduction report: Runkel et al. 2024 (size: {size})", "",
           "Generated by `make figures` (`experiments/report.py`). Every verdict is computed "
           "from the runs' numbers by the rule stated beside it (`trdr/claims.py`: `RULES`, "
           "`CLAIMS`). Claims are quoted from the paper, with where they stand. Every rule "
           "is also applied to the start images of the same runs (the baseline: an attack "
           "that returns its start); a verdict whose passing checks the start images pass "
           "too is **uninformative**: it says nothing about the attack. **Not tested**: no "
           "rule of trdr tests that sentence yet, or these runs are too small for it (the "
           "reason is in the rule). **Per seed**: the verdict of each repeat of the runs on "
           "another data draw, victim initialisation and attack start (seed 0 first), with "
           "the numbers' mean ± std in each section."]
  if size != "paper":
    lines.append(f"\nThese are **{size}-size** runs (smaller victims, fewer images and "
                 "iterations than the paper): the verdicts say what these runs show.")
  lines += ["", "| artefact | verdict | baseline | per seed | source |", "|---|---|---|---|---|"]
  for name, v in results.items():
    baseline = v["baseline"]["verdict"] if "baseline" in v else "—"
    seeds = ", ".join(v["seeds"]["verdicts"]) if "seeds" in v else "—"
    lines.append(f"| {name} | {v['verdict']} | {baseline} | {seeds} | {v['source']} |")
  lines.append("")
  if count_rows:
    lines += ["## Counts on both scales", "", *counts_markdown(count_rows)]
  for name in ARTEFACTS:
    title = "Table 1" if name == "table1" else f"Fig. {name[3:]}"
    extra = [table1_md.strip()] if name == "table1" else []
    lines += _section(title, results[name], IMAGES[name], extra)
  lines += _section("Membership ambiguity", results["membership"], ["membership.png"],
                    membership_markdown(measured))
  return "\n".join(lines) + "\n"


def run(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Regenerates every figure and Table 1 (reusing finished runs) and writes the report.

  Args:
    config: configs/report.py: sections paper (configs/paper_figures.py), decoreco
      (configs/decoreco_figures.py), membership (configs/membership.py, into
      WORKDIR/membership) and variant.
    workdir: output directory: paper_figures/, decoreco_figures/, report.md, report.json,
      membership.{png,pdf}.
  Returns:
    artefact -> verdict dict (Figs. 1–12, table1, membership).
  Raises:
    FileExistsError: a run directory holds a finished run of another config.
  """
  os.makedirs(workdir, exist_ok=True)
  paper.make(config, workdir)
  collected = collect(workdir)
  results = verdicts.verdicts(collected)
  # The repeats over seeds: each artefact's verdict per seed and mean ± std of its numbers.
  repeats = [verdicts.verdicts(collect(d, repeats=True))
             for d in make_seeds(config, workdir)]
  for name, stats in over_seeds([results, *repeats],
                                (0, *config.get("repeat_seeds", ()))).items():
    results[name]["seeds"] = stats
  count_rows = counts(collected["summaries"])
  measured = membership.run(config.membership, os.path.join(workdir, "membership"))
  results["membership"] = verdicts.verdict_membership(measured)
  plotting.save_figure(report_figures.membership_figure(measured), workdir, "membership")
  with open(os.path.join(workdir, "paper_figures", "table1.md")) as f:
    table1_md = f.read()
  io.write_json(os.path.join(workdir, "report.json"),
                {"verdicts": results, "counts": count_rows, "membership": measured,
                 "rules": RULES})
  io.atomic_write(os.path.join(workdir, "report.md"),
                  markdown(results, table1_md, measured, config.variant, count_rows).encode())
  return results
