"""Attack your own model: θ* from a PyTorch state_dict (the reference code's layout), a
NumPy .npz, a Flax msgpack or an orbax checkpoint (`trdr.victim.pretrained`)."""

import importlib.util
import os
import subprocess
import sys

import flax.serialization
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from trdr import assets, data, experiment, models, victim
from trdr.configs import bilevel_affine, decoreco_cifar
from trdr.runtime import files, rundir
from trdr.victim import pretrained

import torch_reference  # tests/torch_reference.py

# PyTorch (the optional extra trdr[torch]) is imported by the tests that use it, not at
# collection: its import costs every xdist worker seconds, also when those tests are not run.
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="needs PyTorch: pip install '.[torch]'")
IMAGE_SHAPE = (32, 32, 3)
D = int(np.prod(IMAGE_SHAPE))


def _reference_state_dict(rng, widths=(16, 8), outputs=1, all_biases=False):
  """float64 arrays named and shaped as the Haim et al. reference MLP's state_dict:
  ``layers.k.weight`` (out, in) over NCHW-flattened images, a bias on the first layer
  (or every layer)."""
  sizes = (D, *widths, outputs)
  state = {}
  for k, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
    state[f"layers.{k}.weight"] = rng.normal(size=(n_out, n_in)) / np.sqrt(n_in)
    if k == 0 or all_biases:
      state[f"layers.{k}.bias"] = rng.normal(size=n_out)
  return state


def _reference_forward(state, images_nhwc, absolute=False):
  """The reference MLP's Φ in NumPy, on NCHW-flattened images (as PyTorch's
  x.view(N, -1) of an NCHW batch); with ``absolute``, the same net on |W|, |b|, |x|."""
  f = np.abs if absolute else (lambda a: a)
  h = f(images_nhwc.transpose(0, 3, 1, 2).reshape(len(images_nhwc), -1))
  n = len({k.rpartition(".")[0] for k in state})
  for k in range(n):
    h = h @ f(state[f"layers.{k}.weight"]).T + f(state.get(f"layers.{k}.bias", 0.0))
    if k < n - 1:
      h = np.maximum(h, 0.0)
  return h[:, 0] if h.shape[1] == 1 else h


def _config(**victim):
  config = decoreco_cifar.get_config("smoke")
  config.float64 = True
  config.victim.update(victim)
  return config


def test_reference_state_dict_gives_the_same_phi_as_the_reference_net():
  """θ* in the reference code's layout (PyTorch (out, in) weights over NCHW inputs) maps
  to trdr's (Flax (in, out) kernels over NHWC inputs): Φ(x) agrees with the reference
  forward pass on the same images, in float64.

  Error argument: both sides compute the same dot products in different orders. A dot
  product of length n in float64 is off by at most γ_n·(|a|·|b|), γ_n = n·u/(1 − n·u),
  u = 2⁻⁵³; ReLU is 1-Lipschitz, so through L layers the difference of the two
  computations is at most Σ_layers γ_{n_k} times the same net run on |W|, |b|, |x|
  (`_reference_forward(absolute=True)`). The tolerance is twice that (two computations)."""
  rng = np.random.default_rng(0)
  state = _reference_state_dict(rng)
  images = rng.uniform(-0.5, 0.5, size=(20, *IMAGE_SHAPE))
  found = pretrained.layers(state, IMAGE_SHAPE)
  cfg = pretrained.architecture(found, _config().victim)
  assert (cfg.arch, tuple(cfg.widths), cfg.num_outputs, cfg.all_biases) == (
      "haim_mlp", (16, 8), 1, False)
  with jax.enable_x64(True):
    theta = pretrained.params(found, cfg, jnp.float64)
    phi = np.asarray(models.build_model(cfg).apply({"params": theta}, jnp.asarray(images)))
  u = np.finfo(np.float64).eps / 2
  gamma = sum(n * u / (1 - n * u) for n in (D + 1, 16 + 1, 8 + 1))
  bound = 2 * gamma * _reference_forward(state, images, absolute=True)
  error = np.abs(phi - _reference_forward(state, images))
  assert np.all(error <= bound), (error.max(), bound.min())
  assert not np.allclose(phi, _reference_forward(  # the permutation matters
      {**state, "layers.0.weight": state["layers.0.weight"][:, ::-1]}, images))


