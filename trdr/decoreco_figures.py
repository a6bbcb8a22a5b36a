"""Runkel et al. 2024, Figs. 5–12: DecoReco reconstructions and both energy landscapes.

One work directory holds every run the figures read; each run is a sub-directory, reused
when finished with the same config (`run_or_reuse`), resumed when interrupted:

  victim/            θ* of the Haim MLP, shared by all DecoReco runs
  sweep/             the vmapped hyperparameter sweep; sweep/best.json feeds the runs below
  uniform/           U(0, 1) initialisation with the untuned config settings    -> fig5
  tuned/             Gaussian N(0, σ²) initialisation, the sweep's best setting  -> fig6–8
  partition/         initialisation from the distinct partition, best setting    -> fig9
  landscape_decoreco/ the 25 eq. 10 initialisations, best setting               -> fig10–12 (b)
  landscape_bilevel/ the bilevel landscape of configs/bilevel_affine.py          -> fig10–12 (a)

Figures:
  fig5   U(0, 1) initialisation without variance tuning: reconstructions beside their
         SSIM-nearest training image, best first
  fig6   tuned σ: reconstructions beside their nearest training image, labelled with their
         rank among all reconstructions
  fig7   tuned σ, per training image: each training image beside its best reconstruction,
         ranked, and the best SSIM against the victim's output Φ(x_i) (Haim et al. Fig. 4)
  fig8   overview: the first reconstructions (candidate order) beside their nearest neighbour
  fig9   partition initialisation: (a) against the training set, (b) against the partition
  fig10–12 the landscape figures, (a) bilevel and (b) DecoReco
"""

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import ml_collections  # noqa: E402
import numpy as np  # noqa: E402
from absl import logging  # noqa: E402

from trdr import io, landscape, plotting, reconstruct  # noqa: E402

# run name -> (kind of run, finished-marker file)
RUNS = {
    "sweep": ("sweep", reconstruct.SUMMARY_FILE),
    "uniform": ("attack", reconstruct.SUMMARY_FILE),
    "tuned": ("attack", reconstruct.SUMMARY_FILE),
    "partition": ("attack", reconstruct.SUMMARY_FILE),
    "landscape_decoreco": ("landscape", landscape.LANDSCAPE_FILE),
    "landscape_bilevel": ("landscape", landscape.LANDSCAPE_FILE),
}
NEEDS = {
    "fig5": ("uniform",), "fig6": ("sweep", "tuned"), "fig7": ("sweep", "tuned"),
    "fig8": ("sweep", "tuned"), "fig9": ("sweep", "partition"),
    "fig10": ("sweep", "landscape_bilevel", "landscape_decoreco"),
    "fig11": ("sweep", "landscape_bilevel", "landscape_decoreco"),
    "fig12": ("sweep", "landscape_bilevel", "landscape_decoreco"),
}
ARTEFACTS = tuple(NEEDS)


