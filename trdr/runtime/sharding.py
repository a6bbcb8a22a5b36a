"""Mapping a function over a grid axis, sharded over all local devices.

The energy-landscape grid (and any sweep over initialisations or hyperparameters) is a
function applied to every slice of a leading "grid" axis. `grid_map` does it as ONE
jittable computation:

  * on one device, `jax.lax.map` of the function itself at ``batch_size`` 1, else
    `jax.vmap` over the whole grid when ``batch_size >= G``, else `jax.lax.map` in
    vmapped batches of ``batch_size``;
  * on k > 1 devices, the grid is padded to a multiple of k (the last point repeated),
    split into k equal shards over a 1-D mesh of the devices (`jax.shard_map`), each
    shard mapped as on one device with the same ``batch_size``, and the padding dropped
    (or, with ``replicate=False``, the shards left where they were computed).

The grid points do not communicate, so every point's result is the single-device one up
to the batching of its own shard (which the solvers' tolerances may feel in float32; see
README, *Performance*). On CPU, ``XLA_FLAGS=--xla_force_host_platform_device_count=8``
(set before JAX is imported) emulates 8 devices; tests/test_sharding.py checks the
sharded grid against the single-device one that way.

The scripts give JAX one CPU device per core (`set_cpu_devices`, --cpu_devices): on CPU,
`trdr.experiment.loop` runs a grid attacked one start at a time as one start per device at once,
and a vmapped batch on the first device (README, *Performance*).
"""

import hashlib
import math
import os
from typing import Any, Callable, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

GRID_AXIS = "grid"

PyTree = Any


def grid_size(xs: PyTree) -> int:
  """G, the common leading dimension of every leaf of ``xs``.

  Raises:
    ValueError: ``xs`` has no leaves, a scalar leaf, or leaves with different leading
      dimensions.
  """
  leaves = jax.tree.leaves(xs)
  if not leaves:
    raise ValueError("grid_map needs at least one array in xs, got an empty pytree")
  sizes = {np.shape(leaf)[0] if np.ndim(leaf) else None for leaf in leaves}
  if len(sizes) != 1 or None in sizes:
    raise ValueError("every leaf of xs needs the same leading (grid) dimension; got leading "
                     f"dimensions {sorted(map(str, sizes))}")
  return sizes.pop()


def num_shards(devices: Sequence[jax.Device] | None = None) -> int:
  """How many shards `grid_map` splits a grid into: the number of ``devices`` (default:
  all local devices, `jax.local_devices`)."""
  return len(jax.local_devices() if devices is None else devices)


def shard_size(size: int, devices: Sequence[jax.Device] | None = None) -> int:
  """Grid points per device: ⌈G / k⌉ for k = `num_shards` (padding included)."""
  return math.ceil(size / num_shards(devices))


def local_map(fn: Callable[[PyTree], PyTree], xs: PyTree, batch_size: int) -> PyTree:
  """``fn`` over the leading axis of ``xs`` on one device.

  Args:
    fn: maps one slice (each leaf [...]) to a pytree of arrays.
    xs: pytree, each leaf [G, ...].
    batch_size: ≥ 1. 1: `jax.lax.map` of ``fn`` itself, unbatched (also when G = 1);
      ``batch_size >= G``: one `jax.vmap` over the whole axis; otherwise `jax.lax.map`
      over vmapped batches of ``batch_size`` (a remainder is its own batch).
  Returns:
    The outputs of ``fn`` stacked along a new leading axis, each leaf [G, ...].
  Raises:
    ValueError: ``batch_size`` < 1, or the leaves of ``xs`` disagree on G.
  """
  if batch_size < 1:
    raise ValueError(f"batch_size must be >= 1, got {batch_size}")
  if batch_size == 1:
    # Not lax.map(batch_size=1) nor a vmap of a one-point grid, which vmap fn over a batch
    # of one: under vmap every lax.cond (the L-BFGS zoom line search's) runs both
    # branches and selects.
    return jax.lax.map(fn, xs)
  if batch_size >= grid_size(xs):
    return jax.vmap(fn)(xs)
  return jax.lax.map(fn, xs, batch_size=batch_size)


def replicated(devices: Sequence[jax.Device] | None = None) -> NamedSharding | None:
  """The layout of `grid_map`'s outputs on k > 1 devices: a full copy on every device of
  the 1-D mesh; None for a single device."""
  devices = list(jax.local_devices() if devices is None else devices)
  if len(devices) == 1:
    return None
  return NamedSharding(Mesh(np.asarray(devices), (GRID_AXIS,)), PartitionSpec())


