"""The loop closed through the own-model path: θ* trained IN PYTORCH with Haim et al.'s
recipe (decoreco_cifar.py:smoke: D-32-32-1 ReLU MLP, bias on the first layer only,
full-batch GD on the mean logistic loss at lr 0.5, float64), saved as the reference code
saves it and attacked through ``victim.load``, gives the KKT premise (`trdr.victim.kkt`)
and the recovered counts that trdr's own training of the same recipe gives.

Both trainings start from the SAME θ0 (trdr's draw, `trdr.victim.cache.initial_params`,
copied into the PyTorch net) and run the same number of epochs (``victim.flow_time``, no
loss threshold: an epoch more or less would move θ* by a whole step, not by rounding), so
they differ only by float64 rounding, and every tolerance below is argued from that.
"""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from trdr import data, experiment, models  # noqa: E402
from trdr.attacks import decoreco  # noqa: E402
from trdr.configs import decoreco_cifar  # noqa: E402
from trdr.runtime import files  # noqa: E402
from trdr.victim import cache, objective, pretrained, training  # noqa: E402

import torch_reference  # noqa: E402  (tests/torch_reference.py)

FLOW_TIME = 100.0   # 200 epochs at the :smoke lr 0.5: train loss ≈ 2e-4, accuracy 1
U = np.finfo(np.float64).eps / 2   # unit roundoff of float64, 2⁻⁵³
NAMES = ("dense_0", "dense_1", "output")   # trdr's names of the reference's layers.0, 1, 2


def _gamma(m: int) -> float:
  """γ_m = m·u/(1 − m·u): the relative forward error of an m-term float64 dot product."""
  return m * U / (1 - m * U)


def _config():
  config = decoreco_cifar.get_config("smoke")
  config.float64 = True
  # A fixed epoch count, not the loss threshold (gd_epochs: ⌈flow_time / lr⌉ = 200).
  config.victim.flow_time, config.victim.loss_threshold = FLOW_TIME, 0.0
  config.attack.steps, config.attack.log_every = 20, 20
  return config


def _train_in_torch(theta0, task, config):
  """θ0 (trdr's Flax layout) copied into the reference net and trained there by plain
  full-batch GD (SGD without momentum) on BCE-with-logits with targets (y + 1)/2, which is
  trdr's mean softplus(−y·Φ) for y ∈ {±1}, for `training.gd_epochs` epochs.

  The reference net sees NCHW images flattened channels first (x.view(N, −1)), so θ0's
  first kernel, over NHWC-flattened inputs, is permuted to NCHW order: the same function,
  and the layout `trdr.victim.pretrained` expects of a PyTorch state_dict.

  Returns:
    (the net, {"epochs", "max_theta_norm": max_k ‖θ_k‖, "max_step": max_k lr·‖∇L(θ_k)‖}).
  """
  h, w, c = task.train_images.shape[1:]
  d = h * w * c
  net = torch_reference.haim_mlp((d, *config.victim.widths, 1), torch.float64)
  with torch.no_grad():
    for k, (name, layer) in enumerate(zip(NAMES, net.layers, strict=True)):
      kernel = np.array(theta0[name]["kernel"], np.float64)
      if k == 0:   # rows h·W·C + w·C + c -> c·H·W + h·W + w
        kernel = kernel.reshape(h, w, c, -1).transpose(2, 0, 1, 3).reshape(d, -1)
      layer.weight.copy_(torch.from_numpy(np.array(kernel.T, order="C", copy=True)))
      if layer.bias is not None:
        layer.bias.copy_(torch.from_numpy(np.array(theta0[name]["bias"], np.float64)))
  x = torch.from_numpy(np.array(task.train_images.transpose(0, 3, 1, 2), np.float64,
                                order="C", copy=True))   # writable: the task's arrays are not
  targets = torch.from_numpy((task.train_labels.astype(np.float64) + 1) / 2)
  lr = config.victim.lr
  optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.0)
  epochs = training.gd_epochs(config.victim)
  norm = lambda tensors: float(torch.sqrt(sum(torch.sum(t.detach() ** 2) for t in tensors)))
  max_theta, max_step = norm(net.parameters()), 0.0
  for _ in range(epochs):
    optimizer.zero_grad()
    torch.nn.functional.binary_cross_entropy_with_logits(net(x), targets).backward()
    max_step = max(max_step, lr * norm(p.grad for p in net.parameters()))
    optimizer.step()
    max_theta = max(max_theta, norm(net.parameters()))
  return net, {"epochs": epochs, "max_theta_norm": max_theta, "max_step": max_step}


