"""Command-line entry points: the absl flags and ``main`` of the scripts in experiments/.

Each script is `app.run(cli.<main>)`. Importing this module defines the flags
--config (an ml_collections config file, locked: a typo in --config.x.y=... is an
error), --workdir (``~`` and $VARS expanded), --overwrite, the flags of a run across processes
(--distributed, --coordinator_address, --num_processes, --process_id; `trdr.runtime.distributed`),
--cpu_devices (JAX CPU devices: one per core by default) and for the artefact scripts
--artefacts.
"""

import contextlib
import hashlib
import logging as std_logging
import os
import platform
import sys
import time

from absl import app, flags, logging
from ml_collections import config_flags

# JAX, matplotlib and the rest of trdr are imported once the flags are parsed, by what uses
# them: a refused command line (an unknown --config file or field) answers without them,
# in a fraction of the seconds they take to import.

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file[:variant].",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Where results are written (experiments: "
                               "default runs/<config name>[_<variant>][_sweep]).")
_OVERWRITE = flags.DEFINE_bool("overwrite", False, "Replace a finished run in --workdir.")
_KEEP_CHECKPOINT = flags.DEFINE_bool(
    "keep_checkpoint", False, "Keep the attack's last checkpoint once the run has finished "
    "(experiments; by default it is removed: only a resumption needs it).")
_EXPORT_VICTIM = flags.DEFINE_string(
    "export_victim", None, "Also write the run's θ* to this file, .npz (trdr's Flax names) "
    "or .pth (a PyTorch state_dict), the layouts --config.victim.load reads (experiments).")
_ARTEFACTS = flags.DEFINE_list("artefacts", None, "Which artefacts to write (paper.py; "
                               "names from trdr.report.artefacts.ARTEFACTS, default: all of them).")
_COORDINATOR = flags.DEFINE_string(
    "coordinator_address", None, "host:port of process 0 when the grid runs across "
    "processes (jax.distributed); with --num_processes and --process_id.")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Processes sharing the grid.")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index, 0 first.")
_DISTRIBUTED = flags.DEFINE_bool(
    "distributed", False, "Join the processes of one run (jax.distributed.initialize); "
    "without --coordinator_address JAX finds them itself (TPU pod slices, SLURM).")
_CPU_DEVICES = flags.DEFINE_integer(
    "cpu_devices", 0, "JAX CPU devices of this process (jax_num_cpu_devices); 0: one per "
    "CPU core it may use (JAX_NUM_CPU_DEVICES, if set, stands), so that a grid attacked "
    "one start at a time runs one start per core (trdr.experiment.loop). Not changed across "
    "processes or when XLA_FLAGS sets --xla_force_host_platform_device_count.")
_COMPILATION_CACHE = flags.DEFINE_string(
    "compilation_cache", None, "Directory of the persistent XLA compilation cache: a second "
    "run loads the programs the first compiled instead of compiling them again (the same "
    "programs, so the same numbers). Safe to delete; 'off' disables it. Default: "
    "$JAX_COMPILATION_CACHE_DIR if set, else ~/.cache/trdr/xla-<machine>-<this CPU's "
    "feature flags>.")
_DEBUG = flags.DEFINE_bool(
    "debug", False, "Show the traceback of an error trdr raises on bad input (a config "
    "value, a model file, a finished --workdir) instead of its one line.")
flags.mark_flags_as_required(["config"])

# What trdr raises on purpose for bad input: the CLIs print it as one line, exit status 2.
_INPUT_ERRORS = (ValueError, FileExistsError, FileNotFoundError, NotADirectoryError)
_REPO_CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                             "configs")


