"""What a DecoReco count is worth: the attack's measured power at the nearest calibrated cell.

A count of 0 reconstructed training images is evidence of privacy only where the same
attack, on victims of the same architecture and size, does recover training images (issue
88; Iurada et al. 2025, "A Law of Data Reconstruction", tie recovery to p / (d·n)).
`make power` (`trdr.studies.power`) measures that power on trdr's own victims: per
architecture and training-set size n, at Haim et al.'s published settings and at settings
tuned by trdr's sweep, over several seeds, the training images recovered as best buddies at
SSIM ≥ 0.4, window 11, beside the same count for the attack's start images. `make
power-doc` ships its calibration table in the package (trdr/assets/power.json, `TABLE`);
`statement` reads it and says, for a victim's θ* and n, what the attack recovers at the
nearest calibrated cell, or that its power is not measured there. trdr ships no table
until such a run has written one: then every statement says "power not measured".

The calibration table (JSON, `calibration_cell` builds a cell):

  {"format": 1, "provenance": {...}, "criterion": {"count": "best buddies",
   "ssim_level": 0.4, "window": 11},
   "cells": [{"signature": str (`signature`), "architecture": str (words), "p": int, "d": int,
              "n": int, "setting": str, "values": [σ, lr, λ_min, α], "seeds": [int],
              "recovered": {"min", "max", "mean"}, "start": {"min", "max", "mean"},
              "recovered_w3": {...}, "start_w3": {...}}],
   "premise_threshold": `premise_threshold`'s dict}

`premise_threshold` derives the threshold of DecoReco's premise warning (the first layer's
unexplained KKT fraction, `premise_warning`) from calibrated cells by
a rule stated before looking at them (its docstring).
"""

import importlib.resources
import math
import re
from collections.abc import Iterable, Mapping

import numpy as np

from trdr.runtime import files

FORMAT = 1
TABLE = "power.json"        # in the package trdr.assets
ASSETS = "trdr.assets"

# A calibrated cell speaks for a training-set size within this factor of its own n.
N_FACTOR = 2.0

# Names of the settings in a table, in words.
SETTING_WORDS = {"b9dfyspx": "Haim et al.'s published settings (b9dfyspx)",
                 "tuned": "settings tuned by trdr's sweep"}

NOT_EVIDENCE = "a 0 is not evidence of privacy"

# The attack whose power the table calibrates (`trdr.studies.power`): runs of other attacks
# carry no statement.
ATTACK = "decoreco"
# The count a statement places against the calibrated range: summary.json's
# "reconstructed_best_buddies" at this SSIM level and window (`run_count`).
LEVEL, WINDOW = 0.4, 11

# `premise_threshold`'s rule in words, as the page states it.
RULE = ("a cell recovers when its best buddies (window 11, SSIM ≥ 0.4) exceed its start "
        "images'; the threshold is the largest first-layer unexplained fraction at which some "
        "cell still recovers; the residual separates when every non-recovering cell lies "
        "above it")


def _layer_order(name: str) -> tuple:
  """trdr's layer names in the network's order (`trdr.models`): ``dense``, ``hidden``,
  ``dense_0`` … or ``conv_0`` …, ``output`` last."""
  found = re.fullmatch(r"(?:dense|conv)_(\d+)", name)
  return name == "output", int(found.group(1)) if found else -1, name