def replicate(tree: PyTree, devices: Sequence[jax.Device] | None = None) -> PyTree:
  """``tree`` laid out like `grid_map`'s outputs (unchanged on one device).

  Feeding `grid_map` inside a jitted loop body arrays in this layout from the start
  (`jax.device_put` of the initial state) keeps the jitted function from compiling twice:
  once for a single-device first input and again for the replicated outputs it returns.
  """
  target = replicated(devices)
  if target is None:
    return tree
  if target.is_fully_addressable:
    return jax.device_put(tree, target)
  # Devices of other processes (`trdr.runtime.distributed`): every process holds the same tree
  # and supplies the copies on its own devices.
  def put(leaf):
    host = np.asarray(leaf)
    return jax.make_array_from_callback(host.shape, target, lambda index: host[index])
  return jax.tree.map(put, tree)


def pad(xs: PyTree, size: int, padded: int) -> PyTree:
  """Each leaf [G, ...] -> [padded, ...], the last slice repeated."""
  index = np.minimum(np.arange(padded), size - 1)
  return jax.tree.map(lambda leaf: leaf[index], xs)


def distinct_points(xs: PyTree) -> tuple[np.ndarray, np.ndarray]:
  """The grid points of ``xs`` (leading axis G of every leaf) that are bit-identical, by
  the SHA-256 of their leaves' bytes (PRNG keys by their key data).

  Returns:
    (distinct int[U]: the first point of each group, ascending; spread int[G]: each
    point's group), so that ``xs[distinct][spread]`` is ``xs`` leaf by leaf.
  """
  leaves = [np.asarray(jax.random.key_data(x) if jax.dtypes.issubdtype(
      x.dtype, jax.dtypes.prng_key) else x) for x in jax.tree.leaves(xs)]
  first = {}
  owner = []
  for g in range(grid_size(xs)):
    digest = hashlib.sha256()
    for x in leaves:
      digest.update(np.ascontiguousarray(x[g]))
    owner.append(first.setdefault(digest.digest(), g))
  return np.unique(owner, return_inverse=True)


def grid_map(fn: Callable[[PyTree], PyTree], xs: PyTree, batch_size: int,
             devices: Sequence[jax.Device] | None = None, *, replicate: bool = True
             ) -> PyTree:
  """``fn`` applied to every slice along the leading axis of ``xs``, sharded over devices.

  One jittable computation (call it inside `jax.jit` or not). With a single device it is
  `local_map`. With k > 1 devices the grid axis G is padded to P = k⌈G/k⌉ by repeating
  the last slice, sharded over a 1-D mesh (axis name `GRID_AXIS`) with `jax.shard_map`,
  each device runs `local_map` on its P/k points with ``batch_size``, and the P − G
  padded results are dropped. Anything ``fn`` closes over (θ*, labels, ...) is replicated
  to every device. ``fn`` must not use collectives: grid points are independent.

  Args:
    fn: maps one slice of ``xs`` (a pytree like ``xs`` without the leading axis) to a
      pytree of arrays, e.g. an `AttackState` -> (AttackState, StepMetrics).
    xs: pytree (dicts, NamedTuples, ...) of arrays, each leaf [G, ...] with the same G.
    batch_size: grid points per vmapped batch on EACH device (≥ 1); a value ≥ the
      points per device, ⌈G/k⌉, vmaps a device's whole shard at once.
    devices: the devices to shard over; default all local devices (`jax.local_devices`).
      One device: no sharding, no padding.
    replicate: on k > 1 devices, whether the computation ends by copying every shard's
      results onto every device (an all-gather) and dropping the padding. False leaves
      each shard on the device that computed it (`gather` brings them to the host),
      which saves the all-gather of the whole state (hundreds of MB for a landscape), a
      cost per call, not per step.
  Returns:
    Pytree of ``fn``'s output structure, each leaf [G, ...]; on k > 1 devices every
    device holds a full copy (`replicated`), so that the result is as usable as a
    single-device array (padding cannot be dropped from a sharded axis of G points);
    see `replicate` for loops that feed it back in. With ``replicate=False`` on k > 1
    devices: each leaf [P, ...], sharded over the mesh along P, rows G… the padding.
  Raises:
    ValueError: ``batch_size`` < 1, an empty ``devices``, or leaves of ``xs`` without a
      common leading dimension.
  """
  if batch_size < 1:
    raise ValueError(f"batch_size must be >= 1, got {batch_size}")
  devices = list(jax.local_devices() if devices is None else devices)
  if not devices:
    raise ValueError("grid_map needs at least one device, got an empty devices list")
  size = grid_size(xs)
  if len(devices) == 1:
    return local_map(fn, xs, batch_size)
  padded = shard_size(size, devices) * len(devices)
  mesh = Mesh(np.asarray(devices), (GRID_AXIS,))
  spec = PartitionSpec(GRID_AXIS)
  # check_vma=False: fn's closed-over constants (θ*, ...) are replicated, and library code
  # such as optax's line search mixes them with per-shard values in lax.cond branches,
  # which the varying-manual-axes type check rejects ("cond branches must have equal
  # output types"). Grid points use no collectives, so the check has nothing to protect.
  sharded = jax.shard_map(lambda shard: local_map(fn, shard, batch_size), mesh=mesh,
                          in_specs=spec, out_specs=spec, check_vma=False)
  out = sharded(pad(xs, size, padded) if padded > size else xs)
  if not replicate:
    return out
  full = NamedSharding(mesh, PartitionSpec())
  return jax.tree.map(lambda leaf: jax.lax.with_sharding_constraint(leaf[:size], full), out)