def run(main) -> None:
  """`absl.app.run` of ``main`` with `parse_flags`, after `trdr.runtime.sharding.set_cpu_devices`,
  with JAX's persistent compilation cache (`--compilation_cache`; what it saved is logged
  at the end) and matplotlib's Agg backend (the figures are written to files; no display)."""
  # JAX's backend probe logs "Unable to initialize backend 'tpu'" at INFO on every machine
  # without a TPU; its warnings and errors still show.
  std_logging.getLogger("jax._src.xla_bridge").setLevel(std_logging.WARNING)

  def with_devices(argv):
    import matplotlib  # noqa: PLC0415  (see the imports above)

    from trdr.runtime import sharding  # noqa: PLC0415

    matplotlib.use("Agg")
    sharding.set_cpu_devices(_CPU_DEVICES.value,
                             _DISTRIBUTED.value or bool(_COORDINATOR.value))
    cache = _use_compilation_cache(_COMPILATION_CACHE.value)
    try:
      out = main(argv)
      if cache is not None:
        logging.info(cache.line())
      return out
    except KeyboardInterrupt as e:
      if _DEBUG.value:
        raise
      # The attack loop's own line (`trdr.experiment.loop.run`) says which step resumes.
      _fail(str(e) or _interrupted(_RESOLVED.get("workdir")), status=130)
    except _INPUT_ERRORS as e:
      if _DEBUG.value:
        raise
      _fail(f"error: {' '.join(str(e).split())} (--config="
            f"{config_flags.get_config_filename(flags.FLAGS['config'])}; --debug shows "
            "the traceback)", status=2)
  app.run(with_devices, flags_parser=parse_flags)


def _interrupted(workdir: str | None) -> str:
  """The one line of a command stopped by Ctrl-C: where the same command resumes (the
  attack's last checkpoint, from metrics.jsonl, written after it; finished runs are
  reused)."""
  from trdr.runtime import rundir  # noqa: PLC0415  (see the imports above)

  if not workdir or not os.path.isdir(workdir):
    return "interrupted before any work was saved; the same command starts again"
  steps = [r["step"] for r in rundir.read_metrics(workdir) if "step" in r]
  if steps and os.path.exists(os.path.join(workdir, rundir.CHECKPOINT_FILE)):
    return (f"interrupted after step {steps[-1]}; the same command resumes from step "
            f"{steps[-1]} (the checkpoint in {workdir})")
  return (f"interrupted; the same command resumes in {workdir} (finished runs and "
          "checkpoints there are reused)")


def _cpu_key() -> str:
  """The machine and its CPU's feature flags, hashed: executables compiled for one CPU
  (AVX-512, say) are never loaded on another."""
  flags_line = ""
  with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
    flags_line = next((line for line in f if line.startswith(("flags", "Features"))), "")
  return f"{platform.machine()}-" + hashlib.sha256(flags_line.encode()).hexdigest()[:12]


class _CacheUse:
  """What the persistent compilation cache did in this process (JAX's monitoring events)."""

  def __init__(self, directory: str):
    self.directory, self.hits, self.misses, self.saved_s = directory, 0, 0, 0.0

  def event(self, event: str, **_):
    if event == "/jax/compilation_cache/cache_hits":
      self.hits += 1
    elif event == "/jax/compilation_cache/cache_misses":
      self.misses += 1

  def duration(self, event: str, seconds: float, **_):
    if event == "/jax/compilation_cache/compile_time_saved_sec":
      self.saved_s += seconds

  def line(self) -> str:
    # JAX's saving per program is its compile time less the load time, which is negative
    # for a program quicker to compile than to load: a sum under half a second is "none".
    saved = (f"about {self.saved_s:.0f} s" if self.saved_s >= 0.5 else "no")
    return (f"Compilation cache {self.directory}: {self.hits} programs loaded ({saved} "
            f"compilation time skipped), {self.misses} compiled and stored")


def _use_compilation_cache(value: str | None) -> _CacheUse | None:
  """Turns on JAX's persistent compilation cache for this process (a process-wide switch:
  set here, by the entry point, never by the library) in ``value``'s directory or the
  default (`_COMPILATION_CACHE`); every program is cached, however short its compile.
  Returns what records its use, None when 'off'."""
  import jax  # noqa: PLC0415  (see the imports above)
  import jax.monitoring  # noqa: PLC0415

  if value == "off":
    return None
  directory = value or os.environ.get("JAX_COMPILATION_CACHE_DIR") or os.path.join(
      os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "trdr",
      f"xla-{_cpu_key()}")
  jax.config.update("jax_compilation_cache_dir", directory)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
  use = _CacheUse(directory)
  jax.monitoring.register_event_listener(use.event)
  jax.monitoring.register_event_duration_secs_listener(use.duration)
  return use


