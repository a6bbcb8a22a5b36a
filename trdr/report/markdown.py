"""report.md and membership.md: each artefact's claim, rule, measured numbers, checks,
baseline and verdict as Markdown, with the counts and membership tables.
"""

import numpy as np

from trdr.report import membership_rules
from trdr.report.claims import CLAIMS


def _fmt(value) -> str:
  if isinstance(value, (bool, np.bool_)):
    return "yes" if value else "no"
  if isinstance(value, (int, np.integer)):
    return str(int(value))
  if isinstance(value, float):
    if not np.isfinite(value):
      return "n/a"
    return f"{value:.3e}" if value != 0 and (abs(value) < 1e-2 or abs(value) >= 1e4) else (
        f"{value:.3f}")
  if isinstance(value, (list, tuple)):
    return "[" + ", ".join(_fmt(v) for v in value) + "]"
  return str(value)


def _section(title: str, v: dict, images: list[str], extra: list[str] = ()) -> list[str]:
  lines = [f"## {title}", ""]
  lines += [f"![{title}]({path})" for path in images]
  if images:
    lines.append("")
  if extra:
    lines += [*extra, ""]
  lines += [f"- **Paper** ({v['source']}): {v['claim']}", f"- **Rule:** {v['rule']}",
            "- **Measured:** " + _pairs(v["measured"]), "- **Checks:** " + _pairs(v["checks"])]
  if "registered" in v:
    lines.append(f"- **Read under** {_registered_words(v['registered'])} (trdr's variant "
                 f"below: {v['registered']['main_steps']}): the numbers, checks and verdict "
                 "of this section are that reading's (seed 0 alone)")
  if "seeds" in v:
    lines.append(_seeds_line(v["seeds"]))
  if "baseline" in v:
    b = v["baseline"]
    lines += ["- **Baseline** (the same rule on the start images): " + _pairs(b["measured"]),
              "- **Baseline checks:** " + _pairs(b["checks"]) + f" (baseline: {b['verdict']})"]
  lines += [f"- {sentence}" for sentence in v.get("sentences", ())]
  if "variant" in v:
    x = v["variant"]
    lines += [f"- **{x['words']}**, the main runs: verdict "
              f"**{_verdict_text(x)}** (baseline: {x['baseline']['verdict']}); measured: "
              + _pairs(x["measured"]) + "; checks: " + _pairs(x["checks"])]
    if "seeds" in x:
      lines.append("  " + _seeds_line(x["seeds"]))
  if "readings" in v:
    lines.append("- **Under each reading of θ0** (the one-hidden victim's attack rerun under "
                 "each, the affine victim's the main runs'; the start images' verdict in "
                 "brackets, then the one-hidden victim alone; the headline reading is "
                 f"({v['headline_reading']})): " + "; ".join(
                     f"({r}) {x['verdict']} ({x['baseline']})"
                     + (f", one-hidden alone {x['one_hidden']}" if "one_hidden" in x else "")
                     for r, x in v["readings"].items()))
  if "steps" in v:
    lines.append("- **Affine victim under each outer step** (seed 0; the start images' verdict "
                 "in brackets): " + "; ".join(f"{x['words']}: {x['verdict']} ({x['baseline']})"
                                              for x in v["steps"]))
  reason = f" ({v['reason']})" if "reason" in v else ""
  lines += ["", f"**Verdict: {v['verdict']}**{reason}", ""]
  return lines


def _seeds_line(s: dict) -> str:
  return (f"- **Over seeds** {_fmt(s['seeds'])}: verdicts {', '.join(s['verdicts'])}; "
          "mean ± std: " + "; ".join(f"{k} = {_fmt(m)} ± {_fmt(s['std'][k])}"
                                     for k, m in s["mean"].items())
          + "".join(f"; {k} per seed: " + " | ".join(map(_fmt, per))
                    for k, per in s.get("lists", {}).items()))


def _verdict_text(v: dict) -> str:
  return v["verdict"] + (f" ({v['reason']})" if "reason" in v else "")


def _registered_words(r: dict) -> str:
  """The registered reading of a verdict's "registered" (`trdr.report.artefacts.
  registered_verdicts`) in words, with its outer steps."""
  return (f"the registered reading of the paper's random θ0, ({r['reading']}) {r['words']}"
          + (" (chosen by default: no reading met the rule)" if r.get("default") else "")
          + f", {r['steps']} outer steps")


