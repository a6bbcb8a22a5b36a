"""grid_map: a grid sharded over 8 (emulated) devices equals the single-device grid."""

import os
import subprocess
import sys
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from trdr.runtime import sharding

TESTS = os.path.dirname(os.path.abspath(__file__))


class Point(NamedTuple):
  x: jax.Array
  n: jax.Array


def _fn(p):
  """A grid function with a NamedTuple in and a (dict, array) out, and a while loop."""
  y = jax.lax.fori_loop(0, 3, lambda _, v: jnp.cos(v) + p.n, p.x)
  return {"y": y, "point": p._replace(n=p.n * 2)}, jnp.sum(p.x)


def _points(g):
  return Point(jnp.arange(g * 6, dtype=jnp.float32).reshape(g, 2, 3) / 7,
               jnp.arange(g, dtype=jnp.int32))


@pytest.mark.parametrize("g", [1, 7])
@pytest.mark.parametrize("batch_size", [1, 3, 100])
def test_grid_map_equals_a_loop_over_points(g, batch_size):
  xs = _points(g)
  out = jax.jit(lambda x: sharding.grid_map(_fn, x, batch_size))(xs)
  one = jax.jit(_fn)
  for i in range(g):
    expected = one(jax.tree.map(lambda leaf: leaf[i], xs))  # noqa: B023
    got = jax.tree.map(lambda leaf: leaf[i], out)  # noqa: B023
    assert jax.tree.structure(got) == jax.tree.structure(expected)
    # Vectorised and per-point code may round differently. y: three steps of cos(v) + n,
    # each adding XLA's cos error (a few ulp; 4u assumed, u = 2^-24) and one rounding of
    # |v| <= n + 1, with cos 1-Lipschitz: <= 12u + 3(n + 1)u absolute per evaluation, and
    # |y| >= cos(1) = 0.54 (n = 0, 1) or n - 1: relative <= 2 · 18u / 0.54 = 4e-6 for two.
    # sum(x): 5 additions of values >= 0, <= 10u. n: integers, exact. A wrong point: O(1).
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=5e-6), got, expected)


def test_grid_map_on_one_device_is_vmap_or_lax_map():
  """With one device, grid_map is exactly a vmap (batch ≥ G) or a lax.map."""
  xs = _points(10)
  for batch_size, reference in ((10, jax.vmap(_fn)(xs)),
                                (4, jax.lax.map(_fn, xs, batch_size=4))):
    out = sharding.grid_map(_fn, xs, batch_size, devices=jax.local_devices()[:1])
    jax.tree.map(np.testing.assert_array_equal, out, reference)


def test_batches_of_one_keep_the_branches_of_fn():
  """Batch 1 maps ``fn`` itself: its lax.cond stays a branch (the L-BFGS line search's),
  where a vmapped batch, even of one, computes both branches and selects."""
  def fn(p):
    return jax.lax.cond(p.x[0, 0] > 0, jnp.sin, jnp.cos, p.x)
  xs = _points(4)
  branches = [str(jax.make_jaxpr(lambda x, b=b: sharding.grid_map(
      fn, x, b, devices=jax.local_devices()[:1]))(xs)) for b in (1, 2)]
  assert "cond[" in branches[0] and "select_n" not in branches[0]
  assert "select_n" in branches[1]
  # A grid of one point (or one point per device) too: batch 1 ≥ G is not a vmap.
  one = str(jax.make_jaxpr(lambda x: sharding.grid_map(
      fn, x, 1, devices=jax.local_devices()[:1]))(_points(1)))
  assert "cond[" in one and "select_n" not in one
  np.testing.assert_array_equal(
      sharding.grid_map(fn, xs, 1, devices=jax.local_devices()[:1]), jax.vmap(fn)(xs))


def test_padding_repeats_the_last_point():
  xs = {"a": jnp.arange(5), "b": jnp.arange(10).reshape(5, 2)}
  padded = sharding.pad(xs, 5, 8)
  np.testing.assert_array_equal(padded["a"], [0, 1, 2, 3, 4, 4, 4, 4])
  np.testing.assert_array_equal(padded["b"][-1], [8, 9])
  assert sharding.shard_size(25, [None] * 8) == 4
  assert sharding.shard_size(32, [None] * 8) == 4
  assert sharding.shard_size(3, [None] * 8) == 1


def test_distinct_points_groups_bit_identical_points():
  """Points are the same only if every leaf's bytes are: −0.0 is not 0.0, and another
  PRNG key is another point."""
  k0, k1 = jax.random.split(jax.random.key(0))
  xs = {"x": np.array([[0.0, 1.0], [0.0, 1.0], [-0.0, 1.0], [0.0, 1.0]]),
        "key": jnp.stack([k0, k0, k0, k1])}
  distinct, spread = sharding.distinct_points(xs)
  np.testing.assert_array_equal(distinct, [0, 2, 3])
  np.testing.assert_array_equal(spread, [0, 0, 1, 2])
  np.testing.assert_array_equal(xs["x"][distinct][spread], xs["x"])


