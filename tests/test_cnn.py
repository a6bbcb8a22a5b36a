"""The convolutional victim (`trdr.models.ConvNet`, configs/decoreco_cnn.py): its layers and
initialisation as stated, the positive homogeneity DecoReco's KKT premise relies on, a CNN
trained in PyTorch loaded and attacked by DecoReco at :smoke with its KKT premise fitted
per tensor (trdr's own GD training of the CNN: tests/test_cnn_study.py), and the bilevel attack
on it (configs/bilevel_cnn.py): a :smoke landscape and its hypergradient against a finite
difference."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from trdr import models
from trdr.configs import decoreco_cnn


def _net(**kw):
  return models.ConvNet(**({"channels": (4, 8)} | kw))


def test_layers_biases_and_initialisation_as_stated():
  """conv_0 with a bias, N(0, 1e-4²); conv_1 and the head without, PyTorch's default
  U(±1/√fan_in) (fan_in 9·4 for conv_1, 8·8·8 for the head after two poolings of 32²)."""
  with jax.enable_x64(True):
    theta = models.init_params(_net(), jax.random.key(0), (32, 32, 3), jnp.float64)
  assert set(theta) == {"conv_0", "conv_1", "output"}
  assert set(theta["conv_0"]) == {"kernel", "bias"} and set(theta["conv_1"]) == {"kernel"}
  assert theta["conv_0"]["kernel"].shape == (3, 3, 3, 4)
  assert theta["output"]["kernel"].shape == (8 * 8 * 8, 1)
  # 108 + 4 draws of N(0, 1e-8): their sd within 20 % of 1e-4 (the sample sd's relative
  # error is about 1/√(2·112) = 7 %: 20 % is 3 of them)
  first = np.concatenate([np.ravel(theta["conv_0"]["kernel"]), theta["conv_0"]["bias"]])
  assert abs(first.std() / 1e-4 - 1) < 0.2
  for name, fan_in in (("conv_1", 9 * 4), ("output", 8 * 8 * 8)):
    kernel = np.asarray(theta[name]["kernel"])
    assert np.abs(kernel).max() <= 1 / np.sqrt(fan_in)
    # U(±b) has sd b/√3; over ≥ 288 draws within 20 % (the sd's error ≈ 1/√(2·288) ≈ 4 %)
    assert abs(kernel.std() * np.sqrt(3 * fan_in) - 1) < 0.2, name


def test_conv3x3_is_flax_conv_with_the_same_parameters():
  """`models.Conv3x3` (one matrix product over the 3 × 3 patches) has nn.Conv(features,
  (3, 3), padding=1)'s parameters, drawn alike, and its output to float64 rounding: both
  sum the same 9·C products and the bias in another order, each within γ_{9C+1} times the
  same sum of absolute values (|x| * |k| + |b|) of the exact one, γ_k = k·u/(1 − k·u),
  u = 2⁻⁵³, so they differ by at most twice that."""
  import flax.linen as nn   # noqa: PLC0415
  init = dict(kernel_init=nn.initializers.normal(1.0), bias_init=nn.initializers.normal(1.0))
  with jax.enable_x64(True):
    ours = models.Conv3x3(5, **init)
    flax_conv = nn.Conv(5, (3, 3), padding=1, param_dtype=jnp.float64, **init)
    x = jax.random.normal(jax.random.key(1), (2, 6, 7, 4), jnp.float64)
    theta = ours.init(jax.random.key(0), x)
    reference = flax_conv.init(jax.random.key(0), x)
    assert jax.tree.structure(theta) == jax.tree.structure(reference)
    for a, b in zip(jax.tree.leaves(theta), jax.tree.leaves(reference)):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    got, want, absolute = (np.asarray(a) for a in (
        ours.apply(theta, x), flax_conv.apply(theta, x),
        flax_conv.apply(jax.tree.map(jnp.abs, theta), jnp.abs(x))))
  u, k = np.finfo(np.float64).eps / 2, 9 * 4 + 1
  assert np.all(np.abs(got - want) <= 2 * k * u / (1 - k * u) * absolute)


@pytest.mark.parametrize("pool", [True, "max"])
def test_relu_cnn_without_later_biases_is_positively_homogeneous(pool):
  """Scaling one later layer by c > 0 scales Φ by c (ReLU, average and max pooling commute
  with positive scaling; no bias after the first layer): float64, to 1e-12 relative."""
  net = _net(pool=pool)
  with jax.enable_x64(True):
    theta = models.init_params(net, jax.random.key(1), (16, 16, 3), jnp.float64)
    x = jax.random.uniform(jax.random.key(2), (5, 16, 16, 3), jnp.float64)
    scaled = jax.tree_util.tree_map(lambda a: a, theta)
    scaled["conv_1"] = {"kernel": 3.0 * theta["conv_1"]["kernel"]}
    phi = net.apply({"params": theta}, x)
    np.testing.assert_allclose(net.apply({"params": scaled}, x), 3.0 * phi, rtol=1e-12)


def test_max_pooling_takes_the_largest_of_each_2x2_block():
  """`models.ConvNet(pool="max")`'s pooling is PyTorch's MaxPool2d(2): each output the
  largest of its 2 × 2 block (no arithmetic: exact)."""
  h = jax.random.normal(jax.random.key(0), (2, 6, 4, 3))
  blocks = np.asarray(h).reshape(2, 3, 2, 2, 2, 3)
  np.testing.assert_array_equal(models.POOLINGS["max"](h), blocks.max(axis=(2, 4)))
  np.testing.assert_array_equal(models.POOLINGS["average"](h),
                                models.POOLINGS[True](h))
  with pytest.raises(ValueError, match="unknown pool 'median'"):
    _net(pool="median").init(jax.random.key(0), jnp.zeros((1, 16, 16, 3)))


def _kkt_reference(model, params, images, lambdas, labels):
  """DecoReco's binary KKT residual ||θ − (1/m) Σ_j λ_j y_j ∇θΦ(x_j)||² with one
  jax.grad per candidate, summed in a Python loop (`decoreco.stationarity_residual` takes
  one VJP)."""
  total = params
  for j in range(images.shape[0]):
    g = jax.grad(lambda p, j=j: labels[j] * model.apply({"params": p}, images[j:j + 1])[0])(
        params)
    total = jax.tree.map(lambda t, gj, j=j: t - lambdas[j] / images.shape[0] * gj, total, g)
  return sum(jnp.sum(t ** 2) for t in jax.tree.leaves(total))


@pytest.mark.parametrize("victim_kind", ["cnn", "sequential"])
def test_max_pooled_kkt_term_in_both_autodiff_orders_matches_per_sample_gradients(
    x64, victim_kind):
  """DecoReco's loss on a max-pooled CNN (`models.ConvNet(pool="max")`, and a LeNet-style
  `models.Sequential` as read from ONNX: 5 × 5 conv with padding 2, max pooling, 3 × 3
  conv, average pooling, two linear layers), in both `decoreco.AUTODIFF_ORDERS`: value and
  ∇(x, λ) equal the per-sample reference's (`_kkt_reference` plus the same prior), on the
  ReLU the attack sees (derivative sigmoid(αz)). Tolerance 1e-10 relative, as
  tests/test_decoreco.py argues for the CNN: the same float64 sums over at most a few
  hundred terms in another order, ~√300·ε ≈ 4e-15 relative; a wrong or missing term (the
  max's routing of the gradient, a flipped kernel) is an O(0.1–1) error."""
  from trdr.attacks import decoreco   # noqa: PLC0415
  alpha, prior = 20.0, dict(x_min=-1.0, x_max=1.0, lambda_weight=5.0)
  relu = decoreco.relu_sigmoid_backward(alpha)
  if victim_kind == "cnn":
    model = models.ConvNet(channels=(4, 5), pool="max", first_scale=0.5, all_biases=True)
  else:
    model = models.Sequential(layers=(
        "conv out=4 kernel=5,5 stride=1,1 pad=2,2,2,2 bias=1", "relu",
        "maxpool kernel=2,2 stride=2,2 pad=0,0,0,0",
        "conv out=5 kernel=3,3 stride=1,1 pad=1,1,1,1 bias=0", "relu",
        "avgpool kernel=2,2 stride=2,2 pad=0,0,0,0 count_pad=1", "flatten",
        "dense out=6 bias=0", "relu", "dense out=1 bias=0"),
        input_shift=(0.5,), input_scale=(0.25, 0.5, 1.0))
  params = models.init_params(model, jax.random.key(1), (8, 8, 3), jnp.float64)
  rng = np.random.default_rng(1)
  images = jnp.asarray(0.8 * rng.normal(size=(4, 8, 8, 3)))
  lambdas = jnp.asarray(rng.uniform(-0.1, 1.0, size=4))
  labels = jnp.asarray([-1.0, -1.0, 1.0, 1.0])
  attacked = model.clone(activation=relu)

  def reference(x, lam):
    return (_kkt_reference(attacked, params, x, lam, labels)
            + decoreco.prior_penalty(x, lam, lambda_min=0.05, **prior))

  expected, (rx, rl) = jax.jit(jax.value_and_grad(reference, argnums=(0, 1)))(images, lambdas)
  assert float(decoreco.prior_penalty(images, lambdas, lambda_min=0.05, **prior)) > 0
  for order in decoreco.AUTODIFF_ORDERS:
    value, (gx, gl) = jax.jit(decoreco.autodiff_loss_and_grad(
        model, params, labels, order=order, **prior))(images, lambdas, jnp.asarray(alpha),
                                                      jnp.asarray(0.05))
    assert abs(float(value - expected)) < 1e-10 * abs(float(expected)), order
    for ours, theirs in ((gx, rx), (gl, rl)):
      assert float(jnp.linalg.norm(ours - theirs)) < 1e-10 * float(jnp.linalg.norm(theirs))


def test_bad_settings_name_what_is_wrong():
  x = jnp.zeros((1, 30, 30, 3))
  with pytest.raises(ValueError, match="do not pool"):
    _net().init(jax.random.key(0), x)
  with pytest.raises(ValueError, match="channels"):
    _net(channels=()).init(jax.random.key(0), jnp.zeros((1, 32, 32, 3)))


@pytest.mark.slow  # a DecoReco run
def _victim(seed=0, channels=(4, 8), shape=(16, 16, 3)):
  from trdr.victim import cache   # noqa: PLC0415
  import ml_collections   # noqa: PLC0415
  config = ml_collections.ConfigDict(dict(arch="cnn", channels=channels, pool=True,
                                          activation="relu", all_biases=False,
                                          num_outputs=1, later_init="pytorch"))
  model = models.build_model(config)
  with jax.enable_x64(True):
    theta = models.init_params(model, jax.random.key(seed), shape, jnp.float64)
  return cache.Victim(model, theta, config, {"config": {"image_shape": list(shape)}})


@pytest.mark.parametrize("ext", [".npz", ".pth"])
def test_a_cnn_theta_star_written_and_read_back_is_bitwise_the_same(tmp_path, ext):
  """`pretrained.export` of a CNN θ* (Flax names in .npz; a PyTorch state_dict, OIHW convs
  and the head over NCHW-flattened features, in .pth) and `layers` / `architecture` /
  `params` read it back to the same arrays and the same architecture."""
  import ml_collections   # noqa: PLC0415
  from trdr.victim import pretrained   # noqa: PLC0415
  if ext == ".pth":
    pytest.importorskip("torch")
  target = _victim()
  path = pretrained.export(target, str(tmp_path / f"theta{ext}"))
  found = pretrained.layers(pretrained.read(path), (16, 16, 3))
  arch = pretrained.architecture(found, ml_collections.ConfigDict(
      {"arch": "haim_mlp", "widths": (1000, 1000), "activation": "relu"}))
  assert arch.arch == "cnn" and tuple(arch.channels) == (4, 8) and arch.pool
  assert "widths" not in arch
  with jax.enable_x64(True):
    back = pretrained.params(found, arch, jnp.float64)
  assert jax.tree.structure(back) == jax.tree.structure(target.params)
  for a, b in zip(jax.tree.leaves(target.params), jax.tree.leaves(back)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("pooling", ["average", "max"])
def test_a_pytorch_cnn_gives_pytorch_s_phi(pooling):
  """A PyTorch CNN of trdr's shape (Conv2d 3×3 padding 1, ReLU, avg_pool2d or max_pool2d
  2, Linear on x.flatten(1)) read through its state_dict, its pooling stated
  (``victim.file``): trdr's Φ equals PyTorch's to float64 rounding. (A max is exact: the
  same bound holds.) Both evaluate the same sums in another order; each output's forward error is
  at most γ_m times the same network evaluated on |θ| and |x| (every term positive: the
  sum of the absolute terms), m ≤ 1,000 the longest chain of additions (27 + 36 terms of
  the convs, 4 + 4 of the poolings, 128 of the head), γ_m = m·u/(1 − m·u), u = 2⁻⁵³,
  twice (one error each side)."""
  torch = pytest.importorskip("torch")
  import io   # noqa: PLC0415
  from trdr.victim import pretrained   # noqa: PLC0415
  import ml_collections   # noqa: PLC0415

  class Net(torch.nn.Module):
    def __init__(self):
      super().__init__()
      self.layers = torch.nn.ModuleList([
          torch.nn.Conv2d(3, 4, 3, padding=1, dtype=torch.float64),
          torch.nn.Conv2d(4, 8, 3, padding=1, bias=False, dtype=torch.float64),
          torch.nn.Linear(8 * 4 * 4, 1, bias=False, dtype=torch.float64)])

    def forward(self, x):
      pool = getattr(torch.nn.functional, {"average": "avg", "max": "max"}[pooling] + "_pool2d")
      h = pool(torch.relu(self.layers[0](x)), 2)
      h = pool(torch.relu(self.layers[1](h)), 2)
      return self.layers[2](h.flatten(1))[:, 0]

  torch.manual_seed(0)
  net = Net()
  buffer = io.BytesIO()   # saved and read as a user's .pth is
  torch.save(net.state_dict(), buffer)
  buffer.seek(0)
  arrays = {k: v.numpy() for k, v in torch.load(buffer).items()}
  found = pretrained.layers(arrays, (16, 16, 3))
  victim_config = ml_collections.ConfigDict({"arch": "cnn", "activation": "relu", "file": {
      "pooling": pooling, "activation": "relu", "padding": 1}})
  arch = pretrained.stated(found, pretrained.architecture(found, victim_config), (16, 16, 3))
  assert arch.pool == {"average": True, "max": "max"}[pooling]
  x = np.random.default_rng(0).random((3, 16, 16, 3))
  model = models.build_model(arch)
  with jax.enable_x64(True):
    theta = pretrained.params(found, arch, jnp.float64)
    ours = np.asarray(model.apply({"params": theta}, jnp.asarray(x)))
    absolute = np.asarray(model.apply({"params": jax.tree.map(jnp.abs, theta)},
                                      jnp.asarray(x)))
  theirs = net(torch.from_numpy(x.transpose(0, 3, 1, 2).copy())).detach().numpy()
  u = np.finfo(np.float64).eps / 2
  gamma = 1000 * u / (1 - 1000 * u)
  assert np.all(np.abs(ours - theirs) <= 2 * gamma * absolute), (ours - theirs, absolute)


@pytest.mark.parametrize("arrays, words", [
    ({"c.weight": np.zeros((4, 3, 3, 3)), "bn.weight": np.ones(4), "bn.bias": np.zeros(4),
      "bn.running_mean": np.zeros(4), "bn.running_var": np.ones(4),
      "fc.weight": np.zeros((1, 1024))}, "layer 'bn' is a BatchNorm layer"),
    ({"c.weight": np.zeros((4, 3, 5, 5)), "fc.weight": np.zeros((1, 1024))},
     "is a 5 × 5 convolution"),
    ({"a.weight": np.zeros((4, 768)), "b.weight": np.zeros((4, 4, 3, 3))},
     "a convolution after a linear layer"),
    ({"c.weight": np.zeros((4, 3, 3, 3)), "fc.weight": np.zeros((1, 100))},
     "the convolutions give 1024 features without pooling and 256 with")])
def test_an_unsupported_layer_is_one_error_naming_it(arrays, words):
  from trdr.victim import pretrained   # noqa: PLC0415
  with pytest.raises(ValueError, match="trdr") as raised:
    pretrained.layers(arrays, (16, 16, 3))
  assert words in str(raised.value)


@pytest.mark.slow  # a bilevel landscape run
def test_bilevel_attack_runs_on_a_cnn_and_reports_its_lower_level(tmp_path):
  """configs/bilevel_cnn.py:smoke end to end: θ* by L-BFGS to ||∇θE|| < victim.tol, every
  outer step's ||∇θE(θ(x))|| in summary.json, and the ground-truth start a fixed point."""
  from trdr import experiment   # noqa: PLC0415
  from trdr.attacks import init as inits   # noqa: PLC0415
  from trdr.configs import bilevel_cnn   # noqa: PLC0415
  from trdr.runtime import files   # noqa: PLC0415
  config = bilevel_cnn.get_config("smoke")
  config.attack.steps, config.attack.log_every = 5, 5
  experiment.run(config, str(tmp_path), "landscape")
  summary = files.read_json(tmp_path / experiment.SUMMARY_FILE)
  assert summary["victim"]["grad_norm"] < config.victim.tol < config.attack.lower_level.tol
  lower = summary["lower_level"]
  assert {"grad_norm_max", "grad_norm_median", "grad_norm_final_max",
          "fraction_converged", "iters_mean", "iters_max"} <= set(lower)
  # Each solve is warm-started from the previous outer iterate's θ(x), one Adam step of
  # at most lr = 1e-2 per pixel away: most solves reach tol within max_iter (a stall
  # shows in the fraction, which the run warns about, not as a failure here).
  assert lower["grad_norm_median"] < config.attack.lower_level.tol
  assert 0.5 <= lower["fraction_converged"] <= 1.0
  records = files.read_json(tmp_path / experiment.LANDSCAPE_FILE)
  truth = records[inits.pure_index(records, "ground_truth")]
  noise = records[inits.pure_index(records, "noise")]
  # At x_GT, θ* meets ||∇θE|| < victim.tol = lower_level.tol / 10 (recomputed in another
  # program to float32 rounding, ~1e-6 relative: still below lower_level.tol), so the
  # lower level (started at θ*) takes no step, l = 0, ∇θ l = 2(θ − θ*) = 0 and Adam's
  # update of a zero gradient is exactly 0: the training images stay (SSIM 1 up to float32
  # rounding of the SSIM's local means, ~1e-6; any Adam step would move every pixel by up
  # to lr = 1e-2, whatever the gradient). A noise start that stayed noise has SSIM to the
  # training set near 0 (the README's 0.05 for the affine victim) and to its noise near 1;
  # one pulled onto the training set not.
  assert truth["lower_level_iters_mean"] == 0 and truth["upper_loss"] == 0.0
  assert truth["ssim_to_train"] > 1 - 1e-4
  assert noise["ssim_to_train"] < 0.3 < noise["ssim_to_noise"]


@pytest.mark.slow  # compiles the CNN's lower level, the attack's step and a dense Hessian
def test_bilevel_hypergradient_on_a_cnn_matches_a_finite_difference(x64):
  """The attack's own step (`trdr.attacks.bilevel.build`, a plain gradient step at lr 1, so
  x − x' = ∇x l) against the central difference of l(x) = ||θ* − θ(x)||² along one random
  unit direction v, on a softplus CNN in float64 (eq. 7 needs E twice differentiable:
  softplus, not ReLU). Both lower levels are warm-started from θ*, so they follow the same
  local minimum of the non-convex E."""
  import functools   # noqa: PLC0415

  import ml_collections   # noqa: PLC0415
  from jax.flatten_util import ravel_pytree   # noqa: PLC0415

  from trdr import victim   # noqa: PLC0415
  from trdr.attacks import bilevel   # noqa: PLC0415
  from trdr.configs import bilevel_cnn   # noqa: PLC0415
  wd, shape, n = 1e-2, (8, 8, 1), 6
  rng = np.random.default_rng(0)
  labels = jnp.asarray(np.repeat([-1.0, 1.0], n // 2))
  # Noise plus, for y = +1, a left-to-right ramp: a task the CNN can learn. On pure noise
  # (or at wd 0.1) L-BFGS ends at θ* = 0, a critical point of every such network with
  # balanced labels (constant features, Φ = 0), where ∇θE does not depend on x.
  ramp = np.linspace(0.0, 0.5, shape[1])[None, None, :, None]
  x_true = jnp.asarray(0.5 * rng.uniform(size=(n, *shape))
                       + (np.asarray(labels) > 0)[:, None, None, None] * ramp)
  config = ml_collections.ConfigDict(dict(
      arch="cnn", channels=(2, 3), pool=True, activation="softplus", all_biases=True,
      num_outputs=1, later_init="pytorch", weight_decay=wd))
  model = models.build_model(config)
  energy_fn = functools.partial(victim.energy, weight_decay=wd,
                                apply_fn=lambda p, x: model.apply({"params": p}, x))
  theta0 = models.init_params(model, jax.random.key(0), shape, jnp.float64)
  theta_star, info = jax.jit(lambda p: victim.minimize_energy(
      lambda q: energy_fn(q, x_true, labels), p, max_iter=5000, tol=1e-12))(theta0)
  assert info.grad_norm < 1e-12
  assert np.all(np.sign(model.apply({"params": theta_star}, x_true)) == labels)  # not θ* = 0

  tol, fd_tol, cg_tol = 1e-12, 1e-13, 1e-14
  attack_config = bilevel_cnn.get_config("smoke").attack
  attack_config.lower_level.update(start="previous", max_iter=5000, tol=tol)
  attack_config.hypergradient.update(solve="cg", cg_tol=cg_tol, cg_maxiter=1000)
  attack_config.update(optimizer="sgd", lr=1.0, lr_schedule="constant", project=False,
                       steps=1)
  attack = bilevel.build(victim.Victim(model, theta_star, config, {}), attack_config,
                         labels, key=jax.random.key(0))
  x = jnp.clip(x_true + 0.1 * jnp.asarray(rng.normal(size=x_true.shape)), 0.0, 1.0)
  state, metrics = jax.jit(attack.step)(attack.init(x))
  grad = x - state.images                     # x' = x − 1 · ∇x l
  # The lower level reports how far it converged: ||∇θE(θ(x))|| below its tol.
  assert metrics.grad_norm < tol and metrics.num_iter > 0

  v = jnp.asarray(rng.normal(size=x.shape))
  v = v / jnp.linalg.norm(v)

  @jax.jit
  def loss(t):
    z = x + t * v
    theta, info = victim.minimize_energy(lambda p: energy_fn(p, z, labels), theta_star,
                                         max_iter=5000, tol=fd_tol)
    return bilevel.param_distance(theta_star, theta), info.grad_norm

  eps, h = 1e-4, 1e-2
  (l_plus, g_plus), (l_minus, g_minus) = loss(eps), loss(-eps)
  assert g_plus < fd_tol and g_minus < fd_tol
  fd = float((l_plus - l_minus) / (2 * eps))
  directional = float(jnp.vdot(grad, v))

  # The error budget, from this problem's own quantities. H = ∇²θθE at θ(x), dense (P = 90).
  flat, unravel = ravel_pytree(state.theta)
  hessian = jax.hessian(lambda f: energy_fn(unravel(f), x, labels))(flat)
  eigenvalues = np.linalg.eigvalsh(np.asarray(hessian))
  mu, kappa = eigenvalues[0], eigenvalues[-1] / eigenvalues[0]
  assert mu > 0   # a strict local minimum: the implicit function theorem applies there
  l_max, l_x = float(max(l_plus, l_minus)), float(metrics.upper_loss)
  u = np.finfo(np.float64).eps / 2
  # (1) Each re-solve stops at ||∇E|| < fd_tol, within fd_tol/μ of its minimiser (to first
  # order near the strict minimum), which moves l = ||θ* − θ||² by at most 2√l·fd_tol/μ
  # (plus its square); two solves, divided by 2ε.
  solves = 2 * (2 * np.sqrt(l_max) * fd_tol / mu + (fd_tol / mu) ** 2) / (2 * eps)
  # (2) l is a sum of P squares, rounded to ~P·u relative; two values, divided by 2ε.
  rounding = 2 * flat.size * u * l_max / (2 * eps)
  # (3) Truncation ε²|l‴|/6, l‴ estimated by the third central difference at h ≫ ε and
  # allowed 10× (the estimate is l‴ somewhere in [−2h, 2h], not its maximum near 0).
  third = (loss(2 * h)[0] - 2 * loss(h)[0] + 2 * loss(-h)[0] - loss(-2 * h)[0]) / (2 * h**3)
  truncation = 10 * eps**2 * abs(float(third)) / 6
  # (4) The hypergradient's own error, through |⟨Δg, v⟩| ≤ ||Δg||: θ(x) solved to tol lies
  # δ = tol/μ off, so ∇θl = 2(θ − θ*) is off by δ/√l relative; CG stops at ||r|| ≤
  # cg_tol·||b||, a relative error ≤ cg_tol·κ(H) in H⁻¹b; 10× for the second-order terms
  # (H and ∂x∇θE evaluated δ away from θ(x)).
  hyper = 10 * float(jnp.linalg.norm(grad)) * (tol / mu / np.sqrt(l_x) + cg_tol * kappa)
  bound = solves + rounding + truncation + hyper
  assert abs(fd - directional) <= bound, (fd, directional, solves, rounding, truncation,
                                          hyper)
  # The test can fail: a wrong sign or a missing term moves the derivative by O(itself).
  assert abs(directional) > 100 * bound, (directional, bound)


@pytest.mark.slow  # trains in PyTorch, then a DecoReco run
def test_a_pytorch_trained_cnn_loads_with_torchs_phi_and_decoreco_runs_on_it(tmp_path):
  """Acceptance 1 of the CNN issue, end to end: a CNN of trdr's shape trained in PyTorch
  (float32, full-batch gradient descent on the logistic loss of configs/decoreco_cnn.py:
  smoke's training images) and saved as a user saves one (torch.save(state_dict)) loads
  into trdr with Φ equal to PyTorch's to float32 rounding, and DecoReco attacks it at
  :smoke with the architecture read from the file.

  The rounding bound (`_float32_forward_error`): each side's Φ is within a layer-by-layer
  forward-error bound of the exact Φ of the same θ and x, whatever order (or convolution
  algorithm) it sums in, so the two differ by at most twice that. It is far below |Φ|,
  so a wrong layout (a flatten order, a transposed kernel) would fail it."""
  torch = pytest.importorskip("torch")
  from trdr import data, experiment   # noqa: PLC0415
  from trdr.runtime import files   # noqa: PLC0415
  from trdr.victim import pretrained   # noqa: PLC0415

  class Net(torch.nn.Module):
    def __init__(self):
      super().__init__()
      self.c0 = torch.nn.Conv2d(3, 4, 3, padding=1)
      self.c1 = torch.nn.Conv2d(4, 8, 3, padding=1, bias=False)
      self.fc = torch.nn.Linear(8 * 8 * 8, 1, bias=False)

    def forward(self, x):
      h = torch.nn.functional.avg_pool2d(torch.relu(self.c0(x)), 2)
      h = torch.nn.functional.avg_pool2d(torch.relu(self.c1(h)), 2)
      return self.fc(h.flatten(1))[:, 0]

  config = decoreco_cnn.get_config("smoke")
  task = data.make_task(config.data)
  to_torch = lambda a: torch.from_numpy(np.ascontiguousarray(a.transpose(0, 3, 1, 2),
                                                             np.float32))
  x, y = to_torch(task.train_images), torch.from_numpy(task.train_labels.astype(np.float32))
  torch.manual_seed(0)
  net = Net()
  optimizer = torch.optim.SGD(net.parameters(), lr=0.1)   # 0.5 kills every ReLU here
  with torch.no_grad():
    before = torch.nn.functional.softplus(-y * net(x)).mean().item()
  for _ in range(50):
    optimizer.zero_grad()
    torch.nn.functional.softplus(-y * net(x)).mean().backward()
    optimizer.step()
  with torch.no_grad():
    after = torch.nn.functional.softplus(-y * net(x)).mean().item()
    theirs = net(to_torch(task.test_images)).numpy()
  assert after < before   # trained, not the initialisation
  torch.save(net.state_dict(), tmp_path / "model.pth")

  config.victim.load = str(tmp_path / "model.pth")
  config.victim.file.update(pooling="average", activation="relu", padding=1)  # not in a .pth
  resolved = pretrained.resolve(config, task.train_images.shape[1:])
  assert resolved.victim.arch == "cnn" and tuple(resolved.victim.channels) == (4, 8)
  with jax.enable_x64(True):   # the :smoke config's float64
    loaded = pretrained.load(resolved, task)
    theta = jax.tree.map(lambda t: np.asarray(t, np.float32), loaded.params)
  images = jnp.asarray(task.test_images, jnp.float32)
  ours = np.asarray(loaded.model.apply({"params": theta}, images))
  bound = _float32_forward_error(theta, np.asarray(images))
  assert np.all(np.abs(ours - theirs) <= 2 * bound), (np.abs(ours - theirs), bound)
  assert np.max(2 * bound) < 0.01 * np.max(np.abs(theirs))   # the check can fail

  config.attack.steps, config.attack.log_every = 20, 20
  experiment.run(config, str(tmp_path / "run"), "attack")
  summary = files.read_json(tmp_path / "run" / experiment.SUMMARY_FILE)
  assert summary["candidates"] == 2 * len(task.train_images)
  assert np.isfinite(summary["final_loss"])
  premise = summary["kkt_premise"]   # fitted on every tensor of the CNN's θ*
  assert set(premise["relative"]) == {"conv_0/bias", "conv_0/kernel", "conv_1/kernel",
                                      "output/kernel"}
  assert premise["first_layer"].startswith("conv_0") and premise["n"] == len(x)
  predicted = np.where(net(x).detach().numpy() >= 0, 1.0, -1.0)
  # the report's accuracy: a mean of n = 10 booleans, k/n exact in float32
  assert round(summary["victim"]["train_accuracy"] * len(x)) == int(
      np.sum(predicted == task.train_labels))


def _float32_forward_error(theta, images):
  """A bound on |Φ̂ − Φ| of the (4, 8)-channel ConvNet of `test_a_pytorch_trained_cnn_...`,
  Φ̂ computed in float32 in any summation order, to first order in u = 2⁻²⁴ (Higham,
  *Accuracy and Stability of Numerical Algorithms*, §3.1): a sum of k terms is within
  γ_k = k·u/(1 − k·u) times the sum of their magnitudes, and an error e in a layer's input
  reaches its output as at most |W| e (ReLU is 1-Lipschitz, the poolings average: a sum of
  4, then × 1/4, a power of two). Layer by layer, with the actual activations (float64):
  conv_0 (27 products and a bias), ReLU, pooling, conv_1 (36), ReLU, pooling, head (512)."""
  gamma = lambda k: k * 2.0 ** -24 / (1 - k * 2.0 ** -24)
  conv = lambda h, k: jax.lax.conv_general_dilated(
      h, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
      precision=jax.lax.Precision.HIGHEST)
  pool = lambda h: h.reshape(h.shape[0], h.shape[1] // 2, 2, h.shape[2] // 2, 2,
                             h.shape[3]).mean(axis=(2, 4))
  with jax.enable_x64(True):
    t = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), theta)
    h = jnp.asarray(images, jnp.float64)
    k0, b0, k1 = t["conv_0"]["kernel"], t["conv_0"]["bias"], t["conv_1"]["kernel"]
    w = t["output"]["kernel"]
    z = conv(h, k0) + b0
    error = gamma(28) * (conv(jnp.abs(h), jnp.abs(k0)) + jnp.abs(b0))
    h = pool(jax.nn.relu(z))
    error = pool(error) + gamma(4) * h
    z = conv(h, k1)
    error = conv(error, jnp.abs(k1)) + gamma(36) * conv(h, jnp.abs(k1))
    h = pool(jax.nn.relu(z)).reshape(h.shape[0], -1)
    error = pool(error).reshape(h.shape[0], -1) + gamma(4) * h
    out = jnp.abs(w[:, 0]) @ error.T + gamma(512) * (jnp.abs(w[:, 0]) @ h.T)
    return np.asarray(out)