def first_table_rows(results: dict) -> list[dict]:
  """The rows of the first table of report.md and docs/verdicts.md, one per artefact of
  ``results``: {"artefact", "verdict" (with its reason), "baseline", "seeds" (the verdict
  of each repeat over seeds, seed 0 first), "v" (the artefact's verdict dict)}. An
  artefact read under the registered reading of θ0 (Figs. 1, 2, 4 and Table 1: its
  "registered", `trdr.report.artefacts.registered_verdicts`) shows that reading's verdict,
  whose runs are seed 0's alone, and directly below it trdr's variant's (its "variant": the
  main runs, with their repeats)."""
  rows = []
  for name, v in results.items():
    seeds = ", ".join(v["seeds"]["verdicts"]) if "seeds" in v else "—"
    row = {"artefact": name, "verdict": _verdict_text(v), "seeds": seeds, "v": v,
           "baseline": v["baseline"]["verdict"] if "baseline" in v else "—"}
    if "registered" not in v:
      rows.append(row)
      continue
    r, x = v["registered"], v["variant"]
    rows += [row | {"verdict": f"{_verdict_text(v)} (registered reading ({r['reading']}), "
                               f"{r['steps']} outer steps)",
                    "seeds": "— (seed 0 alone: the readings' runs are not repeated)"},
             {"artefact": f"{name}, {x['words']}", "verdict": _verdict_text(x), "v": v,
              "baseline": x["baseline"]["verdict"] if "baseline" in x else "—",
              "seeds": ", ".join(x["seeds"]["verdicts"]) if "seeds" in x else "—"}]
  return rows


def registered_note(results: dict) -> list[str]:
  """The sentences under the first table on the artefacts read under the registered
  reading: which reading, its outer steps beside trdr's variant's, and what the per-seed
  column holds for each row; none where no artefact is."""
  read = [(name, v["registered"]) for name, v in results.items() if "registered" in v]
  if not read:
    return []
  r = read[0][1]
  names = ", ".join(name for name, _ in read)
  fewer = (f" The registered reading's attack ran {r['steps']} outer steps, trdr's variant "
           f"{r['main_steps']}: the registered reading has not run at {r['main_steps']} "
           "steps here, and whether the reading or the step count makes a difference "
           "between the two rows is not measured." if r["steps"] != r["main_steps"] else "")
  return [f"{names}: the verdict is the one under {_registered_words(r)}, picked by the rule "
          "fixed in docs/paper.md before the verdicts (the one-hidden victim's attack under "
          "that reading; the affine victim's E is strongly convex, so its runs are the main "
          "runs under every reading). The row directly below each is trdr's variant: the "
          "main runs' verdict." + fewer + " **Per seed**: the verdict of each repeat of the "
          "runs on another data draw, victim initialisation and attack start (seed 0 "
          "first); the registered reading's runs are seed 0's alone, so its rows have none, "
          "and trdr's variant's rows hold the main runs' repeats.", ""]


def _pairs(values: dict) -> str:
  return "; ".join(f"{k} = {_fmt(x)}" for k, x in values.items()) or "none"


def counts_markdown(rows: list[dict]) -> list[str]:
  """The counts table of `counts`: "count (start count)" per threshold."""
  if not rows:
    return []
  levels = list(rows[0]["counts"])
  lines = ["Training images reconstructed (of n): a training image counts when its SSIM to "
           "its SSIM-nearest reconstruction, or to its best buddy (Haim et al.'s mutual "
           "nearest neighbours under their NCC distance), reaches t; SSIM with an 11×11 "
           "window (dm-pix's default) and a 3×3 window (Haim et al.'s counts; theirs pads "
           "'same', ours 'valid')." + (
               " Haim et al.'s protocol: every training image's NCC-nearest reconstruction "
               "at ½ resolution (no one-to-one constraint), min–max scaled, kornia's 3×3 "
               "SSIM ('same', reflected borders)." if any(
                   r["matching"].startswith("Haim") for r in rows) else "")
           + " In parentheses: the same count for the start images.", "",
           "| run | matching | window | n | " + " | ".join(
               f"SSIM ≥ {k.removeprefix('ssim_ge_')}" for k in levels) + " |",
           "|---|---|---:|---:|" + "---:|" * len(levels)]
  for r in rows:
    cells = [f"{r['counts'][k]} ({r['start'][k]})" for k in levels]
    lines.append(f"| {r['run']} | {r['matching']} | {r['window']} | {r['n_train']} | "
                 + " | ".join(cells) + " |")
  return lines + [""]


