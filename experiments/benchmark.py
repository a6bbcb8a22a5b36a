r"""Benchmarks, measured side by side in one run (ratios, not absolute promises).

  python experiments/benchmark.py [--config=configs/bilevel_affine.py] [--steps=10]

1. The eq. 10 grid attacked as one vmapped computation (`jax.vmap` over all grid points),
   as one computation mapped over the grid in vmapped batches (`bilevel.run_grid` with the
   config's batch size), and one by one in a Python loop (each jitted once): the times,
   their ratios, and the largest difference of the final images and of l from the loop's
   (in float32 they agree to the lower-level tolerance; tests/test_landscape.py checks
   equality in float64 at tight tolerances).
2. The three hypergradient solves — conjugate gradient on exact Hessian-vector products,
   quasi-Newton from the lower-level L-BFGS pairs (eq. 7), truncated Neumann series
   (Lorraine et al. 2020) — on the affine victim (--config) and the one-hidden victim
   (--one_hidden_config), in float64, lower level started at θ*, at three attack iterates
   (noise, partition, their 50/50 mixture): time per hypergradient (lower-level solve
   from θ* + backward pass; the backward part is the difference to the lower-level solve
   timed alone), and cosine / relative error against CG converged to tol 1e-10. Printed
   as a Markdown table.

  python experiments/benchmark.py --sections=solvers   # section 2 only

3. ``--sections=decoreco`` (not run by default; ~3 minutes on 2 cores): one DecoReco attack
   iteration at the size of Haim et al. (2022) — MLP 3072-1000-1000-1 with only the first
   layer's bias, Haim initialisation (first layer N(0, 1e-4²)), m = 1000 candidates
   x ~ N(0, 10⁻⁶), α = 20, loss + ∇(x, λ) + SGD-momentum (0.9) steps with learning rates
   0.4 (x) and 1e-4 (λ) as in the reference code — in float64 and float32, by (a) autodiff,
   ``jax.value_and_grad(decoreco.stationarity_loss)``, and (b) the hand-derived fused
   `trdr.attacks.kkt_mlp.value_and_grad`; jitted, median of --decoreco_repeats after a
   warm-up, the two timed alternately. Printed as a Markdown table: ms / iteration, GFLOP/s
   on the matmul FLOP count of each (autodiff 44.7, fused 40.5 GFLOP; XLA's own count is
   printed too), fused / autodiff in this run, and the ratio to the reference PyTorch
   implementation's times QUOTED from /work/shared/ANCHORS.md (405–430 ms float64,
   191–197 ms float32; not measured here), plus the largest relative difference of the
   fused loss and gradients from autodiff's. If ``import torch`` works, a PyTorch
   transcription of the reference iteration (create-graph backward + double backward) is
   timed alongside; otherwise that row is skipped.

  python experiments/benchmark.py --sections=decoreco

4. ``--sections=sweep`` (not run by default; minutes): the DecoReco hyperparameter sweep
   at the size of configs/decoreco_cifar.py:cpu (D-1000-1000-1, m = 200, float64, fused
   gradient), S = --sweep_settings settings from the config's ranges, --sweep_steps
   iterations: as ONE vmapped computation (`sharding.grid_map`, the sweep's code path) vs
   a Python loop over the settings (each setting's `run_steps` jitted once). Prints both
   times, their ratio and the largest difference of the final candidates.

  python experiments/benchmark.py --sections=sweep
"""

import functools
import importlib.util
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags
from ml_collections import config_flags

from trdr import data, metrics, models, reconstruct, sharding, victim
from trdr.attacks import bilevel, decoreco, kkt_mlp, init as inits

_CONFIG = config_flags.DEFINE_config_file("config", "configs/bilevel_affine.py",
                                          "Experiment config.", lock_config=True)
_STEPS = flags.DEFINE_integer("steps", 3, "Outer steps timed per initialisation.")
_REPEATS = flags.DEFINE_integer("repeats", 2, "Timed repetitions (median reported).")
_SECTIONS = flags.DEFINE_list("sections", ["grid", "solvers"],
                              "grid: section 1; solvers: section 2; decoreco: section 3.")
