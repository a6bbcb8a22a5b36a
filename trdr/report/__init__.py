"""The reproduction report: every figure and Table 1 beside the paper's claim, with a verdict.

`report/` holds the rules and the rendering; the studies that are experiments of their own
(membership, knowledge, the θ0 readings, the victim recipe) are `trdr.studies`.

  claims      the paper's claims, one record each (quote, source, rule in words, the
              evidence it needs, its check, its images): the table the report iterates
  verdicts    the rules: each claim's check on the runs' numbers and on the start
              images' (the baseline), their thresholds (`RULES`) and the verdict they make
  artefacts   which runs each paper artefact needs, and how it is drawn from them
  evidence    the numbers behind the verdicts, read from the runs (and their repeats)
  controls    the rules applied to control attacks (identity, worsening, oracle)
  markdown    report.md and membership.md
  figures     the report's own figures (the quiz, the trajectories, membership)

`run` regenerates Figs. 1–12, Table 1 and Table 1 under each reading of the paper's random
θ0 (`artefacts.make`, into WORKDIR/paper_figures
and WORKDIR/decoreco_figures; finished runs of an unchanged config are reused), reads the
numbers behind every verdict (`evidence.collect`), applies every claim of `claims`, adds
the membership experiment's verdicts where it has run (`trdr.studies.membership.read` of
WORKDIR/membership/membership.json: `make membership`, an hour at ":cpu", is its own
command) and writes WORKDIR/report.md, report.json and membership.{png,pdf}.
"""

import datetime
import os
import platform

import jax
import ml_collections

from trdr import plotting
from trdr.report import artefacts, claims, evidence, figures, markdown, membership_rules
from trdr.report.verdicts import RULES
from trdr.studies import membership
from trdr.runtime import files, rundir