def _interval(ci) -> str:
  return f"[{_fmt(ci[0])}, {_fmt(ci[1])}]"


def tpr_cell(row: dict, fpr: str) -> str:
  """A row's TPR at FPR ``fpr`` as the sentences quote it (`membership_rules.tpr_text`: "—,
  N too small" with its count when the row has fewer than 1 / FPR non-members)."""
  return membership_rules.tpr_text(row, fpr)


def _top(row: dict) -> str:
  """A row's members among its top k (`trdr.evaluation.roc.precision_at_top`), "k: m/s"."""
  return ", ".join(f"{k}: {m}/{s}" for k, s, m in row.get("top", ())) or "—"


def membership_markdown(measured: dict) -> list[str]:
  """The membership tables (`trdr.studies.membership.measure`): AUC per attack × start kind × score
  with its CI over victims, the AUC per victim and TPR at low FPR, on the reconstructions and
  on their start images; natural-looking counts and member fractions."""
  fprs = [f"{f:g}" for f in measured["fprs"]]
  victims = len(measured.get("victims", ())) or "the"
  labels = measured.get("labels", {"member_min_ssim": float("nan"),
                                   "non_member_max_ssim": float("nan")})
  lines = [f"Natural-looking: SSIM ≥ {measured['natural_threshold']:g} to the nearest public "
           "reference image (test[1::2], never a start). Member: best buddies by SSIM with a "
           f"training image at SSIM ≥ {labels['member_min_ssim']:g}; non-member: SSIM < "
           f"{labels['non_member_max_ssim']:g} to every training image; between: excluded "
           "(counted). The labels under each SSIM window of the column window; the rule "
           f"judges the first ({_fmt(labels.get('windows', ['—'])[0])}), the others are "
           "reported. AUC = P(score of a member "
           f"> score of a non-member), over the images of all {victims} victims pooled "
           "(each victim its own data draw of one recipe). The interval the rule uses is over "
           f"victims: the {measured['confidence']:.0%} Student t interval of the mean of the "
           "victims' own AUCs (each victim one replicate: the images of one victim are not "
           "independent). Beside it, for comparison: the bootstrap over victims (whole "
           "victims resampled; too narrow with few victims) and the i.i.d. bootstrap over "
           "images. Scores are "
           f"oriented before running (higher = member); fewer than {measured['min_per_class']}"
           " members or non-members: no AUC. TPR at an FPR needs at least 1 / FPR "
           "non-members (with fewer it is the TPR at FPR 0): \"—, N too small\" where the "
           "row has fewer. Top k: the members among the images that score at least the "
           "k-th largest (members / selected; the rule \"with certainty\" reads them).", "",
           "| attack | start | stage | score | window | members | non-members | excluded | AUC | "
           "per victim: mean [CI] | AUC per victim | bootstrap over victims | over images | "
           + " | ".join(f"TPR at {f} FPR" for f in fprs) + " | top k |",
           "|---|---|---|---|---:|---:|---:|---:|---:|---|---|---|---|" + "---:|" * len(fprs)
           + "---|"]
  for r in measured["rows"]:
    if not r["informative"]:
      cells = ["too few", "—", "—", "—", "—", *("—" for _ in fprs)]
    else:
      cells = [_fmt(r["auc"]), f"{_fmt(r['victim_mean'])} {_interval(r['ci'])}",
               _fmt(r["per_cluster"]), _interval(r["ci_bootstrap"]), _interval(r["ci_images"]),
               *(tpr_cell(r, f) for f in fprs)]
    lines.append(f"| {r['attack']} | {r['kind']} | {r['stage']} | {r['score']} | "
                 f"{r.get('window', '—')} | {r['members']} | {r['non_members']} | "
                 f"{r.get('excluded', '—')} | " + " | ".join(cells) + f" | {_top(r)} |")
  controls = measured.get("controls", [])
  if controls:
    lines += ["", "Controls on the mixed starts, after the attack: positive (label: the start "
              "was a training image; an experiment that cannot tell these apart cannot "
              "detect membership), negative (the partition starts split at random into "
              "two halves; telling them apart is a false alarm) and oracle (an attack that "
              "returns training images only: the training-image starts themselves, every "
              "one a member; the rule \"with certainty\" must tell).", "",
              "| attack | control | score | members | non-members | AUC | per victim: mean "
              "[CI] | p (AUC) | top k |",
              "|---|---|---|---:|---:|---:|---|---:|---|"]
    for r in controls:
      cells = (f"{_fmt(r['auc'])} | {_fmt(r['victim_mean'])} {_interval(r['ci'])} | "
               f"{_fmt(r['p_auc'])}" if r["informative"] else "too few | — | —")
      lines.append(f"| {r['attack']} | {r['control']} | {r['score']} | {r['members']} | "
                   f"{r['non_members']} | {cells} | {_top(r)} |")
  for attack, c in measured.get("label_calibration", {}).items():
    lines += ["", f"Labels on genuine non-members ({attack}'s {c['images']} partition images "
              f"scored as reconstructions): {c['labelled_non_member']:.0%} labelled non-member, "
              f"{c['at_member_level']:.0%} at the member level (an upper bound on false "
              "members)."]
  ts = [row["threshold"] for row in measured["fractions"][0]["rows"]]
  lines += ["", "Natural-looking images at SSIM ≥ t: count (member fraction; for mixed starts "
            "also the fraction whose nearest real image has the start's membership).", "",
            "| attack | start | stage | " + " | ".join(f"t = {t:g}" for t in ts) + " |",
            "|---|---|---|" + "---|" * len(ts)]
  for f in measured["fractions"]:
    cells = [f"{x['natural']} ({_fmt(x['fraction_member'])}"
             + (f"; {_fmt(x['start_member_agree'])}" if x["start_member_agree"] is not None
                else "") + ")" for x in f["rows"]]
    lines.append(f"| {f['attack']} | {f['kind']} | {f['stage']} | " + " | ".join(cells) + " |")
  return lines


