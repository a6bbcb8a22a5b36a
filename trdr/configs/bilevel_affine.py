r"""Bilevel attack on the affine classifier: the energy landscape, Fig. 10(a), 11(a), 12(a).

Command:
  python experiments/landscape.py --config=configs/bilevel_affine.py [--workdir=DIR]
  python experiments/landscape.py --config=configs/bilevel_affine.py:smoke   # seconds
  make landscape-affine

Victim: affine classifier (eq. 8) trained full batch with logistic loss + (wd/2)||θ||²,
wd = 1e-2, on the shipped real CIFAR-10 sample, vehicles {0,1,8,9} vs animals, 250 images
per class (n = 500); the distinct partition is another 250 per class.
Attack: eq. 2/7 from the 25 eq. 10 initialisations λ1, λ2 ∈ {0, .25, .5, .75, 1}, vmapped;
implicit hypergradient with conjugate gradient, Adam on the pixels, projection onto [0, 1].

Expected runtime: default about 2–3 minutes on a 2-core CPU, about 1 minute on one GPU;
":smoke" (20 images per class, 3×3 grid, 30 steps) under a minute on a 2-core CPU
(`make benchmark` measures the phases side by side: docs/performance.md).
"""

import ml_collections
from ml_collections import config_dict

from trdr import data


