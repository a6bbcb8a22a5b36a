"""The attack loop: a grid of starts attacked in checkpointed chunks, as one computation.

Every experiment (a single attack, the eq. 10 landscape, a hyperparameter sweep) and
every attack (`trdr.attacks.ATTACKS`) runs through `run`: the attack's ``step`` in one
while loop of a traced trip count (`run_count`), mapped over the leading grid axis G of
the states and sharded over all local devices (`trdr.runtime.sharding.grid_map`, in
vmapped batches of `batch_size` per device; one start at a time on CPU is a loop of
jitted calls, one start per CPU device at once).

A chunk runs as calls ("scans") of about `SCAN_SECONDS` each (in one process), every one
the same compiled program whatever its number of steps (`_chunk`: a new user's first run
compiles the attack's step program once): between two scans a progress line comes (at
least every `PROGRESS_SECONDS`), Ctrl-C stops the run with a checkpoint of the steps
done, and a checkpoint comes by the clock (``checkpoint_minutes``).

Checkpoint-first protocol: the attack runs in chunks of ``log_every`` steps, and after a
chunk (every ``checkpoint_every`` steps, and after the last) the checkpoint (the states,
the per-step metrics history and the metrics records so far) is written first,
atomically, and only then the lines of the chunks since the previous checkpoint appended
to metrics.jsonl. A resumed run continues from the checkpoint and rewrites metrics.jsonl
from the records in it, so a run killed at any moment (even between the two writes, or
half-way through the append) ends with one line per chunk and with the uninterrupted
run's numbers: the same steps in the same order on the same inputs, though the scans
may be cut elsewhere (a scan of k steps and then one of j give the bits of one scan of
k + j: one compiled program, its trip count a value; tests/test_interrupt.py checks it,
and that it gives `lax.scan`'s bits). The checkpoint is
written by a second thread while the next scan computes (one write in flight; `run`
returns or raises only after it). Bit-identical starts are attacked once.

Across processes (`trdr.runtime.distributed`) the grid is sharded over every process's devices,
each process checkpoints its own block of grid points in its own directory (keeping the
previous checkpoint), and a resumed run continues from the last step all of them have.
"""

import concurrent.futures
import contextlib
import operator
import os
import signal
import threading
import time
from typing import Any

import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from trdr.attacks.protocol import Attack
from trdr.runtime import distributed, files, rundir, sharding

PREVIOUS_FILE = "checkpoint.previous.msgpack"


def batch_size(requested: int, grid_size: int, batches_well: bool) -> int:
  """Grid points per vmapped batch on each device: the one policy for every attack.

  ``requested`` > 0 is used as given (capped at the grid size). 0 chooses the whole share
  of a device in one vmap when the attack ``batches_well`` (e.g. DecoReco) or on a
  GPU/TPU, and one point at a time on CPU otherwise, where a vmapped bilevel lower level
  runs every member's L-BFGS branches (experiments/benchmark.py measures it).

  Raises:
    ValueError: ``requested`` < 0.
  """
  if requested < 0:
    raise ValueError(f"grid_batch_size must be >= 0 (0: chosen by attack and backend), "
                     f"got {requested}")
  if requested == 0:
    requested = grid_size if batches_well or jax.default_backend() != "cpu" else 1
  return min(requested, grid_size)


def run_steps(step_fn, state: Any, num_steps: int):
  """``num_steps`` steps of one start under `lax.scan`: (state, metrics [num_steps])."""
  return jax.lax.scan(lambda s, _: step_fn(s), state, None, length=num_steps)


def run_count(step_fn, state: Any, count, length: int):
  """``count`` steps of one start (a traced int32 scalar, 0 ≤ count ≤ ``length``) as one
  `lax.fori_loop` (a while loop: the trip count is a value, not part of the program):
  (state, metrics: each leaf [length, ...], row i the metrics of step i for i < count,
  zeros after). Every count runs the same compiled program, so `run` can cut a chunk into
  calls of any length without compiling again. The body is `run_steps`' (one step, its
  metrics written into row i as a scan writes them): the same bits as `run_steps` for the
  same steps (tests/test_interrupt.py)."""
  _, shapes = jax.eval_shape(step_fn, state)
  rows = jax.tree.map(lambda m: jnp.zeros((length,) + m.shape, m.dtype), shapes)

  def body(i, carry):
    state, rows = carry
    state, metrics = step_fn(state)
    return state, jax.tree.map(lambda r, m: r.at[i].set(m), rows, metrics)
  return jax.lax.fori_loop(0, count, body, (state, rows))