def test_grid_map_rejects_bad_inputs():
  with pytest.raises(ValueError, match="batch_size"):
    sharding.grid_map(_fn, _points(3), 0)
  with pytest.raises(ValueError, match="leading"):
    sharding.grid_map(_fn, Point(jnp.zeros((3, 2)), jnp.zeros(4)), 1)
  with pytest.raises(ValueError, match="leading"):
    sharding.grid_map(_fn, Point(jnp.zeros((3, 2)), jnp.zeros(())), 1)
  with pytest.raises(ValueError, match="at least one array"):
    sharding.grid_map(_fn, (), 1)
  with pytest.raises(ValueError, match="at least one device"):
    sharding.grid_map(_fn, _points(3), 1, devices=[])


@pytest.mark.slow
def test_eight_device_grid_equals_one_device_grid(subprocess_env, tmp_path):
  """`loop.run_grid` and the evaluation over a 25-point float64 grid (padded to
  32 on 8 devices, 4 per device) give the single-device numbers.

  The 8 CPU devices are emulated with XLA_FLAGS in a subprocess (the flag only acts
  before JAX is imported). With one point per batch every point runs the same program
  as on one device, so the results must be bitwise equal, as must `loop.run`'s loop
  that runs one start per CPU device on 2 devices, in two chunks (the second queued
  behind the first on one of them), to the grid in one program; the toy grid_map runs
  batch sizes 1, 3, 4 (a device's whole shard) and 100.

  The single-device numbers come from a second subprocess, side by side with the first:
  both compile with XLA's fusion emitters, which keep the per-point code of the two the
  same (the older emitters that tests/conftest.py gives the other processes do not), at
  LLVM optimisation level 0 (this test is its compilations).
  """
  flags = " ".join(flag for flag in subprocess_env["XLA_FLAGS"].split() if not flag.startswith(
      ("--xla_backend_optimization_level=", "--xla_cpu_use_fusion_emitters=")))
  flags += " --xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=true"
  runs = {}
  for devices in (8, 1):
    env = {**subprocess_env, "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": f"{flags} --xla_force_host_platform_device_count={devices}".strip()}
    env.pop("JAX_NUM_CPU_DEVICES")
    runs[devices] = subprocess.Popen(
        [sys.executable, os.path.join(TESTS, "sharded_grid.py"), str(tmp_path / f"{devices}.npz")],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  for proc in runs.values():
    output, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, output
  sharded, single = (dict(np.load(tmp_path / f"{devices}.npz")) for devices in (8, 1))
  assert int(single["num_devices"]) == 1 and int(sharded.pop("num_devices")) == 8
  assert set(sharded) == set(single) - {"num_devices"}
  assert single["images_b1"].shape[0] == 25
  assert float(single["upper_loss_b1"][:, -1].max()) > 0  # the attack moved
  for name, value in sharded.items():
    assert value.dtype == single[name].dtype, name
    np.testing.assert_array_equal(value, single[name], err_msg=name)
  # Left sharded over the 8 devices and gathered: the replicated grid's bits.
  toy_split = [name for name in sharded if name.startswith("toy_split")]
  assert toy_split
  for name in toy_split:
    np.testing.assert_array_equal(sharded[name], sharded[name.replace("split", "b1")])
  # loop.run's two chunks, the second queued behind the first: the bits of one program.
  np.testing.assert_array_equal(single["images_loop"], single["images_b1"])
  np.testing.assert_array_equal(single["upper_loss_loop"], single["upper_loss_b1"])


def test_set_cpu_devices_gives_one_per_core_unless_told_forced_or_distributed(monkeypatch):
  """The scripts' --cpu_devices (`sharding.set_cpu_devices`): 0 asks JAX for one CPU
  device per core this process may use (unless JAX_NUM_CPU_DEVICES is set), a positive
  count for that many, and nothing is asked across processes or when XLA_FLAGS already
  forces a count. (JAX's own update is recorded, not made: this process's backend has
  started.)"""
  asked = []
  monkeypatch.setattr(sharding.jax.config, "update", lambda *a: asked.append(a))
  monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_max_isa=AVX2")
  monkeypatch.delenv("JAX_NUM_CPU_DEVICES", raising=False)
  cores = len(os.sched_getaffinity(0))
  assert sharding.set_cpu_devices(0) == cores
  assert sharding.set_cpu_devices(3) == 3
  assert sharding.set_cpu_devices(3, across_processes=True) is None
  monkeypatch.setenv("JAX_NUM_CPU_DEVICES", "1")  # JAX's own count stands against 0 only
  assert sharding.set_cpu_devices(0) is None
  assert sharding.set_cpu_devices(2) == 2
  monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
  assert sharding.set_cpu_devices(0) is None
  assert asked == [("jax_num_cpu_devices", cores), ("jax_num_cpu_devices", 3),
                   ("jax_num_cpu_devices", 2)]
  with pytest.raises(ValueError, match="cpu_devices must be >= 0"):
    sharding.set_cpu_devices(-1)
