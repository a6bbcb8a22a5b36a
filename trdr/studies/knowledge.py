"""Privacy against what the adversary knows: recovered training images as knowledge grows.

Runkel et al.'s conclusion ("privacy due to uncertainty") is about an adversary that holds
θ* and nothing else. Here the informed adversary (`trdr.attacks.informed`; Balle, Cherubin
and Hayes, S&P 2022) also knows all training images but k, for k from 1 to n
(configs/knowledge.py). `run` measures, per victim, seed and k, the fraction of the k
unknown images recovered (best buddies at SSIM ≥ the config's level, per SSIM window)
beside the same fraction for the start images; `summary` gives the mean and spread over
seeds, `figure` the curves and `markdown` the page with its one-paragraph reading.

Rows are written to WORKDIR/knowledge.json as each finishes; a rerun skips the rows there
(a long run never loses finished work).
"""

import os
import time

import jax
import jax.numpy as jnp
import matplotlib.figure
import ml_collections
import numpy as np
from absl import logging

from trdr import data, experiment, victim
from trdr.attacks import decoreco, informed, truth
from trdr.attacks import init as inits
from trdr.evaluation import evaluate, ssim
from trdr.runtime import files, rundir
from trdr.victim import kkt

ROWS_FILE = "knowledge.json"


INFORMED = "informed"
# The informed adversary whose KKT objective keeps the tensors where the premise holds
# (`trdr.attacks.informed.premise_weights`), by weighting: adversary name per weighting.
PREMISE_ADVERSARIES = {"explained": "informed, premise-weighted",
                       "first_layer": "informed, first layer"}
# The bilevel attack (eqs. 2 and 7 of Runkel et al., `trdr.attacks.bilevel`) as the
# paper's adversary (k = n) under two lower-level starts: the victim's own θ0, known to the
# adversary (Loo et al., ICLR 2024; SimuDy, ICLR 2025; reading (b) of
# `trdr.studies.readings`), and a fresh U(0, 1) draw at every solve, θ0 unknown (the
# paper's sentence, reading (a)).
BILEVEL = {"bilevel, θ0 known": "victim_theta0", "bilevel, θ0 unknown": "uniform"}


def _key(row: dict) -> tuple:
  return row["victim"], row.get("adversary", INFORMED), row["seed"], row["k"]


def _seeded(config: ml_collections.ConfigDict, seed: int) -> ml_collections.ConfigDict:
  c = config.copy_and_resolve_references()
  c.seed = c.data.seed = c.victim.seed = int(seed)
  return c


def unknown_points(n: int, k: int, seed: int) -> np.ndarray:
  """The k unknown training indices (sorted) of a row: a seeded draw without replacement."""
  return np.sort(np.random.default_rng([seed, k]).choice(n, k, replace=False))


def recovered(images, truth, mean, level: float, windows, display: str = "pixels"
              ) -> dict[str, int]:
  """Unknown training images recovered: best buddies (Haim et al.'s matching, NCC) at SSIM
  ≥ ``level``, per SSIM window (`trdr.evaluation.evaluate.reconstructions`).

  Args:
    images: float[k, H, W, C] reconstructions, truth float[k, H, W, C] the unknown
      training images, both in the victim's input space; mean: the task mean (or None).
    display: how the reconstructions are shown (the attack's `Attack.display`: DecoReco's
      are min-max scaled, as Haim et al. show them); the training images as pixels.
  Returns:
    {"w<window>": count} for each window.
  """
  shown = np.asarray(evaluate.to_display(np.asarray(truth), mean, "pixels"))
  found = evaluate.reconstructions(np.asarray(images), mean, {"train": shown}, display=display,
                                   thresholds=(level,), ssim_window=windows[0],
                                   count_windows=windows[1:])
  return {f"w{w}": int(found["count_best_buddies_ssim_ge" + ("" if w == windows[0]
                                                               else f"_w{w}")][0])
          for w in windows}