_DECORECO_REPEATS = flags.DEFINE_integer(
    "decoreco_repeats", 7, "Timed DecoReco iterations per method and dtype (median, >= 5).")
_SWEEP_SETTINGS = flags.DEFINE_integer("sweep_settings", 8, "Settings S of section 4.")
_SWEEP_STEPS = flags.DEFINE_integer("sweep_steps", 10, "Attack iterations timed in section 4.")
_SWEEP_CONFIG = flags.DEFINE_string("sweep_config", "configs/decoreco_cifar.py:cpu",
                                    "Config (path[:variant]) of section 4.")
_ONE_HIDDEN_CONFIG = flags.DEFINE_string(
    "one_hidden_config", "configs/bilevel_one_hidden.py:cpu",
    "Config (path[:variant]) of the one-hidden victim for section 2.")


def load_config(spec: str):
  """get_config(variant) of the config file ``path[:variant]``."""
  path, _, variant = spec.partition(":")
  module_spec = importlib.util.spec_from_file_location(
      os.path.splitext(os.path.basename(path))[0], path)
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  return module.get_config(variant or None)


SOLVER_ROWS = (  # (label, solve, settings overriding the config's hypergradient section)
    ("cg, reference (tol 1e-10)", "cg", {"cg_tol": 1e-10, "cg_maxiter": 20000}),
    ("cg (config)", "cg", {}),
    ("quasi_newton", "quasi_newton", {}),
    ("neumann (config)", "neumann", {}),
)


def trained_victim(config, dtype):
  """(task, apply_fn, θ*, training report) for the config's data and victim."""
  task = data.make_binary_task(config.data)
  model = models.build_model(config.victim)
  apply_fn = lambda p, x: model.apply({"params": p}, x)
  theta0 = models.init_params(model, jax.random.key(config.victim.seed),
                              task.train_images.shape[1:], dtype)
  theta_star, report = victim.train(model, theta0, task, config.victim)
  return task, apply_fn, theta_star, report


def solver_table(config, repeats: int) -> list[tuple]:
  """Section 2 for one victim config, in float64.

  Returns rows (label, seconds per hypergradient, seconds of it beyond the lower-level
  solve — the backward pass with its linear solve —, cosines, relative errors).

  The lower level is started at θ* and solved to the config's tolerance; the three
  iterates are x_rnd, x_part and (x_rnd + x_part)/2.
  """
  dtype = jnp.float64
  task, apply_fn, theta_star, _ = trained_victim(config, dtype)
  labels = jnp.asarray(task.train_labels, dtype)
  x_rnd = inits.uniform(jax.random.key(config.seed), task.train_images.shape, task.mean, dtype)
  x_part = jnp.asarray(task.partition_images, dtype)
  batch = jnp.stack([x_rnd, x_part, 0.5 * (x_rnd + x_part)])
  energy_fn = functools.partial(victim.energy, apply_fn=apply_fn,
                                weight_decay=config.victim.weight_decay)
  ll, hg = config.attack.lower_level, config.attack.hypergradient
  forward_only = bilevel.make_lower_level(energy_fn, max_iter=ll.max_iter, tol=ll.tol,
                                          memory_size=ll.memory_size, solve="cg")
  forward = jax.jit(lambda xs: jax.lax.map(
      lambda x: forward_only(theta_star, x, labels)[0], xs))
  forward_seconds = _median_time(lambda: forward(batch), repeats) / batch.shape[0]
  reference, rows = None, []
  for label, solve, overrides in SOLVER_ROWS:
    settings = {"cg_tol": hg.cg_tol, "cg_maxiter": hg.cg_maxiter, "damping": hg.damping,
                "neumann_alpha": hg.neumann_alpha, "neumann_steps": hg.neumann_steps,
                **overrides}
    lower = bilevel.make_lower_level(energy_fn, max_iter=ll.max_iter, tol=ll.tol,
                                     memory_size=ll.memory_size, solve=solve, **settings)
    one = jax.grad(lambda x: metrics.param_distance(theta_star, lower(theta_star, x, labels)[0]))
    hypergrad = jax.jit(lambda xs: jax.lax.map(one, xs))
    seconds = _median_time(lambda: hypergrad(batch), repeats) / batch.shape[0]
    grads = np.asarray(hypergrad(batch)).reshape(batch.shape[0], -1)
    if reference is None:
      reference = grads
    norms = np.linalg.norm(grads, axis=1) * np.linalg.norm(reference, axis=1)
    cos = np.sum(grads * reference, 1) / norms
    rel = np.linalg.norm(grads - reference, axis=1) / np.linalg.norm(reference, axis=1)
    rows.append((label, seconds, seconds - forward_seconds, cos, rel))
  return rows


