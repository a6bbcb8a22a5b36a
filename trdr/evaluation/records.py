"""A run's numbers as records: landscape.json's per-grid-point records, summary counts.

  `grid_records`        one landscape.json record per eq. 10 grid point, with the start
                        images' numbers beside (prefix `evaluate.START`: the baseline)
  `counts`, `per_class_counts`  training images reconstructed at SSIM thresholds
  `lower_level_summary` how well the bilevel lower level converged over a run
"""

import numpy as np

from trdr.evaluation import registry
from trdr.evaluation.evaluate import START


def grid_records(lambda1, lambda2, history: dict, evaluation: dict, thresholds=(),
                 uniform_tols=()) -> list[dict]:
  """One record per grid point: the numbers behind Figs. 10–12 (means over its images).

  Args:
    lambda1, lambda2: float[G] grid coordinates.
    history: metric name -> float[G, steps] (`trdr.experiment.loop.run`); the first metric is the
      attack's objective, reported as ``upper_loss`` (its last value). None: no history
      (a saved run rescored, `rescored`): no upper_loss and no lower-level fields.
    evaluation: `reconstructions` output [G, ...] (plus param_distance float[G]), and
      the same of the start images under keys prefixed with `START`.
    thresholds: the thresholds of evaluation["count_ssim_ge"].
    uniform_tols: the tolerances of evaluation["param_distance_uniform"] [G, T].
  Returns:
    Records with lambda1, lambda2, upper_loss, {metric}_to_s for every set s and every
    metric of the evaluation (`trdr.evaluation.registry.METRICS`, in its order: by
    default l2_to_s and ssim_to_s),
    and where available param_distance, param_distance_uniform_tol_t (per tolerance t),
    lower_level_grad_norm_max,
    lower_level_iters_mean (bilevel) and train_ssim_ge_t (per threshold t); the start
    images' numbers under the same names prefixed with `START` (the verdicts' baseline).
  """
  history = history or {}
  objective = history[next(iter(history))] if history else None
  own = {k: v for k, v in evaluation.items() if not k.startswith(START)}
  start = {k[len(START):]: v for k, v in evaluation.items() if k.startswith(START)}
  records = []
  for g in range(len(lambda1)):
    record = {"lambda1": float(lambda1[g]), "lambda2": float(lambda2[g])}
    if objective is not None:
      record["upper_loss"] = float(objective[g, -1])
    record.update(_point_record(own, g, thresholds, uniform_tols))
    if "grad_norm" in history:
      record["lower_level_grad_norm_max"] = float(history["grad_norm"][g].max())
      record["lower_level_iters_mean"] = float(history["num_iter"][g].mean())
    record.update({START + k: v
                   for k, v in _point_record(start, g, thresholds, uniform_tols).items()})
    records.append(record)
  return records


def _point_record(evaluation: dict, g: int, thresholds, uniform_tols) -> dict:
  """Grid point g's means of `reconstructions` output (and its param_distance[_uniform])."""
  sets = [k.removesuffix("_index") for k in evaluation if k.endswith("_index")]
  record = {}
  if "param_distance" in evaluation:
    record["param_distance"] = float(evaluation["param_distance"][g])
  if "param_distance_uniform" in evaluation:
    record.update({f"param_distance_uniform_tol_{t:g}": float(d)
                   for t, d in zip(uniform_tols, evaluation["param_distance_uniform"][g])})
  for m in registry.METRICS:
    record.update({f"{m}_to_{s}": float(evaluation[f"{s}_{m}"][g].mean()) for s in sets
                   if f"{s}_{m}" in evaluation})
  if "count_ssim_ge" in evaluation:
    record.update({f"train_ssim_ge_{t:g}": int(c)
                   for t, c in zip(thresholds, evaluation["count_ssim_ge"][g])})
  return record


def counts(count_ssim_ge, thresholds) -> dict[str, int]:
  """{"ssim_ge_0.4": count, ...} from one run's count_ssim_ge int[len(thresholds)]."""
  return {f"ssim_ge_{t:g}": int(c) for t, c in zip(thresholds, np.asarray(count_ssim_ge))}


def per_class_counts(results: dict, labels, thresholds) -> dict[str, dict]:
  """Training images reconstructed per class: {"reconstructed_per_class[_w{w}]": {label:
  {"ssim_ge_0.4": count, ...}}} from one run's best_ssim_per_train[_w{w}] float[n] and
  the training labels float[n] (±1, or 0 … C−1: Buzaglo et al.'s per-class evaluation)."""
  out = {}
  for key in results:
    if key.startswith("best_ssim_per_train"):
      best, suffix = np.asarray(results[key]), key.removeprefix("best_ssim_per_train")
      out["reconstructed_per_class" + suffix] = {
          f"{c:g}": {f"ssim_ge_{t:g}": int(np.sum(best[labels == c] >= t)) for t in thresholds}
          for c in np.unique(labels)}
  return out


def lower_level_summary(history: dict, tol: float) -> dict:
  """How well the bilevel lower level converged over the whole run.

  Args:
    history: with grad_norm and num_iter, float[G, steps] each (||∇θE|| at θ(x^k) at the
      end of every outer step k, and the L-BFGS iterations it took).
    tol: the lower level's target ||∇θE||.
  Returns:
    Plain-number dict: grad_norm_{max, median, final_max}, fraction_converged (steps that
    reached ``tol``), iters_mean, iters_max; {} without lower-level metrics.
  """
  if "grad_norm" not in history or np.size(history["grad_norm"]) == 0:
    return {}
  grad, iters = np.asarray(history["grad_norm"]), np.asarray(history["num_iter"])
  return {"grad_norm_max": float(grad.max()), "grad_norm_median": float(np.median(grad)),
          "grad_norm_final_max": float(grad[:, -1].max()),
          "fraction_converged": float(np.mean(grad < tol)),
          "iters_mean": float(iters.mean()), "iters_max": int(iters.max())}