def _fitted_search(target: victim.Victim, task, k: int, config) -> bool:
  """Whether a row runs `kkt_row`: a gradient-descent Haim MLP (the fused loss's victims,
  `decoreco.fused_applies`) with 1 ≤ k ≤ ``config.fitted_max_k`` (0 or absent: never) and
  k < n."""
  return (target.config.get("training", "lbfgs") == "gd" and decoreco.fused_applies(target)
          and k <= config.get("fitted_max_k", 0) and k < task.train_images.shape[0])


def kkt_row(target: victim.Victim, task, k: int, seed: int,
            config: ml_collections.ConfigDict, restarts: int, steps: int,
            premise: str = "all") -> dict:
  """A row of the informed adversary against a gradient-descent Haim MLP by
  `trdr.attacks.informed.kkt_search` (the known images' λ fitted first, ``restarts``
  DecoReco starts N(0, σ²) of ``steps`` steps, the lowest loss kept), its objective
  weighted per tensor by ``premise`` (`informed.premise_weights`: "all" is DecoReco's).

  On the seeds of ``config.truth_seeds`` the truth diagnostic (`trdr.attacks.truth`):
  the same objective at the true unknown images with every λ fitted (``loss_at_truth``),
  beside the loss reached (the kept start's images, every λ fitted again), and the same
  search started at the truth with those λ (``truth_start``: its loss, mean SSIM of its
  images to their start, the count it keeps), read by `truth.verdict`.

  Returns:
    `attack_row`'s fields (residual: the loss reached; truth_residual: the loss at the
    truth, NaN off ``truth_seeds``) and premise, weights ({tensor: w_t}), search_loss,
    ssim_to_truth (mean over the k of SSIM(reconstruction, its training image) as scored,
    first window) and, on ``truth_seeds``, truth (`trdr.attacks.truth`'s dict).
  """
  t0 = time.perf_counter()
  kkt = config.attack.kkt
  x = jnp.asarray(task.train_images)
  y = jnp.asarray(task.train_labels, x.dtype)
  n = x.shape[0]
  unknown = unknown_points(n, k, seed)
  known = np.setdiff1d(np.arange(n), unknown)
  starts = jax.vmap(lambda s: informed.start_images(
      target, config.attack, s, (k, *x.shape[1:]), task.mean, x.dtype))(
          jax.random.split(jax.random.PRNGKey(seed), restarts))
  objective = informed.kkt_objective(target, kkt, (x[known], y[known]), y[unknown], premise)
  found = informed.kkt_search(target, objective, starts, steps)
  level, windows = config.eval.ssim_level, tuple(config.eval.windows)
  true = np.asarray(x[unknown])
  shown = lambda images, how: jnp.asarray(evaluate.to_display(images, task.mean, how))
  to_truth = float(jnp.mean(ssim.ssim(shown(found.images, "minmax"), shown(true, "pixels"),
                                      filter_size=windows[0])))
  row = {"k": int(k), "n": int(n), "method": "optimisation", "premise": premise,
         "weights": objective.weights, "residual": found.loss,
         "search_loss": found.search_loss, "truth_residual": float("nan"),
         "display": "minmax", "ssim_to_truth": to_truth,
         "recovered": recovered(found.images, true, task.mean, level, windows, "minmax"),
         "start_recovered": recovered(np.asarray(starts[found.start]), true, task.mean,
                                      level, windows, "minmax")}
  if seed in config.truth_seeds:
    lambdas, at_truth, grad_norm = informed.objective_at(target, objective, x[unknown])
    start = informed.kkt_search(target, objective, x[unknown][None], steps,
                                lambdas[:n - k], lambdas[n - k:])
    kept = recovered(start.images, true, task.mean, level, windows, "minmax")
    to_start = float(jnp.mean(ssim.ssim(shown(start.images, "minmax"), shown(true, "minmax"),
                                        filter_size=windows[0])))
    row["truth_residual"] = at_truth
    row["truth"] = {"loss_at_truth": at_truth, "lambda_fit_grad_norm": grad_norm,
                    "loss_reached": found.loss,
                    "truth_start": {"loss": start.loss, "ssim_to_start": to_start,
                                    "kept": kept[f"w{windows[0]}"],
                                    "kept_w3": kept.get("w3", -1), "n": int(k)},
                    **truth.verdict(at_truth, found.loss, kept[f"w{windows[0]}"], k,
                                    start.loss)}
  row["seconds"] = time.perf_counter() - t0
  return row


