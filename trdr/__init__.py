"""trdr: training data reconstruction from a classifier's trained parameters θ*.

Reproduces and extends Runkel, Gandikota, Geiping, Schönlieb, Moeller, "Training Data
Reconstruction: Privacy due to Uncertainty?" (arXiv 2412.08544).
"""

import warnings as _warnings

# jaxopt 0.8.5 is unmaintained upstream but works with JAX 0.10; it warns on import.
# Only that one warning is filtered; every other warning stays visible.
_warnings.filterwarnings(
    "ignore", message="JAXopt is no longer maintained", category=DeprecationWarning
)

__version__ = "0.1.0"

# The Python API (`trdr.api`), imported on first use so that `import trdr.io` stays light.
API = ("get_config", "load_task", "train_victim", "load_victim", "attack",
       "evaluate_reconstructions", "run_experiment")


def __getattr__(name):
  if name in API:
    from trdr import api  # noqa: PLC0415
    return getattr(api, name)
  raise AttributeError(f"module 'trdr' has no attribute {name!r}")


def __dir__():
  return sorted([*globals(), *API])
