"""Section: the main job on a fresh machine (empty compilation cache) and again warm.

A researcher's first run of the README's command finds no compiled program in JAX's
persistent compilation cache; every later run finds them all. This section runs the main
job (`experiments/landscape.py` of ``config_path``) as its own process, as the README does,
four times a round, alternating the two trees: the ``baseline`` revision's (extracted with
``git archive``) with an empty cache directory, this tree's with another, then each again
with its now-filled cache (medians over ``repeats`` rounds). Printed per phase
(summary.json's ``phase_seconds``; "rest" is the process's wall time less those: start-up,
imports, figures, writing), cold and warm, each tree's seconds and the baseline's over this
tree's; and how many programs each run compiled and loaded (the CLI's last log line).
"""

import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

from trdr import experiment
from trdr.runtime import files

PHASES = ("victim", "attack", "evaluation")
_CACHE_LINE = re.compile(r"(\d+) programs loaded.*?(\d+) compiled")


def _extract(revision: str, root: str, into: str) -> str:
  """``revision``'s tree of the git repository at ``root``, written under ``into``."""
  os.makedirs(into)
  archive = subprocess.run(["git", "-C", root, "archive", revision], check=True,
                           capture_output=True).stdout
  subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)
  return into


def _run(tree: str, config_path: str, workdir: str, cache: str) -> dict:
  """Phase seconds, "rest", "whole run" and the programs compiled / loaded of one run of
  the main job from source ``tree`` in a process of its own."""
  env = dict(os.environ, PYTHONPATH=tree)
  began = time.perf_counter()
  done = subprocess.run([sys.executable, "experiments/landscape.py", f"--config={config_path}",
                         f"--workdir={workdir}", f"--compilation_cache={cache}"],
                        cwd=tree, env=env, capture_output=True, text=True)
  wall = time.perf_counter() - began
  if done.returncode != 0:
    raise RuntimeError(f"the main job from {tree} failed ({done.returncode}):\n"
                       f"{done.stderr[-3000:]}")
  phases = files.read_json(os.path.join(workdir, experiment.SUMMARY_FILE))["phase_seconds"]
  out = {p: float(phases[p]) for p in PHASES}
  out["rest"] = wall - sum(out.values())
  out["whole run"] = wall
  counts = _CACHE_LINE.findall(done.stderr)
  out["loaded"], out["compiled"] = (int(x) for x in counts[-1]) if counts else (-1, -1)
  return out


def run(config_path: str, baseline: str, repeats: int = 1) -> None:
  """Prints the section for the main job's config file ``config_path`` (as --config takes
  it, e.g. configs/bilevel_affine.py or configs/bilevel_affine.py:smoke), against the git
  revision ``baseline`` of this repository (e.g. HEAD~1 or main); medians of ``repeats``
  rounds, each with fresh cache directories, the trees' order swapped every round."""
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  with tempfile.TemporaryDirectory(prefix="trdr-cold-path-") as tmp:
    trees = {"baseline": _extract(baseline, root, os.path.join(tmp, "baseline")), "this": root}
    rounds = []
    for r in range(repeats):  # a fresh cache directory per tree and round: empty, then filled
      order = list(trees) if r % 2 == 0 else list(trees)[::-1]
      rounds.append({(name, state): _run(
          trees[name], config_path, os.path.join(tmp, f"{name}_{state}_{r}"),
          os.path.join(tmp, f"cache_{name}_{r}")) for state in ("cold", "warm") for name in order})
  runs = {k: {f: float(np.median([x[k][f] for x in rounds])) for f in rounds[0][k]}
          for k in rounds[0]}
  print(f"\n== the main job ({config_path}) in a process of its own, the compilation cache "
        f"empty (cold) and filled by that run (warm): {baseline} vs this tree, seconds ==")
  print(f"{'':12s} {'cold ' + baseline:>16s} {'cold this':>10s} {'ratio':>6s} "
        f"{'warm ' + baseline:>16s} {'warm this':>10s} {'ratio':>6s}")
  for phase in (*PHASES, "rest", "whole run"):
    row = []
    for state in ("cold", "warm"):
      a, b = runs["baseline", state][phase], runs["this", state][phase]
      row.append(f"{a:16.1f} {b:10.1f} {a / b:5.2f}x")
    print(f"{phase:12s} " + " ".join(row))
  for (name, state), r in runs.items():
    print(f"{state} {baseline if name == 'baseline' else name}: {r['compiled']:.0f} programs "
          f"compiled, {r['loaded']:.0f} loaded")
  print(f"(median of {repeats} rounds; XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r})")