def run_configs(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """The config of every run, with the shared victim directory and the sweep's best.json."""
  best = os.path.join(workdir, "sweep", reconstruct.BEST_FILE)
  victim_dir = os.path.join(workdir, "victim")
  configs = {}
  for name in RUNS:
    if name == "landscape_bilevel":
      configs[name] = config.bilevel
      continue
    c = (config.landscape if name == "landscape_decoreco" else config.decoreco
         ).copy_and_resolve_references()
    c.victim.checkpoint_dir = victim_dir
    if name == "uniform":
      c.init.kind = "uniform"
    elif name == "partition":
      c.init.kind = "partition"
    if name in ("tuned", "partition", "landscape_decoreco"):
      c.attack.hparams_file = best
    configs[name] = c
  return configs


def run_or_reuse(name: str, config: ml_collections.ConfigDict, workdir: str):
  """Runs ``name`` into ``workdir`` unless it finished there with this same config
  (an unfinished run there of the same config is resumed).

  Raises:
    FileExistsError: ``workdir`` holds a finished run of a different config (finished
      results are never replaced silently: remove the folder to recompute).
  """
  kind, marker = RUNS[name]
  if os.path.exists(os.path.join(workdir, marker)):
    if io.read_json(os.path.join(workdir, io.CONFIG_FILE)) != io.to_jsonable(config):
      raise FileExistsError(f"{workdir} holds a finished run of a different config; "
                            "remove it or use another --workdir")
    logging.info("Reusing the finished run %s", workdir)
    return
  if kind == "sweep":
    reconstruct.sweep(config, workdir)
  elif kind == "attack":
    reconstruct.run(config, workdir)
  else:
    landscape.run(config, workdir)


def _results(workdir: str, name: str) -> dict:
  return dict(np.load(os.path.join(workdir, name, reconstruct.RESULTS_FILE)))


def _summary(workdir: str, name: str) -> dict:
  return io.read_json(os.path.join(workdir, name, reconstruct.SUMMARY_FILE))


def _hp_text(summary: dict) -> str:
  hp = summary["hyperparameters"]
  return (f"σ = {hp['init_scale']:.3g}, lr = {hp['lr']:.3g}, λ_min = {hp['lambda_min']:.3g}, "
          f"α = {hp['alpha']:.3g}")


def figure(name: str, workdir: str, n_show: int) -> dict[str, plt.Figure]:
  """The artefact ``name`` (one or more figures, by file name) from finished runs."""
  if name in ("fig5", "fig6", "fig8"):
    run = "uniform" if name == "fig5" else "tuned"
    results, summary = _results(workdir, run), _summary(workdir, run)
    title = {"fig5": "Fig. 5: U(0, 1) initialisation, no variance tuning",
             "fig6": "Fig. 6: tuned σ", "fig8": "Fig. 8: the first reconstructions"}[name]
    counts = ", ".join(f"SSIM ≥ {k[8:]}: {v}" for k, v in summary["reconstructed"].items())
    return {name: plotting.decoreco_grid(
        results, "train", n_show=n_show, order="index" if name == "fig8" else "ssim",
        title=f"{title} ({_hp_text(summary)}; {counts} of {summary['n_train']})")}
  if name == "fig7":
    results, summary = _results(workdir, "tuned"), _summary(workdir, "tuned")
    return {"fig7": plotting.best_per_train_grid(
                results, n_show=n_show, title=f"Fig. 7: tuned σ ({_hp_text(summary)})"),
            "fig7_ssim_vs_output": plotting.ssim_vs_output(results)}
  if name == "fig9":
    results, summary = _results(workdir, "partition"), _summary(workdir, "partition")
    fig = plt.figure(figsize=(14.4, 2 * 1.1 * max(1, n_show // 8) + 0.8))
    top, bottom = fig.subfigures(2, 1)
    plotting.decoreco_grid(results, "train", n_show=n_show, fig=top,
                           title="Fig. 9 (a): partition initialisation, training set")
    plotting.decoreco_grid(results, "partition", n_show=n_show, fig=bottom,
                           title="(b): the same reconstructions, partition")
    return {"fig9": fig}
  if name in ("fig10", "fig11", "fig12"):
    panels = {}
    for label, run in (("(a) bilevel", "landscape_bilevel"), ("(b) DecoReco", "landscape_decoreco")):
      records = io.read_json(os.path.join(workdir, run, landscape.LANDSCAPE_FILE))
      shape = tuple(np.load(os.path.join(workdir, run, landscape.RESULTS_FILE))["grid_shape"])
      panels[label] = (records, shape)
    return {name: plotting.combined_landscape_figures(panels)[name]}
  raise ValueError(f"unknown artefact {name!r}; known: {ARTEFACTS}")


def run(config: ml_collections.ConfigDict, workdir: str, artefacts=ARTEFACTS) -> list[str]:
  """Runs (or reuses) what ``artefacts`` need and writes them into ``workdir``.

  Args:
    config: configs/decoreco_figures.py (sections decoreco, landscape, bilevel, n_show).
    workdir: the figures' work directory (runs in sub-directories).
    artefacts: names from `ARTEFACTS`.
  Returns:
    The figure files written (PNG and PDF).
  Raises:
    ValueError: unknown artefact.
  """
  unknown = [a for a in artefacts if a not in NEEDS]
  if unknown:
    raise ValueError(f"unknown artefact(s) {unknown}; known: {ARTEFACTS}")
  os.makedirs(workdir, exist_ok=True)
  configs = run_configs(config, workdir)
  for name in RUNS:  # in dependency order: the sweep first
    if any(name in NEEDS[a] for a in artefacts):
      run_or_reuse(name, configs[name], os.path.join(workdir, name))
  written = []
  for artefact in artefacts:
    for file_name, fig in figure(artefact, workdir, config.n_show).items():
      written += io.save_figure(fig, workdir, file_name)
  logging.info("Wrote %s", written)
  return written