def attack_row(target: victim.Victim, task, k: int, seed: int,
               config: ml_collections.ConfigDict, restarts: int, steps: int,
               premise: str = "all") -> dict:
  """One row: the informed adversary with k unknown points of ``task``'s training set,
  from ``restarts`` starts (`trdr.attacks.informed.start_images`; a closed form needs
  none), ``steps`` steps each; on the seeds of ``config.truth_seeds`` also the same steps
  from the true images (a diagnostic; it costs one more start, as much as the adversary's
  own search for the gradient-descent victim's single start). A gradient-descent Haim MLP
  at k ≤ ``config.fitted_max_k`` runs `kkt_row` instead (``premise`` its weighting; other
  rows take "all" only).

  Returns:
    {k, n, method ("closed form" | "optimisation"), residual (the kept start's final
    loss; NaN for a closed form), truth_residual (the final loss from the true images,
    `trdr.attacks.informed.reconstruct`'s diagnostic; NaN on a seed outside
    ``config.truth_seeds``), display (how the reconstructions
    were scored: "minmax" for DecoReco's, as Haim et al. show them), recovered and
    start_recovered ({"w<window>": count}), seconds}.
  """
  t0 = time.perf_counter()
  attack = config.attack.copy_and_resolve_references().unlock()
  attack.steps = attack.kkt.steps = int(steps)
  if _fitted_search(target, task, k, config):
    return kkt_row(target, task, k, seed, config, restarts, steps, premise)
  if premise != "all":
    raise ValueError(f"premise weighting {premise!r} needs the fitted KKT search "
                     "(a gradient-descent Haim MLP, k ≤ config.fitted_max_k)")
  x = jnp.asarray(task.train_images)
  y = jnp.asarray(task.train_labels, x.dtype)
  n = x.shape[0]
  unknown = unknown_points(n, k, seed)
  known = np.setdiff1d(np.arange(n), unknown)
  key = jax.random.PRNGKey(seed)
  # A gradient-descent victim's "same steps from the truth" here would start from random λ
  # and compare nothing like-for-like: its diagnostic is `kkt_row`'s, at k ≤ fitted_max_k.
  gd = target.config.get("training", "lbfgs") == "gd"
  starts = jax.vmap(lambda s: informed.start_images(
      target, attack, s, (k, *x.shape[1:]), task.mean, x.dtype))(
          jax.random.split(key, restarts))
  found = informed.reconstruct(target, attack, (x[known], y[known]), y[unknown],
                               starts, box=inits.pixel_box(task.mean),
                               truth=x[unknown] if seed in config.truth_seeds and not gd
                               else None)
  level, windows = config.eval.ssim_level, tuple(config.eval.windows)
  truth = np.asarray(x[unknown])
  display = "minmax" if target.config.get("training", "lbfgs") == "gd" else "pixels"
  return {"k": int(k), "n": int(n), "method": found.method, "residual": found.residual,
          "truth_residual": found.truth_residual, "display": display,
          "recovered": recovered(found.images, truth, task.mean, level, windows, display),
          "start_recovered": recovered(np.asarray(starts[found.start]), truth, task.mean,
                                       level, windows, display),
          "seconds": time.perf_counter() - t0}