def signature(params_or_signature) -> str:
  """The architecture's signature: θ*'s kernel shapes in the network's order.

  A trdr-trained victim and the same network read from a user's file (`trdr.victim.
  pretrained`: .pth, .npz, .msgpack, orbax, and .onnx via `trdr.victim.onnx_model`) hold θ*
  in trdr's Flax layout (``<layer>/kernel`` float[in, out], a convolution's float[3, 3, in,
  out], layers ``dense_0`` … / ``conv_0`` … / ``output``), so both give the same signature.
  Biases and the activation are not in it.

  Args:
    params_or_signature: θ* as a nested mapping {layer: {"kernel": array, ...}} (an outer
      ``{"params": ...}`` is removed), or a signature string (returned as it is).
  Returns:
    e.g. "3072x1000,1000x1000,1000x1" for Haim et al.'s MLP on CIFAR-10.
  Raises:
    ValueError: θ* holds no layer with a ``kernel`` (e.g. a PyTorch state_dict, whose
      ``.weight`` is float[out, in]: load it with `trdr.victim.pretrained` first).
  """
  if isinstance(params_or_signature, str):
    return params_or_signature
  params = params_or_signature
  if isinstance(params, Mapping) and set(params) == {"params"}:
    params = params["params"]
  if not isinstance(params, Mapping):
    raise ValueError(f"expected θ* as a mapping {{layer: {{'kernel': ...}}}} or a signature "
                     f"string, got {type(params).__name__}")
  kernels = [(name, layer["kernel"]) for name, layer in params.items()
             if isinstance(layer, Mapping) and "kernel" in layer]
  if not kernels:
    raise ValueError(f"θ* has no layer with a 'kernel' (layers {sorted(params)}): give it in "
                     "trdr's Flax layout, e.g. as trdr.victim.pretrained.load reads a file")
  kernels.sort(key=lambda item: _layer_order(str(item[0])))
  shape = lambda k: k.shape if hasattr(k, "shape") else np.shape(k)
  return ",".join("x".join(str(int(s)) for s in shape(k)) for _, k in kernels)


def spread(values) -> dict:
  """{"min", "max", "mean"} of counts over seeds (floats; JSON-able)."""
  v = np.asarray(list(values), float)
  if v.size == 0:
    raise ValueError("no values to summarise")
  return {"min": float(v.min()), "max": float(v.max()), "mean": float(v.mean())}


def calibration_cell(*, signature_: str, architecture: str, p: int, d: int, n: int,
                     setting: str, values, seeds, recovered, start, recovered_w3=None,
                     start_w3=None) -> dict:
  """One cell of the calibration table: the counts over seeds (ints in [0, n]) summarised.

  Raises:
    ValueError: the seeds and the counts differ in number, or a count lies outside [0, n].
  """
  counts = {"recovered": recovered, "start": start, "recovered_w3": recovered_w3,
            "start_w3": start_w3}
  cell = {"signature": signature_, "architecture": architecture, "p": int(p), "d": int(d),
          "n": int(n), "setting": setting, "values": [float(v) for v in values],
          "seeds": [int(s) for s in seeds]}
  for name, c in counts.items():
    if c is None:
      continue
    c = list(c)
    if len(c) != len(cell["seeds"]):
      raise ValueError(f"{name}: {len(c)} counts for {len(cell['seeds'])} seeds")
    if not all(0 <= x <= n for x in c):
      raise ValueError(f"{name}: counts {c} outside [0, n = {n}]")
    cell[name] = spread(c)
  return cell


def load_table(path: str | None = None) -> dict | None:
  """The calibration table at ``path``, by default the one shipped in the package
  (trdr/assets/power.json, `make power-doc`); None when there is none.

  Raises:
    ValueError: the file is not a calibration table of this `FORMAT`.
  """
  if path is None:
    resource = importlib.resources.files(ASSETS).joinpath(TABLE)
    if not resource.is_file():
      return None
    text = resource.read_text(encoding="utf-8")
  else:
    try:
      with open(path, encoding="utf-8") as f:
        text = f.read()
    except FileNotFoundError:
      return None
  table = files.loads_json(text)
  if not isinstance(table, dict) or table.get("format") != FORMAT or "cells" not in table:
    raise ValueError(f"{path or TABLE} is not a trdr power table of format {FORMAT} "
                     "(`make power power-doc` writes one)")
  return table