def _fail(line: str, status: int) -> None:
  sys.stderr.write(line + "\n")
  sys.exit(status)


def _check_config_file() -> None:
  """A --config file that does not exist: one line naming it and the configs that do."""
  if "config" not in flags.FLAGS:
    return
  given = config_flags.get_config_filename(flags.FLAGS["config"])
  if not given:
    return
  path = given.partition(":")[0]
  if os.path.exists(path):
    return
  configs = lambda d: sorted(f for f in os.listdir(d) if f.endswith(".py") and f != "__init__.py"
                             ) if os.path.isdir(d) else []
  # the configs beside the path given, else the repository's configs/
  folder = next((d for d in (os.path.dirname(path), _REPO_CONFIGS) if d and configs(d)), None)
  known = f"; the configs in {folder}: {', '.join(configs(folder))}" if folder else ""
  _fail(f"error: no config file {path}{known}", status=2)


def parse_flags(argv: list[str]) -> list[str]:
  """absl's flag parsing; a --config.x.y=... that names no field or gives a value of the
  wrong type exits with one ``error:`` line (the flag and ml_collections' suggestion, e.g.
  'Did you mean "steps"') and status 2, not a traceback, and so does a --config file that
  does not exist (with the configs that do)."""
  try:
    rest = flags.FLAGS(argv)   # absl's parse_flags_with_usage would print "FATAL", exit 1
    _check_config_file()
    return rest
  except (flags.Error, AttributeError, KeyError, TypeError, ValueError) as e:
    text = str(e.args[0] if e.args else e)
    if len(text) > 1 and text[0] == text[-1] and text[0] in "'\"":  # a repr's quotes
      text = text[1:-1]
    text = " ".join(text.replace("\\n", " ").replace("\\'", "'").split())
    _fail(f"error: {text} (a command-line flag)", status=2)


def default_workdir(config_arg: str, suffix: str = "") -> str:
  """runs/bilevel_affine for configs/bilevel_affine.py, runs/bilevel_affine_smoke for
  :smoke, then ``suffix`` (relative to the current directory)."""
  path, _, variant = config_arg.partition(":")
  name = os.path.splitext(os.path.basename(path))[0]
  return os.path.join("runs", (f"{name}_{variant}" if variant else name) + suffix)


# The work directory this process's command resolved (`_workdir`): the Ctrl-C line names it.
_RESOLVED: dict[str, str] = {}


def _workdir(value: str) -> str:
  """--workdir with ``~`` and environment variables expanded, made absolute.

  Raises:
    ValueError: none given (paper.py and report.py need one), or it names a file.
  """
  if not value:
    raise ValueError("--workdir is required")
  path = os.path.abspath(os.path.expandvars(os.path.expanduser(value)))
  if os.path.exists(path) and not os.path.isdir(path):
    raise ValueError(f"--workdir={value}: {path} is a file, not a directory")
  _RESOLVED["workdir"] = path
  return path