def run(config: ml_collections.ConfigDict, workdir: str) -> list[dict]:
  """Every (victim, adversary, seed, k) row of ``config`` (configs/knowledge.py), finished
  rows reused.

  Returns:
    The rows {victim, adversary (`INFORMED` or a key of `BILEVEL`, for the victims of
    ``config.bilevel.victims``), seed, k, n, method, residual, recovered, start_recovered,
    seconds, grad_norm (||∇θE(θ*)|| of a stationary victim, NaN otherwise)}, also in
    WORKDIR/knowledge.json.
  Raises:
    FileExistsError: ``workdir`` holds rows of other settings (`trdr.runtime.rundir.study_rows`).
  """
  # Rows are reused by (victim, adversary, seed, k), so a workdir holds rows of one set of
  # settings: all sections but the seeds and ks, which may grow.
  path, rows = rundir.study_rows(workdir, config, ROWS_FILE, growing=("seeds", "ks"))
  done = {_key(r) for r in rows}
  for name, base in config.victims.items():
    if config.get("only_victims") and name not in config.only_victims:
      continue
    for seed in config.seeds:
      c = _seeded(base, seed)
      with jax.enable_x64(bool(c.float64)):
        task = data.make_task(c.data)
        target = None
        for k in config.ks:
          k = int(k) or task.train_images.shape[0]
          if k > task.train_images.shape[0]:
            continue
          for premise in ("all", *config.get("premises", ())):
            adversary = INFORMED if premise == "all" else PREMISE_ADVERSARIES[premise]
            if (name, adversary, int(seed), k) in done or (
                premise != "all" and k not in config.premise_ks):
              continue
            if target is None:
              target = victim.load_or_train(c, task, os.path.join(workdir, "victims",
                                                                  f"{name}_seed{seed}"))
              grad_norm = _grad_norm(target, task)     # one θ* per victim and seed
              floor = _kkt_floor(target, task)
            if premise != "all" and not _fitted_search(target, task, k, config):
              continue
            row = {"victim": name, "adversary": adversary, "seed": int(seed),
                   **attack_row(target, task, k, int(seed), config, config.restarts[name],
                                config.steps[name], premise),
                   "grad_norm": grad_norm, **floor}
            _log(row)
            rows.append(row)
            done.add(_key(row))
            files.write_json(path, rows)
        n = task.train_images.shape[0]
        for adversary, start in BILEVEL.items():
          if name not in config.bilevel.victims or (name, adversary, int(seed), n) in done:
            continue
          row = {"victim": name, "adversary": adversary, "seed": int(seed),
                 **bilevel_row(c, start, config, os.path.join(workdir, "victims",
                                                              f"{name}_seed{seed}"),
                               os.path.join(workdir, "bilevel", f"{name}_{start}_seed{seed}")),
                 "grad_norm": float("nan")}
          _log(row)
          rows.append(row)
          done.add(_key(row))
          files.write_json(path, rows)
  return rows


def _log(row: dict) -> None:
  logging.info("knowledge %s, %s, seed %d, k=%d (%s): recovered %s, start %s, %.1f s",
               row["victim"], row["adversary"], row["seed"], row["k"], row["method"],
               row["recovered"], row["start_recovered"], row["seconds"])


def bilevel_row(victim_config: ml_collections.ConfigDict, start: str,
                config: ml_collections.ConfigDict, victim_dir: str, run_dir: str) -> dict:
  """The paper's adversary (k = n) by the bilevel attack from U(0, 1) noise, one start per
  training image, its lower level restarting from ``start`` (`BILEVEL`), against the
  knowledge experiment's victim (``victim_dir``, shared with the informed rows); a
  finished run is reused (`trdr.experiment.run`).

  Returns:
    The row's fields as `attack_row`'s (method "bilevel"; residual: the final upper loss
    ||θ* − θ(x)||²).
  """
  t0 = time.perf_counter()
  c = victim_config.copy_and_resolve_references().unlock()   # --config is locked (cli)
  c.init.kind = "uniform"
  c.attack.candidates_per_image = 1
  c.attack.steps = int(config.bilevel.steps)
  c.attack.lower_level.start = start
  c.victim.checkpoint_dir = victim_dir
  experiment.run(c, run_dir, "attack")
  with experiment.load_results(run_dir) as saved:
    final, initial, truth, upper = (np.asarray(saved[k]) for k in (
        "final_images", "initial_images", "train_images", "history_upper_loss"))
    mean = np.asarray(saved["mean"]) if saved["mean"].size else None
  level, windows = config.eval.ssim_level, tuple(config.eval.windows)
  return {"k": int(truth.shape[0]), "n": int(truth.shape[0]), "method": "bilevel",
          "residual": float(upper[-1]), "truth_residual": float("nan"),
          "recovered": recovered(final, truth, mean, level, windows),
          "start_recovered": recovered(initial, truth, mean, level, windows),
          "seconds": time.perf_counter() - t0}


