"""Section: the main job's phases with its lower level before (L-BFGS) and now (Newton–CG).

`trdr.experiment.run` of the --config's landscape (the main job without the CLI's figures,
which are drawn from its files alike for both) in fresh run directories: first, untimed,
each setting at one chunk of outer steps (``attack.log_every``), which compiles every
program of the run (the victim's training, the attack's chunk, the evaluation's searches
and re-solves: the same shapes at any number of steps); then ``repeats`` rounds of the
whole run per setting, alternating, the order swapped every round. The seconds of each
phase are the run's own (summary.json's ``phase_seconds``). Printed: each phase's median,
the L-BFGS time over the Newton–CG time, and the largest difference between the two
settings' landscape.json fields (the start images' fields are the same bits: the lower
level plays no part in them; tests/test_landscape.py holds the rest to the findings).
"""

import copy
import os
import tempfile
import time

import ml_collections
import numpy as np

from trdr import experiment
from trdr.runtime import files

SETTINGS = {"L-BFGS": "lbfgs", "Newton–CG": "newton_cg"}   # today's first: the reference
PHASES = ("victim", "attack", "evaluation")


def _config(config: ml_collections.ConfigDict, method: str, steps: int | None = None
            ) -> ml_collections.ConfigDict:
  config = copy.deepcopy(config)
  config.attack.lower_level.method = method
  if steps is not None:
    config.attack.steps = steps
  return config


def _run(config: ml_collections.ConfigDict, workdir: str) -> tuple[dict, float, list]:
  """(phase seconds, wall seconds, landscape.json records) of one run in ``workdir``."""
  began = time.perf_counter()
  experiment.run(config, workdir, "landscape")
  wall = time.perf_counter() - began
  summary = files.read_json(os.path.join(workdir, experiment.SUMMARY_FILE))
  return summary["phase_seconds"], wall, files.read_json(
      os.path.join(workdir, "landscape.json"))


def run(config: ml_collections.ConfigDict, repeats: int) -> None:
  """Prints the section for the main job's ``config`` (configs/bilevel_affine.py)."""
  seconds = {name: {p: [] for p in (*PHASES, "whole run")} for name in SETTINGS}
  records = {}
  with tempfile.TemporaryDirectory(prefix="trdr-main-job-") as tmp:
    for method in SETTINGS.values():   # compiles every program of both settings
      _run(_config(config, method, config.attack.log_every), os.path.join(tmp, f"warm_{method}"))
    for r in range(repeats):
      for name in (list(SETTINGS) if r % 2 == 0 else list(SETTINGS)[::-1]):
        method = SETTINGS[name]
        phases, wall, records[name] = _run(_config(config, method),
                                           os.path.join(tmp, f"{method}_{r}"))
        for p in PHASES:
          seconds[name][p].append(phases[p])
        seconds[name]["whole run"].append(wall)
  g = len(config.init.lambda1) * len(config.init.lambda2)
  print(f"\n== the main job, lower level L-BFGS (before) vs Newton–CG (now): {g} grid points "
        f"x {2 * config.data.n_per_class} images, {config.attack.steps} outer steps, tol "
        f"{config.attack.lower_level.tol:g}; compiled before timing ==")
  print(f"{'':12s}" + "".join(f"{name + ' median s':>22s}" for name in SETTINGS)
        + f"{'L-BFGS / Newton–CG':>20s}")
  for p in (*PHASES, "whole run"):
    t = {name: float(np.median(seconds[name][p])) for name in SETTINGS}
    print(f"{p:12s}" + "".join(f"{t[name]:22.1f}" for name in SETTINGS)
          + f"{t['L-BFGS'] / t['Newton–CG']:19.2f}x")
  print(f"(median of {repeats} alternating rounds; the whole run is experiment.run's wall "
        "time, without the CLI's figures)")
  fields = sorted({k for r in records["L-BFGS"] for k in r if not k.startswith("lambda")})
  deltas = {k: max(abs(a[k] - b[k]) for a, b in zip(records["L-BFGS"], records["Newton–CG"]))
            for k in fields}
  print("largest |Δ| over the grid, L-BFGS vs Newton–CG: " + ", ".join(
      f"{k} {v:.2g}" for k, v in deltas.items()))