def _gd_amplification(model, theta0, task, config, iterations=6):
  """‖J‖, J the Jacobian of the whole GD trajectory θ0 ↦ θ_E (E = gd_epochs), by power
  iteration on JᵀJ (a lower estimate that converges from below; 6 iterations give it to
  3 digits here). How much a perturbation of θ0 (and, we take it, of any θ_k) grows by
  epoch E."""
  x = jnp.asarray(task.train_images, jnp.float64)
  y = jnp.asarray(task.train_labels, jnp.float64)
  loss = lambda p: objective.GD_LOSSES[config.victim.loss](model.apply({"params": p}, x), y)
  lr, epochs = config.victim.lr, training.gd_epochs(config.victim)
  gd = lambda p: jax.lax.fori_loop(
      0, epochs, lambda _, p: jax.tree.map(lambda a, g: a - lr * g, p, jax.grad(loss)(p)), p)
  _, forward = jax.linearize(gd, theta0)
  backward = jax.linear_transpose(forward, theta0)
  normal = jax.jit(lambda v: backward(forward(v))[0])
  flat = lambda tree: np.concatenate([np.ravel(t) for t in jax.tree.leaves(tree)])
  v = jax.tree.map(lambda t: jax.random.normal(jax.random.key(1), t.shape, t.dtype), theta0)
  v = jax.tree.map(lambda t: t / np.linalg.norm(flat(v)), v)
  for _ in range(iterations):
    jtj_v = normal(v)
    growth = np.linalg.norm(flat(jtj_v))   # → ‖J‖² as v aligns with the top singular vector
    v = jax.tree.map(lambda t, growth=growth: t / growth, jtj_v)
  return float(np.sqrt(growth))


@pytest.fixture(scope="module")
def closed_loop(tmp_path_factory):
  """The two :smoke attacks, one on trdr's θ*, one on PyTorch's θ* from a .pth, both
  trained by the same recipe from the same θ0 for the same epochs."""
  root = tmp_path_factory.mktemp("torch_recipe")
  config = _config()
  task = data.make_task(config.data)
  assert task.train_images.shape[0] == 10
  image_shape = task.train_images.shape[1:]
  model = models.build_model(config.victim)
  with jax.enable_x64(True):
    theta0 = cache.initial_params(config.victim, model, image_shape, jnp.float64)
    assert all(t.dtype == jnp.float64 for t in jax.tree.leaves(theta0))
    float64_task = task._replace(train_images=task.train_images.astype(np.float64))
    amplification = _gd_amplification(model, theta0, float64_task, config)
  threads = torch.get_num_threads()
  torch.set_num_threads(1)   # ten 3072-pixel images: threads only contend with XLA's
  try:
    net, record = _train_in_torch(theta0, float64_task, config)
  finally:
    torch.set_num_threads(threads)
  pth = root / "model.pth"
  torch.save(net.state_dict(), pth)   # as the reference code saves θ*
  assert sorted(net.state_dict()) == ["layers.0.bias", "layers.0.weight", "layers.1.weight",
                                      "layers.2.weight"]

  # Both attacks at the same settings: a loaded θ* never runs the config's untuned defaults
  # (`trdr.attacks.decoreco.own_model`), so both take Haim et al.'s published ones.
  with config.attack.unlocked():
    config.attack.update(decoreco.PUBLISHED["b9dfyspx"]._asdict())
  own = experiment.run(config, str(root / "trdr"), "attack").summary
  config.victim.load = str(pth)
  loaded = experiment.run(config, str(root / "torch"), "attack").summary
  # θ* of each run as the run saved it (the loaded run keeps a copy of what the loader
  # mapped into trdr's layout: `pretrained.keep`).
  theta = {name: pretrained.read(str(root / name / "victim" / cache.VICTIM_FILE))
           for name in ("trdr", "torch")}
  return {"root": str(root), "own": own, "loaded": loaded, "theta": theta, "record": record,
          "amplification": amplification, "theta0": jax.tree.map(np.asarray, theta0),
          "task": float64_task, "model": model, "image_shape": image_shape}


