r"""Benchmarks, measured side by side in one run (ratios, not absolute promises).

  python experiments/benchmark.py [--config=configs/bilevel_affine.py] [--steps=3]
  make benchmark                   # the default sections -> docs/performance.md

Every section prints as it goes; once all have finished, the run writes what they printed
to --output (default docs/performance.md, Markdown) under a header with the date, the
machine (CPU model, cores, AVX-512, XLA flags, JAX backend and devices) and the versions of
python, jax, jaxlib, flax, optax, jaxopt, numpy and torch (`benchmarks.record`). The file
is replaced atomically and only by a run that finished: a failed run leaves it as it was.
--output= (empty) only prints.

Sections (--sections, default main_job,grid,lower_level,solvers,decoreco,step; one module each
in experiments/benchmarks/):

  main_job  the main job (--config) run whole, its lower level by L-BFGS (before) and by
            Newton–CG (its default), alternating after a run of each that compiles: each
            phase's seconds, the ratios, the largest difference of landscape.json (`main_job`).
  grid      the eq. 10 grid attacked as one vmapped computation, in vmapped batches and
            in Python loops over initialisations (trdr's: one per CPU device at once;
            and on one device): times, ratios, differences (`grid`).
  lower_level  the grid with the branch-free Newton–CG lower level vs L-BFGS, each in a
            loop over the grid points and Newton–CG as one vmap (`lower_level`).
  solvers   the hypergradient solves CG, quasi-Newton and Neumann on the affine (--config)
            and one-hidden (--one_hidden_config) victims, float64: time and accuracy
            against CG at tol 1e-10, as a Markdown table (`solvers`).
  decoreco  one DecoReco iteration at the size of Haim et al. (2022), autodiff vs the
            fused `trdr.attacks.kkt_mlp`, float64 and float32 (minutes on 2 cores;
            `decoreco`).
  evaluation  the landscape's nearest-neighbour search, one search per set vs trdr's
            evaluation (one search for all sets, distinct grid points once), and its
            floor: the search's pair products at this CPU's float32 matmul rate (`evaluation`).
  pruning   whether an exact search pruned by a Cauchy–Schwarz bound on SSIM (per-image
            window means and variances) could beat the all-pairs search: on the main job's
            starts (--pruning_images per point; --pruning_results: a finished run's
            reconstructions too), the fraction of pairs the bound cannot rule out, and the
            bound's, the exact SSIM's and its pair products' times side by side (`pruning`).
  step      one outer step of the bilevel attack (--config) at three grid points, at its
            start and 100 steps in: the whole step, the lower-level solve, l and ∇x l, so
            the hypergradient's and the update's shares (`step`).
  cold_path the main job (--cold_path_config) as the README runs it, a process of its own:
            with an empty compilation cache, then warm, this tree against the git revision
            --cold_path_baseline (extracted by git archive), alternating; each phase's
            seconds, the ratios and the programs compiled (four whole runs a round, medians
            of --repeats rounds; `cold_path`).
  table1    Table 1's tolerance sweep of ||θ* − θ||² from θ0 ~ U(0, 1) on the affine
            (--config) and one-hidden (--one_hidden_config) victims: re-solves vmapped
            over the tolerances vs one re-solve read at each (`table1`).
  sweep     the DecoReco sweep, S settings (--sweep_settings) of --sweep_config vmapped as
            one computation vs a loop over them (minutes; `sweep`).
  conv      the CNN's DecoReco step (`kkt_cnn`, and by autodiff) beside the MLP's of
            --conv_mlp_config at the same n, m and dtype, with the ratio and a profile of
            the CNN step's parts; then why `trdr.models.Conv3x3` exists: the CNN victim
            of --conv_config with Conv3x3 and with flax's nn.Conv on the same θ (checked
            to agree to rounding), ∇x of a loss and a DecoReco iteration once at the top
            level and --conv_steps times in `lax.scan`: ms / step of each and the ratio
            nn.Conv / Conv3x3 (minutes; `conv`).
  dp        why `trdr.victim.dp_sgd.MICROBATCH_SIZE` is 1: DP-SGD's clipped sum for the
            victims of --dp_config, one example at a time vs all n vmapped (checked to
            agree to rounding): ms / call of each and the ratio (`dp`).

  python experiments/benchmark.py --sections=lower_level
  python experiments/benchmark.py --sections=solvers --output=runs/benchmarks/solvers.md
  python experiments/benchmark.py --sections=decoreco
  python experiments/benchmark.py --sections=evaluation
  python experiments/benchmark.py --sections=pruning --pruning_results=RUN/results.npz
  python experiments/benchmark.py --sections=step
  python experiments/benchmark.py --sections=cold_path --cold_path_baseline=main
  python experiments/benchmark.py --sections=table1
  python experiments/benchmark.py --sections=sweep
  python experiments/benchmark.py --sections=conv
  python experiments/benchmark.py --sections=dp
"""