def experiment_main(mode: str):
  """``main`` of experiments/{landscape,reconstruct,sweep}.py: `experiment.run` of
  ``mode``, then the run's figures (`plotting.run_figures`)."""
  def main(argv):
    from trdr import experiment, plotting, victim  # noqa: PLC0415  (see the imports above)
    from trdr.runtime import distributed  # noqa: PLC0415
    from trdr.victim import pretrained  # noqa: PLC0415

    del argv
    if _DISTRIBUTED.value or _COORDINATOR.value:
      distributed.initialize(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
    workdir = _workdir(_WORKDIR.value or default_workdir(
        config_flags.get_config_filename(flags.FLAGS["config"]),
        "_sweep" if mode == "sweep" else ""))
    if _EXPORT_VICTIM.value:  # refused now, not after the run
      pretrained.check_export_path(_EXPORT_VICTIM.value)
    experiment.run(_CONFIG.value, workdir, mode, overwrite=_OVERWRITE.value,
                   keep_checkpoint=_KEEP_CHECKPOINT.value)
    if distributed.is_main():
      began = time.time()
      plotting.run_figures(workdir, check=False)  # files this process has just checksummed
      logging.info("Seconds: figures %.1f", time.time() - began)
      if _EXPORT_VICTIM.value:
        pretrained.export(victim.from_run(workdir), _EXPORT_VICTIM.value)
      print(headline(workdir, mode, _EXPORT_VICTIM.value))
  return main


def headline(workdir: str, mode: str, exported: str | None = None) -> str:
  """What a finished run found, for its last lines: a landscape's pure starts (||θ* − θ||²
  and the mean L2 and SSIM of their reconstructions to the training set, the partition and
  the noise; 3 significant digits), an attack's training images reconstructed, a sweep's
  best setting; then the files and folders in ``workdir`` with their sizes, and θ*'s
  ``exported`` file."""
  from trdr import experiment  # noqa: PLC0415  (see the imports above)
  from trdr.attacks import init as inits  # noqa: PLC0415
  from trdr.runtime import files  # noqa: PLC0415

  lines = [f"Finished: {workdir}"]
  if mode == "landscape":
    records = files.read_json(os.path.join(workdir, experiment.LANDSCAPE_FILE))
    sets = ("train", "partition", "noise")
    lines += ["| start | ||θ* − θ||² | " + " | ".join(f"L2 to {s}" for s in sets) + " | "
              + " | ".join(f"SSIM to {s}" for s in sets) + " |",
              "|---|---:|" + "---:|" * 2 * len(sets)]
    for name in inits.PURE_INITS:
      try:
        r = records[inits.pure_index(records, name)]
      except ValueError:  # a grid without that point
        continue
      cells = [r.get("param_distance", float("nan")), *(r[f"l2_to_{s}"] for s in sets),
               *(r[f"ssim_to_{s}"] for s in sets)]
      lines.append(f"| {name} | " + " | ".join(f"{c:.3g}" for c in cells) + " |")
    summary_path = os.path.join(workdir, experiment.SUMMARY_FILE)
    premise = (files.read_json(summary_path).get("bilevel_premise")
               if os.path.exists(summary_path) else None)
    if premise:   # the bilevel attack's premise at the training images
      lines.append(f"Bilevel premise: l(x_GT) = {premise['l_training_images']:.3g} at the "
                   f"training images (lower-level start {premise['start']!r})"
                   + ("; above 0.01: they are not a minimiser of what the attack minimises"
                      if premise["l_training_images"] > 1e-2 else ""))
  elif mode == "attack":
    summary = files.read_json(os.path.join(workdir, experiment.SUMMARY_FILE))
    if "reconstructed" in summary:
      lines.append(f"Training images reconstructed, of {summary['n_train']} (best SSIM ≥ t): "
                   + ", ".join(f"t = {t}: {c}" for t, c in
                               ((k.removeprefix("ssim_ge_"), v)
                                for k, v in summary["reconstructed"].items())))
    if "power" in summary:   # trdr.evaluation.power: the count beside the attack's power
      lines.append(f"Power: {summary['power']}")
    if warning := summary.get("kkt_premise", {}).get("warning"):
      lines.append(f"Warning: {warning}")
    if "truth" in summary:   # trdr.attacks.truth: what the count is worth
      from trdr.attacks import truth  # noqa: PLC0415  (see the imports above)
      lines.append(f"Truth diagnostic: {summary['truth']['verdict']}. "
                   + truth.headline(summary["truth"]))
  elif mode == "sweep":
    best = files.read_json(os.path.join(workdir, experiment.BEST_FILE))
    lines.append("Best setting: " + ", ".join(
        f"{k} = {v:.3g}" if isinstance(v, float) else f"{k} = {v}" for k, v in best.items()))
  sizes = {n + ("/" if os.path.isdir(p) else ""): files.disk_usage(p)
           for n in sorted(os.listdir(workdir))
           if not n.startswith(".") and (p := os.path.join(workdir, n))}
  lines.append("Written: " + ", ".join(f"{n} ({b / 1e6:.1f} MB)" for n, b in sizes.items())
               + f"; {sum(sizes.values()) / 1e6:.0f} MB in all")
  if exported:
    lines.append(f"θ* exported: {exported} ({os.path.getsize(exported) / 1e6:.1f} MB)")
  return "\n".join(lines)


def paper_main(argv):
  """``main`` of experiments/paper.py (--workdir required): the requested artefacts, then
  the verdict of each that is a claim, with its baseline and rule (`report.verdict_lines`)."""
  del argv
  from trdr import report
  from trdr.report import artefacts
  workdir = _workdir(_WORKDIR.value)
  names = _ARTEFACTS.value or tuple(artefacts.ARTEFACTS)
  for path in artefacts.make(_CONFIG.value, workdir, names):
    print(path)
  for line in report.verdict_lines(workdir, names):
    print(line)


def report_main(argv):
  """``main`` of experiments/report.py (--workdir required): every artefact, the verdicts
  and report.md."""
  del argv
  from trdr import report
  workdir = _workdir(_WORKDIR.value)
  for name, v in report.run(_CONFIG.value, workdir).items():
    print(f"{name}: {v['verdict']}")
  print(f"Wrote {os.path.join(workdir, 'report.md')}")


def membership_main(argv):
  """``main`` of experiments/membership.py: the membership experiment (`trdr.studies.membership`;
  finished runs reused), its verdict, WORKDIR/membership.{png,pdf} and membership.md."""
  del argv
  from trdr import plotting  # noqa: PLC0415  (see the imports above)
  from trdr import report  # noqa: PLC0415
  from trdr.report import claims, figures, markdown  # noqa: PLC0415
  from trdr.studies import membership  # noqa: PLC0415
  from trdr.runtime import files  # noqa: PLC0415
  workdir = _workdir(_WORKDIR.value or default_workdir(
      config_flags.get_config_filename(flags.FLAGS["config"])))
  measured = membership.run(_CONFIG.value, workdir)
  results = claims.verdicts({"membership": measured})
  plotting.save_figure(figures.membership_figure(measured), workdir, "membership",
                       plotting.size_stamp(_CONFIG.value.variant))
  files.atomic_write(os.path.join(workdir, "membership.md"),
                     markdown.membership_page(measured, results, report.provenance(
                         _CONFIG.value.variant)).encode())
  for name, verdict in results.items():
    for check, ok in verdict["checks"].items():
      print(f"{name}: {check}: {ok}")
    print(f"{name}: {verdict['verdict']} (baseline: {verdict['baseline']['verdict']})")
  print(f"Wrote {os.path.join(workdir, 'membership.md')}")


def knowledge_main(argv):
  """``main`` of experiments/knowledge.py: the informed adversary against k (`trdr.report.
  knowledge`; finished rows reused), WORKDIR/knowledge.{png,pdf} and knowledge.md."""
  del argv
  from trdr import plotting, report  # noqa: PLC0415  (see the imports above)
  from trdr.studies import knowledge  # noqa: PLC0415
  from trdr.runtime import files  # noqa: PLC0415
  config = _CONFIG.value
  workdir = _workdir(_WORKDIR.value or default_workdir(
      config_flags.get_config_filename(flags.FLAGS["config"])))
  rows = knowledge.run(config, workdir)
  plotting.save_figure(knowledge.figure(rows, tuple(config.eval.windows)), workdir,
                       "knowledge", plotting.size_stamp(config.variant))
  files.atomic_write(os.path.join(workdir, "knowledge.md"),
                     knowledge.markdown(rows, config, report.provenance(config.variant))
                     .encode())
  print(knowledge.reading(rows, config.eval.windows[0]))
  print(f"Wrote {os.path.join(workdir, 'knowledge.md')}")


def dp_main(argv):
  """``main`` of experiments/dp.py: the attacks on DP-SGD victims beside the ReRo bound
  (`trdr.studies.dp`; finished rows reused), WORKDIR/dp.{png,pdf} and dp.md."""
  del argv
  from trdr import plotting, report  # noqa: PLC0415  (see the imports above)
  from trdr.runtime import files  # noqa: PLC0415
  from trdr.studies import dp  # noqa: PLC0415
  config = _CONFIG.value
  workdir = _workdir(_WORKDIR.value or default_workdir(
      config_flags.get_config_filename(flags.FLAGS["config"])))
  result = dp.run(config, workdir)
  plotting.save_figure(dp.figure(result, config), workdir, "dp",
                       plotting.size_stamp(config.variant))
  files.atomic_write(os.path.join(workdir, "dp.md"),
                     dp.markdown(result, config, report.provenance(config.variant)).encode())
  print(dp.reading(result, config))
  print(f"Wrote {os.path.join(workdir, 'dp.md')}")


def victim_recipe_main(argv):
  """``main`` of experiments/victim_recipe.py: DecoReco's victim recipe ablated (`trdr.
  report.victim_recipe`; finished cells reused) and WORKDIR/victim_recipe.md."""
  del argv
  from trdr import report  # noqa: PLC0415  (see the imports above)
  from trdr.studies import victim_recipe  # noqa: PLC0415
  from trdr.runtime import files  # noqa: PLC0415
  config = _CONFIG.value
  workdir = _workdir(_WORKDIR.value or default_workdir(
      config_flags.get_config_filename(flags.FLAGS["config"])))
  rows = victim_recipe.run(config, workdir)
  files.atomic_write(os.path.join(workdir, "victim_recipe.md"),
                     victim_recipe.markdown(rows, config, report.provenance(config.variant))
                     .encode())
  print(victim_recipe.reading(rows, config))
  print(f"Wrote {os.path.join(workdir, 'victim_recipe.md')}")


def cnn_main(argv):
  """``main`` of experiments/cnn.py: DecoReco on the CNN beside the MLP (`trdr.studies.cnn`;
  finished rows reused), WORKDIR/cnn.{png,pdf} and cnn.md."""
  del argv
  from trdr import plotting, report  # noqa: PLC0415  (see the imports above)
  from trdr.runtime import files  # noqa: PLC0415
  from trdr.studies import cnn  # noqa: PLC0415
  config = _CONFIG.value
  workdir = _workdir(_WORKDIR.value or default_workdir(
      config_flags.get_config_filename(flags.FLAGS["config"])))
  rows = cnn.run(config, workdir)
  fig = cnn.figure(rows, workdir, config)
  if fig is not None:
    plotting.save_figure(fig, workdir, cnn.FIGURE, plotting.size_stamp(config.variant))
  files.atomic_write(os.path.join(workdir, "cnn.md"),
                     cnn.markdown(rows, config, report.provenance(config.variant),
                                  figure_written=fig is not None).encode())
  print(cnn.reading(rows, config))
  print(f"Wrote {os.path.join(workdir, 'cnn.md')}")


def power_main(argv):
  """``main`` of experiments/power.py: DecoReco's power against n (`trdr.studies.power`;
  finished rows reused), WORKDIR/power.json (the calibration table), power.{png,pdf} and
  power.md."""
  del argv
  from trdr import plotting, report  # noqa: PLC0415  (see the imports above)
  from trdr.runtime import files  # noqa: PLC0415
  from trdr.studies import power  # noqa: PLC0415
  config = _CONFIG.value
  workdir = _workdir(_WORKDIR.value or default_workdir(
      config_flags.get_config_filename(flags.FLAGS["config"])))
  rows = power.run(config, workdir)
  provenance = report.provenance(config.variant)
  files.write_json(os.path.join(workdir, power.TABLE_FILE),
                   power.calibration(rows, config, provenance))
  plotting.save_figure(power.figure(rows, config, power.threshold(rows) if rows else None),
                       workdir, power.FIGURE, plotting.size_stamp(config.variant))
  files.atomic_write(os.path.join(workdir, "power.md"),
                     power.markdown(rows, config, provenance).encode())
  print(power.reading(rows, config))
  print(f"Wrote {os.path.join(workdir, 'power.md')}")