def print_solver_tables(configs: dict, repeats: int) -> None:
  """Section 2 as one Markdown table over the victims in ``configs`` (name -> config)."""
  previous = jax.config.jax_enable_x64
  jax.config.update("jax_enable_x64", True)
  print("\n== hypergradient solves, float64, lower level started at θ*, iterates: noise, "
        f"partition, 50/50 mix (backend {jax.default_backend()}) ==\n")
  print("| victim | solve | ms / hypergradient | of which backward | cosine to reference "
        "(noise, partition, mix) | relative error (noise, partition, mix) |")
  print("|---|---|---:|---:|---|---|")
  for name, config in configs.items():
    v, hg = config.victim, config.attack.hypergradient
    size = (f"width {v.width}, {v.activation}, " if v.arch == "one_hidden" else "") + (
        f"n = {2 * config.data.n_per_class}")
    for label, seconds, backward, cos, rel in solver_table(config, repeats):
      if label.startswith("cg (config)"):
        label = f"cg (tol {hg.cg_tol:g}, maxiter {hg.cg_maxiter})"
      elif label.startswith("neumann"):
        alpha = "1/(1.1 λ_max)" if hg.neumann_alpha == 0 else f"{hg.neumann_alpha:g}"
        label = f"neumann (K = {hg.neumann_steps}, α = {alpha})"
      print(f"| {v.arch} ({size}) | {label} | {1e3 * seconds:.1f} | {1e3 * backward:.1f} | "
            f"{', '.join(f'{c:.4f}' for c in cos)} | {', '.join(f'{r:.1e}' for r in rel)} |")
  jax.config.update("jax_enable_x64", previous)


def _median_time(fn, repeats):
  jax.block_until_ready(fn())  # compile and warm up
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - start)
  return float(np.median(times))


def main(argv):
  del argv
  if "grid" in _SECTIONS.value:
    grid_section(_CONFIG.value)
  if "solvers" in _SECTIONS.value:
    print_solver_tables({"affine": _CONFIG.value,
                         "one_hidden": load_config(_ONE_HIDDEN_CONFIG.value)}, _REPEATS.value)
  if "decoreco" in _SECTIONS.value:
    decoreco_section(_DECORECO_REPEATS.value)
  if "sweep" in _SECTIONS.value:
    sweep_section(load_config(_SWEEP_CONFIG.value), _SWEEP_SETTINGS.value, _SWEEP_STEPS.value,
                  _REPEATS.value)
  unknown = set(_SECTIONS.value) - {"grid", "solvers", "decoreco", "sweep"}
  if unknown:
    raise app.UsageError(
        f"unknown --sections {sorted(unknown)}; known: grid, solvers, decoreco, sweep")


