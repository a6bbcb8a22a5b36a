"""Nothing silently wrong, nothing lost: checksummed θ* and checkpoints, θ* keyed by the
data's content, no partial files on a full disk, one run per work dir, and every setting
checked before the first write (issue "Nothing silently wrong")."""

import builtins
import errno
import glob
import json
import os
import re
from typing import NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from trdr import cli, data, experiment, models, plotting, victim
from trdr.attacks.protocol import Attack
from trdr.configs import bilevel_affine
from trdr.evaluation import records
from trdr.experiment import loop
from trdr.studies import membership
from trdr.runtime import files, rundir
from trdr.victim import solver


def _small_task():
  config = data.default_data_config()
  config.n_per_class = 5
  return data.make_task(config)


def _victim_config():
  config = bilevel_affine.get_config("smoke")
  config.data.n_per_class = 5
  return config


def _corruptions(raw: bytes):
  """A file's bytes cut in half, and with 8 bytes in its middle flipped."""
  middle = len(raw) // 2
  flipped = raw[:middle] + bytes(b ^ 0xFF for b in raw[middle:middle + 8]) + raw[middle + 8:]
  return {"truncated": raw[:middle], "flipped": flipped}


def test_corrupted_theta_star_and_checkpoint_are_named_errors(tmp_path):
  """A truncated or byte-flipped θ* or checkpoint is a ValueError naming the file and the
  remedy, never a silent resume (found: flipped checkpoint bytes resumed with exit 0)."""
  theta = models.init_params(models.Affine(), jax.random.key(0), (4, 4, 1))
  victim.save(str(tmp_path), theta, {"arch": "affine"})
  rundir.save_checkpoint(str(tmp_path), {"images": np.arange(64.0).reshape(4, 16)})
  for path, read in ((tmp_path / victim.VICTIM_FILE, lambda: victim.load_metadata(
                         str(tmp_path))),
                     (tmp_path / rundir.CHECKPOINT_FILE, lambda: rundir.load_checkpoint(
                         str(tmp_path)))):
    raw = path.read_bytes()
    for kind, bad in _corruptions(raw).items():
      path.write_bytes(bad)
      with pytest.raises(ValueError, match=rf"{path}.*delete {path}") as e:
        read()
      assert "corrupted" in str(e.value) or "unreadable" in str(e.value), kind
    path.write_bytes(raw)
    read()  # restored: reads again


def test_non_finite_theta_star_is_never_saved(tmp_path):
  theta = models.init_params(models.Affine(), jax.random.key(0), (4, 4, 1))
  theta = jax.tree.map(lambda a: a.at[0].set(np.nan), theta)
  with pytest.raises(ValueError, match="non-finite"):
    victim.save(str(tmp_path), theta, {})
  assert not os.listdir(tmp_path)


@pytest.mark.slow  # trains θ* twice
def test_changed_data_at_the_same_path_retrains_theta_star(tmp_path):
  """The saved θ* is keyed by the data's content, not only the config that names it
  (found: an .npz regenerated in place reused the old θ*)."""
  config, task = _victim_config(), _small_task()
  first = victim.load_or_train(config, task, str(tmp_path))
  again = victim.load_or_train(config, task, str(tmp_path))
  jax.tree.map(np.testing.assert_array_equal, again.params, first.params)  # reused
  images = task.train_images.copy()
  images[0, 0, 0, 0] += 0.5
  changed = task._replace(train_images=images)
  assert (victim.metadata(config, changed)["data_sha256"]
          != victim.metadata(config, task)["data_sha256"])
  retrained = victim.load_or_train(config, changed, str(tmp_path))
  assert retrained.metadata["config"]["data_sha256"] == victim.metadata(
      config, changed)["data_sha256"]
  assert victim.load_metadata(str(tmp_path))["config"] == victim.metadata(config, changed)


