r"""Figs. 1–4 and Table 1 of Runkel et al. 2024: both victims from the pure initialisations.

Command:
  make fig1 fig2 fig3 fig4 table1                # ":cpu", into runs/report_cpu/paper_figures
  make fig1 fig2 fig3 fig4 table1 SIZE=paper     # "", into runs/report_paper/paper_figures
  python experiments/paper.py --config=configs/report.py:cpu --workdir=runs/report_cpu \
      --artefacts=fig1,table1

Figures: Fig. 1 (random U(0,1) initialisation; affine (a), one-hidden (b)), Fig. 2
(ground truth), Fig. 3 (affine, partition; nearest training (a) / partition (b) image),
Fig. 4 (the same for the one-hidden victim), Table 1 (||θ* − θ||², table1.md/.json beside
the paper's values). Assembled by `trdr.report.artefacts` from two landscape runs:
  affine:      configs/bilevel_affine.py (its victim and attack; "smoke" for :smoke), grid
               λ1, λ2 ∈ {0, 1} — the three pure initialisations plus (1, 0) = noise again;
  one_hidden:  configs/bilevel_one_hidden.py with the same variant ("" paper size, "cpu",
               "smoke"; see its docstring for sizes).
The runs are reused once finished (delete the run directory to recompute).

The affine victim's lower level starts from θ0 ~ U(0, 1) at every outer step (the paper's
sentence read literally; its E is strongly convex, so θ(x) is the same from any θ0). The
one-hidden victim's is the main job's warm start ("previous": from the previous outer
step's θ, the first solve from θ*): from a fresh U(0, 1) draw every solve lands in another
minimum of its non-convex E, and the training images then do not minimise the upper level
(`table1_readings` below, in report.md), which would make Figs. 1, 2 and 4 verdicts on an
ill-posed problem. `--config.paper.one_hidden.attack.lower_level.start=uniform` runs the
literal reading.
outer_step: the affine run again with eq. 7's plain gradient step (`make outer-step`).
Expected runtime: ":cpu" about 3 minutes on a 2-core CPU, the outer step about 4 minutes
more, Table 1's readings longer than before (their victims now train as the attack's, to
5000 L-BFGS iterations, which the ReLU victims run to the end; not yet timed as a whole:
`make figures` records each phase's seconds) and the attacks under each reading about 8; ":smoke"
under a minute; paper size about 30 minutes on one GPU for the one-hidden victim (not yet
run to the end).
"""

import ml_collections

from trdr.configs import bilevel_affine, bilevel_one_hidden, sizes