def _task(n_per_class=5):
  config = data.default_data_config()
  config.n_per_class = n_per_class
  return data.make_task(config)


def test_npz_msgpack_and_orbax_load_theta_star_exactly(tmp_path):
  """trdr's own θ* written as a Flax-layout .npz, a Flax msgpack (with and without an
  outer "params") and an orbax checkpoint loads back bitwise, with its architecture."""
  config = _config()
  model = models.build_model(config.victim)
  with jax.enable_x64(True):
    theta = models.init_params(model, jax.random.key(1), IMAGE_SHAPE, jnp.float64)
  flat = {f"{layer}/{name}": np.asarray(v) for layer, p in theta.items() for name, v in
          p.items()}
  np.savez(tmp_path / "theta.npz", **flat)
  (tmp_path / "theta.msgpack").write_bytes(flax.serialization.to_bytes(theta))
  (tmp_path / "wrapped.msgpack").write_bytes(flax.serialization.to_bytes({"params": theta}))
  paths = [tmp_path / "theta.npz", tmp_path / "theta.msgpack", tmp_path / "wrapped.msgpack"]
  if importlib.util.find_spec("orbax.checkpoint"):
    import orbax.checkpoint as ocp
    ocp.PyTreeCheckpointer().save(str(tmp_path / "orbax"), jax.tree.map(np.asarray, theta))
    paths.append(tmp_path / "orbax")
  task = _task()
  for path in paths:
    config.victim.load = str(path)
    with jax.enable_x64(True):
      resolved = pretrained.resolve(config, IMAGE_SHAPE)
      loaded = pretrained.load(resolved, task)
    assert resolved.victim.to_dict() == {**config.victim.to_dict(), "load": str(path)}
    jax.tree.map(np.testing.assert_array_equal, loaded.params, theta)
    assert loaded.metadata["config"]["sha256"] == pretrained.sha256(str(path))


@pytest.mark.parametrize("arch, expected", [
    ("haim_mlp", {"arch": "haim_mlp", "widths": (16,), "all_biases": True}),
    ("one_hidden", {"arch": "one_hidden", "width": 16})])
def test_an_ambiguous_two_layer_net_takes_the_configs_architecture(arch, expected):
  state = _reference_state_dict(np.random.default_rng(0), widths=(16,), all_biases=True)
  found = pretrained.layers(state, IMAGE_SHAPE)
  victim_config = _config(arch=arch).victim
  cfg = pretrained.architecture(found, victim_config)
  assert {k: cfg[k] if k != "widths" else tuple(cfg[k]) for k in expected} == expected
  with pytest.raises(ValueError, match=r"fits \['haim_mlp', 'one_hidden'\]: set victim.arch"):
    pretrained.architecture(found, _config(arch="affine").victim)
  one_layer = pretrained.layers({"fc.weight": np.ones((1, D)), "fc.bias": np.ones(1)},
                                IMAGE_SHAPE)
  assert pretrained.architecture(one_layer, victim_config).arch == "affine"