def _theta_error_bound(run) -> float:
  """The bound on ‖θ_torch − θ_trdr‖ / ‖θ_trdr‖ that float64 rounding allows.

  Per epoch, both programs compute θ − lr·∇L(θ) in float64 with other summation orders
  (PyTorch's and XLA's matmuls; the first layer's NCHW inputs against trdr's NHWC). Every
  entry of the step is made of sums of at most D + 1 = 3073 products (the first layer's
  forward pass; the backward sums run over n = 10 images and 32 units), so the two
  programs' steps differ by at most γ_{D+1} ≈ 3.4e-13 of the step evaluated on absolute
  values, which the cancellation among the n per-sample terms of the mean loss can make
  up to n times the step itself: ≤ n·γ_{D+1}·max_k lr‖∇L(θ_k)‖ (the largest step,
  recorded in the PyTorch run); the subtraction θ − step rounds once more, ≤ u·max_k ‖θ_k‖.
  An error made at epoch k reaches epoch E multiplied by the GD map's Jacobian, whose norm
  over the whole trajectory, A = ‖∂θ_E/∂θ_0‖, is computed here (≈ 21: the first layer grows
  from its 1e-4 start to norm ≈ 1.8 and carries a perturbation of it along); we take A to
  bound every ‖∂θ_E/∂θ_k‖ and allow it 3 times over. Two programs, E epochs:

    ‖θ_torch − θ_trdr‖ ≤ 2 · 3A · E · (n·γ_{D+1}·max step + u·max ‖θ_k‖)

  ≈ 2·63·200·(10·3.4e-13·0.24 + 1.1e-16·4.5) / 4.5 ≈ 5e-9 of ‖θ_E‖ ≈ 4.5 (largest step
  0.24): a worst case (every rounding adverse, none cancelling, errors adding over the
  epochs instead of averaging out), which float64 results sit far below."""
  record = run["record"]
  d = int(np.prod(run["image_shape"]))
  n = run["task"].train_images.shape[0]
  per_epoch = n * _gamma(d + 1) * record["max_step"] + U * record["max_theta_norm"]
  theta_norm = np.sqrt(sum(np.sum(v ** 2) for v in run["theta"]["trdr"].values()))
  return 2 * 3 * run["amplification"] * record["epochs"] * per_epoch / theta_norm


@pytest.mark.slow  # two :smoke attacks end to end, one on a PyTorch-trained θ*
def test_torch_and_trdr_gd_reach_the_same_theta_star(closed_loop):
  """The same recipe from the same θ0 in PyTorch and in trdr: the same θ* up to float64
  rounding (`_theta_error_bound`), after the same epochs; and the loader read the
  PyTorch layout (NCHW first-layer inputs, [out, in] weights) into trdr's exactly where
  it should (a wrong permutation would put θ* off by O(‖θ‖), not by rounding)."""
  own, loaded = closed_loop["own"]["victim"], closed_loop["loaded"]["victim"]
  epochs = closed_loop["record"]["epochs"]
  assert epochs == own["epochs"] == 200 and not own["reached_threshold"]
  assert own["flow_time"] == FLOW_TIME and own["train_accuracy"] == 1.0
  assert loaded["train_accuracy"] == 1.0 and loaded["loaded_from"].endswith("model.pth")
  ours, theirs = closed_loop["theta"]["trdr"], closed_loop["theta"]["torch"]
  assert sorted(ours) == sorted(theirs) == ["dense_0/bias", "dense_0/kernel",
                                            "dense_1/kernel", "output/kernel"]
  difference = np.sqrt(sum(np.sum((theirs[k] - ours[k]) ** 2) for k in ours))
  norm = np.sqrt(sum(np.sum(ours[k] ** 2) for k in ours))
  bound = _theta_error_bound(closed_loop)
  assert bound < 1e-6   # the bound itself is rounding-level, so the check means something
  assert difference <= bound * norm, (difference / norm, bound)
  # θ* moved: the check is not of θ0 against itself (the first layer grows ~50×).
  moved = np.linalg.norm(ours["dense_0/kernel"] - closed_loop["theta0"]["dense_0"]["kernel"])
  assert moved > 1e6 * bound * norm