PURE_GRID = (0.0, 1.0)  # λ1 = λ2 ∈ {0, 1}: noise, partition, ground truth (and noise again)
# Table 1 as the paper measures it, "for a random initialisation of θ": ||θ* − θ(x)||² with
# θ(x) re-solved from θ0 ~ U(0, 1), at each of these lower-level tolerances ||∇θE|| < t.
TABLE1_TOLERANCES = (1e-2, 1e-3, 1e-4, 1e-5, 1e-6)
# ":smoke": the affine victim only, to 1e-4 (the re-solves run as long as the tightest
# tolerance needs, and from θ0 ~ U(0, 1) to 1e-6 they would be most of the smoke report's
# time; there Table 1 falls back to the re-solve from θ*).
SMOKE_TABLE1_TOLERANCES = (1e-2, 1e-3, 1e-4)
# The L-BFGS budget of a one-hidden lower-level solve from θ0 ~ U(0, 1) below paper size
# (the attacks under each reading and Table 1's readings' re-solves, below): with 200 none
# reached tol at ":cpu", with 1000 all did.
ONE_HIDDEN_UNIFORM_MAX_ITER = 1000


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  variant = sizes.variant(arg)
  config = ml_collections.ConfigDict()
  config.affine = bilevel_affine.get_config("smoke" if variant == "smoke" else None)
  config.affine.init.lambda1 = PURE_GRID
  config.affine.init.lambda2 = PURE_GRID
  config.one_hidden = bilevel_one_hidden.get_config(variant)
  # Runkel et al.'s lower level for the affine victim (and for Fig. 10(a)'s landscape,
  # decoreco_figures.py); the one-hidden victim keeps its config's warm start, the reading
  # under which x_GT minimises l (see the docstring).
  bilevel_affine.paper_lower_level(config.affine.attack)
  if variant == "smoke":
    config.affine.eval.uniform_start_tols = SMOKE_TABLE1_TOLERANCES
  else:
    for victim in (config.affine, config.one_hidden):
      victim.eval.uniform_start_tols = TABLE1_TOLERANCES
  config.n_show = 8 if variant == "smoke" else 32
  # Eq. 7's plain gradient step x ← Π[0,1](x − η∇x l) beside trdr's Adam (artefact
  # "outer_step", `trdr.report.artefacts.outer_step`): the affine run above with
  # attack.optimizer "sgd" at each constant η of this decade grid (the paper gives no η).
  # The η shown beside Adam is the one whose noise start, the only start an attacker holds,
  # ends at the lowest upper loss l, the attack's own objective: chosen without looking at
  # a training image. Grid and rule fixed before the runs; the report says when the chosen
  # η lies at the grid's edge (then the grid does not bracket the best η). ":cpu" runs the
  # decade grid's middle three, which keeps `make figures` within its hour: the whole
  # grid's ":cpu" run (its table in docs/verdicts.md as of commit 095e3f4) chose 10 with 1
  # and 100 on either side, so the outer three cannot change the choice.
  config.outer_step = ml_collections.ConfigDict()
  config.outer_step.lrs = {"smoke": (1.0, 10.0), "cpu": (1.0, 10.0, 100.0)}.get(
      variant, (0.01, 0.1, 1.0, 10.0, 100.0, 1000.0))
  # The outer steps repeated on the report's repeat seeds (`trdr.report.artefacts.OUTER_STEPS`
  # beyond Adam, the affine run itself): eq. 7's step plain and with the line search, the
  # paper's step, everywhere; Adam with the stopping rule, which differs from Adam only
  # at the steps the rule holds (the ground-truth start's), on seed 0 alone below paper size.
  config.outer_step.seed_steps = (("plain", "adam_stop", "linesearch_stop") if not variant
                                  else ("plain", "linesearch_stop"))
  # Figs. 1, 2, 4 and Table 1 under each reading of the paper's random θ0 (artefact
  # "readings_attack", `trdr.report.artefacts.readings_attack`): the one-hidden run above
  # with its lower level started as reading (a), (b) or (e) says at every outer step. A
  # solve from a U(0, 1) draw takes hundreds of L-BFGS iterations where a warm start takes
  # a few (each run's seconds per outer step are in its metrics.jsonl), so below paper size
  # the runs take fewer outer steps than the main one (the same for every reading), to fit
  # `make figures`' time; ":smoke" runs (a) and (e) only.
  config.reading_runs = ml_collections.ConfigDict()
  config.reading_runs.readings = ("a", "e") if variant == "smoke" else ("a", "b", "e")
  config.reading_runs.steps = {"": config.one_hidden.attack.steps, "cpu": 40,
                               "smoke": 3}[variant]
  config.reading_runs.max_iter = (config.one_hidden.victim.max_iter if not variant
                                  else ONE_HIDDEN_UNIFORM_MAX_ITER)
  # Table 1 under each reading of the paper's random θ0 (trdr/studies/readings.py): the
  # one-hidden victim of this variant, with ReLU (the paper's) and softplus, over seeds; its
  # input decides the headline reading (`readings.headline_reading`). Its victims are
  # trained as the attack runs' victims are, and its re-solves are the attack runs' own
  # lower-level solves with their budget (method, max_iter, tol, memory_size of
  # `readings.attack_config`): the rule reads the convergence the attack itself has.
  config.readings = ml_collections.ConfigDict()
  config.readings.victim = bilevel_one_hidden.get_config(variant)
  config.readings.victim.attack.lower_level.max_iter = config.reading_runs.max_iter
  config.readings.activations = ("softplus",) if variant == "smoke" else ("relu", "softplus")
  config.readings.seeds = (0,) if variant == "smoke" else (0, 1, 2)
  return config
