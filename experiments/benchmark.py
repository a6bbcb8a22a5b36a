r"""Benchmarks, measured side by side in one run (ratios, not absolute promises).

  python experiments/benchmark.py [--config=configs/bilevel_affine.py] [--steps=3]

Sections (--sections, default grid,lower_level,solvers,decoreco; one module each in
experiments/benchmarks/):

  grid      the eq. 10 grid attacked as one vmapped computation, in vmapped batches and
            in Python loops over initialisations (trdr's: one per CPU device at once;
            and on one device): times, ratios, differences (`grid`).
  lower_level  the grid with the branch-free Newton–CG lower level vs L-BFGS, each in a
            loop over the grid points and Newton–CG as one vmap (`lower_level`).
  solvers   the hypergradient solves CG, quasi-Newton and Neumann on the affine (--config)
            and one-hidden (--one_hidden_config) victims, float64: time and accuracy
            against CG at tol 1e-10, as a Markdown table (`solvers`).
  decoreco  one DecoReco iteration at the size of Haim et al. (2022), autodiff vs the
            fused `trdr.attacks.kkt_mlp`, float64 and float32 (~3 minutes on 2 cores;
            `decoreco`).
  evaluation  the landscape's nearest-neighbour search, one search per set vs trdr's
            evaluation (one search for all sets, distinct grid points once), and its
            floor: the search's pair products at this CPU's float32 matmul rate (`evaluation`).
  table1    Table 1's tolerance sweep of ||θ* − θ||² from θ0 ~ U(0, 1) on the affine
            (--config) and one-hidden (--one_hidden_config) victims: re-solves vmapped
            over the tolerances vs one re-solve read at each (`table1`).
  sweep     the DecoReco sweep, S settings (--sweep_settings) of --sweep_config vmapped as
            one computation vs a loop over them (minutes; `sweep`).

  python experiments/benchmark.py --sections=lower_level
  python experiments/benchmark.py --sections=solvers
  python experiments/benchmark.py --sections=decoreco
  python experiments/benchmark.py --sections=evaluation
  python experiments/benchmark.py --sections=table1
  python experiments/benchmark.py --sections=sweep
"""

from absl import app, flags
from ml_collections import config_flags

from benchmarks import decoreco, evaluation, grid, lower_level, solvers, sweep, table1
from trdr import sharding

SECTIONS = ("grid", "lower_level", "solvers", "decoreco", "evaluation", "table1", "sweep")

_CONFIG = config_flags.DEFINE_config_file(
    "config", "configs/bilevel_affine.py",
    "Bilevel config of the grid, lower_level and solvers sections.", lock_config=True)
_STEPS = flags.DEFINE_integer("steps", 3,
                              "Outer steps timed per initialisation (grid, lower_level).")
_REPEATS = flags.DEFINE_integer("repeats", 2, "Timed repetitions (median reported).")
_GRID_VMAP = flags.DEFINE_bool("grid_vmap", True, "grid: also the whole-grid vmap (~50x the "
                               "loop on CPU; --nogrid_vmap --steps=25: the main job's chunks).")
_CPU_DEVICES = flags.DEFINE_integer("cpu_devices", 0, "JAX CPU devices (0: one per core), as "
                                    "the experiment scripts' --cpu_devices.")
_SECTIONS = flags.DEFINE_list("sections", ["grid", "lower_level", "solvers", "decoreco"],
                              f"Which of {list(SECTIONS)} to run (in that order).")
_DECORECO_REPEATS = flags.DEFINE_integer(
    "decoreco_repeats", 7, "Timed DecoReco iterations per method and dtype (median, >= 5).")
_DECORECO_CANDIDATES = flags.DEFINE_integer(
    "decoreco_candidates", 1000, "Candidates m of the decoreco section (:cpu runs: 200).")
_SWEEP_SETTINGS = flags.DEFINE_integer("sweep_settings", 8, "Settings S of the sweep section.")
_SWEEP_STEPS = flags.DEFINE_integer("sweep_steps", 10,
                                    "Attack iterations timed in the sweep section.")
_SWEEP_CONFIG = config_flags.DEFINE_config_file(
    "sweep_config", "configs/decoreco_cifar.py:cpu", "DecoReco config of the sweep section.",
    lock_config=True)
_ONE_HIDDEN_CONFIG = config_flags.DEFINE_config_file(
    "one_hidden_config", "configs/bilevel_one_hidden.py:cpu",
    "Config of the one-hidden victim for the solvers and table1 sections.", lock_config=True)


def main(argv):
  del argv
  sharding.set_cpu_devices(_CPU_DEVICES.value)
  unknown = set(_SECTIONS.value) - set(SECTIONS)
  if unknown:
    raise app.UsageError(f"unknown --sections {sorted(unknown)}; known: {', '.join(SECTIONS)}")
  if "decoreco" in _SECTIONS.value and _DECORECO_REPEATS.value < 5:
    raise app.UsageError(f"--decoreco_repeats must be >= 5, got {_DECORECO_REPEATS.value}")
  if "grid" in _SECTIONS.value:
    grid.run(_CONFIG.value, _STEPS.value, _REPEATS.value, _GRID_VMAP.value)
  if "lower_level" in _SECTIONS.value:
    lower_level.run(_CONFIG.value, _STEPS.value, _REPEATS.value)
  if "solvers" in _SECTIONS.value:
    solvers.run([_CONFIG.value, _ONE_HIDDEN_CONFIG.value], _REPEATS.value)
  if "decoreco" in _SECTIONS.value:
    decoreco.run(_DECORECO_REPEATS.value, _DECORECO_CANDIDATES.value)
  if "evaluation" in _SECTIONS.value:
    evaluation.run(_CONFIG.value, _REPEATS.value)
  if "table1" in _SECTIONS.value:
    table1.run([_CONFIG.value, _ONE_HIDDEN_CONFIG.value], _REPEATS.value)
  if "sweep" in _SECTIONS.value:
    sweep.run(_SWEEP_CONFIG.value, _SWEEP_SETTINGS.value, _SWEEP_STEPS.value, _REPEATS.value)


if __name__ == "__main__":
  app.run(main)