def _grad_norm(target: victim.Victim, task) -> float:
  if target.config.get("training", "lbfgs") != "lbfgs":
    return float("nan")
  x = jnp.asarray(task.train_images)
  g = jax.grad(lambda p: victim.energy(p, x, jnp.asarray(task.train_labels, x.dtype),
                                       apply_fn=lambda q, i: target.model.apply({"params": q}, i),
                                       weight_decay=target.config.weight_decay))(target.params)
  return float(jnp.sqrt(sum(jnp.sum(v ** 2) for v in jax.tree.leaves(g))))


def _kkt_floor(target: victim.Victim, task) -> dict:
  """For a gradient-descent victim, the KKT premise (`trdr.victim.kkt`): the residual
  ‖θ* − Σ λ_i y_i ∇θΦ(x_i)‖² of the best λ ≥ 0 on all n training images with the plain
  ReLU derivative and no λ prior (`trdr.victim.kkt.fit`; for a Haim MLP its Grams,
  `informed.premise_fit`), its first layer's and every tensor's unexplained fraction.
  A statement about θ*, not a value of the attack's objective (sigmoid(αz), λ prior): it
  is never compared with the attack's losses. {} for a stationary victim."""
  if target.config.get("training", "lbfgs") != "gd":
    return {}
  x = jnp.asarray(task.train_images)
  y = jnp.asarray(task.train_labels, x.dtype)
  if decoreco.fused_applies(target):    # the same fit from the Haim MLP's Grams, in seconds
    relative, total = informed.premise_fit(informed.haim_grams(target.params, x, y))
    return {"kkt_floor": total, "kkt_first_layer": relative["dense_0/kernel"],
            "kkt_relative": relative}
  fit = kkt.fit(target.apply, target.params, x, y)
  return {"kkt_floor": fit.residual_total, "kkt_first_layer": fit.relative[fit.first_layer],
          "kkt_relative": fit.relative}


def summary(rows: list[dict], window: int) -> list[dict]:
  """Per (victim, adversary, k): the recovered fraction's mean and sample std over seeds
  (ddof 1; NaN for one seed), the baseline's mean, the seeds, the method(s).

  Returns:
    Rows {victim, adversary, k, n, seeds, method, mean, std, start_mean, residual,
    truth_residual and floor (medians over seeds of the final loss kept, of the loss at or
    from the true images and of the KKT premise floor `_kkt_floor`; NaN where none),
    verdicts ({"search": seeds, "objective": seeds} of the truth diagnostic)}, in the rows'
    order.
  """
  groups: dict[tuple, list[dict]] = {}
  for r in rows:
    groups.setdefault((r["victim"], r.get("adversary", INFORMED), r["k"]), []).append(r)
  out = []
  for (name, adversary, k), rs in groups.items():
    frac = np.asarray([r["recovered"][f"w{window}"] / k for r in rs])
    start = np.asarray([r["start_recovered"][f"w{window}"] / k for r in rs])
    out.append({"victim": name, "adversary": adversary, "k": k, "n": rs[0]["n"],
                "seeds": [r["seed"] for r in rs],
                "method": "/".join(sorted({r["method"] for r in rs})),
                "mean": float(frac.mean()),
                "std": float(frac.std(ddof=1)) if len(rs) > 1 else float("nan"),
                "start_mean": float(start.mean()),
                "residual": _median([r["residual"] for r in rs]),
                "truth_residual": _median([r.get("truth_residual", np.nan) for r in rs]),
                "floor": _median([r.get("kkt_floor", np.nan) for r in rs]),
                "verdicts": {v: [r["seed"] for r in rs if r.get("truth", {}).get("verdict") == v]
                             for v in ("search", "objective")}})
  return out


def _median(values) -> float:
  values = np.asarray(values, float)
  return float(np.median(values[np.isfinite(values)])) if np.isfinite(values).any() \
      else float("nan")


