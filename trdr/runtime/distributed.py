"""One grid of starts across processes: JAX's multi-controller runtime (`jax.distributed`).

A grid (the eq. 10 landscape, a sweep, the membership starts) is sharded by
`trdr.runtime.sharding.grid_map` over a 1-D mesh. In one process the mesh holds the local
devices. Once `initialize` has joined this process to others (TPU pod slices, several
GPU hosts, or several CPU processes talking over gloo), `grid_devices` is every process's
devices, and every process runs the same program (`trdr.experiment.loop.run`) on the same inputs:

  * each device attacks its block of grid points; the chunk's results are gathered so
    that every process holds the whole grid (`grid_map`'s replicated outputs);
  * each process checkpoints only its own block of the grid (`rows`), in its own run
    directory (`process_dir`: process 0 the run's work dir, process i its
    ``process_<i>`` subdirectory), keeping the previous checkpoint too;
  * a resumed run continues from the last step that every process has checkpointed
    (`common_step`): processes are at most one chunk apart, because every chunk ends
    with a gather they all take part in;
  * θ* is process 0's (`broadcast`), and only process 0 evaluates and writes the merged
    results (landscape.json, results.npz, ...); the others mark their directory finished
    with `SHARD_FILE`.

Grid points never communicate, so a point's numbers do not depend on how many processes
share the grid (tests/test_distributed.py checks a 2-process landscape against the
single-process one).
"""

import os
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils

SHARD_FILE = "shard.json"

PyTree = Any


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None) -> None:
  """Joins this process to the others of one run (`jax.distributed.initialize`); call it
  before anything touches a JAX device.

  CPU processes exchange data over gloo (``jax_cpu_collectives_implementation``), which
  the GPU and TPU backends ignore. With no arguments JAX finds the cluster itself on a
  TPU pod slice, under SLURM or Open MPI; elsewhere give all three.

  Args:
    coordinator_address: "host:port" of process 0, the same in every process.
    num_processes: how many processes (≥ 2) run the grid.
    process_id: this process's index in [0, num_processes).
  Raises:
    ValueError: some but not all three given, or ``process_id`` out of range.
  """
  given = [v is not None for v in (coordinator_address, num_processes, process_id)]
  if any(given) and not all(given):
    raise ValueError("give coordinator_address, num_processes and process_id together (or "
                     "none, where JAX detects the cluster); got "
                     f"{coordinator_address!r}, {num_processes!r}, {process_id!r}")
  if all(given) and not 0 <= process_id < num_processes:
    raise ValueError(f"process_id must lie in [0, {num_processes}), got {process_id}")
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(coordinator_address=coordinator_address,
                             num_processes=num_processes, process_id=process_id)


def active() -> bool:
  """Whether this process shares its grids with other processes."""
  return jax.process_count() > 1


def is_main() -> bool:
  """Whether this process writes the run's results (process 0, or the only one)."""
  return jax.process_index() == 0


def grid_devices() -> list[jax.Device]:
  """The devices a grid is sharded over: every process's (`jax.devices`) when `active`,
  else this process's (`jax.local_devices`)."""
  return list(jax.devices() if active() else jax.local_devices())


def process_dir(workdir: str) -> str:
  """Where this process writes: ``workdir`` for process 0, ``workdir``/process_<i> for
  process i > 0 (its checkpoint, config.json, metrics.jsonl, `SHARD_FILE`)."""
  index = jax.process_index()
  return workdir if index == 0 else os.path.join(workdir, f"process_{index}")


def rows(padded: int, devices: list[jax.Device]) -> slice:
  """The rows of a grid padded to ``padded`` points (a multiple of len(devices)) that
  this process's devices compute under `trdr.runtime.sharding.grid_map`.

  Raises:
    ValueError: ``padded`` is not a multiple of the device count, or this process's
      devices are not contiguous in ``devices`` (its rows would not be one block).
  """
  if padded % len(devices):
    raise ValueError(f"{padded} grid points do not split evenly over {len(devices)} devices")
  mine = [i for i, d in enumerate(devices) if d.process_index == jax.process_index()]
  if not mine or mine != list(range(mine[0], mine[-1] + 1)):
    raise ValueError(f"process {jax.process_index()}'s devices are not one contiguous "
                     f"block of the mesh (positions {mine})")
  per_device = padded // len(devices)
  return slice(mine[0] * per_device, (mine[-1] + 1) * per_device)


def gather_rows(block: PyTree) -> PyTree:
  """Every process's ``block`` (its `rows`, the same shape in every process) concatenated
  in process order along the leading axis: the whole padded grid, in every process."""
  return jax.tree.map(lambda x: np.asarray(multihost_utils.process_allgather(
      np.asarray(x), tiled=True)), block)


def common_step(step: int) -> int:
  """The smallest of every process's ``step``: the last step that all have checkpointed."""
  return int(np.min(multihost_utils.process_allgather(np.asarray(step, np.int64))))


def broadcast(tree: PyTree) -> PyTree:
  """Process 0's ``tree`` in every process, each leaf in its own dtype (e.g. θ*, which a
  GPU may train differently in each process)."""
  out = multihost_utils.broadcast_one_to_all(tree)
  return jax.tree.map(lambda new, old: jax.numpy.asarray(new, old.dtype), out, tree)
