"""Section: 3 × 3 convolutions inside a loop, `trdr.models.Conv3x3` vs flax's ``nn.Conv``.

What `trdr.models.Conv3x3` is for, measured: the victim of ``config`` (configs/decoreco_cnn.py
:cpu: `trdr.models.ConvNet`, channels (16, 32), 2 × 2 average pooling, 32 × 32 × 3 images;
θ as initialised: the times do not depend on training) and `flax_twin`, the same network
with each `Conv3x3` replaced by ``nn.Conv(features, (3, 3), padding=1)``, applied to the SAME
θ (Conv3x3 has nn.Conv's parameter names and shapes, which is checked). m candidates drawn
as DecoReco starts them (N(0, σ²), σ = attack.init_scale), the victim as the attack sees it
(ReLU with derivative sigmoid(αz)). Two computations, each once at the top level of a
jitted program and ``steps`` times inside `jax.lax.scan` (the loop every attack runs its
steps in):

  * ∇x of the logistic loss mean_j softplus(−y_j Φ(x_j)), a forward and a backward pass
    (in the scan, a gradient step x ← x − η ∇x);
  * one DecoReco iteration, `trdr.attacks.decoreco.attack_step` with its autodiff loss (∇x
    of a vector-Jacobian product in θ; in the scan, `decoreco.run_steps`, the attack's own
    code path).

and then, on the Conv3x3 network, the DecoReco iteration in each of
`trdr.attacks.decoreco.AUTODIFF_ORDERS` (reverse mode twice; a VJP in x of a JVP in θ, the
CNN config's `attack.autodiff_order`), inside `lax.scan`, with the ratio of the two.

Before anything is timed, both networks' logits, their ∇x and the DecoReco loss and
gradients are checked to agree to the rounding of the dtype (and so are the two orders'
loss and gradients) (`check_agreement`: max |Δ| at
most `RTOL_EPS` ε times the largest entry; for the logits, which cancel, times the largest
output of the network with |θ| on |x|, which bounds their sums' terms; a wrong convolution
shows in the gradients); a larger difference raises. Then all calls are
timed alternately (`common.timed_alternately`: load hits both alike), each after one call
that compiles; the table gives the median milliseconds per step of each network and the
ratio nn.Conv / Conv3x3.
"""

import functools
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from benchmarks import common
from trdr import models, victim
from trdr.attacks import decoreco, kkt_cnn

# Agreement gate, in units of the dtype's ε times the scale of `check_agreement`: the two
# networks sum the same products in other orders (27 to 288 per convolution output, 2048 in
# the head, and a backward pass through each), whose rounding errors grow like √N · ε; a
# wrong convolution (a flipped or transposed kernel, a shifted window) is off by O(1).
RTOL_EPS = 256

SHAPE = (32, 32, 3)
STEP_SIZE = 1e-3        # η of the scanned gradient steps on the logistic loss


def flax_twin(model: models.ConvNet, dtype=jnp.float32) -> models.ConvNet:
  """``model`` with flax's ``nn.Conv(features, (3, 3), padding=1)`` (XLA's convolution, its
  parameters in ``dtype``) in place of each `trdr.models.Conv3x3`: the same layers, names
  and parameter shapes, so ConvNet's θ applies as it is."""
  return model.clone(conv=functools.partial(nn.Conv, kernel_size=(3, 3), padding=1,
                                            param_dtype=dtype))


def check_agreement(pairs: dict, dtype) -> dict[str, float]:
  """max |Δ| / scale of each pair of ``pairs``, name -> (Conv3x3's array, nn.Conv's array,
  scale): the magnitude the rounding errors are relative to, the largest entry of Conv3x3's
  where it is None.

  Raises:
    ValueError: a pair differs by more than `RTOL_EPS` ε of ``dtype`` times its scale, or
      is not finite.
  """
  return common.relative_differences(pairs, dtype, RTOL_EPS, "Conv3x3 and nn.Conv",
                                     "the same network")


