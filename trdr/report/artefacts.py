"""The paper's artefacts: which runs each needs, and how it is drawn from them.

Runkel et al. 2024's Figs. 1–12 and Table 1 come from eight runs, each a
`trdr.experiment.run` in a sub-directory of one work directory (`RUNS`), run once and
reused while finished with the same config (`run_or_reuse`), resumed when interrupted:

  paper_figures/affine, one_hidden      the bilevel attack from the three pure eq. 10
                                        starts, affine (eq. 8) and one-hidden (eq. 9)
  decoreco_figures/victim               θ* of the Haim MLP, shared by the DecoReco runs
  decoreco_figures/sweep                the vmapped DecoReco sweep; best.json feeds the
                                        tuned, partition and DecoReco-landscape runs
  decoreco_figures/untuned, tuned,      DecoReco from N(0, 1) (σ untuned, Fig. 5; the
    partition                           tuned run's other settings), from N(0, σ²) (the
                                        sweep's σ) and from the distinct partition
  decoreco_figures/landscape_decoreco,  the 25 eq. 10 starts, DecoReco and bilevel
    landscape_bilevel

The runs' directories and saved numbers are `trdr.report.runs`'; each section of the paper
draws its artefacts in a module of its own: `sec43_bilevel` (Sec. 4.3: Figs. 1–4, Table 1,
the outer step, the readings), `sec44_decoreco` (Sec. 4.4: Figs. 5–9) and
`sec45_landscape` (Sec. 4.5: Figs. 10–12).

`ARTEFACTS` maps each artefact to the runs it needs and the function that draws it; `make`
runs what is missing and writes the artefacts (PNG and PDF; Table 1 as .md and .json)
into the artefact's folder (paper_figures/ or decoreco_figures/).
"""

import os
from typing import Callable, NamedTuple

import ml_collections
from absl import logging

from trdr import experiment, plotting
from trdr.report.runs import (LANDSCAPE_ATTACKS, RUNS, VICTIM_NAMES, VICTIMS, finished,
                              parameter_count, run_arrays, run_configs, run_dir, seed_config,
                              seed_workdir)
from trdr.report.sec43_bilevel import (OUTER_STEPS, PAPER_TABLE1, PURE_FIGURES, READING_ARTEFACTS,
                                       TABLE1_COLUMNS, UNIFORM_STARTS, affine_verdicts,
                                       chosen_lr, claim_verdicts, fig2_steps,
                                       one_hidden_verdicts, outer_step, pure_figure,
                                       readings_attack, registered_verdicts, table1,
                                       variant_words)
from trdr.report.sec44_decoreco import decoreco_grid, fig6, fig7, fig9, trajectories
from trdr.report.sec45_landscape import landscapes
from trdr.report.verdicts import RULES
from trdr.runtime import files
from trdr.studies import readings

# The names of the report's runs and of each section's artefacts, for the report's readers
# (`trdr.report.evidence`, the tests): `trdr.report.runs` and the sec* modules define them.
__all__ = ["ARTEFACTS", "Artefact", "LANDSCAPE_ATTACKS", "OUTER_STEPS", "PAPER_TABLE1",
           "READING_ARTEFACTS", "RULES", "RUNS", "TABLE1_COLUMNS", "TABLES", "UNIFORM_STARTS",
           "VICTIMS", "VICTIM_NAMES", "affine_verdicts", "chosen_lr", "claim_verdicts",
           "fig2_steps", "finished", "make", "one_hidden_verdicts", "outer_step",
           "parameter_count", "readings_attack", "registered_verdicts", "run_arrays",
           "run_configs", "run_dir", "seed_config", "seed_workdir", "table1", "variant_words"]


class Artefact(NamedTuple):
  """folder: where it is written; needs: run names (in `RUNS` order: the sweep first);
  draw: (run name -> directory, config) -> {file name: Figure | dict (JSON) | str (.md)}."""
  folder: str
  needs: tuple
  draw: Callable


_LANDSCAPES = ("sweep", "landscape_decoreco", "landscape_bilevel")
ARTEFACTS: dict[str, Artefact] = {
    **{name: Artefact("paper_figures", tuple(dict.fromkeys(p[0] for p in panels)),
                      pure_figure(name, panels)) for name, panels in PURE_FIGURES.items()},
    "table1": Artefact("paper_figures", ("affine", "one_hidden"), table1),
    "table1_readings": Artefact("paper_figures", (), lambda runs, config: (
        readings.table1_readings(config.paper.readings, os.path.join(
            os.path.dirname(runs["affine"]), "readings"), PAPER_TABLE1["one_hidden"],
            RULES["small_param_distance"]))),
    "outer_step": Artefact("paper_figures", ("affine",), outer_step),
    "readings_attack": Artefact("paper_figures", ("affine", "one_hidden"), readings_attack),
    "fig5": Artefact("decoreco_figures", ("sweep", "untuned"), decoreco_grid(
        "fig5", "untuned", "Fig. 5: N(0, 1) initialisation, σ not tuned")),
    "fig6": Artefact("decoreco_figures", ("sweep", "tuned"), fig6),
    "fig7": Artefact("decoreco_figures", ("sweep", "tuned"), fig7),
    "fig8": Artefact("decoreco_figures", ("sweep", "tuned"), decoreco_grid(
        "fig8", "tuned", "Fig. 8: the first reconstructions", order="index")),
    "fig9": Artefact("decoreco_figures", ("sweep", "partition"), fig9),
    "trajectories": Artefact("decoreco_figures", ("affine", "one_hidden", "sweep", "partition"),
                             trajectories),
    **{name: Artefact("decoreco_figures", _LANDSCAPES, landscapes(name))
       for name in ("fig10", "fig11", "fig12")},
}


# The artefacts that are tables (.json and .md), not figures.
TABLES = ("table1", "table1_readings", "outer_step", "readings_attack")


def make(config: ml_collections.ConfigDict, workdir: str, artefacts=tuple(ARTEFACTS)
         ) -> list[str]:
  """Runs (or reuses) what ``artefacts`` need and writes them.

  Args:
    config: configs/report.py (sections paper and decoreco).
    workdir: the work directory of all runs (`RUNS`) and artefacts.
    artefacts: names from `ARTEFACTS`.
  Returns:
    The files written.
  Raises:
    ValueError: unknown artefact.
    FileExistsError: a run directory holds a finished run of another config.
  """
  unknown = [a for a in artefacts if a not in ARTEFACTS]
  if unknown:
    raise ValueError(f"unknown artefact(s) {unknown}; known: {list(ARTEFACTS)}")
  configs = run_configs(config, workdir)
  needed = {run for a in artefacts for run in ARTEFACTS[a].needs}
  runs = {name: run_dir(workdir, name) for name in RUNS}
  for name in RUNS:  # in dependency order: the sweep first
    if name in needed:
      experiment.run_or_reuse(RUNS[name][1], configs[name], runs[name])
  written = []
  for artefact in artefacts:
    folder = os.path.join(workdir, ARTEFACTS[artefact].folder)
    os.makedirs(folder, exist_ok=True)
    for file_name, item in ARTEFACTS[artefact].draw(runs, config).items():
      if isinstance(item, dict):
        files.write_json(os.path.join(folder, file_name), item)
        written.append(os.path.join(folder, file_name))
      elif isinstance(item, str):
        files.atomic_write(os.path.join(folder, file_name), item.encode())
        written.append(os.path.join(folder, file_name))
      else:
        written += plotting.save_figure(item, folder, file_name,
                                        plotting.size_stamp(config.variant))
  logging.info("Wrote %s", written)
  return written