def sweep_section(config, num_settings: int, steps: int, repeats: int) -> None:
  """Section 4: S DecoReco settings vmapped as one computation vs a loop over them."""
  previous = jax.config.jax_enable_x64
  jax.config.update("jax_enable_x64", bool(config.float64))
  dtype = jnp.float64 if config.float64 else jnp.float32
  model = models.build_model(config.victim)
  shape = (32, 32, 3)
  params = models.init_params(model, jax.random.key(0), shape, dtype)
  m = config.attack.candidates_per_image * 2 * config.data.n_per_class
  settings = reconstruct.sample_settings(jax.random.key(1), num_settings,
                                         config.sweep.ranges, dtype)
  keys = jax.random.split(jax.random.key(2), num_settings)
  starts = jax.vmap(lambda k, sigma: decoreco.init_state(*decoreco.init_candidates(
      k, m, shape, sigma=sigma, dtype=dtype)[:2]))(keys, settings.init_scale)
  _, _, labels = decoreco.init_candidates(keys[0], m, shape, sigma=1.0, dtype=dtype)
  loss_and_grad = reconstruct.make_loss_and_grad(config, model, params, labels)
  run = functools.partial(decoreco.run_steps, num_steps=steps, loss_and_grad=loss_and_grad,
                          lambda_lr=config.attack.lambda_lr, momentum=config.attack.momentum)
  vmapped = jax.jit(lambda s, h: sharding.grid_map(lambda sh: run(sh[0], sh[1]), (s, h),
                                                   num_settings))
  one = jax.jit(run)
  pick = lambda tree, i: jax.tree.map(lambda t: t[i], tree)
  loop = lambda: [one(pick(starts, i), pick(settings, i)) for i in range(num_settings)]
  t_vmap = _median_time(lambda: vmapped(starts, settings), repeats)
  t_loop = _median_time(loop, repeats)
  together, _ = vmapped(starts, settings)
  alone = np.stack([np.asarray(r[0].images) for r in loop()])
  diff = float(np.nanmax(np.abs(np.asarray(together.images) - alone)))
  fused = reconstruct.fused_applies(config, params)
  print(f"\n## DecoReco sweep: {num_settings} settings × {steps} iterations, m = {m}, "
        f"widths {tuple(config.victim.widths)}, {'float64' if config.float64 else 'float32'}, "
        f"{'fused' if fused else 'autodiff'} gradient, load average "
        f"{os.getloadavg()[0]:.1f}\n")
  print("| sweep as | seconds | loop time / this |\n|---|---:|---:|")
  print(f"| one vmapped computation (`sharding.grid_map`) | {t_vmap:.2f} | {t_loop / t_vmap:.2f}× |")
  print(f"| a Python loop over the settings | {t_loop:.2f} | 1.00× |")
  print(f"\nmax |Δ final candidates|, vmapped vs loop: {diff:.1e}")
  jax.config.update("jax_enable_x64", previous)


def grid_section(config):
  """Section 1, in the config's precision."""
  jax.config.update("jax_enable_x64", bool(config.float64))
  dtype = jnp.float64 if config.float64 else jnp.float32
  task, apply_fn, theta_star, report = trained_victim(config, dtype)
  print(f"victim: {report}")

  grid = inits.make_grid(config.init.lambda1, config.init.lambda2)
  key_noise, key_attack = jax.random.split(jax.random.key(config.seed))
  x_gt = jnp.asarray(task.train_images, dtype)
  x_rnd = inits.uniform(key_noise, x_gt.shape, task.mean, dtype)
  x0 = inits.grid_images(grid, x_gt, jnp.asarray(task.partition_images, dtype), x_rnd)
  labels = jnp.asarray(task.train_labels, dtype)
  attack = bilevel.make_attack(apply_fn, theta_star, labels, config.victim, config.attack,
                               key_attack)
  steps = _STEPS.value
  run = lambda s: bilevel.run_steps(attack.step, s, steps)
  g, n = x0.shape[:2]
  batch = bilevel.grid_batch_size(config.attack.grid_batch_size, g)
  states = jax.vmap(attack.init)(x0)
  vmapped = jax.jit(lambda s: bilevel.run_grid(attack.step, s, steps, g))
  mapped = jax.jit(lambda s: bilevel.run_grid(attack.step, s, steps, batch))
  single = jax.jit(lambda x: run(attack.init(x)))
  loop = lambda: [single(x0[i]) for i in range(g)]

  t_vmap = _median_time(lambda: vmapped(states), _REPEATS.value)
  t_map = _median_time(lambda: mapped(states), _REPEATS.value)
  t_loop = _median_time(loop, _REPEATS.value)
  looped = loop()

  def difference(result):
    """Largest |Δ| of the final images and largest relative |Δ| of l, against the loop."""
    state, step_metrics = result
    images = max(float(np.abs(state.images[i] - looped[i][0].images).max()) for i in range(g))
    loss = max(float(np.max(np.abs(step_metrics.upper_loss[i] - looped[i][1].upper_loss)
                            / np.maximum(np.abs(looped[i][1].upper_loss), 1e-12)))
               for i in range(g))
    return f"{images:.1e} / {loss:.1e}"

  print(f"\n== eq. 10 grid: {g} initialisations x {n} images, {steps} outer steps "
        f"(solve={config.attack.hypergradient.solve}, backend={jax.default_backend()}) ==")
  print(f"{'':44s} {'seconds':>9s} {'loop / this':>12s} {'max |Δ images| / rel. |Δ l| vs loop':>36s}")
  for name, seconds, result in (
      (f"jax.vmap over all {g} grid points", t_vmap, vmapped(states)),
      (f"one computation, vmapped batches of {batch}", t_map, mapped(states)),
      ("Python loop over grid points", t_loop, None)):
    print(f"{name:44s} {seconds:9.3f} {t_loop / seconds:11.2f}x "
          f"{'(reference)' if result is None else difference(result):>36s}")