def _control_sentence(attack: str, answers: dict) -> str:
  """One attack's controls (`membership_rules.membership_controls`) in words."""
  said = {"positive": {True: "detects membership", False: "detects nothing",
                       None: "has too few images"},
          "negative": {True: "raises a false alarm", False: "raises no alarm",
                       None: "has too few images"},
          "oracle": {True: "is told with certainty", False: "is not told with certainty",
                     None: "has too few images"}}
  return (f"{attack}: the positive control {said['positive'][answers.get('positive')]}, the "
          f"negative control {said['negative'][answers.get('negative')]}, the oracle "
          f"(training images only) {said['oracle'][answers.get('oracle')]}.")


def membership_page(measured: dict, results: dict, generated: dict | None = None) -> str:
  """membership.md of experiments/membership.py: where it comes from (``generated``,
  `trdr.report.provenance`: size, UTC time, machine, JAX); the answers first (per claim of
  `trdr.report.claims.MEMBERSHIP`, its verdict and one sentence per attack and start
  kind; the controls); then each claim's rule and the tables.

  Args:
    measured: `trdr.studies.membership.measure` output.
    results: {claim: its verdict} (`trdr.report.claims.verdicts` of {"membership":
      measured}).
    generated: `trdr.report.provenance`.
  """
  g = generated or {}
  victims = measured.get("victims", [])
  header = (f"Generated by `make membership` (`experiments/membership.py`; written "
            f"{g.get('utc', '?')}, {g.get('machine', '?')}, {g.get('devices', '?')}, jax "
            f"{g.get('jax', '?')}) from membership.json; do not edit by hand. Size "
            f"`{g.get('size', '?')}`, {len(victims)} victims per attack (data draws "
            f"{', '.join(map(str, victims))}).")
  answer = ["## The answers", ""]
  for verdict in results.values():
    baseline = verdict.get("baseline", {}).get("verdict")
    answer += [f"{CLAIMS[verdict['artefact']].title}. **Verdict: {verdict['verdict']}**"
               + (f" (baseline, the same rule on the start images: {baseline})"
                  if baseline else "")
               + f". The paper ({verdict['source']}): {verdict['claim']}", "",
               *(f"- {sentence}" for sentence in verdict.get("sentences", ())), ""]
  answer += [*(f"- {_control_sentence(attack, answers)}"
               for attack, answers in membership_rules.membership_controls(measured).items()),
             "", "The rules, every score and the controls' numbers: the sections below."]
  sections = []
  for name, verdict in results.items():
    section = {key: v for key, v in verdict.items() if key != "sentences"}   # said above
    shown = list(CLAIMS[name].images)   # the figure and the tables: with the first claim
    sections += _section(CLAIMS[name].title, section, shown,
                         membership_markdown(measured) if shown else [])
  return "\n".join(["# trdr membership ambiguity", "", header, "", *answer, "",
                    *sections]) + "\n"