import datetime
import os

from absl import app, flags
from ml_collections import config_flags

from benchmarks import (cold_path, conv, decoreco, dp, evaluation, grid, lower_level,
                        main_job, pruning, record, solvers, step, sweep, table1)
from trdr.runtime import sharding

SECTIONS = {  # name -> the title of its part of --output, in the order they run
    "main_job": "the main job's phases, its lower level before and now",
    "grid": "the eq. 10 grid as one computation and as loops",
    "lower_level": "the lower level by L-BFGS and by Newton–CG",
    "solvers": "the hypergradient solves",
    "decoreco": "one DecoReco iteration at Haim et al.'s size",
    "evaluation": "the landscape's nearest-neighbour search",
    "pruning": "what a bound-pruned exact search could save on the SSIM search",
    "step": "where one outer step of the bilevel attack spends its time",
    "cold_path": "the main job with an empty compilation cache and warm, against a baseline",
    "table1": "Table 1's tolerance sweep",
    "sweep": "the DecoReco sweep, vmapped and looped",
    "conv": "the CNN's DecoReco step beside the MLP's; 3 × 3 convolutions in a loop",
    "dp": "DP-SGD's clipped sum, one example at a time and vmapped",
}

_CONFIG = config_flags.DEFINE_config_file(
    "config", "configs/bilevel_affine.py",
    "Bilevel config of the main_job, grid, lower_level and solvers sections.",
    lock_config=True)
_STEPS = flags.DEFINE_integer("steps", 3,
                              "Outer steps timed per initialisation (grid, lower_level).")
_REPEATS = flags.DEFINE_integer("repeats", 2, "Timed repetitions (median reported).")
_GRID_VMAP = flags.DEFINE_bool("grid_vmap", True, "grid: also the whole-grid vmap (far "
                               "slower than the loop on CPU; --nogrid_vmap --steps=25: the "
                               "main job's chunks).")
_CPU_DEVICES = flags.DEFINE_integer("cpu_devices", 0, "JAX CPU devices (0: one per core), as "
                                    "the experiment scripts' --cpu_devices.")
_SECTIONS = flags.DEFINE_list("sections", ["main_job", "grid", "lower_level", "solvers",
                                           "decoreco", "step"],
                              f"Which of {list(SECTIONS)} to run (in that order).")
_DECORECO_REPEATS = flags.DEFINE_integer(
    "decoreco_repeats", 7, "Timed DecoReco iterations per method and dtype (median, >= 5).")
_DECORECO_CANDIDATES = flags.DEFINE_integer(
    "decoreco_candidates", 1000, "Candidates m of the decoreco section (:cpu runs: 200).")
_PRUNING_IMAGES = flags.DEFINE_integer(
    "pruning_images", 50, "Images per grid point whose searches the pruning section measures.")
_PRUNING_RESULTS = flags.DEFINE_string(
    "pruning_results", "", "A finished main job's results.npz: the pruning section measures "
    "its reconstructions too (\"\": the starts only).")
_COLD_PATH_CONFIG = flags.DEFINE_string(
    "cold_path_config", "configs/bilevel_affine.py", "The cold_path section's --config of "
    "experiments/landscape.py (a path relative to the repository, as the README gives it).")
_COLD_PATH_BASELINE = flags.DEFINE_string(
    "cold_path_baseline", "HEAD~1", "The git revision the cold_path section compares with.")
_SWEEP_SETTINGS = flags.DEFINE_integer("sweep_settings", 8, "Settings S of the sweep section.")
_SWEEP_STEPS = flags.DEFINE_integer("sweep_steps", 10,
                                    "Attack iterations timed in the sweep section.")
_SWEEP_CONFIG = config_flags.DEFINE_config_file(
    "sweep_config", "configs/decoreco_cifar.py:cpu", "DecoReco config of the sweep section.",
    lock_config=True)
_CONV_CONFIG = config_flags.DEFINE_config_file(
    "conv_config", "configs/decoreco_cnn.py:cpu",
    "DecoReco config with a CNN victim (victim.arch 'cnn') of the conv section.",
    lock_config=True)
_CONV_STEPS = flags.DEFINE_integer("conv_steps", 10,
                                   "Steps of each lax.scan timed in the conv section.")
_CONV_CANDIDATES = flags.DEFINE_integer(
    "conv_candidates", 0, "Candidates m of the conv section (0: --conv_config's, "
    "candidates_per_image · 2 · n_per_class: 200 at :cpu).")
_CONV_MLP_CONFIG = config_flags.DEFINE_config_file(
    "conv_mlp_config", "configs/decoreco_cifar.py:cpu",
    "DecoReco config with a Haim MLP victim at --conv_config's n, timed beside the CNN in "
    "the conv section.", lock_config=True)