def _bad_files(tmp_path):
  """One θ* file per mistake, and the words its error must name."""
  rng = np.random.default_rng(0)
  good = _reference_state_dict(rng)
  cases = {
      "missing_key": ({k: v for k, v in _reference_state_dict(rng, all_biases=True).items()
                       if k != "layers.1.weight"}, r"missing key 'layers.1.weight'"),
      "missing_flax_key": ({"dense_0/kernel": np.ones((D, 4)), "dense_0/bias": np.ones(4),
                            "dense_2/kernel": np.ones((4, 4)), "output/kernel": np.ones((4, 1))},
                           r"missing keys \['dense_1/kernel'\]"),
      "extra_key": ({**good, "layers.0.running_mean": np.zeros(16)},
                    r"layer 'layers.0' is a BatchNorm layer \(layers.0.running_mean\)"),
      "wrong_shape": ({**good, "layers.0.weight": good["layers.0.weight"][:, :3000]},
                      r"layers.0.weight has 3000 inputs .*expected the images' 3072 = "
                      r"32×32×3 pixels"),
      "wrong_dtype": ({**good, "layers.2.weight": np.ones((1, 8), np.int32)},
                      r"layers.2.weight has dtype int32, expected a floating-point"),
      "nan": ({**good, "layers.1.weight": np.where(np.eye(8, 16), np.nan, 1.0)},
              r"layers.1.weight holds 8 NaN/inf values"),
      "no_architecture": ({**good, "layers.1.bias": np.zeros(8)},
                          r"no victim architecture of trdr has 3 layer\(s\)"),
  }
  out = {}
  for name, (arrays, message) in cases.items():
    np.savez(tmp_path / f"{name}.npz", **arrays)
    out[name] = (tmp_path / f"{name}.npz", message)
  (tmp_path / "theta.txt").write_text("not a model")
  out["unknown_format"] = (tmp_path / "theta.txt", "unknown format")
  (tmp_path / "truncated.npz").write_bytes((tmp_path / "extra_key.npz").read_bytes()[:500])
  out["truncated"] = (tmp_path / "truncated.npz", r"cannot read .*truncated.npz")
  return out


@pytest.mark.parametrize("mistake", ["missing_key", "missing_flax_key", "extra_key",
                                     "wrong_shape", "wrong_dtype", "nan", "no_architecture",
                                     "unknown_format", "truncated"])
def test_a_theta_star_file_that_does_not_fit_is_a_named_error_before_any_write(tmp_path,
                                                                              mistake):
  path, message = _bad_files(tmp_path)[mistake]
  config = _config()
  config.data.n_per_class = 5
  config.victim.load = str(path)
  with pytest.raises(ValueError, match=message):
    experiment.run(config, str(tmp_path / "run"), "attack")
  assert not os.path.exists(tmp_path / "run")


def test_a_pth_file_without_torch_names_the_extra(tmp_path, monkeypatch):
  monkeypatch.setitem(sys.modules, "torch", None)  # as if not installed
  (tmp_path / "model.pth").write_bytes(b"\x80\x02}q\x00.")
  with pytest.raises(ModuleNotFoundError, match=r"pip install 'trdr\[torch\]'"):
    pretrained.read(str(tmp_path / "model.pth"))


def _reference_mlp(widths=(16, 8)):
  """Haim et al.'s MLP as their reference code builds it (`torch_reference.haim_mlp`),
  float64, on D inputs."""
  import torch
  return torch_reference.haim_mlp((D, *widths, 1), torch.float64)


@pytest.mark.slow  # trains in PyTorch; the layout: test_reference_state_dict_gives_the_same_phi_...
@needs_torch
def test_a_pytorch_trained_reference_mlp_gives_torchs_phi(tmp_path):
  """A Haim-style MLP trained in PyTorch (full-batch GD on the logistic loss, float64)
  and saved as the reference code saves it (torch.save(model.state_dict())) loads into
  trdr with Φ(x) equal to PyTorch's on the same images, within the bound of
  `test_reference_state_dict_gives_the_same_phi_as_the_reference_net`."""
  import torch
  task = _task()
  torch.manual_seed(0)
  model = _reference_mlp()
  x = torch.from_numpy(np.ascontiguousarray(task.train_images.transpose(0, 3, 1, 2), np.float64))
  y = torch.from_numpy(task.train_labels.astype(np.float64))
  optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
  for _ in range(20):
    optimizer.zero_grad()
    torch.nn.functional.softplus(-y * model(x)).mean().backward()
    optimizer.step()
  torch.save(model.state_dict(), tmp_path / "model.pth")
  config = _config()
  config.data.n_per_class = 5
  config.victim.load = str(tmp_path / "model.pth")
  with jax.enable_x64(True):
    resolved = pretrained.resolve(config, IMAGE_SHAPE)
    loaded = pretrained.load(resolved, task)
    images = task.test_images.astype(np.float64)
    phi = np.asarray(loaded.apply(loaded.params, jnp.asarray(images)))
  with torch.no_grad():
    expected = model(torch.from_numpy(images.transpose(0, 3, 1, 2).copy())).numpy()
  state = {k: v.numpy() for k, v in model.state_dict().items()}
  u = np.finfo(np.float64).eps / 2
  gamma = sum(n * u / (1 - n * u) for n in (D + 1, 16 + 1, 8 + 1))
  bound = 2 * gamma * _reference_forward(state, images, absolute=True)
  assert np.all(np.abs(phi - expected) <= bound), (np.abs(phi - expected).max(), bound.min())
  correct = np.sum(np.where(model(x).detach().numpy() >= 0, 1.0, -1.0) == task.train_labels)
  # The report's accuracy is a float32 mean of n booleans: k/n to 2⁻²⁴, so k is exact.
  assert round(loaded.metadata["report"]["train_accuracy"] * len(x)) == correct