def round_robin(fn: Callable[..., PyTree], blocks: Sequence[tuple], shared: PyTree,
                devices: Sequence[jax.Device] | None = None,
                on_ready: Callable[[int], None] | None = None) -> list[PyTree]:
  """``[fn(shared, *args) for args in blocks]`` with block i on device i mod k of
  ``devices`` (default all local ones), for independent blocks of one jitted computation
  (e.g. `trdr.evaluation.metrics`' SSIM search, chunk by chunk). JAX dispatches asynchronously, so
  the k devices compute their blocks at once; ``shared`` is copied to each device once.
  Each block runs the same program on the same inputs as on one device (bitwise equal on
  CPU: tests/sharded_grid.py), and the results are moved to the first device.

  ``on_ready(i)``, if given, is called for i = 0, 1, ... as block i's result is ready (all
  blocks are dispatched first, so waiting for one delays none): progress for a log.
  """
  devices = list(jax.local_devices() if devices is None else devices)
  copies = [jax.device_put(shared, d) for d in devices]
  out = [fn(copies[i % len(devices)], *jax.device_put(args, devices[i % len(devices)]))
         for i, args in enumerate(blocks)]
  if on_ready is not None:
    for i, result in enumerate(out):
      jax.block_until_ready(result)
      on_ready(i)
  return jax.device_put(out, devices[0]) if len(devices) > 1 else out


def gather(tree: PyTree, size: int) -> PyTree:
  """`grid_map`'s outputs of a grid of ``size`` points (replicated or not) as host arrays,
  each leaf [size, ...]: the padding dropped, every shard copied from its device.

  Raises:
    ValueError: a leaf has shards on other processes' devices (a run across processes,
      `trdr.runtime.distributed`, whose outputs `grid_map` replicates by default).
  """
  def host(leaf):
    if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
      raise ValueError("gather copies this process's shards only; a grid sharded across "
                       "processes needs grid_map's replicated outputs (replicate=True)")
    return np.asarray(leaf)[:size]
  return jax.tree.map(host, tree)


def describe(size: int, batch_size: int, devices: Sequence[jax.Device] | None = None) -> str:
  """One line for logs: how a grid of ``size`` points is laid out by `grid_map`."""
  devices = list(jax.local_devices() if devices is None else devices)
  k, platform = len(devices), devices[0].platform
  per_device = shard_size(size, devices)
  how = ("one vmap" if batch_size >= per_device else "one at a time" if batch_size == 1
         else f"vmapped batches of {batch_size}")
  pad = f", padded to {per_device * k}" if per_device * k > size else ""
  return (f"grid of {size} points over {k} {platform} device(s)"
          f"{pad}: {per_device} per device, {how}")


def set_cpu_devices(requested: int, across_processes: bool = False) -> int | None:
  """Sets JAX's number of CPU devices before its backend starts; returns it (None: left).

  The scripts call it first (`trdr.cli`, --cpu_devices): a grid attacked one start at a
  time then runs one start per device, i.e. per core, at once (`trdr.experiment.loop`).

  ``requested`` 0 means one per CPU core this process may use (`os.sched_getaffinity`),
  unless JAX's own JAX_NUM_CPU_DEVICES is set (then JAX's count stands). Left unchanged
  across processes (each joins with JAX's default) and when XLA_FLAGS forces a count.

  Args:
    requested: CPU devices wanted, >= 0.
    across_processes: this process joins a run across processes (`trdr.runtime.distributed`).
  Raises:
    ValueError: ``requested`` < 0.
    RuntimeError: JAX's backend has already started (from JAX's config).
  """
  if requested < 0:
    raise ValueError(f"cpu_devices must be >= 0 (0: one per core), got {requested}")
  if across_processes or "xla_force_host_platform_device_count" in os.environ.get(
      "XLA_FLAGS", ""):
    return None
  if not requested and os.environ.get("JAX_NUM_CPU_DEVICES"):
    return None
  count = requested or len(os.sched_getaffinity(0))
  jax.config.update("jax_num_cpu_devices", count)
  return count