def premise_markdown(premises: dict) -> list[str]:
  """DecoReco's premise per run (`trdr.victim.kkt`, a run's summary.json "kkt_premise"):
  the unexplained fraction of each tensor of θ* and the residual floor, as Markdown lines;
  none for no run."""
  if not premises:
    return []
  tensors = list(next(iter(premises.values()))["relative"])
  lines = ["## DecoReco's premise: the KKT point of θ*", "",
           "The part of θ* that no non-negative combination of its training images' "
           "gradients explains (Haim et al.'s θ* = Σ λ_i y_i ∇θΦ(x_i; θ*), λ ≥ 0, fitted on "
           "the true training images by NNLS; `trdr/victim/kkt.py`), per tensor and "
           "relative to its ‖θ*‖²; the floor is the residual left at the true images. "
           "How the victim's recipe moves it: docs/victim_recipe.md.", "",
           "| run | " + " | ".join(tensors) + " | whole θ* | floor ‖r‖² | λ > 0 |",
           "|---|" + "---:|" * (len(tensors) + 3)]
  for name, p in premises.items():
    lines.append(f"| {name} | " + " | ".join(f"{p['relative'][t]:.3f}" for t in tensors)
                 + f" | {p['relative_total']:.3f} | {p['residual_total']:.4g} | "
                 f"{p['positive']} of {p['n']} |")
  return lines + [""]


def truth_markdown(truths: dict) -> list[str]:
  """DecoReco's truth diagnostic per run (`trdr.attacks.truth`, a run's summary.json "truth"):
  the attack's loss at the true training images beside the loss it reached, the attack run
  from them, and the verdict, as Markdown lines; none for no run."""
  if not truths:
    return []
  lines = ["## DecoReco's objective at the truth", "",
           "The attack's own loss (sigmoid(αz) backward, λ_min and pixel priors) at the true "
           "training images with λ fitted, beside the loss it reached from its starts (the "
           "lower of its own λ and λ fitted), and the attack run from the truth for the "
           "run's steps: its mean SSIM to its start and the training images it keeps (best "
           "buddies at SSIM ≥ the level; windows 11 and 3). **search**: the truth is lower "
           "and stays, the search failed; **objective**: the objective does not single out "
           "the truth, and a low count is no evidence of privacy (`trdr/attacks/truth.py`).",
           "", "| run | loss at truth | reached | λ fitted | truth start: SSIM | kept | "
           "kept (w 3) | verdict |", "|---|---:|---:|---:|---:|---:|---:|---|"]
  for name, t in truths.items():
    s = t["truth_start"]
    lines.append(f"| {name} | {t['loss_at_truth']:.4g} | {t['loss_reached']:.4g} | "
                 f"{t['loss_reached_lambda_fitted']:.4g} | {s['ssim_to_start']:.3f} | "
                 f"{s['kept']} of {s['n']} | {s['kept_w3']} of {s['n']} | "
                 f"**{t['verdict']}** |")
  return lines + [""]


def power_markdown(powers: dict) -> list[str]:
  """Each DecoReco run's count beside the attack's measured power on trdr's own victims of
  its architecture (`trdr.evaluation.power.run_statement`, a run's summary.json "power"), as
  Markdown lines; none for no run."""
  if not powers:
    return []
  return ["## What each DecoReco count is worth", "",
          "Each run's count beside what the same attack recovers on trdr's own victims of "
          "the same architecture at the nearest calibrated training-set size (`make power`, "
          "docs/power.md); a count where that power is not measured is no evidence of "
          "privacy.", "", *(f"- **{name}**: {text}" for name, text in powers.items()), ""]