@needs_torch
def test_the_command_line_attacks_a_loaded_pytorch_theta_star(
    smoke_report_dir, subprocess_env, tmp_path):
  """End to end: the :smoke report's DecoReco victim (trained by trdr, every layer with
  a bias), written out as a PyTorch state_dict in the reference code's layout, is attacked by
  ``experiments/reconstruct.py --config.victim.load=...`` under decoreco_cifar.py:smoke,
  whose victim section says all_biases=False: the architecture comes from the file, the
  run's θ* is the original bitwise (the transposes are exact), and the victim's accuracy
  on the same data is the original's."""
  import torch
  source = os.path.join(smoke_report_dir, "decoreco_figures", "victim")
  trained = pretrained.read(os.path.join(source, "victim.msgpack"))
  names = sorted({k.partition("/")[0] for k in trained}, key=lambda s: (s == "output", s))
  state = {}
  for k, name in enumerate(names):
    kernel = trained[f"{name}/kernel"]
    if k == 0:  # NHWC-flattened inputs -> NCHW-flattened, as PyTorch's x.view(N, -1)
      kernel = kernel.reshape(*IMAGE_SHAPE, -1).transpose(2, 0, 1, 3).reshape(D, -1)
    state[f"layers.{k}.weight"] = kernel.T
    state[f"layers.{k}.bias"] = trained[f"{name}/bias"]
  torch.save({k: torch.from_numpy(np.array(v)) for k, v in state.items()},  # a writable copy
             tmp_path / "model.pth")
  report_config = files.read_json(os.path.join(smoke_report_dir, "decoreco_figures", "tuned",
                                               rundir.CONFIG_FILE))
  config = decoreco_cifar.get_config("smoke")
  assert report_config["data"] == files.to_jsonable(config.data)  # the premise: same data
  assert not config.victim.all_biases
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  workdir = tmp_path / "run"
  done = subprocess.run(
      [sys.executable, os.path.join(repo, "experiments", "reconstruct.py"),
       f"--config={os.path.join(repo, 'configs', 'decoreco_cifar.py')}:smoke",
       f"--workdir={workdir}", f"--config.victim.load={tmp_path / 'model.pth'}",
       "--config.attack.steps=20", "--config.attack.log_every=10"],
      capture_output=True, text=True, cwd=tmp_path, env=subprocess_env, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  rundir.check_finished(str(workdir), experiment.SUMMARY_FILE)
  saved = files.read_json(workdir / rundir.CONFIG_FILE)
  assert saved["victim"]["all_biases"] and saved["victim"]["widths"] == list(
      report_config["victim"]["widths"])
  copy = pretrained.read(str(workdir / "victim" / "victim.msgpack"))
  assert copy.keys() == trained.keys()
  for k in trained:
    np.testing.assert_array_equal(copy[k], trained[k])
  summary = files.read_json(workdir / experiment.SUMMARY_FILE)
  original = victim.load_metadata(source)["report"]
  assert summary["victim"]["train_accuracy"] == original["train_accuracy"]
  assert summary["victim"]["test_accuracy"] == original["test_accuracy"]
  assert summary["candidates"] > 0


@pytest.mark.slow
def test_the_readmes_use_from_python_example_runs_as_written(tmp_path, monkeypatch):
  """The README's "Use from Python" block, executed as written in a directory holding a
  model.npz (the reference layout, decoreco_cifar.py:smoke's architecture) and a
  my_training_set.npz (`trdr.data.read_training_set`: 4 images of each class group of the
  shipped sample's test split, labels 0/1): the task it evaluates against is that set."""
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  with open(os.path.join(repo, "README.md")) as f:
    readme = f.read()
  section = readme.split("## Use from Python", 1)[1]
  code = section.split("```python\n", 1)[1].split("```", 1)[0]
  widths = tuple(decoreco_cifar.get_config("smoke").victim.widths)
  np.savez(tmp_path / "model.npz",
           **_reference_state_dict(np.random.default_rng(0), widths=widths))
  with np.load(assets.sample_path()) as f:
    sample, labels = f["test_images"], f["test_labels"]
  group = np.isin(labels, decoreco_cifar.get_config("smoke").data.classes[1]).astype(np.int64)
  picked = np.concatenate([np.flatnonzero(group == g)[:4] for g in (0, 1)])
  np.savez(tmp_path / "my_training_set.npz", images=sample[picked], labels=group[picked])
  monkeypatch.chdir(tmp_path)
  namespace = {}
  exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102
  images, task = namespace["images"], namespace["task"]
  pixels = sample[picked].astype(np.float32) / np.float32(255.0)
  np.testing.assert_array_equal(task.train_images, pixels - task.mean)   # the given set
  assert images.shape == (2 * len(task.train_images), *IMAGE_SHAPE)
  assert np.all(np.isfinite(images))
  assert namespace["found"]["count_ssim_ge"].shape == (1,)
  assert namespace["target"].metadata["config"]["sha256"] == pretrained.sha256("model.npz")


@pytest.mark.parametrize("arch", ["affine", "one_hidden", "haim_mlp"])
@pytest.mark.parametrize("ext", [".npz", ".pth"])
def test_save_victim_then_load_gives_theta_star_bitwise(tmp_path, arch, ext):
  """`trdr.save_victim` writes what `victim.load` reads: θ* back bit for bit (a copy of
  the arrays, transposed and channel-permuted for .pth and back), for every architecture."""
  if ext == ".pth":
    pytest.importorskip("torch")
  import trdr  # noqa: PLC0415
  shape = (4, 4, 3)
  victim_config = ml_collections.ConfigDict(
      {"arch": arch, "width": 5, "widths": (6, 5), "activation": "relu", "all_biases": True,
       "num_outputs": 1})
  model = models.build_model(victim_config)
  params = models.init_params(model, jax.random.key(3), shape, jnp.float32)
  params = jax.tree.map(  # every entry distinct, none 0: a misplaced one shows
      lambda a: a + jax.random.uniform(jax.random.key(a.size), a.shape), params)
  target = victim.Victim(model, params, victim_config, {})
  path = trdr.save_victim(target, str(tmp_path / f"theta{ext}"), image_shape=shape)
  found = pretrained.layers(pretrained.read(path), shape)
  loaded = pretrained.params(found, victim_config, jnp.float32)
  assert jax.tree.structure(loaded) == jax.tree.structure(params)
  for a, b in zip(jax.tree.leaves(loaded), jax.tree.leaves(params)):
    np.testing.assert_array_equal(a, b)
  with pytest.raises(ValueError, match="known formats"):
    trdr.save_victim(target, str(tmp_path / "theta.h5"))


def test_a_loaded_theta_star_far_from_stationary_is_warned_about(tmp_path, caplog):
  """A random-weights file attacked by the bilevel attack is named in a warning with its
  ||∇θE|| and, for the affine victim, the bound on ||θ* − θ(x_GT)||; the same victim
  trained by trdr (float64, to ||∇θE|| < victim.tol) loads without one.

  Tolerance: the trained θ*'s ||∇θE|| is recomputed in float64, where it differs from the
  solver's own last value by rounding (~1e-16 · ||∇ of each term||), far below the margin
  the solver leaves under victim.tol = 1e-5."""
  import trdr  # noqa: PLC0415
  config = bilevel_affine.get_config("smoke")
  config.float64 = True
  task = _task()
  model = models.build_model(config.victim)
  with jax.enable_x64(True):
    theta0 = models.init_params(model, jax.random.key(0), IMAGE_SHAPE, jnp.float64)
    trained, report = victim.train(model, theta0, task, config.victim)
    random = jax.tree.map(lambda a: jax.random.uniform(jax.random.key(a.size), a.shape,
                                                       jnp.float64), theta0)
  assert report.grad_norm < config.victim.tol
  for name, params, warned in (("trained", trained, False), ("random", random, True)):
    path = trdr.save_victim(victim.Victim(model, params, config.victim, {}),
                            str(tmp_path / f"{name}.npz"))
    config.victim.load = path
    caplog.clear()
    with jax.enable_x64(True), caplog.at_level("WARNING"):
      loaded = pretrained.load(pretrained.resolve(config, IMAGE_SHAPE), task)
    grad_norm = loaded.metadata["report"]["grad_norm"]
    messages = [r.getMessage() for r in caplog.records if "not stationary" in r.getMessage()]
    assert (grad_norm > config.victim.tol) == warned, (name, grad_norm)
    assert len(messages) == warned, messages
    if warned:
      assert path in messages[0] and f"{grad_norm:.3g}" in messages[0]
      assert f"{grad_norm / config.victim.weight_decay:.3g}" in messages[0]
  # DecoReco: a θ* that does not fit the task's training set (random weights) is warned about.
  config = _config()
  model = models.build_model(config.victim)
  with jax.enable_x64(True):
    theta = models.init_params(model, jax.random.key(1), IMAGE_SHAPE, jnp.float64)
  config.victim.load = trdr.save_victim(victim.Victim(model, theta, config.victim, {}),
                                        str(tmp_path / "mlp.npz"))
  caplog.clear()
  with jax.enable_x64(True), caplog.at_level("WARNING"):
    loaded = pretrained.load(pretrained.resolve(config, IMAGE_SHAPE), task)
  accuracy = loaded.metadata["report"]["train_accuracy"]
  assert accuracy < 1
  assert [f"{100 * accuracy:.1f}% of the given training set" in r.getMessage()
          for r in caplog.records] == [True]
  # ... naming its likely causes, each with how to check it
  message = caplog.records[0].getMessage()
  for cause in ("(1) the architecture", "(2) the preprocessing", "(3) the data",
                "evaluate the model in its own framework on the same images"):
    assert cause in message, cause


def test_a_user_model_runs_at_tuned_or_published_settings_never_the_untuned_defaults():
  """`decoreco.own_model_settings`: the config's defaults are replaced by Haim et al.'s
  published b9dfyspx (σ, lr, λ_min, α), settings set explicitly are kept, a sweep's
  best.json is left for the runner to read; each with its source named."""
  from trdr.attacks import decoreco   # noqa: PLC0415
  untuned = [decoreco_cifar.get_config(v).attack.to_dict() for v in ("", "cpu", "smoke")]
  attack = decoreco_cifar.get_config("cpu").attack
  published, source = decoreco.own_model_settings(attack, untuned)
  assert {k: published[k] for k in decoreco.Hyperparameters._fields} == (
      decoreco.PUBLISHED["b9dfyspx"]._asdict())
  assert "b9dfyspx" in source and attack.lr == 0.4   # the config itself is left as it was
  attack.lr = 0.3
  kept, source = decoreco.own_model_settings(attack, untuned)
  assert kept.lr == 0.3 and kept.alpha == attack.alpha and "set explicitly" in source
  attack.hparams_file = "runs/sweep/best.json"
  _, source = decoreco.own_model_settings(attack, untuned)
  assert "runs/sweep/best.json" in source
