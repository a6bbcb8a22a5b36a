"""One experiment: run(config, workdir) → files (`runner`), over the start images of each
mode (`starts`) and the checkpointed attack loop (`loop`); its arrays written and read
back by `results` (`load_results`); `reevaluate` a finished run's evaluation again for
other reconstructions; `run_or_reuse` a run unless it finished with the same config."""

from trdr.experiment.runner import (BEST_FILE, FINISHED, LANDSCAPE_FILE, MEMBERSHIP_FILE, MODES,
                                    RESULTS_FILE, SUMMARY_FILE, SWEEP_FILE, Finished,
                                    attack_config, reevaluate, run, run_or_reuse)
from trdr.experiment.results import load as load_results

__all__ = ["BEST_FILE", "FINISHED", "Finished", "LANDSCAPE_FILE", "MEMBERSHIP_FILE", "MODES",
           "RESULTS_FILE", "SUMMARY_FILE", "SWEEP_FILE", "attack_config", "load_results",
           "reevaluate", "run", "run_or_reuse"]