def report_page(results: dict, table1_md: str, measured: dict | None, variant: str,
                count_rows: list[dict] = (), premises: dict | None = None,
                truths: dict | None = None, powers: dict | None = None) -> str:
  """report.md from the verdicts, Table 1's Markdown and the membership measurements.

  Args:
    results: artefact -> verdict dict (`verdicts`, plus "membership").
    table1_md: Table 1 as Markdown (`trdr.report.artefacts.table1`, table1.md, and
      `trdr.studies.readings.table1_readings` after it).
    measured: `trdr.studies.membership.measure` output; None where the membership
      experiment has not run (its section then says so, with no figure or tables).
    variant: the config variant ("", "cpu" or "smoke"), named in the header.
    count_rows: `counts` output (the counts table; none: no table).
    premises: {DecoReco run: its summary's "kkt_premise"} (`premise_markdown`; none: no
      section).
    truths: {DecoReco run: its summary's "truth"} (`truth_markdown`; none: no section).
    powers: {DecoReco run: its summary's "power"} (`power_markdown`; none: no section).
  """
  size = variant or "paper"
  lines = [f"# trdr reproduction report: Runkel et al. 2024 (size: {size})", "",
           "Generated by `make figures` (`experiments/report.py`). Every verdict is computed "
           "from the runs' numbers by the rule stated beside it (`trdr/report/claims.py`: "
           "`RULES`, `CLAIMS`). Claims are quoted from the paper, with where they stand. "
           "Every rule is also applied to the start images of the same runs (the baseline: "
           "an attack that returns its start). A check the start images pass and the "
           "reconstructions fail makes the verdict **not reproduced** (or **partly**, when "
           "another check passes that the start images fail): the attack lost what its "
           "start had. A verdict whose passing checks the start images pass too, and that "
           "lost none, is **uninformative** when it passes every check (it says nothing "
           "about the attack) and **not reproduced** when it fails some (only the "
           "failures are informative). "
           "**Underpowered**: an interval that contains chance but is too wide to say "
           "\"cannot tell\" (the margin is in the rule). **Not tested**: no "
           "rule of trdr tests that sentence yet, these runs are too small for it (the "
           "reason is in the rule), or its experiment has not run here (membership: "
           "`make membership`, then `make figures` again). **Per seed**: the verdict of "
           "each repeat of the runs on another data draw, victim initialisation and attack "
           "start (seed 0 first), with the numbers' mean ± std in each section (for the "
           "artefacts read under the registered reading of θ0, the note below the table "
           "says which rows have repeats)."]
  if size != "paper":
    lines.append(f"\nThese are **{size}-size** runs (smaller victims, fewer images and "
                 "iterations than the paper): the verdicts say what these runs show.")
  lines += ["", "| artefact | verdict | baseline | per seed | source |", "|---|---|---|---|---|"]
  for row in first_table_rows(results):
    lines.append(f"| {row['artefact']} | {row['verdict']} | {row['baseline']} | "
                 f"{row['seeds']} | {row['v']['source']} |")
  lines += ["", *registered_note(results)]
  if count_rows:
    lines += ["## Counts on both scales", "", *counts_markdown(count_rows)]
  lines += premise_markdown(premises or {})
  lines += truth_markdown(truths or {})
  lines += power_markdown(powers or {})
  # What a claim's section shows besides its rule: Table 1's tables; the membership
  # experiment's figure and tables where it has run.
  extra = {"table1": [table1_md.strip()],
           "membership": [] if measured is None else membership_markdown(measured)}
  for name, claim in CLAIMS.items():
    shown = [] if "membership" in claim.needs and measured is None else list(claim.images)
    lines += _section(claim.title, results[name], shown, extra.get(name, []))
  return "\n".join(lines) + "\n"