def run_grid(step_fn, states: Any, num_steps: int, batch: int, devices=None,
             replicate: bool = True):
  """`run_steps` for every start of ``states`` (leading axis G) as ONE computation,
  sharded over ``devices`` (default all local ones) and vmapped in batches of ``batch``.
  Starts are independent, so results do not depend on the sharding, and on the batching
  only through the attack's solver tolerances. Returns (states [G, ...], metrics
  NamedTuple of float[G, num_steps]); with ``replicate`` False, on k > 1 devices, left
  sharded and padded (`trdr.runtime.sharding.grid_map`)."""
  return sharding.grid_map(lambda s: run_steps(step_fn, s, num_steps), states, batch,
                           devices, replicate=replicate)


def _chunk(step_fn, batch: int, devices, length: int):
  """``chunk(states, n, then=0)``: (states, metrics NamedTuple of float[G, n]) after ``n``
  steps (1 ≤ n ≤ ``length``) of every start, as `run_grid` gives them; ``then``: the
  steps the next call will ask for (0: none). Raises ValueError for another ``n``.

  ONE compiled program whatever ``n`` (`run_count`, its metrics rows cut to ``n`` in
  host memory): `run` calls it with 1 step to compile, 1 to time a step, then as many as
  fit in `SCAN_SECONDS`, and the remainder of a chunk, and a new user's first run (an
  empty compilation cache) compiles the attack's step program once. It is one jitted
  computation, except one start at a time on this process's CPU devices (the bilevel
  attack on CPU): one jitted program per start, start i on `_device` i, the devices at
  once: the same bits as `lax.map` of that program (README *Performance*). The result is
  gathered in host memory (numpy arrays, committed to no device). The next chunk is first
  queued behind each start's on its device, so that a device done with its starts goes
  on, but not on the first device: the caller's JAX work between the calls (a trace) runs
  there, the default device. The next call, given the states this one returned,
  dispatches the first device's starts and takes the rest.
  """
  def cut(metrics, n):  # in host memory: a slice of a device array compiles per n
    return jax.tree.map(lambda m: np.asarray(m)[:, :n], metrics)

  def trip(n):  # the traced trip count: an int32 scalar, the same program for every n
    if not 1 <= n <= length:
      raise ValueError(f"a chunk of {n} steps: its program runs 1 to {length}")
    return np.int32(n)

  if batch > 1 or not _cpu_threads(devices):
    @jax.jit
    def attack_steps(states, count):  # the name compile logs show
      return sharding.grid_map(lambda s: run_count(step_fn, s, count, length), states,
                               batch, devices)

    def whole(states, n, then=0):
      del then
      states, metrics = attack_steps(states, trip(n))
      return states, cut(metrics, n)
    return whole

  @jax.jit
  def attack_steps_of_one_start(state, count):
    return run_count(step_fn, state, count, length)
  ahead = []  # [(the states returned last, steps, [(its next call or None, state)])]

  def chunk(states, n, then=0):
    steps_now = trip(n)
    returned, steps, queued = ahead.pop() if ahead else (None, 0, None)
    if returned is not states or steps != n:
      # Sliced in host memory (slices taken on the first device held the others back).
      states = jax.device_get(states)
      calls = [attack_steps_of_one_start(jax.device_put(
          jax.tree.map(operator.itemgetter(i), states), _device(devices, i)), steps_now)
               for i in range(sharding.grid_size(states))]
    else:  # the same program on the same inputs: the same bits
      calls = [attack_steps_of_one_start(state, steps_now) if call is None else call
               for call, state in queued]
    queued = [(None if _device(devices, i) == devices[0] else
               attack_steps_of_one_start(state, trip(then)), state)
              for i, (state, _) in enumerate(calls)] if then else None
    # Gathered start by start as each finishes: the copies overlap the later starts.
    leaves, tree = jax.tree.flatten(calls[0])
    stacked = [np.empty((len(calls),) + leaf.shape, leaf.dtype) for leaf in leaves]
    for i, out in enumerate(calls):
      for rows, leaf in zip(stacked, jax.tree.leaves(out)):
        rows[i] = np.asarray(leaf)
    out, metrics = jax.tree.unflatten(tree, stacked)
    if then:
      ahead.append((out, then, queued))
    return out, cut(metrics, n)
  return chunk