def _decoreco_calls(net: nn.Module, params, config: ml_collections.ConfigDict, images,
                    lambdas, labels, steps: int, dtype):
  """({where: call} of one DecoReco iteration, "top" and ``steps`` of them in "scan"; {name:
  array} to compare: the loss and its gradients at the start), with ``config``'s attack."""
  a = config.attack
  loss_and_grad = decoreco.make_loss_and_grad(
      victim.Victim(net, params, config.victim, {}), a, labels)
  hparams = decoreco.Hyperparameters(*(jnp.asarray(v, dtype) for v in (
      a.init_scale, a.lr, a.lambda_min, a.alpha)))
  state = decoreco.init_state(images, lambdas)
  settings = dict(loss_and_grad=loss_and_grad, lambda_lr=a.lambda_lr, momentum=a.momentum)
  # The settings are arguments, as the attack's runner passes them (a state's part), not
  # constants of the program.
  top_step = jax.jit(lambda s, h: decoreco.attack_step(s, h, **settings))
  scan_step = jax.jit(lambda s, h: decoreco.run_steps(s, h, steps, **settings))
  loss, (dx, dl) = jax.jit(loss_and_grad)(images, lambdas, hparams.alpha, hparams.lambda_min)
  return ({"top": lambda: top_step(state, hparams), "scan": lambda: scan_step(state, hparams)},
          {"DecoReco loss": loss, "DecoReco ∇x": dx, "DecoReco ∇λ": dl})


def _autodiff(config: ml_collections.ConfigDict, order: str | None = None
              ) -> ml_collections.ConfigDict:
  """``config`` with the attack's loss by autodiff (attack.fused False: not `kkt_cnn`), in
  ``order`` (None: the config's)."""
  c = config.copy_and_resolve_references()
  c.attack.fused = False
  if order is not None:
    c.attack.autodiff_order = order
  return c


def _calls(net: nn.Module, params, config: ml_collections.ConfigDict, images, lambdas,
           labels, steps: int, dtype):
  """({(computation, where): call}, {name: array} to compare) of one network, the DecoReco
  iteration by autodiff (what the convolution's implementation changes)."""
  config = _autodiff(config)
  attack_net = net.clone(activation=decoreco.relu_sigmoid_backward(config.attack.alpha))
  logits = lambda x: attack_net.apply({"params": params}, x)
  grad_x = jax.grad(lambda x: jnp.mean(jax.nn.softplus(-labels * logits(x))))
  top_grad = jax.jit(grad_x)
  scan_grad = jax.jit(lambda x: jax.lax.scan(
      lambda x, _: (x - STEP_SIZE * grad_x(x), None), x, None, length=steps)[0])
  steps_calls, compared = _decoreco_calls(net, params, config, images, lambdas, labels,
                                          steps, dtype)
  calls = {("grad", "top"): lambda: top_grad(images),
           ("grad", "scan"): lambda: scan_grad(images),
           **{("decoreco", where): call for where, call in steps_calls.items()}}
  compared = {"logits": jax.jit(logits)(images), "∇x logistic loss": top_grad(images),
              **compared}
  return calls, compared


def _order_calls(net: nn.Module, params, config: ml_collections.ConfigDict, images, lambdas,
                 labels, steps: int, dtype, order: str):
  """(call of ``steps`` scanned DecoReco iterations with autodiff in ``order``, {name: array}
  to compare: its loss and gradients at the start)."""
  calls, compared = _decoreco_calls(net, params, _autodiff(config, order), images, lambdas,
                                    labels, steps, dtype)
  return calls["scan"], compared


def _scanned(fn, x, steps: int):
  """A jitted call of ``steps`` evaluations of ``fn`` (x -> array) inside `lax.scan`, each
  at the last one's x moved by `STEP_SIZE` times its output's mean (so none is hoisted
  out of the loop)."""
  body = lambda x, _: (x + STEP_SIZE * jnp.mean(fn(x)), None)
  run = jax.jit(lambda x: jax.lax.scan(body, x, None, length=steps)[0])
  return lambda: run(x)