# Section 3: one DecoReco iteration at the size of Haim et al. (2022).
PAPER_M, PAPER_SHAPE, PAPER_WIDTHS, PAPER_ALPHA = 1000, (32, 32, 3), (1000, 1000), 20.0
LR_IMAGES, LR_LAMBDAS, MOMENTUM = 0.4, 1e-4, 0.9
# The reference PyTorch implementation, quoted from /work/shared/ANCHORS.md (ms, 2 threads).
REFERENCE_MS = {"float64": (405.0, 430.0), "float32": (191.0, 197.0)}


def decoreco_flops(m: int, d: int, widths) -> dict[str, float]:
  """Matmul FLOPs (2 × multiply-adds) of one loss + ∇(x, λ) evaluation.

  Autodiff: first layer X K_0, G_0 = Xᵀ Y_0, X R_0, Z̄_0 K_0ᵀ, Y_0 R_0ᵀ (5 × 2 m D w_0);
  each later layer 7 × 2 m w_{k−1} w_k. Fused (`trdr.attacks.kkt_mlp`, module docstring):
  first layer X K_0 and (…) K_0ᵀ (2 × 2 m D w_0), M X (2 m² D), Γ Y_0 (2 m² w_0), and the
  symmetric Γ = X Xᵀ and M = Y_0 Y_0ᵀ in blocks at 3/4 of 2 m² D and 2 m² w_0; later layers
  as autodiff. Products with the one-column output layer are O(m w) and left out.
  """
  h = m // 2
  gram = lambda n: 2 * m * h * n + 2 * (m - h) ** 2 * n      # `kkt_mlp._gram`
  hidden = sum(7 * 2 * m * a * b for a, b in zip(widths[:-1], widths[1:]))
  w0 = widths[0]
  return {"autodiff": 5 * 2 * m * d * w0 + hidden,
          "fused": 2 * 2 * m * d * w0 + 2 * m * m * d + 2 * m * m * w0 + gram(d) + gram(w0)
                   + hidden}


def _momentum_step(value_and_grad, labels):
  """(θ, x, λ, v_x, v_λ) -> (loss, x', λ', v_x', v_λ'): SGD with momentum as torch.optim.SGD
  (v ← μ v + g, p ← p − lr v), jitted."""

  @jax.jit
  def step(params, images, lambdas, velocity_images, velocity_lambdas):
    loss, (grad_images, grad_lambdas) = value_and_grad(params, images, lambdas, labels)
    velocity_images = MOMENTUM * velocity_images + grad_images
    velocity_lambdas = MOMENTUM * velocity_lambdas + grad_lambdas
    return (loss, images - LR_IMAGES * velocity_images, lambdas - LR_LAMBDAS * velocity_lambdas,
            velocity_images, velocity_lambdas)

  return step


