"""trdr: training data reconstruction from a classifier's trained parameters θ*.

Reproduces and extends Runkel, Gandikota, Geiping, Schönlieb, Moeller, "Training Data
Reconstruction: Privacy due to Uncertainty?" (arXiv 2412.08544).

The packages and modules are the pipeline, in the order data flows through it:

  runtime     files, the run directory, sharding, distributed: knows nothing of the rest
  assets      the shipped CIFAR-10 sample (`assets.sample_path()`)
  data        loaders (the shipped CIFAR-10 sample, .npz, CIFAR-10 python, tfds) -> task
  models      the Flax victims (MODELS): affine (eq. 8), one-hidden (eq. 9), Haim's MLP
  configs     every experiment config, `get_config(variant)`
  victim      E(x, y; θ), its solver, training to θ*, θ* cached or read from a file
  attacks     the Attack protocol and ATTACKS: bilevel (eq. 2, 7), DecoReco, informed
              (all training points but k known); INITS (eq. 10); the prior-aware attack
              on DP-SGD's released trajectory (Hayes et al. 2023)
  evaluation  SSIM, nearest neighbours, distances, ||θ* − θ||², records, ROC statistics,
              the attack's measured power (calibration table, statement)
  experiment  run(config, workdir, mode): starts, the checkpointed loop, one function per mode
  plotting    the runs' figures, from saved files only
  studies     experiments of their own: membership, knowledge, the θ0 readings, the
              victim recipe, the CNN beside the MLP, DP-SGD victims beside the ReRo bound,
              DecoReco's power against n
  report      the paper's claims (one record each), their rules and verdicts, report.md
  api         the Python entry points (`trdr.<name>`)
  cli         the scripts' flags and mains

Rules (tests/test_layout.py checks them against this list):
  * A package or module imports only those above it in this list, never one below: a
    new attack touches `attacks` alone, and every later stage serves it unchanged.
  * Inside a package, modules import one another without a cycle, and never through the
    package's own ``__init__``, which only gathers the stage's public names.
  * Process-wide switches (jax_enable_x64, the matplotlib backend, XLA flags) are set by
    the entry points (`cli`, tests), never as a side effect of importing or calling the
    library: inside it, float64 is the `jax.enable_x64` context of a config's run.
"""

import warnings as _warnings

# jaxopt 0.8.5 is unmaintained upstream but works with JAX 0.10; it warns on import.
# Only that one warning is filtered; every other warning stays visible.
_warnings.filterwarnings(
    "ignore", message="JAXopt is no longer maintained", category=DeprecationWarning
)

__version__ = "0.1.0"

# The Python API (`trdr.api`), imported on first use so that importing a module of trdr
# stays light.
API = ("get_config", "load_task", "train_victim", "load_victim", "save_victim", "attack",
       "informed_attack", "evaluate_reconstructions", "run_experiment", "load_results")


def __getattr__(name):
  if name in API:
    from trdr import api  # noqa: PLC0415
    return getattr(api, name)
  raise AttributeError(f"module 'trdr' has no attribute {name!r}")


def __dir__():
  return sorted([*globals(), *API])