def paper_lower_level(attack: ml_collections.ConfigDict) -> None:
  """Sets ``attack``'s lower level to Runkel et al.'s: "initialising θ by drawing every
  weight independently from a standard Uniform distribution" at every outer step, solved
  by L-BFGS, the paper's quasi-Newton (Figs. 1–4 and Table 1: paper_figures.py; Fig. 10(a):
  decoreco_figures.py)."""
  attack.lower_level.start = "uniform"
  attack.lower_level.method = "lbfgs"


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  config.seed = 0
  config.float64 = False

  config.data = data.default_data_config()  # cifar10_sample, vehicles vs animals, n=250

  config.victim = ml_collections.ConfigDict()
  config.victim.arch = "affine"
  config.victim.training = "lbfgs"  # L-BFGS to ||∇θE|| < tol (the bilevel lower level's E)
  config.victim.weight_decay = 1e-2
  config.victim.tol = 1e-5          # ||∇θE(θ*)|| at the end of training
  config.victim.max_iter = 5000
  config.victim.memory_size = 10
  config.victim.seed = 0
  # θ0 of the training: "default" (the network's own initialisation) or "uniform" (every
  # entry U(0, 1), Runkel et al.'s random θ0; the lower-level start "victim_theta0" restarts
  # from it: reading (b) of trdr.report.readings). Both drawn with victim.seed.
  config.victim.init = "default"
  config.victim.checkpoint_dir = config_dict.placeholder(str)  # default: WORKDIR/victim
  # θ* from a file instead of training (.onnx, .pth, .npz, .msgpack, orbax dir;
  # trdr.victim.pretrained)
  config.victim.load = config_dict.placeholder(str)
  # What a θ* file without its graph (a state_dict) does not hold, stated (docs/own_model.md):
  # with convolutions pooling ("max", "average", "none"), activation and padding (1); and
  # the input normalisation (x − input_shift) / input_scale per channel (torchvision's
  # Normalize(mean, std)), applied before the file's network (an .onnx graph's own Sub/Div
  # after it). Unset: required where the file needs them, else none.
  config.victim.file = ml_collections.ConfigDict({
      "pooling": config_dict.placeholder(str), "activation": config_dict.placeholder(str),
      "padding": config_dict.placeholder(int), "input_shift": config_dict.placeholder(tuple),
      "input_scale": config_dict.placeholder(tuple)})

  config.attack = ml_collections.ConfigDict()
  config.attack.name = "bilevel"
  config.attack.steps = 300
  config.attack.log_every = 25     # steps per chunk: one metrics line each
  # Steps between checkpoints (0: after every chunk). The checkpoint of the 21 distinct
  # grid points is ~390 MB, a second or two to write; a kill loses ≤ 100 steps.
  config.attack.checkpoint_every = 100
  config.attack.checkpoint_minutes = 10.0   # and at least this often (0: not by the clock)
  # "sgd" is eq. 7's plain step x ← x − η∇x l; "sgd_linesearch" with a backtracking line
  # search on l (step ≤ η; l never increases)
  config.attack.optimizer = "adam"
  config.attack.lr = 1e-2
  config.attack.lr_schedule = "cosine"  # "constant" | "cosine" (to 1% over the steps)
  config.attack.project = True      # onto the pixel box [0, 1]
  # The outer stopping rule: no step while l ≤ stop_loss or ‖∇x l‖ ≤ stop_grad_norm (0:
  # off); the run's metrics record which steps were held (stopped).
  config.attack.stop_loss = 0.0
  config.attack.stop_grad_norm = 0.0
  # Grid points per vmapped batch on each device (the grid is sharded over all local
  # devices); 0: a device's whole share on GPU/TPU, 1 on CPU (faster there).
  config.attack.grid_batch_size = 0
  config.attack.lower_level = ml_collections.ConfigDict()
  # or "theta_star", "previous_uniform", "uniform", "uniform_once", "victim_theta0": the
  # readings of the paper's random θ0 (trdr/attacks/bilevel.py, trdr/studies/readings.py)
  config.attack.lower_level.start = "previous"
  config.attack.lower_level.max_iter = 200
  config.attack.lower_level.tol = 1e-5
  config.attack.lower_level.memory_size = 10
  # "newton_cg" (truncated Newton–CG with a vectorised backtracking: no branches; max_iter
  # counts Newton iterations, each of cg_iters Hessian-vector products at most; only for
  # the strongly convex lower level: arch "affine" with weight_decay > 0) | "lbfgs" (optax
  # L-BFGS, zoom line search: the paper's quasi-Newton). Both stop at ||∇θE|| < tol, so
  # each θ(x) lies within tol / weight_decay of the same minimiser; the main job takes the
  # faster (tests/test_landscape.py compares the two; `make benchmark`, section main_job).
  # The configs built on this one that keep the paper's L-BFGS say so.
  config.attack.lower_level.method = "newton_cg"
  config.attack.lower_level.cg_iters = 100
  config.attack.hypergradient = ml_collections.ConfigDict()
  config.attack.hypergradient.solve = "cg"  # "cg" | "quasi_newton" | "neumann"
  config.attack.hypergradient.cg_tol = 1e-6
  config.attack.hypergradient.cg_maxiter = 500
  config.attack.hypergradient.damping = 0.0        # μ: solve (H + μI)v = b; 0 is exact
  config.attack.hypergradient.neumann_alpha = 0.0  # α; 0: 1/(1.1 λ_max(H)), power iteration
  config.attack.hypergradient.neumann_steps = 100  # K terms of the Neumann series

  config.init = ml_collections.ConfigDict()
  config.init.lambda1 = (0.0, 0.25, 0.5, 0.75, 1.0)
  config.init.lambda2 = (0.0, 0.25, 0.5, 0.75, 1.0)

  config.eval = ml_collections.ConfigDict()
  # SSIM window of the nearest neighbours (dm_pix's default 11) and further windows of the
  # per-training-image counts; the counts' SSIM thresholds (none: no per-image counts).
  config.eval.ssim_window = 11
  config.eval.count_windows = ()
  config.eval.ssim_thresholds = ()
  # The metrics recorded at each reconstruction's nearest image of every set ({set}_{metric};
  # landscape records {metric}_to_{set}) and the metric that finds it: names of
  # trdr/evaluation/registry.py's METRICS.
  config.eval.metrics = ("ssim", "l2")
  config.eval.nearest = "ssim"
  config.eval.public_set = False  # nearest neighbours in the test split too
  config.eval.score_k = 10        # Haim et al.'s in-run score: the k best matches
  # ||θ* − θ(x)||² re-solved from θ* to lower_level_tol, and from θ0 ~ U(0, 1) at each of
  # uniform_start_tols (Table 1's setting; none: not computed).
  config.eval.uniform_start_tols = ()
  config.eval.lower_level_tol = 1e-6
  config.eval.lower_level_max_iter = 2000
  config.eval.ssim_chunk_size = 500
  config.eval.n_show = 32

  if arg == "smoke":
    config.data.n_per_class = 20
    config.attack.steps = 30
    config.attack.log_every = 10
    config.attack.checkpoint_every = 0  # every chunk (the kill-and-resume tests need it)
    config.init.lambda1 = (0.0, 0.5, 1.0)
    config.init.lambda2 = (0.0, 0.5, 1.0)
    config.eval.n_show = 8
  elif arg not in (None, ""):
    raise ValueError(f"unknown config variant {arg!r}; known: '' (default), 'smoke'")
  return config