def verdicts_page(report: dict, source: str) -> str:
  """docs/verdicts.md from a report.json alone (`trdr.report.run`): one table of the
  artefacts (the paper's claim, our verdict and why, the baseline, the verdict per seed)
  and Table 1, ||θ* − θ||² summed and as the mean over the victim's P parameters.

  Args:
    report: report.json's contents (with "generated" and "table1").
    source: the report.json path, named in the header.
  Raises:
    KeyError: a report.json written before it carried "generated" and "table1" (rerun
      `make figures`: finished runs are reused).
  """
  g, results, table = report["generated"], report["verdicts"], report["table1"]
  lines = [f"# trdr's verdicts on Runkel et al. 2024 (size: {g['size']})", "",
           f"Generated by `make results-doc` from `{source}` (written {g['utc']}, "
           f"{g['machine']}, {g['devices']}, jax {g['jax']}); the full report, with every "
           "rule, number and check, is `report.md` beside it. Do not edit by hand. How to "
           "read a verdict: [results.md](results.md); where we disagree with the paper "
           "and why: [paper.md](paper.md).", "",
           "| artefact | the paper | verdict | baseline (start images) | per seed |",
           "|---|---|---|---|---|"]
  for row in first_table_rows({name: results[name] for name in CLAIMS}):
    v = row["v"]
    claim = (f"{v['claim']} ({v['source']})".replace("|", "\\|")
             if row["artefact"] in CLAIMS else "the same claim")
    lines.append(f"| {row['artefact']} | {claim} | **{row['verdict']}** | {row['baseline']} | "
                 f"{row['seeds']} |")
  note = registered_note(results)
  if note:
    lines += ["", *note[:-1]]
  columns = table["columns"]
  lines += ["", "## Table 1: ||θ* − θ||² after the attack", "",
            "Summed over the victim's P parameters (as the paper's table) and as the mean "
            "per parameter; the paper's values beside (its victims are larger: its P "
            "differs), and the same for the start images (the baseline).", "",
            "| victim | P | start | measured | measured / P | start images | paper |",
            "|---|---:|---|---:|---:|---:|---:|"]
  for victim, row in table["rows"].items():
    for c in columns:
      lines.append(
          f"| {victim} ({table['sizes'][victim]}) | {row['parameters']} | {c} | "
          f"{_fmt(row['measured'][c])} | {_fmt(row['measured_per_parameter'][c])} | "
          f"{_fmt(row['start_measured'][c])} | {_fmt(row['paper'][c])} |")
  if "table1_readings" in report:  # a report.json written before it had none: no section
    lines += ["", "## Table 1 under each reading of the paper's random θ0", "",
              report["table1_readings"]["markdown"].strip()]
  if "readings_attack" in report:  # the same: no section
    lines += ["", "## Figs. 1, 2, 4 and Table 1 under each reading of the paper's random θ0",
              "", report["readings_attack"]["markdown"].strip()]
  if results.get("fig2", {}).get("steps"):  # the same: no section
    lines += ["", "## Fig. 2 under each outer step (affine victim)", "",
              "The verdict of Fig. 2's rule on the affine victim alone (its ground-truth "
              "start) under each outer step, the start images' verdict beside; eq. 7 is the "
              "paper's step. Details: the outer-step section below.", "",
              "| outer step | verdict (seed 0) | baseline (start images) | per seed |",
              "|---|---|---|---|"]
    for step in results["fig2"]["steps"]:
      lines.append(f"| {step['words']} | **{step['verdict']}** | {step['baseline']} | "
                   + ", ".join(step["seeds"].values()) + " |")
  if "outer_step" in report:  # the same: no section
    lines += ["", "## The outer step: eq. 7's plain gradient step beside Adam (affine, "
              "Figs. 1–3)", "", report["outer_step"]["markdown"].strip()]
  if report.get("kkt_premise"):   # a report.json written before it had none: no section
    lines += ["", *premise_markdown(report["kkt_premise"])]
  if report.get("truth"):   # the same: no section
    lines += ["", *truth_markdown(report["truth"])]
  if report.get("power"):   # the same: no section
    lines += ["", *power_markdown(report["power"])]
  if "disk" in report:  # the same: no section
    disk = report["disk"]
    lines += ["", "## Disk", "",
              f"The report's directory held {disk['bytes'] / 1e6:.0f} MB in "
              f"{len(disk['runs'])} run directories when the report was written (every "
              "file's bytes). Runs finished by an older trdr keep the larger files it "
              "wrote (start images and duplicate grid points in results.npz, the "
              "checkpoint) until they are computed again.", "",
              "| run | MB |", "|---|---:|",
              *(f"| {name} | {b / 1e6:.1f} |" for name, b in disk["runs"].items())]
  return "\n".join(lines) + "\n"