def run(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Regenerates every figure and Table 1 (reusing finished runs) and writes the report.

  Args:
    config: configs/report.py: sections paper (configs/paper_figures.py), decoreco
      (configs/decoreco_figures.py), membership (configs/membership.py: the configuration
      WORKDIR/membership/membership.json must have been measured under) and variant.
    workdir: output directory: paper_figures/, decoreco_figures/, report.md, report.json,
      and membership.{png,pdf} where WORKDIR/membership holds the membership experiment.
  Returns:
    artefact -> verdict dict (Figs. 1–12, table1, membership: "not tested" with its
    reason where the membership experiment has not run); Figs. 1, 2, 4 and Table 1 under
    the registered reading of θ0, the main runs' verdict as their "variant"
    (`artefacts.registered_verdicts`).
  Raises:
    FileExistsError: a run directory holds a finished run of another config.
    ValueError: WORKDIR/membership/membership.json was measured under another
      configuration (`membership.read`; checked before any run starts).
  """
  os.makedirs(workdir, exist_ok=True)
  measured = membership.read(config.membership, os.path.join(workdir, "membership"))
  artefacts.make(config, workdir)
  # The repeats over seeds: each artefact's verdict per seed and mean ± std of its numbers;
  # Figs. 7 and 9 also pool their runs with the repeats' (`claims`).
  collected, seeds = evidence.collect_with_repeats(workdir,
                                                   evidence.make_seeds(config, workdir))
  results = claims.verdicts(collected)
  repeats = [claims.verdicts(s) for s in seeds]
  for name, stats in evidence.over_seeds([results, *repeats],
                                         (0, *config.repeat_seeds)).items():
    results[name]["seeds"] = stats
  count_rows = evidence.counts(collected["summaries"])
  premises = {name: summary["kkt_premise"] for name, summary in collected["summaries"].items()
              if "kkt_premise" in summary}
  truths = {name: summary["truth"] for name, summary in collected["summaries"].items()
            if "truth" in summary}
  powers = {name: summary["power"] for name, summary in collected["summaries"].items()
            if "power" in summary}
  if measured is None:
    for name in claims.MEMBERSHIP:
      results[name] = claims.with_texts(name, membership_rules.membership_not_run())
  else:
    results |= claims.verdicts({"membership": measured})
    plotting.save_figure(figures.membership_figure(measured), workdir, "membership",
                         plotting.size_stamp(config.variant))
  paper_figures = os.path.join(workdir, "paper_figures")
  with open(os.path.join(paper_figures, "table1.md")) as f:
    table1_md = f.read()
  with open(os.path.join(paper_figures, "table1_readings.md")) as f:
    readings_md = f.read()
  with open(os.path.join(paper_figures, "outer_step.md")) as f:
    outer_step_md = f.read()
  with open(os.path.join(paper_figures, "readings_attack.md")) as f:
    readings_attack_md = f.read()
  readings_attack = files.read_json(os.path.join(paper_figures, "readings_attack.json"))
  outer = files.read_json(os.path.join(paper_figures, "outer_step.json"))
  # Figs. 1, 2, 4 and Table 1: the registered (headline) reading of θ0's verdicts, the
  # main runs' (trdr's variant) below them, each reading's beside
  # (`artefacts.registered_verdicts`); Fig. 2 under each outer step (`artefacts.fig2_steps`).
  results = artefacts.registered_verdicts(results, readings_attack)
  results["fig2"]["steps"] = artefacts.fig2_steps(outer)
  table1_md += "\n### Table 1 under each reading of the paper's random θ0\n\n" + readings_md
  table1_md += ("\n### Figs. 1, 2, 4 and Table 1 under each reading: the attack run under "
                "each\n\n" + readings_attack_md)
  table1_md += ("\n### The outer step: eq. 7's plain gradient step beside Adam (affine, "
                "Figs. 1–3)\n\n" + outer_step_md)
  files.write_json(os.path.join(workdir, "report.json"),
                   {"verdicts": results, "counts": count_rows, "membership": measured,
                    "rules": RULES, "table1": collected["table1"],
                    "table1_readings": files.read_json(os.path.join(
                        paper_figures, "table1_readings.json")) | {"markdown": readings_md},
                    "outer_step": outer | {"markdown": outer_step_md},
                    "readings_attack": readings_attack | {"markdown": readings_attack_md},
                    "kkt_premise": premises, "truth": truths, "power": powers,
                    "generated": provenance(config.variant), "disk": _disk(workdir)})
  files.atomic_write(os.path.join(workdir, "report.md"),
                     markdown.report_page(results, table1_md, measured, config.variant,
                                          count_rows, premises, truths, powers).encode())
  return results


def verdict_lines(workdir: str, names) -> list[str]:
  """The verdicts of artefacts ``names`` from the finished runs under ``workdir`` alone
  (`evidence.collect` of what has finished: `make figN` before the other figures' runs),
  one line each with its baseline and rule; an artefact whose runs have not all finished
  is left out. The report (`run`) pools Figs. 7 and 9 with the seeds' repeats as well, and
  reads Figs. 1, 2, 4 and Table 1 under the registered reading of θ0: their lines here are
  trdr's variant's, and say so."""
  found = claims.verdicts(evidence.collect(workdir, repeats=True))
  variant = ("; this is trdr's variant (the main runs): the report's verdict is the one "
             "under the registered reading of θ0 (`make figures`)")
  return [f"{name}: {v['verdict']}" + (f" ({v['reason']})" if "reason" in v else "")
          + f"; baseline (the start images): {v['baseline']['verdict']}; rule: {v['rule']}"
          + (variant if name in artefacts.READING_ARTEFACTS else "")
          for name, v in found.items() if name in names]


def _disk(workdir: str) -> dict:
  """What the report's runs hold on disk: {"bytes": all of ``workdir`` (before report.md
  and report.json), "runs": {run directory relative to ``workdir``: bytes}}."""
  runs = {os.path.relpath(root, workdir): files.disk_usage(root)
          for root, _, names in os.walk(workdir) if rundir.CONFIG_FILE in names}
  return {"bytes": files.disk_usage(workdir), "runs": dict(sorted(runs.items()))}


def provenance(variant: str) -> dict:
  """Where a report (report.json, knowledge.md) comes from: the size, the UTC time, the
  machine and JAX."""
  return {"size": variant or "paper",
          "utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
          "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}",
          "jax": jax.__version__, "devices": f"{jax.device_count()} × "
                                             f"{jax.devices()[0].device_kind}"}