_CONV_DTYPE = flags.DEFINE_enum("conv_dtype", "float32", ["float32", "float64"],
                                "Precision of the conv section (float32: configs/cnn.py's "
                                "CNN runs).")
_DP_CONFIG = config_flags.DEFINE_config_file(
    "dp_config", "configs/dp.py:cpu", "DP study config whose victims the dp section times.",
    lock_config=True)
_ONE_HIDDEN_CONFIG = config_flags.DEFINE_config_file(
    "one_hidden_config", "configs/bilevel_one_hidden.py:cpu",
    "Config of the one-hidden victim for the solvers and table1 sections.", lock_config=True)
# The grid section's whole-grid vmap shards the starts over the CPU devices, and their
# vmapped L-BFGS loops can end far apart; XLA's CPU runtime aborts the process when a device
# waits at the closing all-gather for longer than 40 s. The wait is part of what the section
# times, so the benchmark allows an hour (a value already in XLA_FLAGS stands).
_XLA_COLLECTIVE_TIMEOUTS = ("--xla_cpu_collective_call_terminate_timeout_seconds=3600",
                            "--xla_cpu_collective_call_warn_stuck_timeout_seconds=600")
_OUTPUT = flags.DEFINE_string(
    "output", "docs/performance.md", "Markdown file the finished run writes (relative to the "
    "current directory, as --config): the machine, versions and date, then every section's "
    "output. Empty: print only.")


def main(argv):
  del argv
  started, load = datetime.datetime.now(datetime.timezone.utc), record.load()
  xla_flags = os.environ.get("XLA_FLAGS", "")
  os.environ["XLA_FLAGS"] = " ".join([xla_flags, *(
      f for f in _XLA_COLLECTIVE_TIMEOUTS if f.split("=")[0] not in xla_flags)]).strip()
  sharding.set_cpu_devices(_CPU_DEVICES.value)
  unknown = set(_SECTIONS.value) - set(SECTIONS)
  if unknown:
    raise app.UsageError(f"unknown --sections {sorted(unknown)}; known: {', '.join(SECTIONS)}")
  if "decoreco" in _SECTIONS.value and _DECORECO_REPEATS.value < 5:
    raise app.UsageError(f"--decoreco_repeats must be >= 5, got {_DECORECO_REPEATS.value}")
  if _OUTPUT.value:
    try:
      record.check_writable(_OUTPUT.value)
    except ValueError as e:
      raise app.UsageError(str(e)) from e
  pair = [_CONFIG.value, _ONE_HIDDEN_CONFIG.value]
  runs = {
      "main_job": lambda: main_job.run(_CONFIG.value, _REPEATS.value),
      "grid": lambda: grid.run(_CONFIG.value, _STEPS.value, _REPEATS.value, _GRID_VMAP.value),
      "lower_level": lambda: lower_level.run(_CONFIG.value, _STEPS.value, _REPEATS.value),
      "solvers": lambda: solvers.run(pair, _REPEATS.value),
      "decoreco": lambda: decoreco.run(_DECORECO_REPEATS.value, _DECORECO_CANDIDATES.value),
      "evaluation": lambda: evaluation.run(_CONFIG.value, _REPEATS.value),
      "pruning": lambda: pruning.run(_CONFIG.value, _REPEATS.value, _PRUNING_IMAGES.value,
                                     _PRUNING_RESULTS.value),
      "step": lambda: step.run(_CONFIG.value, _REPEATS.value),
      "cold_path": lambda: cold_path.run(_COLD_PATH_CONFIG.value, _COLD_PATH_BASELINE.value,
                                         _REPEATS.value),
      "table1": lambda: table1.run(pair, _REPEATS.value),
      "sweep": lambda: sweep.run(_SWEEP_CONFIG.value, _SWEEP_SETTINGS.value,
                                 _SWEEP_STEPS.value, _REPEATS.value),
      "conv": lambda: conv.run(_CONV_CONFIG.value, _CONV_STEPS.value, _REPEATS.value,
                               _CONV_CANDIDATES.value, _CONV_DTYPE.value,
                               mlp_config=_CONV_MLP_CONFIG.value),
      "dp": lambda: dp.run(_DP_CONFIG.value, _REPEATS.value),
  }
  sections = [record.captured(name, title, runs[name]) for name, title in SECTIONS.items()
              if name in _SECTIONS.value]
  if _OUTPUT.value:
    header = {"load average at the start (1, 5, 15 min)": load}
    record.write(_OUTPUT.value, record.markdown(sections, started, header))
    print(f"\nWrote {_OUTPUT.value}")


if __name__ == "__main__":
  app.run(main)
