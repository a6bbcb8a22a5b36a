"""Privacy due to noise: the attacks on DP-SGD victims beside the bound DP puts on them.

Runkel et al. ask whether a trained classifier is private because the adversary is
uncertain. Differential privacy answers "how private" with a guarantee: against a
μ-GDP training run no reconstruction attack succeeds with probability above
Φ(Φ⁻¹(κ) + μ) (`trdr.evaluation.rero`; Kaissis et al. 2023, Hayes et al. 2023). `run`
trains, per victim and seed, DP-SGD victims (`trdr.victim.dp_sgd`) at noise multipliers
calibrated to the ε of ``config.epsilons``, the same recipe without noise and the
non-private victim (configs/dp.py), and runs on each the informed adversary
(`trdr.studies.knowledge.attack_row`, k unknown images), DecoReco and the bilevel attack;
`summary` puts each measured success beside its bound, `figure` draws recovered fraction
and test accuracy against ε with the bound's curve, `markdown` writes the page with the
bound's assumptions and a reading computed from the numbers.

Beside them, the attack built for the mechanism: the prior-aware attack of Hayes,
Mahloujifar and Balle (NeurIPS 2023; `trdr.attacks.prior_aware`) on the released
trajectory of full-batch DP-SGD, K = 2 and K = 10 candidates of the target's class, κ =
1/K exactly (`prior_aware_row`, `prior_aware_summary`, the page's section
`prior_aware_section`). Every victim of the study subtracts the test split's mean
(configs/dp.py), which depends on no training image.

Rows are written to WORKDIR/dp.json as each finishes (with the prior's baseline κ; the
prior-aware rows under "prior_aware"); a rerun skips the rows there.
"""

import functools
import math
import os
import time

import jax
import jax.numpy as jnp
import matplotlib.figure
import ml_collections
import numpy as np
import scipy.stats
from absl import logging

from trdr import data, experiment, models, victim
from trdr.attacks import prior_aware, truth
from trdr.evaluation import evaluate, rero
from trdr.runtime import files, rundir
from trdr.studies import knowledge
from trdr.victim import accounting, cache, dp_sgd

ROWS_FILE = "dp.json"
INFORMED, DECORECO, BILEVEL = "informed", "DecoReco", "bilevel"
PRIOR_AWARE = "prior-aware"
# The key of the prior-aware trials' noise: the seed's key folded with this stream and
# the level's index (the victims' own noise is `dp_sgd.NOISE_STREAM`).
PRIOR_AWARE_STREAM = 2
NOISELESS, NONPRIVATE = "σ = 0", "non-private"


def levels(config: ml_collections.ConfigDict) -> dict[str, float | None]:
  """The privacy levels of each victim, most private first: "ε = <e>" → the target ε, then
  `NOISELESS` (the DP recipe at σ = 0, where ``config.noiseless``) and `NONPRIVATE` → None.

  Raises:
    ValueError: a target ε not positive and finite.
  """
  targets = [float(e) for e in config.epsilons]
  if any(not (math.isfinite(e) and e > 0) for e in targets):
    raise ValueError(f"config.epsilons must be positive and finite, got {targets}")
  out: dict[str, float | None] = {f"ε = {e:g}": e for e in sorted(targets)}
  if config.noiseless:
    out[NOISELESS] = None
  out[NONPRIVATE] = None
  return out


@functools.lru_cache(maxsize=64)
def _sigma(target: float, delta: float, steps: int, sampling_rate: float) -> float:
  return accounting.noise_multiplier(target, delta, steps, sampling_rate)


def victim_config(config: ml_collections.ConfigDict, name: str, level: str, seed: int
                  ) -> ml_collections.ConfigDict:
  """The experiment config of victim ``name`` at privacy ``level`` (`levels`) and ``seed``:
  ``config.victims[name]`` with every seed set, and for a DP level ``victim.dp`` =
  ``config.dp[name]`` with the calibrated noise multiplier (0 for `NOISELESS`) and δ.

  Raises:
    ValueError: an unknown level or victim.
  """
  known = levels(config)
  if level not in known or name not in config.victims:
    raise ValueError(f"unknown victim {name!r} or level {level!r}; victims "
                     f"{list(config.victims)}, levels {list(known)}")
  c = config.victims[name].copy_and_resolve_references().unlock()   # --config is locked
  c.seed = c.data.seed = c.victim.seed = int(seed)
  if level == NONPRIVATE:
    return c
  recipe = dict(config.dp[name])
  sigma = 0.0 if level == NOISELESS else _sigma(
      known[level], float(config.delta), int(recipe["steps"]), float(recipe["sampling_rate"]))
  c.victim.dp = ml_collections.ConfigDict(
      {**recipe, "noise_multiplier": sigma, "delta": float(config.delta)})
  return c


def _key(row: dict) -> tuple:
  return row["victim"], row["level"], row["seed"], row["adversary"], row["k"]


def _slug(level: str) -> str:
  return {NOISELESS: "sigma0", NONPRIVATE: "nonprivate"}.get(
      level, "eps" + level.removeprefix("ε = "))


def prior_baseline(task, config: ml_collections.ConfigDict) -> dict:
  """κ of the success criterion (SSIM ≥ ``config.eval.ssim_level``, window
  ``config.eval.windows[0]``) from the task's test split, per class (the adversary knows
  the target's label), and the largest over the classes (`trdr.evaluation.rero.baseline`).

  Returns:
    {"kappa", "upper" (the largest per-class upper limit), "per_class": {label:
    `rero.Baseline` fields}}.
  """
  pixels = np.clip(evaluate.to_display(task.test_images, task.mean, "pixels"), 0.0, 1.0)
  labels = np.asarray(task.test_labels)
  per = {f"{label:g}": rero.baseline(pixels[labels == label], config.eval.ssim_level,
                                     config.eval.windows[0], config.eval.confidence)._asdict()
         for label in np.unique(labels)}
  return {"kappa": max(b["kappa"] for b in per.values()),
          "upper": max(b["upper"] for b in per.values()), "per_class": per}


def _victim_fields(directory: str) -> dict:
  """The privacy and utility of the victim saved in ``directory`` (its report)."""
  report = victim.load_metadata(directory)["report"]
  recipe = {k: report.get(k) for k in accounting.FIELDS if k in report}
  return {"epsilon": report.get("epsilon", math.inf), "mu": report.get("mu", math.inf),
          "recipe": recipe, "train_accuracy": report["train_accuracy"],
          "test_accuracy": report["test_accuracy"], "grad_norm": report["grad_norm"]}


