"""The report's runs: their directories, configs and saved numbers, which every section's
artefacts (`trdr.report.artefacts`) read.

  `RUNS`          run name -> (sub-directory of the work directory, experiment mode)
  `run_configs`   each run's experiment config from configs/report.py
  `run_dir`, `finished`, `seed_workdir`, `seed_config`   where a run is and whether it finished
  `records_of`, `results_of`, `summary_of`, `run_arrays`   a run's landscape.json,
                  results.npz and summary.json
"""

import os

import jax
import ml_collections
import numpy as np

from trdr import experiment, models
from trdr.evaluation.evaluate import START
from trdr.runtime import files


# run name -> (sub-directory of the work directory, experiment mode)
RUNS = {
    "affine": ("paper_figures/affine", "landscape"),
    "one_hidden": ("paper_figures/one_hidden", "landscape"),
    "sweep": ("decoreco_figures/sweep", "sweep"),
    "untuned": ("decoreco_figures/untuned", "attack"),
    "tuned": ("decoreco_figures/tuned", "attack"),
    "partition": ("decoreco_figures/partition", "attack"),
    "landscape_decoreco": ("decoreco_figures/landscape_decoreco", "landscape"),
    "landscape_bilevel": ("decoreco_figures/landscape_bilevel", "landscape"),
}
VICTIM_NAMES = {"affine": "affine", "one_hidden": "one-hidden"}
# The victims of Figs. 1–4 and Table 1, each a landscape run of its name.
VICTIMS = tuple(VICTIM_NAMES)
# Figs. 10–12: the paper's attack and the one it is compared with, in that order, each a
# landscape run "landscape_{attack}" (keys of `trdr.attacks.ATTACKS`).
LANDSCAPE_ATTACKS = ("bilevel", "decoreco")


def run_configs(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Every run's config, from configs/report.py's sections ``paper`` and ``decoreco``: the
  DecoReco runs share one victim directory and read the sweep's best.json."""
  deco = os.path.join(workdir, "decoreco_figures")
  configs = {"affine": config.paper.affine, "one_hidden": config.paper.one_hidden,
             "landscape_bilevel": config.decoreco.bilevel}
  for name in ("sweep", "untuned", "tuned", "partition", "landscape_decoreco"):
    c = (config.decoreco.landscape if name == "landscape_decoreco" else
         config.decoreco.decoreco).copy_and_resolve_references()
    c.victim.checkpoint_dir = os.path.join(deco, "victim")
    if name == "partition":
      c.init.kind = name
    if name != "sweep":
      c.attack.hparams_file = os.path.join(deco, "sweep", experiment.BEST_FILE)
    if name == "untuned":  # Runkel et al. Fig. 5: "randomly with x ~ N(0, 1)", σ not tuned
      c.init.kind, c.attack.init_scale = "gaussian", 1.0
      c.attack.hparams_keep = ("init_scale",)
    configs[name] = c
  return configs


def seed_workdir(workdir: str, seed: int) -> str:
  """The work directory of seed ``seed``'s repeats (`trdr.report.evidence.SEED_RUNS`)."""
  return os.path.join(workdir, "seeds", f"seed_{seed}")


def seed_config(config: ml_collections.ConfigDict, seed: int) -> ml_collections.ConfigDict:
  """A run's ``config`` (of `run_configs`) repeated on seed ``seed``: its data draw, victim
  initialisation and attack start (config.seed = data.seed = victim.seed = seed); a copy."""
  c = config.copy_and_resolve_references()
  c.seed = c.data.seed = c.victim.seed = int(seed)
  return c


def run_dir(workdir: str, name: str) -> str:
  """The directory of run ``name`` (a key of `RUNS`)."""
  return os.path.join(workdir, RUNS[name][0])


def finished(workdir: str, name: str) -> bool:
  """Whether run ``name`` under ``workdir`` has finished."""
  return os.path.exists(os.path.join(run_dir(workdir, name),
                                     experiment.FINISHED[RUNS[name][1]]))



def records_of(runs, name):
  return files.read_json(os.path.join(runs[name], experiment.LANDSCAPE_FILE))


def results_of(runs, name):
  with experiment.load_results(runs[name]) as saved:
    return dict(saved)


def summary_of(runs, name):
  return files.read_json(os.path.join(runs[name], experiment.SUMMARY_FILE))


def run_arrays(directory: str, names, index=()) -> dict:
  """The results.npz arrays ``names`` of the run in ``directory`` and their start twins
  (prefix `START`), at grid point ``index`` (``()``: every point), and phi_train and
  final_lambdas (DecoReco's multipliers; their twin NaN) where saved.

  Raises:
    ValueError: the run predates the evaluation of its start images.
  """
  keys = (*names, *(START + k for k in names))
  path = os.path.join(directory, experiment.RESULTS_FILE)
  with experiment.load_results(path) as saved:
    missing = [k for k in keys if k not in saved]
    if missing:
      raise ValueError(f"{path} lacks {missing}: the run predates the evaluation of its "
                       "start images; delete its directory to recompute it")
    # phi_train (per training image) and DecoReco's final_lambdas have no start twin: the
    # start images have no multipliers, so their twin is NaN (the baseline's quiz has no
    # λ adversary).
    out = {k: saved[k][index] for k in keys}
    if "phi_train" in saved:
      out["phi_train"] = saved["phi_train"]
    if "final_lambdas" in saved:
      lambdas = np.asarray(saved["final_lambdas"])[index]
      out |= {"final_lambdas": lambdas, START + "final_lambdas": np.full(lambdas.shape, np.nan)}
    return out


def parameter_count(victim_config: ml_collections.ConfigDict, image_shape) -> int:
  """The number of parameters P of the victim (θ's entries), from its architecture and
  the image shape (H, W, C): Table 1's ||θ* − θ||² is a sum over P entries; the paper
  speaks of "the average distance", so both the sum and the mean over P are reported."""
  model = models.build_model(victim_config)
  shapes = jax.eval_shape(lambda: models.init_params(model, jax.random.key(0), image_shape))
  return int(sum(np.prod(x.shape) for x in jax.tree.leaves(shapes)))