def _device(devices, i: int):
  """Start i's device in `_chunk`: the k devices in turn from the last, so that the first
  (the caller's JAX work runs there) has the fewest starts: 21 on 2, 10 and 11."""
  return devices[-1 - i % len(devices)]


def grid_layout(batch: int) -> tuple[list[jax.Device], bool]:
  """(devices, looped): where `run` attacks a grid in vmapped batches of ``batch``.

  On this process's CPU devices, one start at a time is `_chunk`'s loop over all of them
  (``looped``), and a vmapped batch runs on the first alone: its products already use
  every core, and a smaller batch per device would change its rounding with the core
  count. Otherwise (GPU/TPU, across processes) the grid is sharded over every device.
  """
  devices = distributed.grid_devices()
  if not _cpu_threads(devices):
    return devices, False
  return (devices, True) if batch == 1 else (devices[:1], False)


def _cpu_threads(devices) -> bool:
  """Whether ``devices`` are this process's CPU devices, which `_chunk` can feed apart."""
  return all(d.platform == "cpu" for d in devices) and not distributed.active()


def _record(history: dict, done: int, n: int, seconds: float) -> dict:
  """The metrics.jsonl line of a chunk: the objective (first metric) over the grid at
  its last step, the other metrics' maximum over the chunk."""
  names = list(history)
  last = history[names[0]][:, -1]
  finite = last[np.isfinite(last)]
  record = {"step": done, "seconds_per_step": seconds,
            "diverged": int(np.sum(~np.isfinite(last)))}
  for stat, fn in (("min", np.min), ("median", np.median), ("mean", np.mean), ("max", np.max)):
    record[f"{names[0]}_{stat}"] = float(fn(finite)) if finite.size else None
  for name in names[1:]:
    record[f"{name}_max"] = float(np.max(history[name][:, -n:]))
  return record


# The stall warning (`stalled`): the median objective over the grid moved by less than this
# fraction of itself over this many logged chunks.
STALL_WINDOW = 5
STALL_RELATIVE = 0.01


def stalled(records: list[dict], objective: str, window: int = STALL_WINDOW,
            relative: float = STALL_RELATIVE) -> str | None:
  """A warning when the attack's loss has stopped moving: the median of ``objective`` over
  the grid (metrics.jsonl's records) changed by less than ``relative`` of itself over the
  last ``window`` records; None otherwise (or with fewer records, or no finite median).
  A run that converged stops moving too, and the loop records only the loss (DecoReco's
  step metrics hold no gradient), so the warning cannot tell the two apart: it says what
  it measured and where the run's later lines tell (a stall far from the data, the
  review's DecoReco on a θ* whose premise fails, is where it matters)."""
  if len(records) <= window:
    return None
  then = records[-1 - window][f"{objective}_median"]
  now = records[-1][f"{objective}_median"]
  if then is None or now is None or then == 0:
    return None
  change = abs(now - then) / abs(then)
  if change >= relative:
    return None
  return (f"the attack's {objective} has stopped moving: its median over the grid changed "
          f"by {change:.2%} (< {relative:.0%}) from step {records[-1 - window]['step']} to "
          f"{records[-1]['step']} ({then:.4g} -> {now:.4g}): what it returns from here is "
          "what it will return. Whether it converged (at the loss's floor) or stalled above "
          "it, the loss alone cannot tell: for DecoReco the truth diagnostic after the run "
          "compares it with the loss at the training images, and the log's KKT premise says "
          "whether θ* lets it find the training set at all")


