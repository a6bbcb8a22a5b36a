"""Control attacks: what each verdict rule says of an attack whose answer is known.

A rule that tests a claim about an attack must be able to fail. The controls replace the
reconstructions of the report's runs by images whose worth is known in advance and apply
the same rules to them, each beside the same baseline (the runs' start images):

  identity   the start images themselves (an attack that does nothing; the baseline
             evidence, `trdr.report.verdicts.baseline_evidence`)
  worsening  fresh U(0, 1) noise in pixels (an attack that throws its start away)
  oracle     each reconstruction's SSIM-nearest training image (an attack that returns
             training images, the best any attack can do for the images it found)

Every other number of a run stays its own: the victim, the start images, the loss history
and the attack's outputs (DecoReco's λ). The reconstructions' evaluation, ||θ* − θ(x)||²
included, is computed again by the run's own evaluation phase (`trdr.experiment.reevaluate`),
and Table 1 from the re-evaluated runs. Membership has its own runs and controls
(`trdr.studies.membership`: a positive and a negative control per attack).
"""

import os

import jax
import ml_collections
import numpy as np

from trdr import experiment
from trdr.report import artefacts, claims, evidence, verdicts
from trdr.runtime import files

KINDS = ("identity", "worsening", "oracle")



def images(saved, kind: str, key: jax.Array) -> np.ndarray:
  """A control's reconstructions for one run.

  Args:
    saved: the run's results.npz (`trdr.experiment.load_results`): final_images
      float[..., m, H, W, C] in the victim's input space, initial_images alike,
      train_images float[n, H, W, C], train_index int[..., m] (each reconstruction's
      SSIM-nearest training image), mean float[H, W, C] or empty.
    kind: "worsening" or "oracle" (identity needs no new images: `evidence`).
    key: the PRNG key of the worsening noise.
  Returns:
    float[..., m, H, W, C], shaped and typed as final_images, in the victim's input space.
  Raises:
    ValueError: an unknown kind.
  """
  final = np.asarray(saved["final_images"])
  if kind == "worsening":
    noise = np.asarray(jax.random.uniform(key, final.shape), final.dtype)
    mean = np.asarray(saved["mean"])
    return noise - mean.astype(final.dtype) if mean.size else noise
  if kind == "oracle":
    return np.asarray(saved["train_images"])[np.asarray(saved["train_index"])].astype(final.dtype)
  raise ValueError(f"unknown control {kind!r}; with new images: 'worsening', 'oracle'")


def make(config: ml_collections.ConfigDict, workdir: str, kind: str, out: str,
         seed: int = 0) -> str:
  """The report's runs that `trdr.report.evidence.collect` reads (`evidence.COLLECTED_RUNS`)
  re-evaluated for control ``kind`` into ``out`` (created; each run in the directory it has
  under ``workdir``), with paper_figures/table1.json.

  Args:
    config: the report's config (configs/report.py) that made ``workdir``.
    workdir: a report's work directory whose collected runs have finished.
    kind: "worsening" or "oracle".
    out: a new directory.
    seed: the worsening noise's seed (a run's key folded with its index in
      `evidence.COLLECTED_RUNS`).
  Returns:
    ``out``.
  Raises:
    FileExistsError: a run's directory under ``out`` exists.
    FileNotFoundError, ValueError: as `trdr.experiment.reevaluate`, and for an unknown kind.
  """
  if kind not in KINDS[1:]:
    raise ValueError(f"unknown control {kind!r}; with new images: {list(KINDS[1:])}")
  for i, name in enumerate(evidence.COLLECTED_RUNS):
    source = artefacts.run_dir(workdir, name)
    with experiment.load_results(source) as saved:
      new = images(saved, kind, jax.random.fold_in(jax.random.key(seed), i))
    experiment.reevaluate(source, new, artefacts.run_dir(out, name))
  runs = {name: artefacts.run_dir(out, name) for name in ("affine", "one_hidden")}
  files.write_json(os.path.join(out, "paper_figures", "table1.json"),
                   artefacts.table1(runs, config)["table1.json"])
  return out


def verdicts_of(config: ml_collections.ConfigDict, workdir: str, kind: str,
                scratch: str) -> dict:
  """Every verdict of `trdr.report.claims.verdicts` for control ``kind`` on the runs of
  ``workdir``, each beside the runs' baseline; ``scratch``/``kind`` holds the re-evaluated
  runs (`make`; identity needs none)."""
  if kind == "identity":
    return claims.verdicts(verdicts.baseline_evidence(evidence.collect(workdir)))
  return claims.verdicts(evidence.collect(make(config, workdir, kind,
                                                 os.path.join(scratch, kind))))