def nearest(table: Mapping, signature_: str, n: int, setting: str | None = None
            ) -> list[dict]:
  """The calibrated cells nearest to ``n`` for the architecture ``signature_``: those at
  the calibrated n nearest to ``n`` on a log scale (a tie goes to the larger n, where the
  attack has less power: the conservative reading of a 0), within a factor `N_FACTOR`;
  one per setting, or only ``setting``'s. Empty when none is that near.

  Raises:
    ValueError: n < 1.
  """
  if n < 1:
    raise ValueError(f"n must be a positive number of training images, got {n}")
  mine = [c for c in table["cells"] if c["signature"] == signature_
          and (setting is None or c["setting"] == setting)]
  if not mine:
    return []
  distance = lambda c: abs(math.log(c["n"] / n))
  best = min(mine, key=lambda c: (distance(c), -c["n"]))
  if distance(best) > math.log(N_FACTOR) + 1e-12:
    return []
  return [c for c in mine if c["n"] == best["n"]]


def _range(counts: Mapping) -> str:
  low, high = int(round(counts["min"])), int(round(counts["max"]))
  return f"{low}" if low == high else f"{low}–{high}"


def statement(params_or_signature, n: int, recovered: int | None = None, *,
              setting: str | None = None, table: Mapping | None = None) -> str:
  """The attack's measured power for a victim, as one sentence to follow "N of n
  reconstructed" (issue 88, part 5).

  Args:
    params_or_signature: the victim's θ* in trdr's layout, or its `signature`.
    n: the victim's training-set size, ≥ 1.
    recovered: this run's count (best buddies, SSIM ≥ 0.4, window 11), in [0, n], or None;
      given, the sentence places it against the calibrated range.
    setting: only the table's cells of this setting ("b9dfyspx", "tuned"); None: every
      setting calibrated there.
    table: a calibration table (`load_table`'s); None reads the package's.
  Returns:
    e.g. "on trdr's own victims of this architecture at n = 100 this attack recovers 13–20
    of 100 at Haim et al.'s published settings (b9dfyspx) (best buddies, SSIM ≥ 0.4, window
    11; 3 seeds; start images 0–1)", or "power not measured for this architecture: a 0 is
    not evidence of privacy".
  Raises:
    ValueError: n < 1, ``recovered`` outside [0, n], or θ* without kernels (`signature`).
  """
  sig = signature(params_or_signature)
  if n < 1:
    raise ValueError(f"n must be a positive number of training images, got {n}")
  if recovered is not None and not 0 <= recovered <= n:
    raise ValueError(f"recovered must lie in [0, n = {n}], got {recovered}")
  if table is None:
    table = load_table()
  if table is None:
    return ("power not measured (this installation has no calibration table; `make power "
            f"power-doc` writes it): {NOT_EVIDENCE}")
  if not any(c["signature"] == sig and (setting is None or c["setting"] == setting)
             for c in table["cells"]):
    what = "this architecture" + ("" if setting is None else f" at {_words(setting)}")
    return f"power not measured for {what}: {NOT_EVIDENCE}"
  cells = nearest(table, sig, n, setting)
  if not cells:
    ns = sorted({c["n"] for c in table["cells"] if c["signature"] == sig})
    return (f"power not measured for this architecture at n = {n} (calibrated at n = "
            f"{', '.join(map(str, ns))}): {NOT_EVIDENCE}")
  at = cells[0]["n"]
  criterion = table.get("criterion", {})
  level, window = criterion.get("ssim_level", 0.4), criterion.get("window", 11)
  parts = []
  for c in cells:
    seeds = len(c["seeds"])
    none = ", no more than its start images" if c["recovered"]["max"] <= c["start"]["max"] else ""
    parts.append(f"{_range(c['recovered'])} of {at} at {_words(c['setting'])} ({seeds} "
                 f"seed{'s' if seeds != 1 else ''}; start images {_range(c['start'])}{none})")
  where = (f"at n = {at}" if at == n else f"at n = {at}, the calibrated size nearest this "
           f"run's n = {n},")
  text = (f"on trdr's own victims of this architecture {where} this attack recovers "
          + " and ".join(parts) + f" (best buddies, SSIM ≥ {level:g}, window {window})")
  powerless = all(c["recovered"]["max"] <= c["start"]["max"] for c in cells)
  if powerless:
    text += f": it has no measured power here and {NOT_EVIDENCE}"
  if recovered is not None:
    low = min(c["recovered"]["min"] for c in cells)
    high = max(c["recovered"]["max"] for c in cells)
    place = ("below every calibrated seed" if recovered < low else
             "above every calibrated seed" if recovered > high else "within the calibrated range")
    scale = "" if at == n else " (counts of different n)"
    text += f"; this run recovers {recovered} of {n}, {place}{scale}"
  return text