def _torch_iteration(params, images, lambdas, labels, threads=None):
  """A PyTorch transcription of the reference iteration, or None without torch.

  Returns a function running one iteration (forward, KKT loss with a create-graph
  backward, double backward, SGD-momentum steps) on copies of the inputs.
  """
  try:
    import torch  # pylint: disable=import-outside-toplevel
  except ImportError:
    return None
  if threads:
    torch.set_num_threads(threads)
  dtype = torch.float64 if images.dtype == jnp.float64 else torch.float32

  class ReluSigmoidBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z):
      ctx.save_for_backward(z)
      return z.clamp(min=0)

    @staticmethod
    def backward(ctx, grad):
      (z,) = ctx.saved_tensors
      return grad * torch.sigmoid(PAPER_ALPHA * z)   # differentiable: double backward works

  tensor = lambda a: torch.tensor(np.asarray(a), dtype=dtype)
  # Flax kernels are [in, out]; torch.nn.functional.linear takes [out, in].
  weights = [tensor(params[n]["kernel"]).T.contiguous().requires_grad_()
             for n in sorted(params, key=lambda n: (n == "output", n))]
  bias = tensor(params["dense_0"]["bias"]).requires_grad_()
  x = tensor(images).reshape(images.shape[0], -1).requires_grad_()
  lam = tensor(lambdas).requires_grad_()
  y = tensor(labels)
  optimizer = torch.optim.SGD([{"params": [x], "lr": LR_IMAGES},
                               {"params": [lam], "lr": LR_LAMBDAS}], momentum=MOMENTUM)
  theta = [weights[0], bias, *weights[1:]]

  def iteration():
    optimizer.zero_grad()
    h = torch.nn.functional.linear(x, weights[0], bias)
    for w in weights[1:]:
      h = torch.nn.functional.linear(ReluSigmoidBackward.apply(h), w)
    outputs = h[:, 0] * y
    grads = torch.autograd.grad(outputs, theta, grad_outputs=lam / x.shape[0],
                                create_graph=True)
    loss = sum(((t - g) ** 2).sum() for t, g in zip(theta, grads))
    loss = loss + (torch.relu(x - 1) ** 2).sum() + (torch.relu(-1 - x) ** 2).sum()
    loss = loss + 5.0 * (torch.relu(0.05 - lam) ** 2).sum()
    loss.backward()
    optimizer.step()
    return float(loss)

  return iteration