def decoreco_row(c: ml_collections.ConfigDict, config: ml_collections.ConfigDict,
                 victim_dir: str, run_dir: str, n: int) -> dict:
  """DecoReco (`trdr.attacks.decoreco`, m = candidates_per_image · n candidates from its
  config's starts) for ``config.decoreco.steps`` steps on the victim of ``victim_dir``; a
  finished run is reused; n is the task's training set size. An attack that diverges (a
  noisy θ* can have large weights) is run again at a tenth of its lr, up to
  ``config.decoreco.retries`` times, as an adversary would retune it; if the last diverges
  too, the row says so and counts nothing recovered.

  Returns:
    {k = n, n, m, method ("decoreco", or "diverged"), lr (the attack's), residual (the
    final KKT loss; NaN when diverged), premise (the part of θ*'s first layer that no
    λ ≥ 0 on the training images' gradients explains, `trdr.victim.kkt`: DecoReco's
    premise is 0 there; NaN when diverged), recovered and start_recovered ({"w<window>":
    training images that are best buddies with a reconstruction, resp. a start, at SSIM ≥
    the level}; start_recovered None when diverged: its starts were never scored),
    seconds, truth (`truth_fields` of the run's truth diagnostic; None when diverged or
    not run)}.
  """
  c = c.copy_and_resolve_references()
  c.victim.checkpoint_dir = victim_dir
  c.attack.steps, c.attack.log_every = int(config.decoreco.steps), int(config.decoreco.log_every)
  level, windows = config.eval.ssim_level, tuple(config.eval.windows)
  c.eval.ssim_thresholds, c.eval.ssim_window, c.eval.count_windows = (level,), windows[0], \
      windows[1:]
  c.eval.public_set = False   # the test split's nearest neighbours (realism) are not read here
  m = int(c.attack.candidates_per_image) * n
  retries = int(config.decoreco.retries)
  for attempt in range(retries + 1):
    directory = run_dir if attempt == 0 else f"{run_dir}_lr{c.attack.lr:g}"
    finished = os.path.join(directory, experiment.SUMMARY_FILE)
    try:
      if not os.path.exists(finished):
        experiment.run(c, directory, "attack")
      break
    except FloatingPointError as e:
      logging.warning("DecoReco diverged at lr %g (%s)%s", c.attack.lr, e,
                      "; retrying at a tenth" if attempt < retries else "; counted as nothing")
      c.attack.lr = c.attack.lr / 10
  else:
    return {"k": n, "n": n, "m": m, "method": "diverged", "lr": float(c.attack.lr * 10),
            "residual": float("nan"), "premise": float("nan"),
            "recovered": {f"w{w}": 0 for w in windows}, "start_recovered": None,
            "seconds": float("nan"), "truth": None}
  summary = files.read_json(finished)
  key = f"ssim_ge_{level:g}"

  def counts(prefix: str) -> dict[str, int]:
    return {f"w{w}": int(summary[f"{prefix}reconstructed_best_buddies"
                                 + ("" if w == windows[0] else f"_w{w}")][key])
            for w in windows}
  kkt = summary["kkt_premise"]
  return {"k": n, "n": n, "m": m, "method": "decoreco", "lr": float(c.attack.lr),
          "residual": float(summary["final_loss"]),
          "premise": float(kkt["relative"][kkt["first_layer"]]), "recovered": counts(""),
          "start_recovered": counts("start_"), "seconds": float(summary["attack_seconds"]),
          "truth": truth_fields(summary)}


def truth_fields(summary: dict) -> dict | None:
  """What the page shows of a DecoReco run's truth diagnostic (`trdr.attacks.truth`,
  summary.json "truth"): {verdict, loss_at_truth, loss_reached (the lower of the loss
  reached and the same with λ fitted, as the verdict compares them), kept, n (the
  truth-start run's), truth_start_lower (`truth.start_lower`)}; None where the run has no
  diagnostic."""
  t = summary.get("truth")
  if not t:
    return None
  reached = [v for v in (t["loss_reached"], t.get("loss_reached_lambda_fitted"))
             if v is not None and math.isfinite(v)]
  return {"verdict": t["verdict"], "loss_at_truth": float(t["loss_at_truth"]),
          "loss_reached": min(reached) if reached else float("nan"),
          "kept": int(t["truth_start"]["kept"]), "n": int(t["truth_start"]["n"]),
          "truth_start_lower": truth.start_lower(t)}


def _decoreco_dir(workdir: str, tag: str, row: dict, lr: float) -> str:
  """The run directory of a DecoReco row: `decoreco_row`'s, with the retried lr's suffix
  where the row's lr is not the config's ``lr``."""
  run_dir = os.path.join(workdir, "attacks", f"decoreco_{tag}")
  return run_dir if math.isclose(row["lr"], lr) else f"{run_dir}_lr{row['lr']:g}"