class _FullDisk:
  """A file opened for writing whose write stores half its payload, then raises ENOSPC."""

  def __init__(self, f):
    self.f = f

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.f.close()

  def write(self, payload):
    self.f.write(payload[: len(payload) // 2])
    raise OSError(errno.ENOSPC, "No space left on device")


def _fill_disk(monkeypatch, full=lambda path: True):
  """Makes trdr.runtime.files' writes to the paths ``full`` selects hit a full disk."""
  real_open = builtins.open
  monkeypatch.setattr(files, "open", lambda p, mode="r", *a, **k: (
      _FullDisk(real_open(p, mode, *a, **k)) if "w" in mode and full(str(p))
      else real_open(p, mode, *a, **k)), raising=False)


def test_a_full_disk_leaves_no_partial_file_and_the_old_file_intact(tmp_path, monkeypatch):
  """ENOSPC half-way through a write: the error propagates, the previous file is intact
  and no *.tmp<pid> is left to hold the space (found: leftovers blocked reruns)."""
  path = tmp_path / "results.json"
  files.write_json(path, {"step": 1})
  _fill_disk(monkeypatch)
  with pytest.raises(OSError, match="No space left"):
    files.write_json(path, {"step": 2})
  monkeypatch.undo()
  assert files.read_json(path) == {"step": 1}
  assert glob.glob(str(tmp_path / "*.tmp*")) == []


@pytest.mark.parametrize("log_every, checkpoint_every, saved", [
    (2, 0, [2, 4, 6]),  # a checkpoint after every chunk
    (1, 3, [3, 6, 7]),  # chunks of one step, a checkpoint every 3 steps and after the last
])
def test_a_run_that_hit_a_full_disk_resumes_bitwise_once_space_is_freed(
    tmp_path, monkeypatch, log_every, checkpoint_every, saved):
  """The checkpoints are written after the steps ``saved``, each followed by the metrics
  lines of its chunks. The disk fills while the second one is written: the run stops with
  the OSError, keeps the first checkpoint and its chunks' lines and leaves no temporary
  file; rerun, it resumes from the first checkpoint and ends bitwise equal to a run that
  was never interrupted, with one line per chunk."""
  states = (jax.random.uniform(jax.random.key(0), (2, 1, 2, 2, 1)), jnp.zeros(2, jnp.int32),
            jnp.array([False, False]))
  steps = saved[-1]
  kwargs = dict(steps=steps, log_every=log_every, grid_batch_size=2, stop_on_divergence=True,
                checkpoint_every=checkpoint_every)
  saved_steps = []
  save = rundir.save_checkpoint
  monkeypatch.setattr(rundir, "save_checkpoint", lambda workdir, tree, *a: saved_steps.append(
      loop.history_steps(tree["history"])) or save(workdir, tree, *a))
  reference, ref_history, _ = loop.run(_toy_attack(99), states, workdir=str(tmp_path),
                                       resume=False, **kwargs)
  monkeypatch.undo()
  assert saved_steps == saved
  run = tmp_path / "run"
  os.makedirs(run)
  written = []

  def full(path):  # the second checkpoint write
    written.append(path)
    return sum(rundir.CHECKPOINT_FILE in p for p in written) == 2 and rundir.CHECKPOINT_FILE in path

  _fill_disk(monkeypatch, full)
  with pytest.raises(OSError, match="No space left"):
    loop.run(_toy_attack(99), states, workdir=str(run), resume=False, **kwargs)
  monkeypatch.undo()
  assert glob.glob(str(run / "*.tmp*")) == []
  assert [r["step"] for r in rundir.read_metrics(str(run))] == list(
      range(log_every, saved[0] + 1, log_every))
  assert np.asarray(rundir.load_checkpoint(str(run))["history"]["objective"]).shape == (2, saved[0])
  resumed, history, _ = loop.run(_toy_attack(99), states, workdir=str(run), resume=True,
                                 **kwargs)
  jax.tree.map(np.testing.assert_array_equal, resumed, reference)
  np.testing.assert_array_equal(history["objective"], ref_history["objective"])
  assert [r["step"] for r in rundir.read_metrics(str(run))] == list(range(log_every, steps + 1,
                                                                          log_every))
  with pytest.raises(ValueError, match="checkpoint_every >= 0"):
    loop.run(_toy_attack(99), states, workdir=str(run), resume=False,
             **{**kwargs, "checkpoint_every": -1})


def test_identical_starts_are_attacked_once(tmp_path, monkeypatch):
  """Grid points whose start states are bit-identical are attacked once and copied back
  (`trdr.experiment.loop.run`): states, history and metrics.jsonl are those of the whole grid
  attacked point by point, bit for bit (batch 1: every point runs the same program)."""
  x = jax.random.uniform(jax.random.key(0), (3, 1, 2, 2, 1))
  states = (x.at[2].set(x[0]), jnp.zeros(3, jnp.int32), jnp.zeros(3, bool))
  attacked = []  # the grid points each chunk attacks
  chunk_of = loop._chunk

  def counted(*args):
    chunk = chunk_of(*args)
    return lambda s, n, *then: attacked.append(len(s[1])) or chunk(s, n, *then)

  monkeypatch.setattr(loop, "_chunk", counted)
  kwargs = dict(steps=4, log_every=2, grid_batch_size=1, resume=False)
  os.makedirs(tmp_path / "once")
  once = loop.run(_toy_attack(99), states, workdir=str(tmp_path / "once"), **kwargs)
  # Points 0 and 1, in each of the three scans: the first chunk as two of one step (the
  # first compiles, the second times a step: `loop._scan_length`), the second as one.
  assert attacked == [2, 2, 2]
  monkeypatch.setattr(loop.sharding, "distinct_points", lambda s: (np.arange(3), np.arange(3)))
  os.makedirs(tmp_path / "each")
  each = loop.run(_toy_attack(99), states, workdir=str(tmp_path / "each"), **kwargs)
  assert attacked == [2, 2, 2, 3, 3, 3]
  jax.tree.map(np.testing.assert_array_equal, once[:2], each[:2])
  strip = lambda rs: [{k: v for k, v in r.items() if k != "seconds_per_step"} for r in rs]
  assert strip(rundir.read_metrics(str(tmp_path / "once"))) == strip(
      rundir.read_metrics(str(tmp_path / "each")))


def test_a_failed_write_of_the_last_checkpoint_is_raised(tmp_path, monkeypatch):
  """Checkpoints are written by a second thread while the next chunk computes, and the
  last one is awaited before `loop.run` returns: its full disk is the run's OSError, and
  the work dir keeps the checkpoint and metrics lines of the chunks before it."""
  x = jax.random.uniform(jax.random.key(0), (2, 1, 2, 2, 1))  # two distinct starts
  states = (x, jnp.zeros(2, jnp.int32), jnp.array([False, False]))
  written = []

  def full(path):  # the third checkpoint write: the one of step 6, the last
    written.append(path)
    return sum(rundir.CHECKPOINT_FILE in p for p in written) == 3 and rundir.CHECKPOINT_FILE in path

  _fill_disk(monkeypatch, full)
  with pytest.raises(OSError, match="No space left"):
    loop.run(_toy_attack(99), states, steps=6, log_every=2, grid_batch_size=2,
             workdir=str(tmp_path), resume=False)
  monkeypatch.undo()
  assert [r["step"] for r in rundir.read_metrics(str(tmp_path))] == [2, 4]
  assert np.asarray(rundir.load_checkpoint(str(tmp_path))["history"]["objective"]).shape == (2, 4)
  assert glob.glob(str(tmp_path / "*.tmp*")) == []


@pytest.mark.parametrize("failure", ["divergence", "trace"])
def test_a_failed_write_in_flight_does_not_replace_the_runs_own_error(tmp_path, monkeypatch,
                                                                     failure):
  """The checkpoint of step 2 hits a full disk while the next chunk computes, and that
  chunk fails on its own (the attack diverges, or the trace raises): the run raises its
  own error, not the writer's OSError (found: the wait in `finally` replaced it), and a
  divergence names the checkpoint that was not written instead of calling it kept."""
  states = (jnp.ones((2, 1, 2, 2, 1)), jnp.zeros(2, jnp.int32), jnp.array([False, True]))
  calls = []

  def traced(images):  # called at step 0, then after each chunk; fails after the second
    calls.append(len(calls))
    if len(calls) == 3:
      raise RuntimeError("the trace failed")
    return {"mean": np.mean(images, axis=(1, 2, 3, 4))}
  trace = (np.arange(2), traced)

  _fill_disk(monkeypatch, lambda path: rundir.CHECKPOINT_FILE in path)
  if failure == "divergence":
    with pytest.raises(FloatingPointError, match=r"after step 4.*checkpoint of step 2 could "
                                                 r"not be written.*No space left"):
      loop.run(_toy_attack(3), states, steps=6, log_every=2, grid_batch_size=2,
               workdir=str(tmp_path), resume=False, stop_on_divergence=True)
  else:
    with pytest.raises(RuntimeError, match="the trace failed"):
      loop.run(_toy_attack(99), states, steps=6, log_every=2, grid_batch_size=2,
               workdir=str(tmp_path), resume=False, trace=trace)
  monkeypatch.undo()
  assert not os.path.exists(tmp_path / rundir.CHECKPOINT_FILE)
  assert rundir.read_metrics(str(tmp_path)) == []
  assert glob.glob(str(tmp_path / "*.tmp*")) == []


@pytest.mark.parametrize("size", [10, 1_000, 100_000])  # msgpack's bin 8, bin 16, bin 32
def test_verified_files_are_flax_msgpack_of_body_and_digest(tmp_path, size):
  """`files.write_verified` writes the map {"body", "sha256"} in three parts, so that a large
  body is not copied again; the bytes are exactly flax's msgpack of that map."""
  import hashlib

  import flax.serialization
  tree = {"x": np.arange(size, dtype=np.uint8), "name": "θ*"}
  files.write_verified(str(tmp_path / "f.msgpack"), tree)
  body = flax.serialization.msgpack_serialize(tree)
  expected = flax.serialization.msgpack_serialize(
      {"body": body, "sha256": hashlib.sha256(body).hexdigest()})
  assert (tmp_path / "f.msgpack").read_bytes() == expected
  restored = files.read_verified(str(tmp_path / "f.msgpack"), "")
  np.testing.assert_array_equal(restored["x"], tree["x"])
  assert restored["name"] == "θ*"


def test_a_resumed_state_must_be_finite_and_fit_the_run(tmp_path):
  """A checkpoint whose state holds NaN, or that has more steps or another grid than the
  run, is a ValueError naming it (found: not checked; only its checksum was)."""
  x = jax.random.uniform(jax.random.key(0), (2, 1, 2, 2, 1))  # two distinct starts
  states = (x, jnp.zeros(2, jnp.int32), jnp.array([False, False]))
  kwargs = dict(log_every=2, grid_batch_size=2, workdir=str(tmp_path), stop_on_divergence=True)
  loop.run(_toy_attack(99), states, steps=4, resume=False, **kwargs)
  path = tmp_path / rundir.CHECKPOINT_FILE
  saved = rundir.load_checkpoint(str(tmp_path))
  with pytest.raises(ValueError, match=rf"{path} does not fit this run.*\(2, ≤ 2\)"):
    loop.run(_toy_attack(99), states, steps=2, resume=True, **kwargs)
  three = (jnp.concatenate([x, x[:1] + 1]), *(jnp.concatenate([v, v[:1]]) for v in states[1:]))
  with pytest.raises(ValueError, match=rf"{path} does not fit this run.*\(3, ≤ 6\)"):
    loop.run(_toy_attack(99), three, steps=6, resume=True, **kwargs)
  saved["state"]["0"] = np.asarray(saved["state"]["0"]).copy()
  saved["state"]["0"][1, 0, 0, 0, 0] = np.nan
  rundir.save_checkpoint(str(tmp_path), saved)
  with pytest.raises(ValueError, match=rf"{path} holds a non-finite attack state.*delete"):
    loop.run(_toy_attack(99), states, steps=6, resume=True, **kwargs)


def test_json_is_written_without_nan_and_read_back_with_it(tmp_path):
  """JSON has no NaN or Infinity; strict parsers reject Python's tokens for them (found:
  NaN written into JSON files). They are written as null with the value beside them, and
  read back as the floats they were."""
  record = {"loss": float("nan"), "ok": 1.5, "per_point": np.array([1.0, np.inf, -np.inf]),
            "nested": [{"std": np.float32("nan")}], "converged": None}
  files.write_json(tmp_path / "r.json", record)
  rundir.append_metrics(str(tmp_path), [record])
  for path in (tmp_path / "r.json", tmp_path / rundir.METRICS_FILE):
    strict = json.loads(path.read_text(), parse_constant=lambda token: pytest.fail(
        f"a JSON file holds {token}"))
    assert strict["loss"] is None and strict["loss_not_finite"] == "nan"
    assert strict["per_point_not_finite"] == {"1": "inf", "2": "-inf"}
  for back in (files.read_json(tmp_path / "r.json"), rundir.read_metrics(str(tmp_path))[0]):
    assert set(back) == set(record)
    assert np.isnan(back["loss"]) and np.isnan(back["nested"][0]["std"])
    assert back["per_point"] == [1.0, np.inf, -np.inf]
    assert back["ok"] == 1.5 and back["converged"] is None


def test_a_second_run_in_the_same_work_dir_is_refused_at_once(tmp_path):
  """The work dir's lock names its holder; released on exit, an exception's included
  (found: two runs in one work dir both finished, metrics.jsonl listed each chunk twice)."""
  with rundir.locked(str(tmp_path)):
    with pytest.raises(RuntimeError, match=rf"in use by another run \(process {os.getpid()}\)"):
      with rundir.locked(str(tmp_path)):
        pass
  with pytest.raises(KeyError):
    with rundir.locked(str(tmp_path)):
      raise KeyError("the run failed")
  with rundir.locked(str(tmp_path)):
    pass


def _finished_run(workdir):
  """The files of a finished landscape run (stand-ins; only their survival is checked)."""
  os.makedirs(workdir)
  files = {rundir.CONFIG_FILE: b'{"old": 1}', experiment.LANDSCAPE_FILE: b"[]",
           rundir.METRICS_FILE: b'{"step": 30}\n', rundir.CHECKPOINT_FILE: b"step 30"}
  for name, payload in files.items():
    (workdir / name).write_bytes(payload)
  return files


@pytest.mark.parametrize("mistake", ["data_path", "lower_level_start", "max_iter_0",
                                     "steps_0", "log_every_0", "lower_level_method",
                                     "newton_cg_not_strongly_convex"])
def test_bad_settings_fail_before_anything_is_written(tmp_path, mistake):
  """Each mistake is a ValueError naming it, raised before training and before the work
  dir is touched: with --overwrite a finished run stays intact (found: its files were
  deleted first), and a fresh work dir is not created, so the corrected command is not
  refused (found: a leftover config.json blocked it)."""
  config = _victim_config()
  expected = {"data_path": "does_not_exist", "lower_level_start": "lower-level start",
              "max_iter_0": "max_iter", "steps_0": "steps", "log_every_0": "log_every",
              "lower_level_method": "unknown lower-level method 'newton'",
              "newton_cg_not_strongly_convex": "'newton_cg' is for a strongly convex"}
  if mistake == "data_path":
    config.data.source, config.data.path = "npz", str(tmp_path / "does_not_exist.npz")
  elif mistake == "lower_level_start":
    config.attack.lower_level.start = "zeros"
  elif mistake == "max_iter_0":
    config.attack.lower_level.max_iter = 0
  elif mistake == "steps_0":
    config.attack.steps = 0
  elif mistake == "lower_level_method":
    config.attack.lower_level.method = "newton"
  elif mistake == "newton_cg_not_strongly_convex":  # wd = 0: the affine E is not
    config.attack.lower_level.method, config.victim.weight_decay = "newton_cg", 0.0
  elif mistake == "log_every_0":
    config.attack.log_every = 0
  finished = _finished_run(tmp_path / "finished")
  with pytest.raises((ValueError, FileNotFoundError), match=expected[mistake]):
    experiment.run(config, str(tmp_path / "finished"), "landscape", overwrite=True)
  for name, payload in finished.items():
    assert (tmp_path / "finished" / name).read_bytes() == payload, name
  assert sorted(os.listdir(tmp_path / "finished")) == sorted(finished)
  with pytest.raises((ValueError, FileNotFoundError), match=expected[mistake]):
    experiment.run(config, str(tmp_path / "fresh"), "landscape")
  assert not os.path.exists(tmp_path / "fresh")


def test_workdir_flag_expands_home_and_variables(tmp_path, monkeypatch):
  """--workdir=~/x and $VAR/x name those folders, not a folder called "~" (found)."""
  monkeypatch.setenv("HOME", str(tmp_path))
  monkeypatch.setenv("TRDR_RUNS", str(tmp_path / "runs"))
  assert cli._workdir("~/x") == str(tmp_path / "x")
  assert cli._workdir("$TRDR_RUNS/y") == str(tmp_path / "runs" / "y")
  with pytest.raises(ValueError, match="--workdir is required"):
    cli._workdir(None)


def test_an_overwrite_that_fails_mid_run_leaves_the_finished_run_intact(tmp_path, monkeypatch):
  """--overwrite builds the new run beside the old one and swaps it in only when it has
  finished: a failure after the checks (here in training) keeps every old file and
  leaves no staging directory (found: the old run's files were deleted first)."""
  finished = _finished_run(tmp_path / "run")

  def fail(*args, **kwargs):
    raise RuntimeError("training failed")

  monkeypatch.setattr(victim, "load_or_train", fail)
  with pytest.raises(RuntimeError, match="training failed"):
    experiment.run(_victim_config(), str(tmp_path / "run"), "landscape", overwrite=True)
  for name, payload in finished.items():
    assert (tmp_path / "run" / name).read_bytes() == payload, name
  assert sorted(os.listdir(tmp_path)) == ["run"]


def test_config_change_names_the_keys_that_differ(tmp_path):
  old = _victim_config()
  assert rundir.config_change(old, old.copy_and_resolve_references()) == ""
  new = old.copy_and_resolve_references()
  new.attack.lr = 0.5
  new.init.lambda1 = (0.0, 1.0)
  del new.attack.lower_level["method"]  # a key one config lacks (e.g. written before it)
  assert rundir.config_change(files.to_jsonable(old), new) == (
      f"attack.lower_level.method: {old.attack.lower_level.method!r} -> absent, "
      f"attack.lr: {old.attack.lr!r} -> 0.5, "
      f"init.lambda1: {list(old.init.lambda1)!r} -> [0.0, 1.0]")
  new.seed, new.data.n_per_class = old.seed + 1, 3
  assert rundir.config_change(old, new, shown=2).endswith(" and 3 more")
  # A dict against a value, and the literal string "absent" against a missing key.
  assert rundir.config_change({"x": {"y": 1}}, {"x": 2}) == "x: {'y': 1} -> 2"
  assert rundir.config_change({"x": "absent"}, {}) == "x: 'absent' -> absent"
  # How often a run checkpoints changes none of its results: runs written before the key
  # existed, or with another value, are the same run (reused, resumed).
  for key in rundir.EXECUTION_KEYS:
    section, name = key.split(".")
    assert rundir.config_change({section: {"lr": 1}}, {section: {"lr": 1, name: 100}}) == ""
    assert rundir.config_change({section: {name: 0}}, {section: {name: 100}}) == ""
    # Nested in a study's config (configs/dp.py: victims.NAME.attack, attack.kkt): the same.
    study = lambda v, s=section, k=name: {"victims": {"mlp": {s: {"lr": 1, k: v}}},
                                          "attack": {"kkt": {k: v}}}
    assert rundir.config_change(study(0), study(100)) == ""
    assert rundir.config_change({"victims": {"mlp": {section: {"lr": 1}}}},
                                {"victims": {"mlp": {section: {"lr": 1, name: 100}}}}) == ""
    # A checkpointed run started again with another value resumes (its config.json, whose
    # SHA-256 the checkpoint carries, is kept).
    workdir = str(tmp_path / name)
    before, after = (ml_collections.ConfigDict({section: {name: v}}) for v in (0, 100))
    assert not rundir.prepare_workdir(workdir, before, "done.json")
    rundir.save_checkpoint(workdir, {"x": np.ones(2)})
    assert rundir.prepare_workdir(workdir, after, "done.json")
    np.testing.assert_array_equal(rundir.load_checkpoint(workdir)["x"], np.ones(2))


def test_every_file_of_a_run_corrupted_three_ways_is_an_error_or_a_recompute(tmp_path):
  """Fault injection on the files a run reads back when it is started again: config.json,
  checkpoint.msgpack and victim.msgpack, each truncated, with bytes flipped in the middle,
  and replaced by a valid file of the same kind from another run. Each ends in an error
  naming the file, or (θ* of other data) in retraining — never in a silent resume.
  (metrics.jsonl is rewritten from the checkpoint on resume; a finished run's files are
  the next test's.)"""
  config = _victim_config()
  other = _victim_config()
  other.attack.steps = 7
  run, elsewhere = str(tmp_path / "run"), str(tmp_path / "other")
  for workdir, cfg in ((run, config), (elsewhere, other)):
    rundir.prepare_workdir(workdir, cfg, experiment.LANDSCAPE_FILE)
    rundir.save_checkpoint(workdir, {"images": np.full((2, 3), len(workdir), np.float32)})

  def swap_in(name):
    return (tmp_path / "other" / name).read_bytes()

  # config.json: unreadable, or another run's config (which its checkpoint does not fit).
  path = tmp_path / "run" / rundir.CONFIG_FILE
  raw = path.read_bytes()
  for bad in _corruptions(raw).values():
    path.write_bytes(bad)
    with pytest.raises((ValueError, FileExistsError), match=str(path)):
      rundir.prepare_workdir(run, config, experiment.LANDSCAPE_FILE)
  path.write_bytes(swap_in(rundir.CONFIG_FILE))
  with pytest.raises(FileExistsError, match=f"different config .*attack.steps: 7 -> "
                     f"{config.attack.steps}\\)"):  # the one key that differs, named
    rundir.prepare_workdir(run, config, experiment.LANDSCAPE_FILE)
  with pytest.raises(ValueError, match="another config.json"):
    rundir.load_checkpoint(run)
  path.write_bytes(raw)
  assert rundir.prepare_workdir(run, config, experiment.LANDSCAPE_FILE)  # resumable again
  # checkpoint.msgpack: truncated and flipped (see above), or another run's valid one.
  path = tmp_path / "run" / rundir.CHECKPOINT_FILE
  raw = path.read_bytes()
  for bad in [*_corruptions(raw).values(), swap_in(rundir.CHECKPOINT_FILE)]:
    path.write_bytes(bad)
    with pytest.raises(ValueError, match=rf"{path}.*delete {path}"):
      rundir.load_checkpoint(run)
  path.write_bytes(raw)
  np.testing.assert_array_equal(rundir.load_checkpoint(run)["images"], len(run))


def _finish(workdir, config, value):
  """A finished landscape run's files, as `trdr.experiment` writes them, filled with
  ``value`` (stand-ins for its numbers)."""
  rundir.prepare_workdir(workdir, config, experiment.LANDSCAPE_FILE)
  rundir.save_checkpoint(workdir, {"images": np.full((2, 3), value)})
  rundir.write_metrics(workdir, [{"step": 30, "objective": value}])
  files.save_npz(os.path.join(workdir, experiment.RESULTS_FILE), final_images=np.full(6, value))
  files.write_json(os.path.join(workdir, experiment.SUMMARY_FILE), {"seconds": value})
  rundir.finish(workdir, experiment.LANDSCAPE_FILE, [{"lambda1": 0.0, "param_distance": value}])
  rundir.drop_checkpoints(workdir)  # as `trdr.experiment.run` does after `finish`


def test_every_file_of_a_finished_run_corrupted_three_ways_is_refused_on_reuse(tmp_path):
  """Fault injection on the files a finished run is reused from (the report's
  `experiment.run_or_reuse`, `plotting.run_figures`): each of them,
  SHA256SUMS included, truncated, with bytes flipped in the middle, or replaced by the
  same file of another finished run, is a ValueError naming it; a finished run is never
  started again (found: a changed results.npz was reused silently)."""
  config, other = _victim_config(), _victim_config()
  other.attack.steps = 7
  run, elsewhere = tmp_path / "run", tmp_path / "other"
  _finish(str(run), config, 1.0)
  _finish(str(elsewhere), other, 2.0)
  names = sorted(os.listdir(run))
  assert set(names) >= {rundir.CONFIG_FILE, rundir.METRICS_FILE, rundir.SUMS_FILE,
                        experiment.RESULTS_FILE, experiment.LANDSCAPE_FILE}
  experiment.run_or_reuse("landscape", config, str(run))  # intact: reused, nothing recomputed
  assert sorted(os.listdir(run)) == names
  for name in names:
    if name == rundir.LOCK_FILE:
      continue
    path = run / name
    raw = path.read_bytes()
    for kind, bad in {**_corruptions(raw), "replaced": (elsewhere / name).read_bytes()
                      }.items():
      assert bad != raw, (name, kind)
      path.write_bytes(bad)
      for reuse in (lambda: experiment.run_or_reuse("landscape", config, str(run)),
                    lambda: plotting.run_figures(str(run))):
        with pytest.raises(ValueError, match=re.escape(str(path)) + ".*delete") as e:
          reuse()
        # Another run's valid SHA256SUMS is found out by the first file it does not fit.
        expected = ("is corrupted" if name == rundir.SUMS_FILE and kind != "replaced" else
                    "was changed or corrupted")
        assert expected in str(e.value), (name, kind)
      with pytest.raises(FileExistsError, match="finished run"):
        rundir.prepare_workdir(str(run), config, experiment.LANDSCAPE_FILE)
    path.write_bytes(raw)
  experiment.run_or_reuse("landscape", config, str(run))


def test_the_membership_reader_refuses_a_changed_finished_run(tmp_path):
  """`membership.per_image` checks SHA256SUMS before it reads a "membership" run."""
  run = tmp_path / "run"
  rundir.prepare_workdir(str(run), _victim_config(), experiment.MEMBERSHIP_FILE)
  files.save_npz(os.path.join(run, experiment.RESULTS_FILE), final_images=np.zeros(6))
  rundir.finish(str(run), experiment.MEMBERSHIP_FILE, {"kinds": ["mixed"]})
  path = run / experiment.RESULTS_FILE
  raw = path.read_bytes()
  path.write_bytes(_corruptions(raw)["flipped"])
  with pytest.raises(ValueError, match=re.escape(str(path)) + ".*delete"):
    membership.per_image(str(run))


def _npz(path, train_shape=(40, 32, 32, 3), n_test=10, test_shape=None):
  rng = np.random.default_rng(0)
  test_shape = test_shape or (n_test, *train_shape[1:])
  np.savez(path, train_images=rng.integers(0, 256, train_shape, dtype=np.uint8),
           train_labels=np.arange(train_shape[0]) % 2,
           test_images=rng.integers(0, 256, test_shape, dtype=np.uint8),
           test_labels=np.arange(test_shape[0]) % 2)
  return path


@pytest.mark.parametrize("mistake", ["truncated_npz", "npy", "channels_first", "empty_test",
                                     "smaller_than_the_ssim_window"])
def test_bad_data_is_a_named_error_before_the_attack(tmp_path, mistake):
  """Found: a truncated .npz (BadZipFile) or a .npy (TypeError) crashed uncaught, NCHW
  images and images smaller than the SSIM window failed only after the whole attack, an
  empty test split in a reshape. Now each is a ValueError naming it, before any write."""
  path = tmp_path / "data.npz"
  if mistake == "truncated_npz":
    raw = _npz(path).read_bytes()
    path.write_bytes(raw[: len(raw) // 2])
  elif mistake == "npy":
    path = tmp_path / "data.npy"
    np.save(path, np.zeros((4, 32, 32, 3), np.uint8))
  elif mistake == "channels_first":
    _npz(path, train_shape=(40, 3, 32, 32))
  elif mistake == "empty_test":
    _npz(path, n_test=0)
  else:
    _npz(path, train_shape=(40, 8, 8, 3))
  expected = {"truncated_npz": "cannot read the file as .npz",
              "npy": "cannot read the file as .npz", "channels_first": "channels first",
              "empty_test": r"test_images must have shape .* N ≥ 1",
              "smaller_than_the_ssim_window": "smaller than the SSIM window 11"}[mistake]
  config = _victim_config()
  config.data.source, config.data.path = "npz", str(path)
  config.data.classes = ((0,), (1,))
  with pytest.raises(ValueError, match=expected):
    experiment.run(config, str(tmp_path / "run"), "landscape")
  assert not os.path.exists(tmp_path / "run")


class _Metrics(NamedTuple):
  objective: jax.Array


def _toy_attack(diverge_at: int) -> Attack:
  """x ← x / 2, whose objective (the mean of x) turns NaN from step ``diverge_at`` on at
  the grid points whose state says ``bad``."""
  def step(state):
    x, k, bad = state
    objective = jnp.where((k >= diverge_at) & bad, jnp.nan, jnp.mean(x))
    return (x / 2, k + 1, bad), _Metrics(objective)
  return Attack("toy", None, step, lambda s: s[0], True, "pixels")


def test_a_diverged_attack_stops_with_a_named_error_and_keeps_its_good_checkpoint(tmp_path):
  """NaN in the objective stops a landscape or attack run at the chunk it appears in,
  before that chunk's checkpoint, so the last good checkpoint stays (found: runs went on
  and reported NaN); a sweep records divergence instead (its settings may diverge)."""
  states = (jnp.ones((2, 1, 2, 2, 1)), jnp.zeros(2, jnp.int32), jnp.array([False, True]))
  for name in ("stop", "sweep"):
    os.makedirs(tmp_path / name)
  kwargs = dict(steps=6, log_every=2, grid_batch_size=2, resume=False)
  with pytest.raises(FloatingPointError, match=r"not finite at 1 of 2 grid points after "
                                               r"step 4.*checkpoint of step 2"):
    loop.run(_toy_attack(3), states, workdir=str(tmp_path / "stop"), stop_on_divergence=True,
             **kwargs)
  saved = rundir.load_checkpoint(str(tmp_path / "stop"))
  assert np.asarray(saved["history"]["objective"]).shape == (2, 2)  # steps 0, 1 only
  _, history, _ = loop.run(_toy_attack(3), states, workdir=str(tmp_path / "sweep"), **kwargs)
  assert np.isnan(history["objective"][1, 3:]).all()
  assert np.isfinite(history["objective"][0]).all()


def test_a_nan_lower_level_solve_is_never_counted_converged():
  """Found: `grad_norm >= tol` is False for NaN, so the L-BFGS loop stops on a NaN
  gradient; it must not be read as converged. The solve reports NaN and the run's
  lower-level summary counts it as not converged (and `trdr.experiment` warns)."""
  _, info = solver.minimize_energy(lambda p: jnp.sum(p ** 2) * jnp.nan, jnp.ones(3),
                                   max_iter=10, tol=1e-6)
  assert np.isnan(info.grad_norm) and not info.grad_norm < 1e-6
  summary = records.lower_level_summary(
      {"grad_norm": np.array([[float(info.grad_norm), 1e-9]]),
       "num_iter": np.array([[int(info.num_iter), 3]])}, tol=1e-6)
  assert summary["fraction_converged"] == 0.5


def test_the_trace_sees_only_its_grid_points_images(tmp_path):
  """`loop.run`'s trace (points, fn) is handed the images of its grid points alone, also
  when a point shares its start with an earlier one (attacked once, `distinct_points`),
  and its values land in those points' rows of the trace, NaN in the others, at step 0
  and after every chunk. The toy attack halves x, so the values are exact."""
  x = jnp.stack([jnp.full((1, 2, 2, 1), v) for v in (8.0, 4.0, 8.0)])
  states = (x, jnp.zeros(3, jnp.int32), jnp.zeros(3, bool))
  seen = []

  def fn(images):
    seen.append(images.shape)
    return {"mean": np.mean(images, axis=(1, 2, 3, 4))}

  _, _, traced = loop.run(_toy_attack(99), states, steps=4, log_every=2, grid_batch_size=1,
                          workdir=str(tmp_path), resume=False, trace=(np.array([2]), fn))
  assert seen == [(1, 1, 2, 2, 1)] * 3
  np.testing.assert_array_equal(traced["step"], [0, 2, 4])
  np.testing.assert_array_equal(traced["mean"][2], [8.0, 2.0, 0.5])
  assert np.isnan(traced["mean"][:2]).all()