def decoreco_section(repeats: int) -> None:
  """Section 3: the Markdown table of one DecoReco iteration, float64 and float32."""
  if repeats < 5:
    raise app.UsageError(f"--decoreco_repeats must be >= 5, got {repeats}")
  previous = jax.config.jax_enable_x64
  jax.config.update("jax_enable_x64", True)
  d = int(np.prod(PAPER_SHAPE))
  flops = decoreco_flops(PAPER_M, d, PAPER_WIDTHS)
  model = models.HaimMLP(widths=PAPER_WIDTHS,
                         activation=decoreco.relu_sigmoid_backward(PAPER_ALPHA))
  apply_fn = lambda p, x: model.apply({"params": p}, x)
  autodiff = jax.value_and_grad(functools.partial(decoreco.stationarity_loss, apply_fn=apply_fn),
                                argnums=(1, 2))
  fused = functools.partial(kkt_mlp.value_and_grad, alpha=PAPER_ALPHA)
  rows, notes = [], []
  for dtype in (jnp.float64, jnp.float32):
    name = jnp.dtype(dtype).name
    key_params, key_candidates = jax.random.split(jax.random.key(0))
    params = models.init_params(model, key_params, PAPER_SHAPE, dtype)
    images, lambdas, labels = decoreco.init_candidates(key_candidates, PAPER_M, PAPER_SHAPE,
                                                       sigma=1e-3, dtype=dtype)
    state = (images, lambdas, jnp.zeros_like(images), jnp.zeros_like(lambdas))
    steps = {"autodiff": _momentum_step(autodiff, labels), "fused": _momentum_step(fused, labels)}
    xla_flops = {k: jax.jit(f).lower(params, images, lambdas, labels).compile()
                 .cost_analysis().get("flops", float("nan"))
                 for k, f in (("autodiff", autodiff), ("fused", fused))}
    times = {k: [] for k in steps}
    for step in steps.values():
      jax.block_until_ready(step(params, *state))     # compile and warm up
    for _ in range(repeats):                           # alternate, so load hits both alike
      for k, step in steps.items():
        start = time.perf_counter()
        jax.block_until_ready(step(params, *state))
        times[k].append(time.perf_counter() - start)
    ms = {k: 1e3 * float(np.median(t)) for k, t in times.items()}
    fastest = {k: 1e3 * float(np.min(t)) for k, t in times.items()}
    ref_value, (ref_x, ref_lambdas) = jax.jit(autodiff)(params, images, lambdas, labels)
    value, (grad_x, grad_lambdas) = jax.jit(fused)(params, images, lambdas, labels)
    rel = lambda a, b: float(jnp.max(jnp.abs(a - b)) / jnp.max(jnp.abs(b)))
    notes.append(f"{name}: fused vs autodiff, max |Δ| / max |autodiff|: loss "
                 f"{rel(value, ref_value):.1e}, ∇x {rel(grad_x, ref_x):.1e}, "
                 f"∇λ {rel(grad_lambdas, ref_lambdas):.1e}; XLA cost analysis: autodiff "
                 f"{xla_flops['autodiff'] / 1e9:.1f}, fused {xla_flops['fused'] / 1e9:.1f} GFLOP")
    low, high = REFERENCE_MS[name]
    for k in steps:
      rows.append((name, k, ms[k], fastest[k], flops[k] / ms[k] / 1e6, ms[k] / ms["autodiff"],
                   f"{ms[k] / high:.2f}–{ms[k] / low:.2f}"))
    torch_iteration = _torch_iteration(params, images, lambdas, labels)
    if torch_iteration is None:
      notes.append(f"{name}: PyTorch transcription skipped (import torch failed)")
    else:
      seconds = _median_time(torch_iteration, repeats)
      rows.append((name, "PyTorch transcription (this run)", 1e3 * seconds, float("nan"),
                   54.9 / seconds, 1e3 * seconds / ms["autodiff"],
                   f"{1e3 * seconds / high:.2f}–{1e3 * seconds / low:.2f}"))
  jax.config.update("jax_enable_x64", previous)
  load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
  print(f"\n== DecoReco iteration, MLP {d}-{'-'.join(map(str, PAPER_WIDTHS))}-1 (first-layer "
        f"bias only), m = {PAPER_M}, α = {PAPER_ALPHA:g}, loss + ∇(x, λ) + SGD momentum; "
        f"median of {repeats} (backend {jax.default_backend()}, {os.cpu_count()} CPUs, load "
        f"average {load} at the end: other processes share the CPUs if it exceeds their "
        "number) ==\n")
  print("| dtype | method | ms / iteration, median | fastest | GFLOP/s (median) | "
        "/ autodiff (this run) | / reference PyTorch (ANCHORS.md, quoted) |")
  print("|---|---|---:|---:|---:|---:|---:|")
  for name, method, ms, fastest, gflops, ratio, reference in rows:
    print(f"| {name} | {method} | {ms:.0f} | {fastest:.0f} | {gflops:.0f} | {ratio:.2f} | "
          f"{reference} |")
  print(f"\nMatmul FLOPs per iteration: autodiff {flops['autodiff'] / 1e9:.1f} GFLOP, fused "
        f"{flops['fused'] / 1e9:.1f} GFLOP (PyTorch reference 54.9, with unused parameter "
        "gradients). Reference PyTorch times are quoted from ANCHORS.md (405–430 ms float64, "
        "191–197 ms float32), not measured in this run.")
  for note in notes:
    print(f"- {note}")


if __name__ == "__main__":
  app.run(main)