def _profile_calls(model: nn.Module, params, config: ml_collections.ConfigDict, images,
                   lambdas, labels, steps: int) -> dict:
  """{part: call of ``steps`` of it inside `lax.scan`}: the parts of the CNN's DecoReco
  step (`PROFILE`), each on the Conv3x3 network as the attack sees it."""
  attack_net = model.clone(activation=decoreco.relu_sigmoid_backward(config.attack.alpha))
  logits = lambda x: attack_net.apply({"params": params}, x)
  residual = lambda x: decoreco.stationarity_residual(
      params, x, lambdas, labels, apply_fn=lambda p, y: attack_net.apply({"params": p}, y))
  first = config.victim.channels[0]
  half = (images.shape[0], images.shape[1] // 2, images.shape[2] // 2, first)
  feature_map = jnp.full(half, 0.1, images.dtype)
  return {"forward": _scanned(logits, images, steps),
          "residual": _scanned(residual, images, steps),
          "patches_0": _scanned(kkt_cnn._patches, images, steps),
          "patches_1": _scanned(kkt_cnn._patches, feature_map, steps)}


# The parts of the CNN's step the profile times, inside `lax.scan`: key -> what.
PROFILE = {
    "forward": "the victim's forward pass Φ(x) (logits)",
    "residual": "the KKT residual's value ||θ − G(x)||² (forward + VJP in θ)",
    "autodiff": "the autodiff step (the residual, then ∇x as a VJP in x of a JVP in θ)",
    "fused": "the fused step (`kkt_cnn`: the attack's path)",
    "patches_0": "the 3 × 3 patches of x (one of `Conv3x3`'s im2col copies, layer 0)",
    "patches_1": "the 3 × 3 patches of a layer-1 input map (the same, layer 1)",
}


def run(config: ml_collections.ConfigDict, steps: int, repeats: int, candidates: int = 0,
        dtype=jnp.float32, *, mlp_config: ml_collections.ConfigDict) -> None:
  """Prints the section for the CNN victim of the DecoReco ``config``: ``candidates``
  images (0: the config's m = candidates_per_image · 2 · n_per_class), ``steps`` scanned
  steps, the median of ``repeats`` timed rounds, in ``dtype`` (float32 or float64, or its
  name); beside it the MLP victim of ``mlp_config`` (a DecoReco config with a Haim MLP, the
  same n) at the same m and dtype, its DecoReco step as the attack runs it (`kkt_mlp`).

  Raises:
    ValueError: ``config``'s victim is no CNN, ``mlp_config``'s no Haim MLP or of another
      n, or two computations that should agree do not (`check_agreement`).
  """
  dtype = jnp.dtype(dtype)
  if config.victim.arch != "cnn":
    raise ValueError(f"the conv section needs a CNN victim (victim.arch 'cnn'), got "
                     f"{config.victim.arch!r}")
  if mlp_config.victim.arch != "haim_mlp" or (
      mlp_config.data.n_per_class != config.data.n_per_class):
    raise ValueError(f"the conv section's MLP config needs a Haim MLP victim at the CNN's n "
                     f"(n_per_class {config.data.n_per_class}), got {mlp_config.victim.arch!r}"
                     f" at n_per_class {mlp_config.data.n_per_class}")
  with common.x64(dtype == jnp.float64):
    model = models.build_model(config.victim)
    twin = flax_twin(model, dtype)
    params = models.init_params(model, jax.random.key(0), SHAPE, dtype)
    layout = lambda tree: jax.tree.map(lambda t: (t.shape, t.dtype), tree)
    if layout(models.init_params(twin, jax.random.key(0), SHAPE, dtype)) != layout(params):
      raise ValueError("nn.Conv's ConvNet parameters are not ConvNet's (names, shapes, dtypes): "
                       f"{layout(params)}")
    m = candidates or config.attack.candidates_per_image * 2 * config.data.n_per_class
    images, lambdas, labels = common.decoreco_candidates(
        jax.random.key(1), m, SHAPE, config.attack.init_scale, dtype)
    nets = {"Conv3x3": model, "nn.Conv": twin}
    built = {k: _calls(net, params, config, images, lambdas, labels, steps, dtype)
             for k, net in nets.items()}
    # The logits cancel, so rounding is large relative to them: their scale is that of
    # the sums' terms, bounded by the network with |θ| on |x| (no pre-activation < 0).
    magnitude = jax.jit(lambda x: model.apply({"params": jax.tree.map(jnp.abs, params)},
                                              jnp.abs(x)))(images)
    scales = {"logits": jnp.max(jnp.abs(magnitude))}
    differences = check_agreement(
        {name: (ours, built["nn.Conv"][1][name], scales.get(name))
         for name, ours in built["Conv3x3"][1].items()}, dtype)
    calls = {(net, *key): call for net, (net_calls, _) in built.items()
             for key, call in net_calls.items()}
    ordered = {order: _order_calls(model, params, config, images, lambdas, labels, steps,
                                   dtype, order) for order in decoreco.AUTODIFF_ORDERS}
    first, second = decoreco.AUTODIFF_ORDERS
    differences |= {f"{name} ({second} vs {first})": d for name, d in check_agreement(
        {name: (ordered[first][1][name], ordered[second][1][name], None)
         for name in ordered[first][1]}, dtype).items()}
    calls |= {("order", order): call for order, (call, _) in ordered.items()}
    # The attack's step as it runs: the CNN's by kkt_cnn (checked against autodiff in the
    # config's order), the MLP's by kkt_mlp, both at these m candidates.
    fused_calls, fused = _decoreco_calls(model, params, config, images, lambdas, labels,
                                         steps, dtype)
    autodiff_order = config.attack.get("autodiff_order", first)
    differences |= {f"{name} (kkt_cnn vs autodiff)": d for name, d in check_agreement(
        {name: (fused[name], ordered[autodiff_order][1][name], None) for name in fused},
        dtype).items()}
    mlp = models.build_model(mlp_config.victim)
    mlp_params = models.init_params(mlp, jax.random.key(0), SHAPE, dtype)
    mlp_calls, _ = _decoreco_calls(mlp, mlp_params, mlp_config, images, lambdas, labels,
                                   steps, dtype)
    calls |= {("attack", "cnn"): fused_calls["scan"], ("attack", "mlp"): mlp_calls["scan"]}
    calls |= {("profile", part): call for part, call in _profile_calls(
        model, params, config, images, lambdas, labels, steps).items()}
    times = common.timed_alternately(calls, repeats)
  ms = {key: 1e3 * float(np.median(t)) / (
      steps if key[-1] == "scan" or key[0] in ("order", "attack", "profile") else 1)
        for key, t in times.items()}
  ms[("profile", "autodiff")] = ms[("order", autodiff_order)]
  ms[("profile", "fused")] = ms[("attack", "cnn")]
  cnn, mlp_ms, before = ms[("attack", "cnn")], ms[("attack", "mlp")], ms[("profile", "autodiff")]
  widths = "-".join(map(str, (int(np.prod(SHAPE)), *mlp_config.victim.widths, 1)))
  what = {"grad": "∇x of the logistic loss (forward + backward)",
          "decoreco": "one DecoReco iteration (`decoreco.attack_step`, autodiff)"}
  where = {"top": "top level, one call",
           "scan": f"inside `lax.scan`, {steps} steps"}
  environment = (f"backend {jax.default_backend()}, {os.cpu_count()} CPUs, load average "
                 f"{os.getloadavg()[0]:.1f}")
  print(f"\n## The CNN's DecoReco step beside the MLP's: ConvNet channels "
        f"{tuple(config.victim.channels)} (pool {config.victim.pool!r}) and Haim MLP "
        f"{widths}, n = {2 * config.data.n_per_class}, m = {m} candidates "
        f"{'×'.join(map(str, SHAPE))}, {dtype.name}, each the attack's own step "
        f"(`decoreco.run_steps`, {steps} steps inside `lax.scan`), median of {repeats} "
        f"({environment})\n")
  print("| CNN, ms / step | MLP, ms / step | CNN / MLP |\n|---:|---:|---:|")
  print(f"| {cnn:.4g} | {mlp_ms:.4g} | {cnn / mlp_ms:.2f}× |")
  print(f"\nThe CNN's step by `kkt_cnn` (the attack's path for a ReLU one-output ConvNet); "
        f"by autodiff in the config's order ({autodiff_order}), the path before it: "
        f"{before:.4g} ms / step, {before / mlp_ms:.2f}× the MLP's, {before / cnn:.2f}× "
        f"`kkt_cnn`'s.")
  print(f"\n### Where the CNN's step goes (Conv3x3, inside `lax.scan`, {steps} steps, "
        f"ms / step, timed in the same rounds)\n")
  print("| part | ms / step | / the autodiff step |\n|---|---:|---:|")
  for part, text in PROFILE.items():
    print(f"| {text} | {ms[('profile', part)]:.4g} | {ms[('profile', part)] / before:.2f} |")
  gradient = before - ms[("profile", "residual")]
  share = lambda part: ms[("profile", part)] / before
  print(f"\nOf the autodiff step, the residual's value (forward and VJP in θ) is "
        f"{share('residual'):.0%} and ∇x of it the other {gradient / before:.0%}; the forward "
        f"pass alone {share('forward'):.0%} (the MLP's whole step is {mlp_ms / before:.0%}), "
        f"the two im2col copies of a forward pass {share('patches_0') + share('patches_1'):.0%}"
        f". `kkt_cnn` computes no tangent convolutions and no kernel gradients it does not "
        f"use: {share('fused'):.0%} of the autodiff step.")
  print(f"\n## 3 × 3 convolutions at the top level and in a loop: `Conv3x3` (one matrix "
        f"product) vs flax `nn.Conv`, the same θ; ConvNet channels "
        f"{tuple(config.victim.channels)}, m = {m} candidates {'×'.join(map(str, SHAPE))}, "
        f"{dtype.name}, median of {repeats} ({environment})\n")
  print("| computation | where | Conv3x3, ms / step | nn.Conv, ms / step | "
        "nn.Conv / Conv3x3 |\n|---|---|---:|---:|---:|")
  for computation in what:
    for place in where:
      ours, theirs = ms[("Conv3x3", computation, place)], ms[("nn.Conv", computation, place)]
      print(f"| {what[computation]} | {where[place]} | {ours:.4g} | {theirs:.4g} | "
            f"{theirs / ours:.2f}× |")
  print(f"\nThe DecoReco iteration's autodiff order (`attack.autodiff_order`), Conv3x3, "
        f"inside `lax.scan`, {steps} steps:\n\n| {first}, ms / step | {second}, ms / step | "
        f"{first} / {second} |\n|---:|---:|---:|\n| {ms[('order', first)]:.4g} | "
        f"{ms[('order', second)]:.4g} | {ms[('order', first)] / ms[('order', second)]:.2f}× |")
  print("\nThe same network: max |Δ| / scale, nn.Conv vs Conv3x3 (scale: the largest "
        "|entry| of Conv3x3's, for the logits of its network with |θ| on |x|; gate "
        f"{RTOL_EPS} ε = {RTOL_EPS * float(jnp.finfo(dtype).eps):.1e}): "
        + ", ".join(f"{name} {d:.1e}" for name, d in differences.items()))