def _gradient_matrix(run):
  """A: the n per-sample gradients ∇θ s_i(θ*_trdr) of the margins s_i = y_i Φ(x_i) as
  rows, float[n, P] (P ≈ 1e5), for the conditioning of the KKT fit."""
  theta = run["theta"]["trdr"]
  params = {name: {k.partition("/")[2]: jnp.asarray(v) for k, v in theta.items()
                   if k.startswith(name + "/")} for name in NAMES}
  x = jnp.asarray(run["task"].train_images, jnp.float64)
  y = jnp.asarray(run["task"].train_labels, jnp.float64)
  margins = lambda p: objective.signed_outputs(run["model"].apply({"params": p}, x), y)
  jac = jax.jacrev(margins)(params)
  return np.concatenate([np.asarray(t).reshape(x.shape[0], -1)
                         for t in jax.tree.leaves(jac)], axis=1)


@pytest.mark.slow  # two :smoke attacks end to end, one on a PyTorch-trained θ*
def test_the_kkt_premise_is_the_same_through_the_own_model_path(closed_loop):
  """summary.json's "kkt_premise" (Haim et al.'s θ* = Σ λ_i ∇θ s_i, λ ≥ 0, fitted on the
  training images): the same unexplained fraction per tensor for PyTorch's θ* as for
  trdr's, within what the two θ*'s difference and the fit's own rounding allow.

  Error argument. Every λ_i > 0 (asserted), so no constraint of the non-negative least
  squares is active and, locally, λ = K⁻¹Aθ, r = (I − Π)θ with Π the orthogonal projection
  onto the row space of A (the per-sample gradients, float[n, P]) and K = AAᵀ; a smooth
  function of θ, conditioned by κ(A) = σ_max/σ_min (computed: ≈ 2.6) and κ(K) = κ(A)².
  (a) The inputs differ by δθ = θ_torch − θ_trdr (per tensor δθ_t, measured from the two
  runs' files and bounded by rounding in the test above). A's rows are products of the
  other layers' weights and activations (ReLU patterns unchanged at rounding-level δθ),
  so ‖δA‖/‖A‖ ≤ 3·max_t ‖δθ_t‖/‖θ_t‖ to first order; ‖δΠ‖ ≤ 2κ(A)‖δA‖/‖A‖; hence
  ‖δr‖ ≤ ‖δθ‖ + 2κ(A)‖θ‖·‖δA‖/‖A‖.
  (b) Each fit rounds: K's entries are float64 sums of P products (γ_P ≈ 1.1e-11
  relative), the 10×10 eigendecomposition and NNLS add O(n·u), so λ is off by ≤
  κ(K)(γ_P + n·u) relative and Aᵀλ by ≤ κ(A)κ(K)(γ_P + n·u)‖θ‖ (‖A‖‖λ‖ ≤ κ(A)‖θ‖); r is
  then formed explicitly (θ − Aᵀλ, its VJP's sums ≤ D + 1 terms: γ_{D+1}‖θ‖). Two fits.
  relative_t = ‖r_t‖²/‖θ_t‖² then moves by ≤ (2‖r_t‖‖δr‖ + ‖δr‖²)/‖θ_t‖² plus
  relative_t·(2ε_t + ε_t²)/(1 − ε_t)², ε_t = ‖δθ_t‖/‖θ_t‖ (its denominator's change).
  (b) dominates: ≈ 2·2.6·6.8·1.1e-11·4.5 ≈ 2e-9 in ‖δr‖, ≈ 5e-8 relative on the smallest
  tensor (the bias, ‖θ_t‖ ≈ 0.26), ≤ 1e-8 on the others.
  """
  own, loaded = closed_loop["own"]["kkt_premise"], closed_loop["loaded"]["kkt_premise"]
  n = closed_loop["task"].train_images.shape[0]
  assert own["n"] == loaded["n"] == n and own["form"] == loaded["form"] == "binary"
  assert own["positive"] == loaded["positive"] == n   # no NNLS constraint active
  assert own["relative"].keys() == loaded["relative"].keys() == {
      "dense_0/bias", "dense_0/kernel", "dense_1/kernel", "output/kernel"}

  ours, theirs = closed_loop["theta"]["trdr"], closed_loop["theta"]["torch"]
  with jax.enable_x64(True):
    sv = np.linalg.svd(_gradient_matrix(closed_loop), compute_uv=False)
  kappa_a = sv[0] / sv[-1]
  assert kappa_a < 10   # a well-posed fit; the bound below grows with it
  norm_t = {k: np.linalg.norm(ours[k]) for k in ours}
  delta_t = {k: np.linalg.norm(theirs[k] - ours[k]) for k in ours}
  theta_norm = np.sqrt(sum(v ** 2 for v in norm_t.values()))
  delta = np.sqrt(sum(v ** 2 for v in delta_t.values()))
  eps_t = {k: delta_t[k] / norm_t[k] for k in ours}
  p = sum(v.size for v in ours.values())
  d = int(np.prod(closed_loop["image_shape"]))
  inputs = delta + 2 * kappa_a * theta_norm * 3 * max(eps_t.values())               # (a)
  rounding = 2 * (kappa_a ** 3 * (_gamma(p) + n * U) + _gamma(d + 1)) * theta_norm   # (b)
  delta_r = inputs + rounding
  for k, rel in own["relative"].items():
    assert 0 < rel < 1
    assert np.isclose(own["norm"][k], norm_t[k] ** 2, rtol=1e-12)   # the same θ*_t
    tolerance = ((2 * np.sqrt(own["residual"][k]) * delta_r + delta_r ** 2) / norm_t[k] ** 2
                 + rel * (2 * eps_t[k] + eps_t[k] ** 2) / (1 - eps_t[k]) ** 2)
    assert tolerance < 1e-6 * rel   # the tolerance the brief asks for: rounding-level
    assert abs(loaded["relative"][k] - rel) <= tolerance, (k, loaded["relative"][k], rel,
                                                           tolerance)