def trials_needed(halfwidth: float, confidence: float) -> int:
  """The fewest trials N whose Clopper–Pearson interval at ``confidence`` is no wider than
  ± ``halfwidth`` whatever the count of successes (the widest is at N/2).

  Raises:
    ValueError: halfwidth or confidence outside (0, 1).
  """
  if not (0 < halfwidth < 1 and 0 < confidence < 1):
    raise ValueError(f"halfwidth and confidence must lie in (0, 1), got {halfwidth}, "
                     f"{confidence}")

  def widest(n: int) -> float:
    return max(_ci_halfwidth(x, n, confidence) for x in (n // 2, (n + 1) // 2))
  n = 1
  while widest(n) > halfwidth:   # doubling, then bisection: widest(n) falls with n
    n *= 2
  lo, hi = n // 2, n
  while hi - lo > 1:
    mid = (lo + hi) // 2
    lo, hi = (mid, hi) if widest(mid) > halfwidth else (lo, mid)
  return hi


def _ci(successes: int, trials: int, confidence: float) -> tuple[float, float]:
  ci = scipy.stats.binomtest(int(successes), int(trials)).proportion_ci(
      confidence, method="exact")
  return float(ci.low), float(ci.high)


def _ci_halfwidth(successes: int, trials: int, confidence: float) -> float:
  low, high = _ci(successes, trials, confidence)
  return (high - low) / 2


def prior_aware_recipe(config: ml_collections.ConfigDict, name: str, level: str
                       ) -> prior_aware.Recipe:
  """The full-batch recipe the prior-aware trials replay at ``level``: ``config.dp[name]``
  at the level's calibrated σ (0 for `NOISELESS`); for `NONPRIVATE` the same T steps of
  gradient descent neither clipped nor noised (the study's non-private victims are trained
  otherwise: L-BFGS, resp. gradient descent to a train loss, releasing no trajectory)."""
  recipe = config.dp[name]
  known = levels(config)
  sigma = 0.0 if known[level] is None else _sigma(
      known[level], float(config.delta), int(recipe.steps), float(recipe.sampling_rate))
  return prior_aware.Recipe(
      lr=float(recipe.lr), steps=int(recipe.steps), noise_multiplier=sigma,
      clip_norm=math.inf if level == NONPRIVATE else float(recipe.clip_norm),
      weight_decay=float(config.victims[name].victim.weight_decay))


@functools.lru_cache(maxsize=8)
def _trials_program(model, loss_name: str, steps: int):
  """The jitted trials of `prior_aware.replay`, vmapped over (candidates, their labels,
  target, key), the recipe's numbers traced: one compilation per model and T serves every
  level and seed (flax modules hash by their fields)."""
  apply_fn = lambda p, x: model.apply({"params": p}, x)
  loss = victim.GD_LOSSES[loss_name]

  def one(theta0, known, known_labels, images, labels, target, key, lr, clip, sigma, wd):
    recipe = prior_aware.Recipe(lr=lr, clip_norm=clip, noise_multiplier=sigma, steps=steps,
                                weight_decay=wd)
    return prior_aware.replay(apply_fn, loss, theta0, known, known_labels, images, labels,
                              target, key, recipe)
  return jax.jit(jax.vmap(one, in_axes=(None, None, None, 0, 0, 0, 0, None, None, None,
                                        None)))


def prior_aware_row(config: ml_collections.ConfigDict, name: str, level: str, seed: int,
                    trials: int) -> dict:
  """``trials`` trials of the prior-aware attack (`trdr.attacks.prior_aware`) on victim
  ``name`` at ``level``, seed ``seed``.

  The task and θ0 are the DP victim's of that seed (`victim_config`), resized where
  ``config.prior_aware.resize[name]`` says (n_per_class, widths: the trials replay the
  mechanism T times each); D⁻ is its training set without its first image. Each trial
  draws the target's class (±1, equally likely), ``config.prior_aware.k_max`` candidates
  of that class from the task's partition (images outside the training set), the target
  uniformly among them, and the mechanism's noise; the mechanism trains on D⁻ ∪ {target}
  and the attack answers the argmax of the candidates' likelihood. The prior of K = k_max
  is all candidates; of K = 2 the target and the candidate after it (cyclically): each a
  uniform prior with the target uniform in it, so κ = 1/K exactly. Trials run in the
  span of the training set and the partition (`prior_aware.basis`).

  Returns:
    {victim, level, seed, adversary: `PRIOR_AWARE`, n (the training set's size), widths
    (the MLP's hidden widths; None for another model), trials, successes: {"K<K>": count},
    epsilon (the PLD accountant's at δ; inf at σ = 0), mu (√T/σ; inf at σ = 0),
    noise_multiplier, clip_norm (None: not clipped), rank (the span's dimension),
    seconds}.
  """
  start = time.time()
  c = victim_config(config, name, NONPRIVATE, seed)
  for field, value in config.prior_aware.get("resize", {}).get(name, {}).items():
    section = c.data if field == "n_per_class" else c.victim
    section[field] = value
  recipe = prior_aware_recipe(config, name, level)
  k_max = int(config.prior_aware.k_max)
  with jax.enable_x64(bool(c.float64)):
    dtype = jnp.float64 if c.float64 else jnp.float32
    task = data.make_task(c.data)
    model = models.build_model(c.victim)
    theta0 = cache.initial_params(c.victim, model, task.train_images.shape[1:], dtype)
    q = prior_aware.basis(np.concatenate([task.train_images, task.partition_images]))
    known = jnp.asarray(prior_aware.project_images(task.train_images[1:], q), dtype)
    known_labels = jnp.asarray(task.train_labels[1:], dtype)
    pool = prior_aware.project_images(task.partition_images, q).astype(dtype)
    theta0 = prior_aware.project_params(theta0, q)

    index = list(levels(config)).index(level)
    rng = np.random.default_rng([int(seed), PRIOR_AWARE_STREAM, index])
    by_class = {v: np.flatnonzero(task.partition_labels == v) for v in (-1.0, 1.0)}
    if min(len(i) for i in by_class.values()) < k_max:
      raise ValueError(f"prior_aware.k_max = {k_max} candidates need as many partition "
                       f"images per class; the task has {[len(i) for i in by_class.values()]}")
    labels = rng.choice([-1.0, 1.0], size=trials)
    chosen = np.stack([rng.choice(by_class[v], size=k_max, replace=False) for v in labels])
    targets = rng.integers(0, k_max, size=trials)
    keys = jax.random.split(jax.random.fold_in(jax.random.key(int(seed)),
                                               PRIOR_AWARE_STREAM * 1000 + index), trials)

    program = _trials_program(model, dp_sgd.loss_name(c.victim), recipe.steps)
    numbers = [jnp.asarray(v, dtype) for v in (recipe.lr, recipe.clip_norm,
                                               recipe.noise_multiplier, recipe.weight_decay)]
    batch = int(config.prior_aware.batch)
    scores = []
    for lo in range(0, trials, batch):
      # The last batch is padded to the full size (one program for all rows) and cut back.
      sl = np.minimum(np.arange(lo, lo + batch), trials - 1)
      scores.append(np.asarray(program(
          theta0, known, known_labels, jnp.asarray(pool[chosen[sl]]),
          jnp.asarray(np.repeat(labels[sl, None], k_max, 1), dtype),
          jnp.asarray(targets[sl]), keys[sl], *numbers))[:trials - lo])
    scores = np.concatenate(scores)
  rows = np.arange(trials)
  other = (targets + 1) % k_max
  hits = {f"K{k_max}": int(np.sum(np.argmax(scores, axis=1) == targets)),
          "K2": int(np.sum(scores[rows, targets] > scores[rows, other]))}
  s = accounting.DPSettings(noise_multiplier=recipe.noise_multiplier,
                            clip_norm=None if math.isinf(recipe.clip_norm) else
                            recipe.clip_norm, steps=recipe.steps, lr=recipe.lr,
                            sampling_rate=1.0, delta=float(config.delta))
  private = recipe.noise_multiplier > 0 and math.isfinite(recipe.clip_norm)
  return {"victim": name, "level": level, "seed": int(seed), "adversary": PRIOR_AWARE,
          "n": int(len(task.train_images)),
          "widths": list(c.victim.widths) if "widths" in c.victim else None,
          "trials": int(trials), "successes": hits,
          "epsilon": accounting.epsilon(s) if private else math.inf,
          "mu": accounting.gdp_mu(s) if private else math.inf,
          "noise_multiplier": recipe.noise_multiplier,
          "clip_norm": s.clip_norm, "rank": int(q.shape[0]),
          "seconds": time.time() - start}


def prior_aware_summary(result: dict, config: ml_collections.ConfigDict) -> list[dict]:
  """Per (victim, K, level), over seeds: successes / trials, their rate and Clopper–Pearson
  interval at ``config.eval.confidence``, κ = 1/K, the bound Φ(Φ⁻¹(κ) + μ) (1 at ε = ∞),
  the mark κ + ½(bound − κ), "above" (the interval's one-sided lower limit exceeds the
  bound: `rero.exceeds`) and "reaches" (the rate is at least the mark).

  Returns:
    A list of dicts, per victim, K (largest first) and `levels` order.
  """
  rows = result.get("prior_aware", [])
  order = list(levels(config))
  ks = sorted({k for r in rows for k in r["successes"]}, key=lambda k: -int(k[1:]))
  out = []
  for name in dict.fromkeys(r["victim"] for r in rows):
    for k in ks:
      for level in order:
        rs = [r for r in rows if r["victim"] == name and r["level"] == level
              and k in r["successes"]]
        if not rs:
          continue
        hits, trials = sum(r["successes"][k] for r in rs), sum(r["trials"] for r in rs)
        kappa = 1.0 / int(k[1:])
        mu = rs[0]["mu"]
        b = float(rero.gdp_bound(kappa, mu)) if math.isfinite(mu) else 1.0
        low, high = _ci(hits, trials, config.eval.confidence)
        out.append({"victim": name, "K": int(k[1:]), "level": level, "kappa": kappa,
                    "epsilon": rs[0]["epsilon"], "mu": mu,
                    "noise_multiplier": rs[0]["noise_multiplier"],
                    "clip_norm": rs[0]["clip_norm"], "seeds": [r["seed"] for r in rs],
                    "successes": hits, "trials": trials, "rate": hits / trials,
                    "low": low, "high": high, "bound": b, "mark": kappa + (b - kappa) / 2,
                    "above": rero.exceeds(hits, trials, b, config.eval.confidence),
                    "reaches": hits / trials >= kappa + (b - kappa) / 2,
                    "seconds": sum(r["seconds"] for r in rs)})
  return out


def run(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Every (victim, level, seed, adversary, k) row of ``config`` (configs/dp.py), finished
  rows reused.

  Returns:
    {"rows": [{victim, level, seed, adversary (`INFORMED`, `DECORECO`, `BILEVEL`), k
    (unknown training images; n for DecoReco and bilevel), n, m (answers per target: k,
    2n, n), method, recovered, start_recovered ({"w<window>": count}), residual,
    premise (the attack's premise measured on θ*: ||∇θE(θ*)|| for the informed adversary,
    whose closed forms need a stationary θ*; `decoreco_row`'s for DecoReco; l(x_GT) =
    ||θ* − θ(x_GT)||² at the training images for the bilevel attack, 0 where its premise
    holds), seconds, epsilon, mu (inf for ε = ∞), recipe (the DP recipe; {} for the non-private
    victim), train_accuracy, test_accuracy, grad_norm}], "prior": {victim:
    `prior_baseline`}}, also in WORKDIR/dp.json.
  Raises:
    FileExistsError: ``workdir`` holds rows of other settings (all but seeds and ks).
    ValueError: as `victim_config`.
  """
  path, saved = rundir.study_rows(workdir, config, ROWS_FILE, growing=("seeds", "ks"),
                                 empty={"rows": [], "prior": {}, "prior_aware": []})
  rows, prior = saved["rows"], saved["prior"]
  aware = saved.setdefault("prior_aware", [])
  done = {_key(r) for r in rows}
  # DecoReco rows written before they carried the truth diagnostic: read it from their
  # finished runs (nothing is run again).
  for r in rows:
    if r["adversary"] == DECORECO and "truth" not in r:
      tag = f"{r['victim']}_{_slug(r['level'])}_seed{r['seed']}"
      lr = victim_config(config, r["victim"], r["level"], r["seed"]).attack.lr
      finished = os.path.join(_decoreco_dir(workdir, tag, r, float(lr)),
                              experiment.SUMMARY_FILE)
      r["truth"] = (truth_fields(files.read_json(finished))
                    if r["method"] != "diverged" and os.path.exists(finished) else None)

  # The prior-aware attack first: the rows whose κ and bound are exact.
  per_seed = math.ceil(trials_needed(float(config.prior_aware.halfwidth),
                                     float(config.eval.confidence)) / len(config.seeds))
  finished = {(r["victim"], r["level"], r["seed"]) for r in aware}
  for name in config.prior_aware.victims:
    for level in levels(config):
      for seed in config.seeds:
        if (name, level, int(seed)) in finished:
          continue
        row = prior_aware_row(config, name, level, int(seed), per_seed)
        logging.info("dp %s, %s, seed %d, prior-aware: %s of %d trials (%.0f s)", name, level,
                     row["seed"], row["successes"], row["trials"], row["seconds"])
        aware.append(row)
        files.write_json(path, {"rows": rows, "prior": prior, "prior_aware": aware})

  def add(row: dict) -> None:
    logging.info("dp %s, %s, seed %d, %s k=%d: recovered %s of %d (start %s); ε %s, test "
                 "accuracy %.3f", row["victim"], row["level"], row["seed"], row["adversary"],
                 row["k"], row["recovered"], row["k"], row["start_recovered"], row["epsilon"],
                 row["test_accuracy"])
    rows.append(row)
    done.add(_key(row))
    files.write_json(path, {"rows": rows, "prior": prior, "prior_aware": aware})

  for name in config.victims:
    for seed in config.seeds:
      for level in levels(config):
        c = victim_config(config, name, level, seed)
        tag = f"{name}_{_slug(level)}_seed{seed}"
        victim_dir = os.path.join(workdir, "victims", tag)
        head = {"victim": name, "level": level, "seed": int(seed)}
        with jax.enable_x64(bool(c.float64)):
          task = data.make_task(c.data)
          n = task.train_images.shape[0]
          if name not in prior:   # the test split: one per victim, whatever the seed
            prior[name] = prior_baseline(task, config)
            files.write_json(path, {"rows": rows, "prior": prior, "prior_aware": aware})
          target = None
          for k in config.ks:
            k = int(k)
            if (name, level, int(seed), INFORMED, k) in done or k > n:
              continue
            if target is None:
              target = victim.load_or_train(c, task, victim_dir)
            row = knowledge.attack_row(target, task, k, int(seed), config,
                                       config.restarts[name], config.steps[name])
            fields = _victim_fields(victim_dir)
            add({**head, "adversary": INFORMED, **row, "m": k, "premise": fields["grad_norm"],
                 **fields})
          if name in config.decoreco.victims and (name, level, int(seed), DECORECO, n) not in done:
            row = decoreco_row(c, config, victim_dir,
                               os.path.join(workdir, "attacks", f"decoreco_{tag}"), n)
            add({**head, "adversary": DECORECO, **row, **_victim_fields(victim_dir)})
          if name in config.bilevel.victims and (name, level, int(seed), BILEVEL, n) not in done:
            run_dir = os.path.join(workdir, "attacks", f"bilevel_{tag}")
            row = knowledge.bilevel_row(c, config.bilevel.start, config, victim_dir, run_dir)
            premise = files.read_json(os.path.join(run_dir, experiment.SUMMARY_FILE))[
                "bilevel_premise"]["l_training_images"]
            add({**head, "adversary": BILEVEL, **row, "m": row["n"],
                 "premise": float(premise), **_victim_fields(victim_dir)})
  return {"rows": rows, "prior": prior, "prior_aware": aware}


def bound(kappa: float, m: int, row: dict) -> float:
  """The ReRo bound of a row's victim for an adversary of m answers per target: Φ(Φ⁻¹(κ_m)
  + μ) for a full-batch victim (`rero.gdp_bound`, κ_m = min(1, m κ)); from the PLD
  privacy profile for a subsampled one (`rero.profile_bound` on 400 ε from 0 to 4 ε(δ));
  1 at ε = ∞."""
  kappa_m = float(rero.guesses_baseline(kappa, m))
  if not math.isfinite(row["epsilon"]):
    return 1.0
  if math.isfinite(row["mu"]):
    return float(rero.gdp_bound(kappa_m, row["mu"]))
  s = accounting.DPSettings(**row["recipe"])
  grid = np.linspace(0.0, 4.0 * row["epsilon"], 400)
  return float(rero.profile_bound(kappa_m, grid, accounting.privacy_profile(s, grid)))


def summary(result: dict, config: ml_collections.ConfigDict) -> list[dict]:
  """Per (victim, level, adversary, k), over seeds: the recovered fraction's mean and
  sample std (ddof 1; NaN for one seed), successes and trials (summed over seeds), the
  start images' mean, ε and μ (the first seed's: every seed has the same recipe), test
  accuracy's mean and std, and the ReRo bound at κ̂ and at κ's upper limit ("bound",
  "bound_upper"); "above": the successes exceed bound_upper beyond sampling error
  (`rero.exceeds` at ``config.eval.confidence``).

  Returns:
    A list of dicts in the order of `levels` within each victim and adversary.
  """
  window = f"w{config.eval.windows[0]}"
  groups: dict[tuple, list[dict]] = {}
  for r in result["rows"]:
    groups.setdefault((r["victim"], r["adversary"], r["k"], r["level"]), []).append(r)
  order, adversaries = list(levels(config)), [INFORMED, DECORECO, BILEVEL]
  rank = lambda seq, x: seq.index(x) if x in seq else len(seq)
  keys = sorted(groups, key=lambda g: (rank(list(config.victims), g[0]),
                                       rank(adversaries, g[1]), g[2], rank(order, g[3])))
  out = []
  for key in keys:
    rs = groups[key]
    name, adversary, k, level = key
    frac = np.asarray([r["recovered"][window] / k for r in rs])
    acc = np.asarray([r["test_accuracy"] for r in rs])
    prior = result["prior"][name]
    successes, trials = int(sum(r["recovered"][window] for r in rs)), k * len(rs)
    upper = bound(prior["upper"], rs[0]["m"], rs[0])
    out.append({"victim": name, "level": level, "adversary": adversary, "k": k,
                "n": rs[0]["n"], "m": rs[0]["m"], "seeds": [r["seed"] for r in rs],
                "methods": sorted({r["method"] for r in rs}),
                "premise": _median([r.get("premise", math.nan) for r in rs]),
                "mean": float(frac.mean()),
                "std": float(frac.std(ddof=1)) if len(rs) > 1 else float("nan"),
                "start_mean": _start_mean(rs, window, k),
                "successes": successes, "trials": trials,
                "epsilon": rs[0]["epsilon"], "mu": rs[0]["mu"],
                "noise_multiplier": rs[0]["recipe"].get("noise_multiplier"),
                "test_accuracy": float(acc.mean()),
                "test_accuracy_std": float(acc.std(ddof=1)) if len(rs) > 1 else float("nan"),
                "bound": bound(prior["kappa"], rs[0]["m"], rs[0]), "bound_upper": upper,
                "above": rero.exceeds(successes, trials, upper, config.eval.confidence)})
  return out


def _median(values) -> float:
  values = np.asarray(values, float)
  return float(np.median(values[np.isfinite(values)])) if np.isfinite(values).any() \
      else float("nan")


def _start_mean(rows: list[dict], window: str, k: int) -> float:
  """The start images' recovered fraction, mean over the rows that scored them (NaN if
  none did: a diverged attack's starts are not scored)."""
  scored = [r["start_recovered"][window] / k for r in rows if r["start_recovered"]]
  return float(np.mean(scored)) if scored else float("nan")


def _x_positions(table: list[dict]) -> tuple[dict[str, float], float]:
  """The x of each level: its ε, and beyond the largest finite ε the levels at ε = ∞
  (σ = 0, non-private), a factor 3 apart on the log axis."""
  finite = sorted({r["epsilon"] for r in table if math.isfinite(r["epsilon"])})
  top = finite[-1] if finite else 1.0
  xs = {r["level"]: r["epsilon"] for r in table if math.isfinite(r["epsilon"])}
  for i, level in enumerate(dict.fromkeys(r["level"] for r in table
                                          if not math.isfinite(r["epsilon"]))):
    xs[level] = top * 3.0 ** (i + 1)
  return xs, top


def figure(result: dict, config: ml_collections.ConfigDict) -> matplotlib.figure.Figure:
  """Left: the recovered fraction against ε (log axis; mean ± std over seeds), one curve
  per (victim, adversary, k), the levels at ε = ∞ right of the largest ε, and the ReRo
  bound Φ(Φ⁻¹(κ_m) + μ(ε)) as a function of ε at δ (μ-GDP, full batch) for one answer per
  target (solid) and for the most answers of any row (dashed). Right: each victim's test
  accuracy against ε."""
  table = summary(result, config)
  aware = prior_aware_summary(result, config)
  fig = matplotlib.figure.Figure(figsize=(18, 4.8))
  ax, aware_ax, acc_ax = fig.subplots(1, 3)
  xs, top = _x_positions(table + aware)
  kappa = max(p["kappa"] for p in result["prior"].values()) if result["prior"] else 0.0
  grid = np.geomspace(min([x for x in xs.values()] + [0.5]) / 2, top, 200)
  mus = np.asarray([accounting.gdp_mu_for_epsilon(e, config.delta) for e in grid])
  ms = sorted({r["m"] for r in table}) or [1]
  at_inf = sorted(x for x in xs.values() if x > top)
  for m, style in ((1, "-"), (ms[-1], "--")):
    ax.plot(grid, rero.gdp_bound(rero.guesses_baseline(kappa, m), mus), style, color="k",
            lw=1.2, label=f"ReRo bound, {m} answer{'s' if m > 1 else ''} per target "
                          f"(κ̂ = {kappa:.3g})")
  if at_inf:   # ε = ∞: the bound is 1
    ax.plot(at_inf, [1.0] * len(at_inf), "k_", ms=14)
  for series in dict.fromkeys((r["victim"], r["adversary"], r["k"]) for r in table):
    t = [r for r in table if (r["victim"], r["adversary"], r["k"]) == series]
    ax.errorbar([xs[r["level"]] for r in t], [r["mean"] for r in t],
                yerr=np.nan_to_num([r["std"] for r in t]), marker="o", capsize=3,
                label=f"{series[0]}, {series[1]}, k = {series[2]}")
  for name in dict.fromkeys(r["victim"] for r in table):
    t = {r["level"]: r for r in table if r["victim"] == name}.values()
    acc_ax.errorbar([xs[r["level"]] for r in t], [r["test_accuracy"] for r in t],
                    yerr=np.nan_to_num([r["test_accuracy_std"] for r in t]), marker="s",
                    capsize=3, label=name)
  for k, style in zip(sorted({r["K"] for r in aware}, reverse=True), ("-", "--", ":")):
    aware_ax.plot(grid, rero.gdp_bound(1.0 / k, mus), style, color="k", lw=1.2,
                  label=f"ReRo bound, κ = 1/{k}")
    aware_ax.axhline(1.0 / k, color="0.6", lw=0.8, ls=style)
  for series in dict.fromkeys((r["victim"], r["K"]) for r in aware):
    t = [r for r in aware if (r["victim"], r["K"]) == series]
    rates = np.asarray([r["rate"] for r in t])
    aware_ax.errorbar([xs[r["level"]] for r in t], rates,
                      yerr=[rates - [r["low"] for r in t], [r["high"] for r in t] - rates],
                      marker="o", capsize=3, label=f"{series[0]}, K = {series[1]}")
  if at_inf:
    aware_ax.plot(at_inf, [1.0] * len(at_inf), "k_", ms=14)
  aware_ax.set_ylim(-0.05, 1.05)
  aware_ax.set_ylabel("success rate (Clopper–Pearson interval); chance: 1/K (grey)")
  aware_ax.set_title("Prior-aware attack on the released trajectory (Hayes et al. 2023)")
  aware_ax.legend(fontsize=6, loc="center left")
  infinite = {level: x for level, x in xs.items() if x > top}
  for a in (ax, aware_ax, acc_ax):
    a.set_xscale("log")
    a.axvline(top * 3.0 ** 0.5, color="0.6", lw=0.8, ls=":")
    ticks = [e for e in sorted(set(xs.values())) if e <= top]
    a.set_xticks(ticks + list(infinite.values()))
    a.set_xticklabels([f"{e:g}" for e in ticks] + [f"∞\n({level})" for level in infinite],
                      fontsize=7)
    a.minorticks_off()
    a.set_xlabel(f"ε at δ = {config.delta:g} (PLD accountant)")
  ax.set_ylim(-0.05, 1.05)
  ax.set_ylabel(f"fraction recovered (best buddies, SSIM ≥ {config.eval.ssim_level:g})")
  ax.set_title("Attacks on DP-SGD victims and the ReRo bound")
  ax.legend(fontsize=6, loc="center left")
  acc_ax.axhline(0.5, color="0.6", lw=0.8, ls="--")
  acc_ax.set_ylabel("test accuracy (chance: 0.5 for balanced classes)")
  acc_ax.set_title("Utility of each victim")
  acc_ax.legend(fontsize=7)
  fig.tight_layout()
  return fig


ASSUMPTIONS = (
    "The bound Φ(Φ⁻¹(κ_m) + μ) holds for every adversary under these assumptions, and the "
    "rows compare it with the measured success only there: (1) the released output is θ* "
    "(for the prior-aware rows the sequence θ_0 … θ_T, which the accountant's adaptive "
    "composition covers too), T steps of the Gaussian mechanism on per-example gradients "
    "clipped to C with "
    "noise σC and the public denominator n, so that adding or removing one training image "
    "is μ-GDP with μ = √T/σ (Dong, Roth and Su, Cor. 3.3; the training report's "
    "accuracies are not released); (2) the target is drawn from the prior π, here the "
    "CIFAR-10 images of its class (the training images are a draw from the train split, "
    "κ is estimated on the test split); (3) κ is the best success without θ*: estimated "
    "as the best guess among the test images and their mean (leave one out), the largest "
    "over the two classes since the adversary knows the label, with its Clopper–Pearson "
    "upper limit; the true supremum over all images may be larger; (4) an adversary "
    "answering m images per target (k for the informed one, 2n for DecoReco, n for the "
    "bilevel attack) has baseline κ_m ≤ min(1, m κ) (union bound), and a best-buddies "
    "match at SSIM ≥ the level implies an answer meeting the criterion, so the measured "
    "event lies inside the bound's; (5) at ε = ∞ (σ = 0 or the non-private victim) the "
    "bound is 1; (6) the bound is on a probability: \"above the bound\" means the "
    "one-sided Clopper–Pearson lower limit of successes/trials (seeds × targets, taken as "
    "independent though the targets of one victim share θ*) exceeds the bound at κ's upper "
    "limit; (7) the recipe's lr and C were chosen by looking at seed 0's training data, "
    "which the accounting does not cover.")


PREPROCESSING = (
    "**Preprocessing.** Every victim of this page (each DP level, σ = 0 and non-private) "
    "takes the pixels in [0, 1] minus the per-pixel mean of the test split "
    "(`data.mean_from = \"test\"`), which depends on no training image: removing one "
    "training image leaves every other input bit for bit unchanged "
    "(tests/test_dp.py::test_a_public_mean_leaves_every_other_input_unchanged, whose control "
    "shows the training set's own mean, the knowledge study's, moving all of them). So one "
    "image's influence on a step is its clipped gradient alone, at most C, as the "
    "accountant assumes.")

MECHANISM = (
    "**Mechanism.** The per-example clipping and the Gaussian noise of the DP-SGD step are "
    "jax-privacy 2.0.0's (`jax_privacy.clipping.clipped_grad`, `jax_privacy.noise_addition."
    "gaussian_privatizer`; `pip install --dry-run jax-privacy==2.0.*` installs jax_privacy "
    "alone beside jax 0.10.2, optax 0.2.8 and numpy 2, changing none of them); the loop around "
    "them is `trdr.victim.dp_sgd`'s. ε comes from dp-accounting's PLD accountant.")

THETA_STAR_ONLY = (
    "**Only θ\\* released.** The second threat model, Hayes et al.'s with the final model "
    "alone, has no row: the likelihood of θ_T given a candidate is the T-fold composition of "
    "a step non-linear in θ (the logistic loss, the clip) with Gaussian noise, a density "
    "that integrates over the T − 1 unreleased θ_t (a (T − 1)·dim θ-dimensional integral, "
    "T = 100) with no closed form, so the Bayes-optimal answer on θ_T cannot be computed. "
    "The bound covers θ_T too (post-processing of the trajectory), so any θ_T attack's "
    "success lies at or below the trajectory attack's optimum; the gap between the two "
    "releases is not measured here.")


def _partial(result: dict, config: ml_collections.ConfigDict) -> list[str]:
  """A line naming the (victim, level, seed) cells whose rows are missing from ``result``
  (a run stopped before it finished; `run` resumes it), or nothing."""
  have = {}
  for r in result["rows"]:
    have.setdefault((r["victim"], r["level"], r["seed"]), set()).add(r["adversary"])
  aware = {(r["victim"], r["level"], r["seed"]) for r in result.get("prior_aware", [])}
  missing = []
  for name in config.victims:
    need = {INFORMED} | ({DECORECO} if name in config.decoreco.victims else set()) | (
        {BILEVEL} if name in config.bilevel.victims else set())
    for level in levels(config):
      for seed in config.seeds:
        cell = (name, level, int(seed))
        if not need <= have.get(cell, set()) or (
            name in config.prior_aware.victims and cell not in aware):
          missing.append(f"{name} {level} seed {seed}")
  if not missing:
    return []
  return [f"**Partial run**: the rows of {len(missing)} (victim, level, seed) cells are "
          f"missing ({'; '.join(missing)}); the tables and the reading below cover only the "
          "rest. `make dp` resumes the run.", ""]


def prior_aware_section(result: dict, config: ml_collections.ConfigDict) -> list[str]:
  """The page's section on the prior-aware attack: its threat model, the table of
  `prior_aware_summary` and the θ*-only statement."""
  table = prior_aware_summary(result, config)
  if not table:
    return []
  sizes = {}
  for r in result["prior_aware"]:
    w = r.get("widths")
    sizes[r["victim"]] = f"n = {r['n']}" + (f", widths {tuple(w)}" if w else "")
  conf = config.eval.confidence
  lines = [
      "## The prior-aware attack on the released trajectory (Hayes et al. 2023)", "",
      "Threat model, the one the accountant covers: full-batch DP-SGD releases θ_0 … θ_T; the "
      "adversary knows the other n − 1 training images and their labels, θ_0, the recipe "
      "(η, C, σ, T, weight decay, loss, architecture) and a prior of K candidate images of "
      "the target's class (drawn from the images outside the training set), the target one "
      "of them uniformly at random. From each released step it recovers the noisy sum "
      "S_t = n(θ_t − θ_{t+1})/η − n·wd·θ_t, subtracts the clipped gradients of the images "
      "it knows, and scores each candidate z by the Gaussian log-likelihood −Σ_t ||R_t − "
      "ḡ_z(θ_t)||² / (2σ²C²); it answers the argmax (`trdr.attacks.prior_aware`): the "
      "Bayes-optimal answer for this release. Without the release its success is exactly "
      "κ = 1/K, so the bound Φ(Φ⁻¹(1/K) + μ) needs no estimate. K = 10: all candidates; "
      "K = 2: the target and one other of them. Each trial draws the target's class, the "
      "candidates, the target and the noise; D⁻ is the training set of the seed's victim "
      "without one image. "
      f"Trials per (victim, level): {trials_needed(float(config.prior_aware.halfwidth), conf)}"
      f" or more over the seeds, so that every {conf:g} Clopper–Pearson interval is within "
      f"± {config.prior_aware.halfwidth:g}. σ = 0: the DP recipe without noise; "
      "non-private: the same T gradient steps, neither clipped nor noised. Victims: "
      + "; ".join(f"{name} ({size})" for name, size in sizes.items())
      + (". The MLP's trials run a smaller MLP of the same recipe (T, C, lr; σ and μ do "
         "not depend on n): each trial replays the T steps with n − 1 + K per-example "
         "gradients, which for the :cpu MLP (n = 100, widths (256, 256)) and its 2,010 "
         "trials is hours on a CPU (each row's seconds: dp.json)"
         if config.prior_aware.get("resize", {}) and "haim_mlp" in config.prior_aware.resize
         and "widths" in config.prior_aware.resize.haim_mlp else "") + ".", "",
      f"| victim | privacy | ε | σ | μ | K | κ = 1/K | successes / trials | rate [{conf:g} "
      "Clopper–Pearson] | bound Φ(Φ⁻¹(κ) + μ) | κ + ½(bound − κ) | above the bound | "
      "reaches κ + ½(bound − κ) |",
      "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
  for r in table:
    lines.append(
        f"| {r['victim']} | {r['level']} | {_num(r['epsilon'])} | "
        f"{r['noise_multiplier']:.3g}{'' if r['clip_norm'] else ', no clip'} | "
        f"{_num(r['mu'])} | {r['K']} | {r['kappa']:.2f} | "
        f"{r['successes']} / {r['trials']} | {r['rate']:.3f} [{r['low']:.3f}, "
        f"{r['high']:.3f}] | {r['bound']:.3f} | {r['mark']:.3f} | "
        f"{'**yes**' if r['above'] else 'no'} | {'yes' if r['reaches'] else 'no'} |")
  lines += ["", prior_aware_reading(table), "", THETA_STAR_ONLY, ""]
  return lines


def prior_aware_reading(table: list[dict]) -> str:
  """From `prior_aware_summary`'s rows: whether any lies above its bound; where the bound
  lies in [0.2, 0.9], the K = max rows that reach κ + ½(bound − κ) and those that do not,
  with their numbers; the rows at ε = ∞."""
  above = [r for r in table if r["above"]]
  parts = ["No prior-aware success lies above its bound (one-sided Clopper–Pearson lower "
           "limit against the exact bound)." if not above else
           "**Above the bound**: " + "; ".join(
               f"{r['victim']} {r['level']} K = {r['K']} ({r['successes']} / {r['trials']}, "
               f"bound {r['bound']:.3f})" for r in above) + "."]
  k_top = max(r["K"] for r in table)
  middle = [r for r in table if r["K"] == k_top and 0.2 <= r["bound"] <= 0.9]
  if middle:
    hit = [r for r in middle if r["reaches"]]
    short = [r for r in middle if not r["reaches"]]
    fmt = lambda r: (f"{r['victim']} {r['level']}: {r['rate']:.3f} [{r['low']:.3f}, "
                     f"{r['high']:.3f}] against bound {r['bound']:.3f}, mark {r['mark']:.3f}")
    if hit:
      parts.append(f"Where the bound lies in [0.2, 0.9] at K = {k_top}, the attack reaches "
                   "κ + ½(bound − κ) on " + "; ".join(map(fmt, hit)) + ".")
    if short:
      parts.append("It falls short on " + "; ".join(map(fmt, short)) + ". The bound is "
                   "the worst case over all neighbouring training sets: it is attained only "
                   "where the target's clipped gradient has norm C at every step and the "
                   "other candidates' are far from it. Candidates of one class can have "
                   "partly alike clipped gradients, and gradients below C are not scaled "
                   "up, either of which lowers the signal the noise hides; which of them "
                   "holds here is not measured on this page.")
  else:
    parts.append(f"No K = {k_top} bound lies in [0.2, 0.9] at these ε.")
  inf = [r for r in table if not math.isfinite(r["epsilon"])]
  if inf:
    parts.append("At ε = ∞: " + "; ".join(
        f"{r['victim']} {r['level']} K = {r['K']} {r['successes']} / {r['trials']}"
        for r in inf) + ".")
  return " ".join(parts)


def markdown(result: dict, config: ml_collections.ConfigDict,
             generated: dict | None = None) -> str:
  """The page: what was run, κ, the table (per victim, level, adversary and k: ε, σ, μ,
  test accuracy, recovered mean ± std over seeds beside the start images', successes /
  trials and the bound), the bound's assumptions and the reading."""
  g = generated or {}
  table = summary(result, config)
  window = config.eval.windows[0]
  lines = [
      "# Privacy due to noise: attacks on DP-SGD victims beside the reconstruction bound", "",
      f"Generated by `make dp` (written {g.get('utc', '?')}, {g.get('machine', '?')}, "
      f"{g.get('devices', '?')}, jax {g.get('jax', '?')}) from dp.json; do not edit by hand. "
      "The figure: [dp.png](dp.png).", "",
      f"Size `{config.variant}`; seeds {list(config.seeds)}. Victims: "
      + "; ".join(f"{name} (n = {n}; DP-SGD full batch, T = {config.dp[name].steps} steps, "
                  f"lr {config.dp[name].lr:g}, clip C = {config.dp[name].clip_norm:g})"
                  for name, n in _sizes(result).items())
      + f". Levels: σ calibrated to each ε at δ = {config.delta:g} (ε by dp-accounting's PLD "
      "accountant), the same recipe at σ = 0, and the non-private victim (configs/"
      "knowledge.py's recipe at these sizes: L-BFGS to stationarity, resp. gradient descent "
      "to train loss 1e-4). "
      "A training image counts as recovered when it and a reconstruction are best buddies "
      f"at SSIM ≥ {config.eval.ssim_level:g} (window {window}); start: the same for the "
      "start images. Informed: `trdr.attacks.informed`, all training images but k known; "
      f"DecoReco: {config.decoreco.steps} steps, m = 2n candidates; bilevel: "
      f"{config.bilevel.steps} outer steps from U(0, 1), one start per training image. "
      "The informed, DecoReco and bilevel attacks are the non-private recipe's: none models "
      "the clipping or the noise; their rows are labelled by their power on the non-private "
      "victim (Reading). The prior-aware attack is built for the mechanism (next section).",
      "", *_partial(result, config), PREPROCESSING, "", MECHANISM, "",
      *prior_aware_section(result, config),
      "## The prior's baseline κ", "",
      "| victim | class | κ̂ (best guess) | count / trials | upper limit | random draw |",
      "|---|---|---:|---:|---:|---:|"]
  for name, p in result["prior"].items():
    for label, b in p["per_class"].items():
      lines.append(f"| {name} | {label} | {b['kappa']:.4f} | {b['count']} / {b['trials']} | "
                   f"{b['upper']:.4f} | {b['mean_pairwise']:.4f} |")
  lines += ["", "## Recovered and the bound", "",
            "Premise: what the attack assumes of θ*, measured (median over seeds): for the "
            "informed adversary ||∇θE(θ*)|| (its closed forms need a stationary θ*; for the "
            "gradient-descent MLP, whose attack is DecoReco's, the same norm for reference), "
            "for DecoReco the part of θ*'s first layer no λ ≥ 0 on the training images' "
            "gradients explains (0 at a KKT point), for the bilevel attack l(x_GT) = "
            "||θ* − θ(x_GT)||² (0 where the training images minimise its upper level).", "",
            "| victim | privacy | ε | σ | μ | test accuracy | adversary | k | m | premise | "
            "recovered (mean ± std) | start | successes / trials | ReRo bound at κ̂ (at κ's "
            "upper limit) | above |",
            "|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|"]
  for r in table:
    sigma = r["noise_multiplier"]
    lines.append(
        f"| {r['victim']} | {r['level']} | {_num(r['epsilon'])} | "
        f"{'—' if sigma is None else f'{sigma:.3g}'} | {_num(r['mu'])} | "
        f"{r['test_accuracy']:.3f} ± {r['test_accuracy_std']:.3f} | {r['adversary']}"
        f"{' (diverged on some seeds)' if 'diverged' in r['methods'] else ''} | "
        f"{r['k']} | {r['m']} | {r['premise']:.3g} | {r['mean']:.2f} ± {r['std']:.2f} | "
        f"{'—' if math.isnan(r['start_mean']) else format(r['start_mean'], '.2f')} | "
        f"{r['successes']} / {r['trials']} | {r['bound']:.3f} ({r['bound_upper']:.3f}) | "
        f"{'**yes**' if r['above'] else 'no'} |")
  lines += ["", *truth_section(result), "## The bound's assumptions", "", ASSUMPTIONS, "",
            "## Reading", "", reading(result, config), ""]
  return "\n".join(lines)


def truth_section(result: dict) -> list[str]:
  """The truth diagnostic of every DecoReco row (`trdr.attacks.truth`): per victim and
  level, each seed's verdict, the attack's loss at the true training images (λ fitted)
  against the loss it reached, and what DecoReco started at the truth kept; [] where no
  row has it."""
  rows = [r for r in result["rows"] if r["adversary"] == DECORECO]
  if not any(r.get("truth") for r in rows):
    return []
  lines = ["## DecoReco's objective at the truth", "",
           "The truth diagnostic of `trdr.attacks.truth` on each DecoReco row: the attack's "
           "own loss at the true training images with λ fitted, against the loss it reached "
           "from its starts, and DecoReco started at the true images (the training images it "
           "still holds as best buddies). \"search\": the truth is lower and the run from it "
           "keeps at least half (the search missed what its objective prefers); "
           "\"objective\": otherwise (the objective does not single out the training images, "
           "so a count of 0 there is no evidence about the noise either). \"lower beside\": "
           "the run from the truth ends below the loss reached and keeps at least half.", "",
           "| victim | privacy | seed | verdict | loss at truth | loss reached | truth start "
           "kept | lower beside |", "|---|---|---:|---|---:|---:|---:|---|"]
  order = {level: i for i, level in enumerate(dict.fromkeys(r["level"] for r in rows))}
  for r in sorted(rows, key=lambda r: (r["victim"], order[r["level"]], r["seed"])):
    t = r.get("truth")
    if not t:
      why = "diverged" if r["method"] == "diverged" else "not run"
      lines.append(f"| {r['victim']} | {r['level']} | {r['seed']} | {why} | — | — | — | — |")
      continue
    lines.append(f"| {r['victim']} | {r['level']} | {r['seed']} | {t['verdict']} | "
                 f"{t['loss_at_truth']:.6g} | {t['loss_reached']:.6g} | {t['kept']} of "
                 f"{t['n']} | {'yes' if t['truth_start_lower'] else 'no'} |")
  verdicts = [r["truth"]["verdict"] for r in rows if r.get("truth")]
  text = (f"\"search\" in {verdicts.count('search')}, \"objective\" in "
          f"{verdicts.count('objective')} of {len(verdicts)} DecoReco rows with the "
          "diagnostic.")
  beside = {}
  for r in rows:
    if r.get("truth"):
      beside.setdefault((r["victim"], r["level"]), []).append(r["truth"]["truth_start_lower"])
  held = [f"{victim} {level} ({sum(b)} of {len(b)} seeds)"
          for (victim, level), b in beside.items() if any(b)]
  if held:
    text += (" The run from the truth ends below the loss the search reached, still holding "
             "at least half the training images, on " + ", ".join(held) + ": there a point "
             "beside the training images scores better than what DecoReco's search found, so "
             "its count is limited by the search as well as by the noise.")
  lines += ["", text, ""]
  return lines


def _num(x: float) -> str:
  return "∞" if not math.isfinite(x) else f"{x:.3g}"


def _sizes(result: dict) -> dict[str, int]:
  return {r["victim"]: r["n"] for r in result["rows"]}


def beats_start(row: dict, confidence: float) -> bool:
  """Whether a `summary` row's attack recovers more than its start images, the attack-free
  baseline: a one-sided Fisher exact test of successes / trials against the start images'
  count on the same trials (start_mean · trials; 0 where the starts were not scored),
  significant at ``confidence`` ∈ (0, 1): p ≤ 1 − confidence, the boundary included (3 of 3
  against 0 of 3 is p = 1/20 exactly; a relative 1e-9 absorbs the rounding of p and of
  1 − confidence, both ~1e-16)."""
  start = row["start_mean"]
  hits = int(round(start * row["trials"])) if math.isfinite(start) else 0
  table = [[row["successes"], row["trials"] - row["successes"]], [hits, row["trials"] - hits]]
  return bool(scipy.stats.fisher_exact(table, alternative="greater").pvalue
              <= (1 - confidence) * (1 + 1e-9))


def reading(result: dict, config: ml_collections.ConfigDict) -> str:
  """One paragraph from the numbers: whether any measured success lies above its bound;
  per victim and adversary the largest recovered fraction at a finite ε beside the bound
  there, and at σ = 0 and on the non-private victim; the test accuracy from the most
  private level to the non-private victim; the attacks that do not beat their start images
  even without privacy (`beats_start`), whose DP rows say nothing about the noise."""
  table = summary(result, config)
  if not table:
    return "No rows yet."
  above = [r for r in table if r["above"]]
  parts = [("No measured success lies above its bound." if not above else
            "Above the bound (the assumptions above are then violated somewhere): "
            + "; ".join(f"{r['victim']} {r['level']} {r['adversary']} k = {r['k']}"
                        for r in above) + ".")]
  for name in dict.fromkeys(r["victim"] for r in table):
    mine = [r for r in table if r["victim"] == name]
    accs = {r["level"]: r["test_accuracy"] for r in mine}
    text = (f"{name}: test accuracy from {accs[next(iter(accs))]:.2f} at "
            f"{next(iter(accs))} to {list(accs.values())[-1]:.2f} ({list(accs)[-1]})")
    for adversary in dict.fromkeys(r["adversary"] for r in mine):
      for k in dict.fromkeys(r["k"] for r in mine if r["adversary"] == adversary):
        t = [r for r in mine if r["adversary"] == adversary and r["k"] == k]
        private = [r for r in t if math.isfinite(r["epsilon"])]
        inf = ", ".join(f"{r['level']} {r['mean']:.2f}" for r in t
                        if not math.isfinite(r["epsilon"]))
        best = max(private, key=lambda r: r["mean"], default=None)
        text += (f"; {adversary} (k = {k}): " + (
            f"at most {best['mean']:.2f} at a finite ε ({best['level']}, bound "
            f"{best['bound']:.2f})" if best else "no finite ε") + (f", {inf}" if inf else ""))
    parts.append(text + ".")
  recipe = []
  for r in table:
    if r["level"] != NOISELESS:
      continue
    plain = next((p for p in table if p["level"] == NONPRIVATE and (
        p["victim"], p["adversary"], p["k"]) == (r["victim"], r["adversary"], r["k"])), None)
    if plain is not None and plain["mean"] > r["mean"]:
      recipe.append(f"{r['victim']} {r['adversary']} k = {r['k']} ({plain['mean']:.2f} → "
                    f"{r['mean']:.2f}; premise {plain['premise']:.3g} → {r['premise']:.3g})")
  if recipe:
    parts.append("The DP recipe without noise (σ = 0: clipping and T steps) already lowers "
                 "what these attacks recover from the non-private victim, where it moves θ* "
                 "off their premise: " + "; ".join(recipe) + ". That part of the privacy at "
                 "finite ε is the recipe's, not the noise's.")
  weak = [r for r in table if r["level"] == NONPRIVATE
          and not beats_start(r, config.eval.confidence)]
  if weak:
    parts.append("Even on the non-private victim these recover no more than their start "
                 "images (one-sided Fisher exact test at the "
                 f"{config.eval.confidence:g} level): " + "; ".join(
                     f"{r['victim']} {r['adversary']} k = {r['k']} ({r['successes']} / "
                     f"{r['trials']})" for r in weak) + ". Their rows at finite ε cannot show "
                 "what the noise adds: uninformative about DP, not evidence of privacy.")
  gaps = [r["bound"] - r["mean"] for r in table if math.isfinite(r["epsilon"])]
  if gaps:
    parts.append(f"At finite ε the bound lies {min(gaps):.2f} to {max(gaps):.2f} above the "
                 "measured fractions: room the guarantee leaves for adversaries stronger "
                 "than these (one that models the clipping and the noise); the bound is a "
                 "worst case over all adversaries, not a prediction of these.")
  return " ".join(parts)