def run_count(summary: Mapping) -> int | None:
  """A run's count in the table's terms: its training images recovered as best buddies at SSIM
  ≥ `LEVEL`, window `WINDOW` (summary.json's "reconstructed_best_buddies" at the run's
  ``ssim_window``, or the ``_w11`` twin where the run's own window is another); None where
  the run has no such count."""
  key = ("reconstructed_best_buddies" if summary.get("ssim_window") == WINDOW
         else f"reconstructed_best_buddies_w{WINDOW}")
  count = summary.get(key, {}).get(f"ssim_ge_{LEVEL:g}")
  return None if count is None else int(count)


def run_statement(params, summary: Mapping, *, table: Mapping | None = None) -> str:
  """"N of n reconstructed" followed by `statement`: the line that a DecoReco run's log,
  summary.json ("power"), the script's last lines and the report carry.

  Args:
    params: the victim's θ* (trdr's layout).
    summary: the run's summary.json so far ("n_train" and its counts, `run_count`).
    table: as `statement`'s.
  Returns:
    e.g. "13 of 100 training images recovered (best buddies, SSIM ≥ 0.4, window 11); on
    trdr's own victims of this architecture at n = 100 this attack recovers …".
  """
  n, count = int(summary["n_train"]), run_count(summary)
  head = ("" if count is None else
          f"{count} of {n} training images recovered (best buddies, SSIM ≥ {LEVEL:g}, window "
          f"{WINDOW}); ")
  return head + statement(params, n, count, table=table)


def premise_warning(premise: Mapping, *, table: Mapping | None = None) -> str | None:
  """DecoReco's premise warning for a θ*, at the threshold derived from calibrated cells.

  Args:
    premise: a run's summary.json "kkt_premise" (`trdr.victim.kkt.KKTFit.to_json`): the
      first layer's unexplained fraction is ``relative[first_layer]``.
    table: a calibration table (`load_table`'s); None reads the package's.
  Returns:
    None where the first layer's fraction is at or below the derived threshold (or no table
    derives one); else the sentence for the run's log, summary.json ("kkt_premise"
    "warning") and last lines: the fraction, then the derivation's own wording
    (`premise_threshold`'s "warning"), which says what a 0 is worth that far from the KKT
    point. Where no calibrated cell recovers anything, every θ* gets the warning.
  """
  if table is None:
    table = load_table()
  derived = (table or {}).get("premise_threshold")
  if not derived:
    return None
  first = float(premise["relative"][premise["first_layer"]])
  threshold = derived.get("threshold")
  if threshold is not None and first <= threshold:
    return None
  return (f"DecoReco's premise: {first:.2f} of this θ*'s first layer is unexplained by its "
          f"{premise['n']} training images' gradients with λ ≥ 0 ({premise['first_layer']}); "
          f"{derived['warning']} (derived from {derived['cells']} calibrated runs: "
          "docs/power.md). Check that data.* gives the exact training set "
          "(data.training_set)")


def _words(setting: str) -> str:
  return SETTING_WORDS.get(setting, f"settings {setting!r}")