@pytest.mark.slow  # two :smoke attacks end to end, one on a PyTorch-trained θ*
def test_the_recovered_counts_are_the_same(closed_loop):
  """The attack on PyTorch's θ* recovers as many training images (nearest-neighbour and
  best-buddy SSIM counts, at every threshold and SSIM window) as the attack on trdr's.

  Exact equality (also per class): the two attacks start from the same candidates
  (config.seed) and run the same 20 steps on θ* that differ by rounding only (the θ test's
  bound, ≤ 5e-9 relative); a count could differ only if a best SSIM sat within that
  rounding's effect of a threshold (0.3, 0.4, 0.5)."""
  own, loaded = closed_loop["own"], closed_loop["loaded"]
  keys = sorted(k for k in own if k.startswith("reconstructed"))
  assert {"reconstructed", "reconstructed_best_buddies"} <= set(keys)
  assert keys == sorted(k for k in loaded if k.startswith("reconstructed"))
  for key in keys:
    assert loaded[key] == own[key], key
  assert own["candidates"] == loaded["candidates"] == 20
  assert sum(own["reconstructed"].values()) > 0   # not only 0 == 0 (measured: 6, 4, 1)
  for name, summary in (("trdr", own), ("torch", loaded)):   # what summary.json holds
    written = files.read_json(os.path.join(closed_loop["root"], name, experiment.SUMMARY_FILE))
    assert written["kkt_premise"] == summary["kkt_premise"]
    assert written["reconstructed"] == summary["reconstructed"]


def test_pytorch_later_init_is_torchs_nn_linear_default():
  """trdr's later_init "pytorch" draws the layers after the first as torch's nn.Linear
  default does: U(−1/√fan_in, 1/√fan_in), fan_in the layer's INPUTS (a 1000-input,
  400-output layer, so a fan_out mix-up shows as a bound 1.6× too large, variance 2.5×).

  Tolerances from the sampling error, N = 4·10⁵ entries per matrix: the sample variance
  of N draws of U(−b, b) (variance σ² = b²/3, kurtosis 9/5) has relative standard error
  √((9/5 − 1)/N) = √(0.8/N) ≈ 1.4e-3; each is within 5 of those of σ² (a miss once in
  ~10⁶ runs; the seeds are fixed anyway), the two within 5·√2. The mean has standard
  error σ/√N. All draws lie in [−b, b], and the extremes come within 20·2b/N of ±b
  unless (1 − 20/N)^N ≈ e⁻²⁰.
  """
  fan_in, fan_out = 1000, 400
  bound = 1 / np.sqrt(fan_in)
  model = models.HaimMLP(widths=(8, fan_in, fan_out), later_init="pytorch")
  params = models.init_params(model, jax.random.key(0), (1, 1, 2))
  ours = np.asarray(params["dense_2"]["kernel"], np.float64)
  assert ours.shape == (fan_in, fan_out)
  torch.manual_seed(0)
  theirs = torch.nn.Linear(fan_in, fan_out).weight.detach().numpy().astype(np.float64).T
  n = ours.size
  sigma2 = bound ** 2 / 3
  se = np.sqrt(0.8 / n)
  for sample in (ours, theirs):   # float32 draws: ±b rounded to float32 at most
    assert -np.float32(bound) <= sample.min() and sample.max() <= np.float32(bound)
    assert sample.min() < -bound * (1 - 40 / n) and sample.max() > bound * (1 - 40 / n)
    assert abs(sample.mean()) <= 5 * np.sqrt(sigma2 / n)
    assert abs(sample.var() / sigma2 - 1) <= 5 * se, sample.var() / sigma2
  assert abs(ours.var() - theirs.var()) / sigma2 <= 5 * np.sqrt(2) * se
  # The "flax" default (lecun_normal, variance 1/fan_in, 3× torch's) is told apart.
  flax_init = models.HaimMLP(widths=(8, fan_in, fan_out), later_init="flax")
  lecun = np.asarray(models.init_params(flax_init, jax.random.key(0), (1, 1, 2))[
      "dense_2"]["kernel"])
  assert abs(lecun.var() / sigma2 - 3) <= 5 * np.sqrt(2 / n) * 3