def figure(rows: list[dict], windows) -> matplotlib.figure.Figure:
  """Recovered fraction against k (log axis; k = n at the right of each curve), one curve
  per victim for the informed adversary with its seeds' spread as error bars, the start
  images' fraction dashed, and the bilevel adversaries at k = n as open markers; one
  panel per SSIM window."""
  fig = matplotlib.figure.Figure(figsize=(5.5 * len(windows), 4.4))
  markers = dict(zip(BILEVEL, ("^", "v")))
  for ax, w in zip(fig.subplots(1, len(windows), squeeze=False)[0], windows):
    table = summary(rows, w)
    colors = {}
    for name in dict.fromkeys(r["victim"] for r in table):
      t = [r for r in table if r["victim"] == name and r["adversary"] == INFORMED]
      ks = [r["k"] for r in t]
      line = ax.errorbar(ks, [r["mean"] for r in t], yerr=np.nan_to_num([r["std"] for r in t]),
                         marker="o", capsize=3, label=f"{name}, informed (n = {t[0]['n']})")
      colors[name] = line[0].get_color()
      ax.plot(ks, [r["start_mean"] for r in t], ls="--", color=colors[name], alpha=0.6)
    for r in table:
      if r["adversary"] in BILEVEL:
        ax.errorbar([r["k"]], [r["mean"]], yerr=np.nan_to_num([r["std"]]), capsize=3,
                    marker=markers[r["adversary"]], mfc="none", ls="none",
                    color=colors.get(r["victim"]), label=f"{r['victim']}, {r['adversary']}")
    ax.set_xscale("log")
    ax.set_ylim(-0.05, 1.05)
    ax.set_xlabel("k, training images the adversary does not know (k = n: the paper's)")
    ax.set_ylabel(f"fraction recovered (best buddies, SSIM ≥ level, window {w})")
    ax.set_title(f"Privacy against knowledge, SSIM window {w}\n(dashed: the start images)")
    ax.legend(fontsize=7)
  fig.tight_layout()
  return fig


def markdown(rows: list[dict], config: ml_collections.ConfigDict,
             generated: dict | None = None) -> str:
  """The page: the table per window (mean ± std over seeds, baseline), the victims'
  stationarity and the reading in one paragraph, from the numbers alone; ``generated``
  (`trdr.report.provenance`) in its header."""
  windows = tuple(config.eval.windows)
  g = generated or {}
  lines = ["# Privacy against what the adversary knows", "",
           f"Generated by `make knowledge` (written {g.get('utc', '?')}, {g.get('machine', '?')}, "
           f"{g.get('devices', '?')}, jax {g.get('jax', '?')}) from knowledge.json; do not edit "
           "by hand. The figure: [knowledge.png](knowledge.png).", "",
           f"Size `{config.variant}`; seeds {list(config.seeds)}; a training image counts as "
           f"recovered when it and a reconstruction are best buddies at SSIM ≥ "
           f"{config.eval.ssim_level:g}. The informed adversary (`trdr.attacks.informed`) "
           "knows θ*, the training recipe and all training images but k; k = n is the "
           "paper's adversary. Baseline: the same count for the start images (U(0, 1) noise; "
           "N(0, σ²) for the gradient-descent victim, whose reconstructions are scored "
           "min-max scaled as DecoReco's are).", "",
           "The loss columns are diagnostics the adversary cannot run. For the stationary "
           "victims: the same steps from the true images, on seeds "
           f"{list(config.truth_seeds)}. For the gradient-descent victim at k ≤ "
           f"{config.get('fitted_max_k', 0)} (`trdr.attacks.informed.kkt_search`: the known "
           "images' λ fitted first, then DecoReco's step on the unknown images): the "
           "adversary's own objective (its sigmoid(αz) derivative, λ_min and pixel priors, "
           "weighted per tensor for the premise-weighted adversary) with every λ fitted, at "
           "the images it found (loss reached) and at the true images (loss at the truth), "
           "and the same search started at the truth with those λ; `trdr.attacks.truth."
           "verdict` reads them per seed: \"search\" (the truth is lower and the search "
           "keeps it: the search failed) or \"objective\" (otherwise: the objective does "
           "not single out the truth). Larger k of that victim have no diagnostic.", ""]
  for w in windows:
    lines += [f"## SSIM window {w}", "",
              "| victim | adversary | n | k | method | recovered (mean ± std over seeds) "
              "| start images | loss: reached / at or from the truth (medians) "
              "| verdict: seeds |",
              "|---|---|---:|---:|---|---:|---:|---:|---|"]
    for r in summary(rows, w):
      verdicts = "; ".join(f"{v} {seeds}" for v, seeds in r["verdicts"].items() if seeds)
      lines.append(f"| {r['victim']} | {r['adversary']} | {r['n']} | {r['k']} | {r['method']} | "
                   f"{r['mean']:.2f} ± {r['std']:.2f} | {r['start_mean']:.2f} | "
                   f"{r['residual']:.6g} / {r['truth_residual']:.6g} | {verdicts or '—'} |")
    lines.append("")
  lines += diagnostic_table(rows, windows) + premise_lines(rows)
  norms = {r["victim"]: [] for r in rows}
  for r in rows:
    if r.get("adversary", INFORMED) == INFORMED:
      norms[r["victim"]].append(r["grad_norm"])
  lines += ["## Stationarity of θ*", "",
            "The closed forms are exact for a stationary θ*; their error is bounded by "
            "||∇θE(θ*)|| (`trdr.attacks.informed`). Largest ||∇θE(θ*)|| over the rows: " +
            ", ".join(f"{v} {np.nanmax(g):.2g}" if np.isfinite(g).any() else
                      f"{v} (gradient descent, KKT only)"
                      for v, g in ((v, np.asarray(g, float)) for v, g in norms.items())) + ".",
            "", "## Reading", "", reading(rows, windows[0]), ""]
  return "\n".join(lines)


