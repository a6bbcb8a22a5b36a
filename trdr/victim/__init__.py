"""The victim: its objective E(x, y; θ), its training to θ*, and θ* cached or read from files.

  objective   E(x, y; θ), the logistic loss with weight decay (Runkel et al., Sec. 3), the
              losses of Haim et al.'s gradient-descent victims, and ||θa − θb||²
              (`param_distance`, eq. 2's upper loss and Table 1's number)
  solver      the L-BFGS (and Newton–CG) minimiser of E, shared with the bilevel attack's
              lower level
  training    θ* by L-BFGS to ||∇θE|| < tol, or by Haim et al.'s gradient descent
  cache       `Victim` (model, θ*, config, report) and `load_or_train`: θ* reused from its
              directory when saved for the same config; `from_run` a run directory's θ*
  pretrained  θ* from a user's file (.pth, .npz, .msgpack, orbax), checked against the task
  kkt         DecoReco's premise measured: how much of θ* its training images' gradients
              explain with λ ≥ 0 (Haim et al.'s KKT conditions), per tensor
  accounting  the DP-SGD recipe (``victim.dp``) and its privacy: ε at δ (dp-accounting's
              PLD accountant), μ of μ-GDP, σ calibrated to a target ε
  dp_sgd      DP-SGD victims: per-example gradients (vmap), clipping, Gaussian noise, full
              batch or Poisson-subsampled (`load_or_train` trains one where ``victim.dp``
              is set)

The names below are the stage's API (``from trdr import victim; victim.load_or_train``);
no module is named like one of them, so none is shadowed. `pretrained`, `kkt`, `accounting`
and `dp_sgd` are imported on their own (``from trdr.victim import kkt``).
"""

from trdr.victim.cache import (VICTIM_FILE, Victim, from_run, load, load_metadata,
                               load_or_train, load_saved, metadata, report_line, save)
from trdr.victim.objective import (GD_LOSSES, accuracy, class_index, energy, logistic_loss,
                                   margins, param_distance, predictions,
                                   signed_outputs)
from trdr.victim.solver import MinimizeInfo, minimize_energy
from trdr.victim.training import GDReport, TrainReport, train, train_gd

__all__ = ["GD_LOSSES", "GDReport", "MinimizeInfo", "TrainReport", "VICTIM_FILE", "Victim",
           "accuracy", "class_index", "energy", "from_run", "load", "load_metadata",
           "load_or_train", "load_saved", "logistic_loss", "margins", "metadata",
           "minimize_energy", "param_distance", "predictions", "report_line", "save",
           "signed_outputs", "train", "train_gd"]