# A run that talks (issue 87). A chunk of ``log_every`` steps (one metrics.jsonl record) runs
# as scans of about SCAN_SECONDS each (`_scan_length`), calls of one compiled program
# (`_chunk`): between two scans Ctrl-C stops the run, and a progress line (at least every
# PROGRESS_SECONDS) or a checkpoint by the clock (every ``checkpoint_minutes``,
# CHECKPOINT_MINUTES by default) can come. The scans do the same steps in the same order as
# one scan of the chunk: the same bits (tests/test_interrupt.py).
PROGRESS_SECONDS = 30.0
SCAN_SECONDS = 2.0
CHECKPOINT_MINUTES = 10.0


def _chunk_end(done: int, log_every: int, steps: int) -> int:
  """The last step of the chunk that step ``done`` + 1 belongs to: the next multiple of
  ``log_every`` after ``done``, or ``steps``."""
  return min((done // log_every + 1) * log_every, steps)


def _chunk_start(end: int, log_every: int) -> int:
  """The steps done before the chunk that ends at step ``end`` (≥ 1)."""
  return (end - 1) // log_every * log_every


def _scan_length(log_every: int, seconds_per_step: float) -> int:
  """Steps per scan: as many as take at most `SCAN_SECONDS` at ``seconds_per_step``, at
  least 1 and at most ``log_every`` (any number: every one runs the same compiled program,
  `_chunk`)."""
  fit = int(SCAN_SECONDS / seconds_per_step) if seconds_per_step > 0 else log_every
  return max(1, min(fit, log_every))


def _progress(done: int, steps: int, objective: str, last: np.ndarray,
              seconds: float) -> float:
  """Logs the progress line after step ``done`` (``last``: the objective float[G] at that
  step over the grid; ``seconds``: per step, recently) and returns the time it was logged."""
  finite = last[np.isfinite(last)]
  value = ("none finite" if not finite.size else f"{finite[0]:.4g}" if last.size == 1 else
           f"min {np.min(finite):.4g}  median {np.median(finite):.4g}  "
           f"max {np.max(finite):.4g}")
  logging.info("step %d/%d  %s: %s  diverged %d  (%.3fs/step, about %.0f s left)", done,
               steps, objective, value, last.size - finite.size, seconds,
               seconds * (steps - done))
  return time.time()


class _Stop:
  """Whether Ctrl-C asked the run to stop (`_sigint_stops`)."""

  def __init__(self):
    self.asked = False

  def is_set(self) -> bool:
    return self.asked


@contextlib.contextmanager
def _sigint_stops(enabled: bool = True):
  """Within: the first SIGINT (Ctrl-C) sets the yielded `_Stop` (the loop stops at its next
  safe point) instead of raising KeyboardInterrupt, a second raises it at once. Not
  ``enabled`` (across processes, which must stop together), or outside the main thread
  (where no handler can be set), the flag is never set: Ctrl-C raises as before."""
  stop = _Stop()
  if not enabled or threading.current_thread() is not threading.main_thread():
    yield stop
    return

  def handler(signum, frame):
    del signum, frame
    stop.asked = True
    signal.signal(signal.SIGINT, signal.default_int_handler)
    logging.warning("Ctrl-C: the attack stops after its current scan (seconds) and writes a "
                    "checkpoint; Ctrl-C again stops it at once, losing the steps since the "
                    "last checkpoint")

  before = signal.signal(signal.SIGINT, handler)
  try:
    yield stop
  finally:
    signal.signal(signal.SIGINT, before)


def run(attack: Attack, states: Any, *, steps: int, log_every: int, grid_batch_size: int,
        workdir: str, resume: bool, trace=None, stop_on_divergence: bool = False,
        checkpoint_every: int = 0, checkpoint_minutes: float = CHECKPOINT_MINUTES
        ) -> tuple[Any, dict[str, np.ndarray], dict[str, np.ndarray]]:
  """Attacks every start of ``states`` for ``steps`` steps, checkpointed (module docstring).

  Args:
    attack: the `Attack`.
    states: the attack's state with a leading grid axis G on every leaf (e.g.
      ``jax.vmap(attack.init)(x0, keys)``).
    steps: total steps per start (≥ 0).
    log_every: steps per chunk (≥ 1): one metrics record (and log line) each.
    grid_batch_size: see `batch_size`.
    workdir: where checkpoint.msgpack and metrics.jsonl are written.
    resume: continue from the checkpoint in ``workdir``.
    trace: optional (points int[k], fn): ``fn`` maps the images float[k, m, H, W, C] of
      grid points ``points`` to {name: float[k]}; evaluated at the start and after every
      chunk, checkpointed, NaN at the other grid points (only those k images are taken).
    stop_on_divergence: raise when a chunk ends with a non-finite objective at any grid
      point, before its checkpoint is written (a sweep instead records divergence).
    checkpoint_every: steps between checkpoints (≥ 0; 0: after every chunk). A chunk
      is checkpointed once this many steps have passed since the last checkpoint, and
      the last chunk always is; the chunks' metrics lines follow their checkpoint. A
      landscape's checkpoint is hundreds of MB, a second or two to write. A kill loses
      at most the steps since the last checkpoint.
    checkpoint_minutes: wall-clock minutes between checkpoints (≥ 0; 0: none by the
      clock): a checkpoint also comes at the first safe point (between two scans, even
      mid-chunk) this long after the last one, so a kill loses at most about this much
      work whatever ``log_every`` and ``checkpoint_every`` are. Not across processes.
  Ctrl-C (SIGINT, in the main thread) stops the run at the next safe point, about
  `SCAN_SECONDS` later: the steps done are checkpointed (not across processes, where the
  last checkpoint is kept) and KeyboardInterrupt is raised with a line that says where the
  same command resumes; a second Ctrl-C interrupts at once. Progress lines come after the
  first scan and then at least every `PROGRESS_SECONDS` (at a safe point), and after the
  last step; metrics.jsonl keeps one record per chunk.
  Returns:
    (final states [G, ...], history: metric name -> float[G, steps], the value of each
    step's metric, e.g. the objective before the step, trace: {"step": int[K], name:
    float[G, K]} at steps 0, log_every, …, steps; {} without ``trace``).
  Raises:
    ValueError: log_every < 1, steps < 0, checkpoint_every < 0 or checkpoint_minutes < 0.
    KeyboardInterrupt: Ctrl-C, after the checkpoint (above).
    FloatingPointError: a diverged grid point, with ``stop_on_divergence``.
  """
  if log_every < 1 or steps < 0 or checkpoint_every < 0 or not checkpoint_minutes >= 0:
    raise ValueError(f"need log_every >= 1, steps >= 0, checkpoint_every >= 0 and "
                     f"checkpoint_minutes >= 0, got {log_every}, {steps}, {checkpoint_every} "
                     f"and {checkpoint_minutes}")
  grid = sharding.grid_size(states)
  # Starts with bit-identical states (a landscape's five λ2 = 0 points share one noise
  # start) follow one trajectory, so each is attacked once and `spread` copies it back
  # (exactly at batch 1; in vmapped batches up to the rounding a batch's size may change).
  distinct, spread = sharding.distinct_points(states)
  size = len(distinct)
  spread_out = (lambda x: x[spread]) if size < grid else (lambda x: x)
  # In host memory (the chunks take them from there; no program per leaf); keys stay JAX.
  states = jax.tree.map(lambda x: x[distinct] if jax.dtypes.issubdtype(
      x.dtype, jax.dtypes.prng_key) else np.asarray(x)[distinct], states)
  _, metrics_shape = jax.eval_shape(attack.step, jax.tree.map(lambda x: x[0], states))
  history = {name: np.zeros((size, 0)) for name in metrics_shape._fields}
  if trace:  # the traced points' images (a field of the states, which are in host memory)
    own = spread[np.asarray(trace[0], np.int64)]
    trace_at = lambda s: trace[1](np.asarray(attack.images(s))[own])
  batch = batch_size(grid_batch_size, size, attack.batches_well)
  devices, looped = grid_layout(batch)
  # Across processes each one checkpoints only its rows of the padded grid.
  padded = sharding.shard_size(size, devices) * len(devices)
  rows = distributed.rows(padded, devices) if distributed.active() else slice(0, size)
  traced = {}
  records = []
  saved = _restore(workdir, resume, size, rows)
  if saved is not None:
    if distributed.active():
      block = flax.serialization.from_state_dict(_block(states, size, padded, rows),
                                                 saved["state"])
      states = jax.tree.map(lambda x: x[:size], distributed.gather_rows(block))
    else:
      states = flax.serialization.from_state_dict(states, saved["state"])
    history = {k: np.asarray(saved["history"][k]) for k in history}
    _check_resumed(workdir, states, history, size, steps, stop_on_divergence)
    if trace and "trace" not in saved:
      raise ValueError(f"the checkpoint in {workdir} was written without the trace this "
                       "run records; remove it (or the run directory) to start again")
    traced = {k: np.asarray(v).reshape((-1,) if k == "step" else (grid, -1))
              for k, v in saved.get("trace", {}).items()} if trace else {}
    records = files.loads_json(saved["metrics"])
    logging.info("Resuming from step %d", history_steps(history))
  elif trace:
    traced = _traced({}, 0, trace_at(states), trace[0], grid)
  rundir.write_metrics(workdir, records)  # no line for a chunk that is not in the checkpoint
  logging.info("%s, %d images per start%s: %s", attack.name,
               attack.images(jax.tree.map(lambda x: x[0], states)).shape[0],
               f" ({size} distinct of {grid})" if size < grid else "",
               f"grid of {size} points, one start at a time on each of the {len(devices)} "
               "CPU devices" if looped else sharding.describe(size, batch, devices))
  chunk = _chunk(attack.step, batch, devices, min(log_every, steps))
  if not looped:  # as chunk returns them: one compilation, not two
    states = sharding.replicate(states, devices)
  done = saved_step = history_steps(history)  # saved_step: the last checkpoint's
  # A checkpoint (and then the metrics lines of the chunks finished since the last one) is
  # written by a second thread while the next scan computes: one write in flight, awaited
  # before the next one and before returning or raising (a kill mid-write leaves the
  # previous checkpoint). Across processes each write is awaited at once: `_restore` keeps
  # one previous checkpoint, enough only while no process is more than one checkpoint ahead
  # of another; so across processes checkpoints come only at chunk ends, by steps (the
  # same steps in every process), and never by the clock or on Ctrl-C.
  writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="checkpoint")
  pending, objective, warned = None, next(iter(history)), False
  written = len(records)  # the records already in metrics.jsonl
  by_clock = checkpoint_minutes * 60
  # The steps per scan, once measured (`_scan_length`). Across processes every process must
  # make the same calls at once (the grid's collectives), and each would measure its own
  # step time: whole chunks, as before.
  length, probes = (log_every if distributed.active() else None), 0
  last_line, last_saved = None, time.time()

  def checkpoint():
    nonlocal pending, saved_step, written, last_saved
    block = _block(states, size, padded, rows) if distributed.active() else states
    if pending is not None:  # raises the previous write's error, if any (once)
      previous, pending = pending, None
      previous.result()
    pending = writer.submit(_save, workdir, {
        "state": block, "history": history, "metrics": files.dumps_json(records),
        **({"trace": traced} if trace else {})}, records[written:], done)
    written, saved_step, last_saved = len(records), done, time.time()
    if distributed.active():
      previous, pending = pending, None
      previous.result()

  def due():  # a checkpoint by the clock, or on Ctrl-C (not across processes: see above)
    return done > saved_step and not distributed.active() and (
        stop.is_set() or bool(by_clock) and time.time() - last_saved >= by_clock)

  try:
    with _sigint_stops(not distributed.active()) as stop:
      while done < steps:
        # One chunk: the steps up to the next multiple of log_every (or the last step), the
        # unit of metrics.jsonl and the trace, run as scans of `length` steps (a resumed run
        # may start mid-chunk, from a checkpoint written by the clock or on Ctrl-C).
        end = _chunk_end(done, log_every, steps)
        chunk_seconds, chunk_steps = 0.0, 0
        while done < end:
          n = min(length or 1, end - done)
          after = done + n
          then = (0 if length is None or after >= steps or stop.is_set()
                  else min(length, _chunk_end(after, log_every, steps) - after))
          start = time.time()
          states, step_metrics = chunk(states, n, then)
          jax.block_until_ready(states)
          took = time.time() - start
          chunk_seconds, chunk_steps = chunk_seconds + took, chunk_steps + n
          history = {k: np.concatenate([history[k], np.asarray(getattr(step_metrics, k))],
                                       axis=1) for k in history}
          done = after
          if length is None:  # the first scan compiles; the second, of one step too, is timed
            probes += 1
            if probes == 2:
              length = _scan_length(log_every, took / n)
          if done == end:
            break
          last_finite = np.isfinite(history[objective][:, -1]).all()
          if due() and (last_finite or not stop_on_divergence):
            checkpoint()
          if last_line is None or time.time() - last_line >= PROGRESS_SECONDS:
            last_line = _progress(done, steps, objective, spread_out(history[objective][:, -1]),
                                  took / n)
          if stop.is_set():
            break
        if done == end:  # the chunk is finished: its record, trace and checkpoint
          if trace:
            traced = _traced(traced, done, trace_at(states), trace[0], grid)
          records.append(_record({k: spread_out(v) for k, v in history.items()}, done,
                                 end - _chunk_start(end, log_every), chunk_seconds / chunk_steps))
          if stop_on_divergence and records[-1]["diverged"]:  # not checkpointed: the last is good
            failed, pending = _settle(pending), None
            raise FloatingPointError(
                f"the attack diverged: {objective} is not finite at {records[-1]['diverged']} "
                f"of {grid} grid points after step {done}; lower the attack's lr (" + (
                    "no checkpoint had been written)" if saved_step == 0 else
                    f"the checkpoint of step {saved_step} in {workdir} is kept)" if failed is None
                    else f"the checkpoint of step {saved_step} could not be written: {failed!r}; "
                    f"{workdir} keeps the one before it, if any)"))
          if done - saved_step >= checkpoint_every or done == steps or due():
            checkpoint()
          if last_line is None or time.time() - last_line >= PROGRESS_SECONDS or done == steps:
            # The time left at this chunk's pace (the first chunk's includes compilation).
            last_line = _progress(done, steps, objective, spread_out(history[objective][:, -1]),
                                  chunk_seconds / chunk_steps)
          if not warned and done < steps and (warning := stalled(records, objective)):
            logging.warning("%s", warning)   # once per run
            warned = True
        if stop.is_set():  # at the last step too: the command's next phases wait for a rerun
          if pending is not None:
            previous, pending = pending, None
            previous.result()
          where = os.path.join(workdir, rundir.CHECKPOINT_FILE)
          message = (f"interrupted after step {done} of {steps}; " + (
              f"the same command resumes from step {saved_step} (the checkpoint {where})"
              if saved_step else "no checkpoint was written: the same command starts the "
              "attack again"))
          raise KeyboardInterrupt(message)   # the command line prints it (trdr.cli.run)
  except BaseException:
    _settle(pending)  # logged, not raised: the run's own error is the one to see
    raise
  finally:
    writer.shutdown()
  if pending is not None:
    pending.result()
  if distributed.active():  # this process's copy: the caller's arrays are its own
    states = jax.tree.map(np.asarray, states)
  return (jax.tree.map(spread_out, states), {k: spread_out(v) for k, v in history.items()},
          traced)


def _settle(pending) -> BaseException | None:
  """Waits for the checkpoint write in flight (a future, or None) on a path that is
  already failing: its error is logged and returned, not raised, so that it does not
  replace the run's own error."""
  if pending is None or pending.exception() is None:
    return None
  logging.error("the checkpoint write in flight failed as well: %r", pending.exception())
  return pending.exception()


def _block(states, size: int, padded: int, rows: slice):
  """This process's ``rows`` of the grid padded as `trdr.runtime.sharding.grid_map` pads it, as
  host arrays."""
  host = sharding.pad(jax.tree.map(np.asarray, states), size, padded)
  return jax.tree.map(lambda x: x[rows], host)


def _save(workdir: str, tree: dict, lines: list[dict], step: int) -> None:
  """The checkpoint of step ``step``, then the metrics ``lines`` of the chunks finished since
  the last one (none for a checkpoint mid-chunk, by the clock or on Ctrl-C).
  Across processes (`trdr.runtime.distributed`) the previous checkpoint is kept as
  `PREVIOUS_FILE`: a process may be killed one checkpoint ahead of another, and the run
  resumes from the last step that all of them have."""
  if distributed.active():
    latest = os.path.join(workdir, rundir.CHECKPOINT_FILE)
    if os.path.exists(latest):
      os.replace(latest, os.path.join(workdir, PREVIOUS_FILE))
  rundir.save_checkpoint(workdir, tree)
  rundir.append_metrics(workdir, lines)
  arrays = sum(np.asarray(x).nbytes for x in jax.tree.leaves(tree) if hasattr(x, "shape"))
  logging.info("Checkpoint of step %s: %.1f MB, of which %.1f MB the arrays a resume needs "
               "(the starts' attack state: images, the optimiser's state, θ(x); the loss "
               "history; the trace)", step,
               os.path.getsize(os.path.join(workdir, rundir.CHECKPOINT_FILE)) / 1e6,
               arrays / 1e6)


def _restore(workdir: str, resume: bool, size: int, rows: slice) -> dict | None:
  """The checkpoint to resume (this process's rows ``rows`` of the grid), or None to
  start from the first step.

  In one process: the work dir's checkpoint when ``resume``. Across processes: the one
  of the last step every process has (`distributed.common_step`), the latest or the
  previous checkpoint; none when some process has none.

  Raises:
    ValueError: a checkpoint that is corrupted, of another config, or (across
      processes) of other rows of the grid, or no checkpoint of the common step.
  """
  saved = rundir.load_checkpoint(workdir) if resume else None
  if not distributed.active():
    return saved
  step = history_steps(saved["history"]) if saved else 0
  common = distributed.common_step(step)
  if common == 0:
    return None
  if step != common:
    saved = rundir.load_checkpoint(workdir, PREVIOUS_FILE)
    if history_steps(saved["history"]) != common:
      raise ValueError(f"{os.path.join(workdir, PREVIOUS_FILE)} is not of step {common}, the "
                       "last step every process checkpointed; delete the run's checkpoints "
                       "to start again")
  length = len(next(iter(jax.tree.leaves(saved["state"]))))
  if length != rows.stop - rows.start:
    raise ValueError(f"the checkpoint in {workdir} holds {length} grid points, but this "
                     f"process runs {rows.stop - rows.start} ({size} over "
                     f"{jax.process_count()} processes); start the run again")
  return saved


def _check_resumed(workdir, states, history, size, steps, finite) -> None:
  """Raises ValueError, naming the checkpoint, unless its state fits this run: G grid
  points, at most ``steps`` steps done, and (``finite``) no NaN/inf in the state."""
  path = os.path.join(workdir, rundir.CHECKPOINT_FILE)
  remedy = f"delete {path} (and {rundir.METRICS_FILE}) to start the run again"
  shapes = {k: v.shape for k, v in history.items()}
  if any(len(s) != 2 or s[0] != size or s[1] > steps for s in shapes.values()):
    raise ValueError(f"{path} does not fit this run: its history has shapes {shapes}, "
                     f"expected ({size}, ≤ {steps}); {remedy}")
  leaves = [np.asarray(x) for x in jax.tree.leaves(states)]
  if finite and not all(np.isfinite(x).all() for x in leaves
                        if np.issubdtype(x.dtype, np.inexact)):
    raise ValueError(f"{path} holds a non-finite attack state; {remedy}")


def _traced(traced: dict, step: int, values: dict, points, grid: int) -> dict:
  """``traced`` ({"step": int[K], name: float[G, K]}; {} for none yet) with one more column:
  ``values`` {name: float[k]} at the grid ``points`` int[k], NaN at the others."""
  out = {"step": np.append(traced.get("step", np.zeros(0, np.int64)), step)}
  for k, v in values.items():
    column = np.full((grid, 1), np.nan)
    column[np.asarray(points, np.int64), 0] = v
    out[k] = np.concatenate([traced[k], column], axis=1) if k in traced else column
  return out


def history_steps(history: dict) -> int:
  """Steps done, from a history dict of float[G, steps] arrays."""
  return int(next(iter(history.values())).shape[1])