def diagnostic_table(rows: list[dict], windows) -> list[str]:
  """The truth diagnostic per row (seed) of the gradient-descent victim's fitted search
  (`kkt_row`): recovered and SSIM to its training image, the loss reached and at the truth
  (every λ fitted, the adversary's own objective), the truth-start run (its loss, SSIM to
  its start, kept) and the verdict. Markdown lines; none when no row has the diagnostic."""
  diag = [r for r in rows if "truth" in r]
  if not diag:
    return []
  w = windows[0]
  lines = ["## Truth diagnostic per seed (gradient-descent victim)", "",
           f"Recovered and SSIM at window {w}; losses are the adversary's own objective "
           "(its weights, sigmoid(αz), λ prior) with every λ fitted; the truth-start run is "
           "the same search from the true images with those λ.", "",
           "| victim | adversary | seed | k | recovered | SSIM to truth | loss reached "
           "| loss at truth | truth start: loss / SSIM to start / kept | verdict |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
  for r in diag:
    t, s = r["truth"], r["truth"]["truth_start"]
    lines.append(f"| {r['victim']} | {r['adversary']} | {r['seed']} | {r['k']} | "
                 f"{r['recovered'][f'w{w}']} of {r['k']} | {r['ssim_to_truth']:.3f} | "
                 f"{t['loss_reached']:.6g} | {t['loss_at_truth']:.6g} | "
                 f"{s['loss']:.6g} / {s['ssim_to_start']:.3f} / {s['kept']} of {s['n']} | "
                 f"{t['verdict']} |")
  return lines + [""]


def premise_lines(rows: list[dict]) -> list[str]:
  """The KKT premise of each gradient-descent victim and seed (`_kkt_floor`), labelled as
  the premise: a statement about θ*, never compared with the attack's losses."""
  seen = {}
  for r in rows:
    if "kkt_floor" in r:
      seen.setdefault((r["victim"], r["seed"]), r)
  if not seen:
    return []
  lines = ["## The KKT premise (gradient-descent victim)", "",
           "The best λ ≥ 0 on all n true training images with the plain ReLU derivative and "
           "no λ prior (`trdr.victim.kkt`): what of θ* the premise leaves unexplained. It is "
           "another objective than the attack's (sigmoid(αz), λ_min prior), so its floor is "
           "not compared with the losses above; the premise-weighted adversary weights each "
           "tensor by its explained fraction on the known images.", "",
           "| victim | seed | ‖r‖² | unexplained fraction per tensor |", "|---|---:|---:|---|"]
  for (name, seed), r in seen.items():
    per = ", ".join(f"{p} {v:.3f}" for p, v in r.get("kkt_relative", {}).items()) or \
        f"first layer {r['kkt_first_layer']:.3f}"
    lines.append(f"| {name} | {seed} | {r['kkt_floor']:.4g} | {per} |")
  return lines + [""]


def diagnosis(rows: list[dict]) -> str:
  """Sentences from the truth diagnostic: per (victim, adversary, k) with one, the seeds
  of each verdict; empty when no row has it."""
  groups: dict[tuple, list[dict]] = {}
  for r in rows:
    if "truth" in r:
      groups.setdefault((r["victim"], r["adversary"], r["k"]), []).append(r)
  parts = []
  for (name, adversary, k), rs in groups.items():
    search = [r["seed"] for r in rs if r["truth"]["verdict"] == "search"]
    objective = [r["seed"] for r in rs if r["truth"]["verdict"] == "objective"]
    found = sum(r["recovered"][next(iter(r["recovered"]))] for r in rs)
    text = (f"{name}, {adversary}, k = {k}: recovered {found} of {sum(r['k'] for r in rs)} "
            f"unknown images over {len(rs)} seeds")
    if search:
      text += (f"; on seeds {search} the truth is lower than the loss reached and a search "
               "from it keeps it (the objective prefers the truth)")
    if objective:
      text += (f"; on seeds {objective} the objective does not single out the truth (not "
               "lower than the loss reached, or a search from it does not keep it)")
    basin = [r["seed"] for r in rs if r["truth"].get("truth_start_lower")
             and r["truth"]["stays"] and r["recovered"][next(iter(r["recovered"]))] < r["k"]]
    if basin:
      text += (f"; on seeds {basin} the search from the truth ends below the loss reached "
               "and keeps the images: a lower point near the truth that the search missed")
    parts.append(text)
  return ("Truth diagnostic: " + "; ".join(parts) + ".") if parts else ""


def reading(rows: list[dict], window: int) -> str:
  """One paragraph from the numbers. Per victim: what each adversary at k = n recovers
  (mean ± std over seeds, beside the start images'), and the largest k at which the
  informed adversary recovers more than half of the unknown images on average and more
  than its start images. Where the paper's adversaries (the informed one at k = n, the
  bilevel one with θ0 unknown) recover at most half and an informed one with k < n more
  than half, the paragraph says that the uncertainty is about the other training images."""
  table = summary(rows, window)
  spread = lambda r: (f"{r['mean']:.2f} ± {r['std']:.2f}" if np.isfinite(r["std"])
                      else f"{r['mean']:.2f}") + f" (start images {r['start_mean']:.2f})"
  paper = (INFORMED, "bilevel, θ0 unknown")
  parts, uncertain = [], []
  for name in dict.fromkeys(r["victim"] for r in table):
    t = [r for r in table if r["victim"] == name]
    at_n = [r for r in t if r["k"] == r["n"]]
    more = [r["k"] for r in t if r["adversary"] == INFORMED and r["k"] < r["n"]
            and r["mean"] > 0.5 and r["mean"] > r["start_mean"]]
    text = f"{name} (n = {t[0]['n']}): at k = n " + (", ".join(
        f"{r['adversary']} {spread(r)}" for r in at_n) if at_n else "nothing was run")
    text += (f"; knowing all but k = {max(more)} or fewer training images, the informed "
             "adversary recovers more than half of the unknown ones" if more else
             "; no k < n tried lets the informed adversary recover more than half")
    parts.append(text)
    if more and at_n and all(r["mean"] <= 0.5 for r in at_n if r["adversary"] in paper):
      uncertain.append(name)
  lead = (f"For {', '.join(uncertain)} the paper's adversaries recover at most half of the "
          "training images and an informed one more than half of the unknown ones: there "
          "the privacy is the adversary's uncertainty about the other training images, not "
          "a property of θ*. " if uncertain else "")
  diagnosed = diagnosis(rows)
  return (f"SSIM window {window}; recovered: best buddies at SSIM ≥ the level, mean ± std "
          f"over seeds. {lead}" + "; ".join(parts) + "." + (f" {diagnosed}" if diagnosed
                                                              else ""))