def premise_threshold(cells: Iterable[Mapping]) -> dict:
  """The premise warning's threshold derived from calibrated cells, by a rule stated before
  looking at them.

  Rule: a cell **recovers** when it has more best buddies (window 11, SSIM ≥ 0.4) than its
  own start images have (the attack-free baseline, same rule). The threshold is the largest
  first-layer unexplained fraction at which some cell still recovers: above it, no
  calibrated victim gave the attack anything, so a count of 0 there says nothing about
  privacy. The residual **separates** when every non-recovering cell lies above the
  threshold; otherwise some victim below it recovers nothing too, and the residual alone
  cannot certify privacy (nor that the attack would work).

  Args:
    cells: {"unexplained": float in [0, 1] (the first layer's ‖r‖²/‖θ*‖², `trdr.victim.
      kkt`), "recovered": int, "start": int}, one per (victim, settings) run.
  Returns:
    {"threshold": float or None (no cell recovers), "cells": int, "recovering": int,
     "failing_below": non-recovering cells at or below the threshold, "separates": bool,
     or None when every cell recovers (no failing cell to separate), "range": [min, max]
     of the unexplained fractions seen, "rule": the rule in words, "reading": what the
     cells say, "warning": the warning's wording this derivation supports}.
  Raises:
    ValueError: no cells, or a fraction outside [0, 1] or not finite.
  """
  cells = list(cells)
  if not cells:
    raise ValueError("no calibrated cells to derive the threshold from")
  u = np.asarray([float(c["unexplained"]) for c in cells])
  if not np.all(np.isfinite(u)) or np.any((u < 0) | (u > 1)):
    raise ValueError(f"unexplained fractions must lie in [0, 1], got {u.tolist()}")
  recovers = np.asarray([int(c["recovered"]) > int(c["start"]) for c in cells])
  out = {"cells": len(cells), "recovering": int(recovers.sum()),
         "range": [float(u.min()), float(u.max())],
         "rule": RULE}
  if not recovers.any():
    out.update(threshold=None, failing_below=len(cells), separates=False,
               reading=(f"No cell of {len(cells)} recovers more than its start images: no "
                        "threshold can be derived, and the attack has no measured power on "
                        "these victims."),
               warning=("the attack's power is not measured on a victim where it recovers "
                        f"anything: {NOT_EVIDENCE}, whatever the residual"))
    return out
  t = float(u[recovers].max())
  below = int(np.sum(~recovers & (u <= t)))
  separates = None if recovers.all() else below == 0
  out.update(threshold=t, failing_below=below, separates=separates)
  if separates is None:
    out["reading"] = (f"Every cell of {len(cells)} recovers more than its start images, at "
                      f"first-layer unexplained fractions {u.min():.3f} to {t:.3f}: above "
                      f"{t:.3f} nothing was measured.")
  elif separates:
    out["reading"] = (f"The {out['recovering']} recovering cells lie at first-layer "
                      f"unexplained fractions up to {t:.3f}, every one of the "
                      f"{len(cells) - out['recovering']} others above it: on these cells "
                      "the residual separates recovering from non-recovering victims.")
  else:
    out["reading"] = (f"{below} of the {len(cells) - out['recovering']} non-recovering cells "
                      f"lie at or below {t:.3f}, the largest unexplained fraction at which a "
                      "cell still recovers: the residual does not separate recovering from "
                      "non-recovering victims, so it alone cannot certify privacy.")
  if separates is None:
    out["warning"] = (f"more than {t:.2f} of the first layer unexplained: beyond every "
                      "calibrated victim, where the attack's power is not measured, so "
                      f"{NOT_EVIDENCE}")
  else:
    out["warning"] = (f"more than {t:.2f} of the first layer unexplained: no calibrated "
                      "victim that far from the KKT point gave the attack anything, so "
                      f"{NOT_EVIDENCE}")
  if separates is not True:
    out["warning"] += ("; below it too the residual alone cannot certify privacy (the "
                       "attack's measured power is the statement that can)")
  return out