@pytest.mark.slow  # one more :smoke attack end to end, on an untrained PyTorch θ*
def test_loaded_models_end_with_the_attacks_power(closed_loop, tmp_path):
  """Issue 88's power statement on the own-model path: a default-initialised PyTorch MLP
  (nn.Linear's own draw, never trained) and the recipe-trained one, both loaded from a .pth
  as users load them, each end with "N of n training images recovered" followed by the
  attack's measured power (`trdr.evaluation.power.run_statement`), in summary.json and in
  the script's last lines (`trdr.cli.headline`), after the count. The statement is read
  back from the same θ* and counts, so the test checks the wiring, not a number: the :smoke
  MLP (D-32-32-1) is no calibrated architecture, so either run must say that a 0 is not
  evidence of privacy, whatever the installation's calibration table holds."""
  import flax.traverse_util  # noqa: PLC0415
  from trdr import cli  # noqa: PLC0415
  from trdr.evaluation import power  # noqa: PLC0415
  config = _config()
  with config.attack.unlocked():
    config.attack.update(decoreco.PUBLISHED["b9dfyspx"]._asdict())
  d = int(np.prod(closed_loop["image_shape"]))
  untrained = torch_reference.haim_mlp((d, *config.victim.widths, 1), torch.float64)
  torch.save(untrained.state_dict(), tmp_path / "default.pth")
  config.victim.load = str(tmp_path / "default.pth")
  default = experiment.run(config, str(tmp_path / "default"), "attack").summary
  runs = {"default": (str(tmp_path / "default"), default),
          "torch": (os.path.join(closed_loop["root"], "torch"), closed_loop["loaded"])}
  for name, (workdir, summary) in runs.items():
    theta = flax.traverse_util.unflatten_dict(
        pretrained.read(os.path.join(workdir, "victim", cache.VICTIM_FILE)), sep="/")
    assert summary["power"] == power.run_statement(theta, summary), name
    assert summary["power"].startswith(
        f"{power.run_count(summary)} of {summary['n_train']} training images recovered")
    assert summary["power"].endswith(power.NOT_EVIDENCE), name
    lines = cli.headline(workdir, "attack").splitlines()
    count = next(i for i, line in enumerate(lines) if line.startswith("Training images"))
    assert lines[count + 1] == f"Power: {summary['power']}", name


def test_every_number_a_loaded_run_writes_is_named_in_own_model_md(closed_loop):
  """docs/own_model.md's summary.json section names every key a DecoReco run on a loaded
  .pth writes: the top level and the records a user reads inside (victim, kkt_premise,
  truth and its truth_start run). A key added to the summary without a line there fails."""
  path = os.path.join(os.path.dirname(__file__), os.pardir, "docs", "own_model.md")
  with open(path, encoding="utf-8") as f:
    doc = f.read()
  section = doc[doc.index("## What a run's summary.json holds"):]
  section = section[:section.find("\n## ", 1) if "\n## " in section[1:] else len(section)]
  summary = closed_loop["loaded"]
  keys = set(summary)
  for record in ("victim", "kkt_premise", "truth"):
    keys |= set(summary.get(record) or {})
  keys |= set((summary.get("truth") or {}).get("truth_start") or {})
  missing = sorted(k for k in keys if f"`{k}`" not in section)
  assert not missing, f"summary.json keys not named in docs/own_model.md: {missing}"
