"""Section 1: the eq. 10 grid attacked as one computation, and in Python loops of one
start at a time.

The bilevel attack (`trdr.attacks.ATTACKS`) from every (λ1, λ2) start of the config's grid,
``steps`` outer steps, each way jitted once and timed in ``repeats`` alternating rounds
(median and min–max): one `jax.vmap` over all grid points; one computation mapped over
the grid in vmapped batches of the config's size and sharded over the k local devices
(`trdr.experiment.loop.run_grid`, batch `trdr.experiment.loop.batch_size`), its results
copied onto every device inside it (an all-gather) or left sharded and gathered to the
host; trdr's loop (`trdr.experiment.loop._chunk`, what `loop.run` uses on CPU: one jitted
call per start, the k devices in turn, at once), also in chunks as `loop.run` calls it,
each start's next chunk queued before the chunk is gathered (on every device but the
first) against waiting at each chunk's end; and a Python loop over the grid points on one
device. On CPU, k is the number of cores (--cpu_devices;
`trdr.runtime.sharding.set_cpu_devices`). Printed: the times, their ratios to trdr's loop
and to the one-device loop, and the largest difference of the final images and of l from
the one-device loop's (in float32 they agree to the lower-level tolerance;
tests/test_landscape.py checks equality in float64 at tight tolerances).
"""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from benchmarks import common
from trdr.experiment import loop
from trdr.runtime import sharding


def run(config: ml_collections.ConfigDict, steps: int, repeats: int, vmap: bool = True
        ) -> None:
  """Prints section 1 for the bilevel ``config``, in the config's precision; ``vmap``
  False leaves out the whole-grid vmap (far slower than the loop on CPU: every start
  runs as long as the slowest; the section's table gives the ratio)."""
  with common.x64(config.float64):
    dtype = jnp.float64 if config.float64 else jnp.float32
    _, attack, x0, key_attack, _ = common.bilevel_grid(config, dtype)
    g, n = x0.shape[:2]
    batch = loop.batch_size(config.attack.grid_batch_size, g, attack.batches_well)
    states = jax.vmap(lambda x: attack.init(x, key_attack))(x0)
    devices, looped_k = loop.grid_layout(1)  # where loop.run puts one start at a time
    vmapped = jax.jit(lambda s: loop.run_grid(attack.step, s, steps, g))
    mapped = jax.jit(lambda s: loop.run_grid(attack.step, s, steps, batch))
    split = jax.jit(lambda s: loop.run_grid(attack.step, s, steps, batch, replicate=False))
    chunk = loop._chunk(attack.step, 1, devices)
    # From the same start states as the other ways (an init compiled into the program
    # can round its first step differently: 6e-8 on the float32 smoke grid).
    single = jax.jit(lambda s: loop.run_steps(attack.step, s, steps))
    point = [jax.tree.map(lambda leaf, i=i: leaf[i], states) for i in range(g)]
    looped = lambda: [single(p) for p in point]
    every = max(1, steps // 3)  # 3-4 chunks (loop.run's: config.attack.log_every steps)

    def in_chunks(s, queued):
      parts = []
      for done in range(0, steps, every):
        n = min(every, steps - done)
        s, m = chunk(s, n, min(every, steps - done - n) if queued else 0)
        parts.append(m)
      return s, jax.tree.map(lambda *x: np.concatenate(x, axis=1), *parts)
    # Alternating rounds: load from elsewhere (steal on a shared VM) hits each way alike.
    calls = {"vmap": lambda: vmapped(states), "map": lambda: mapped(states),
             "split": lambda: sharding.gather(split(states), g),
             "loop_k": lambda: chunk(states, steps), "queued": lambda: in_chunks(states, True),
             "waiting": lambda: in_chunks(states, False), "loop": looped}
    times = common.timed_alternately({k: f for k, f in calls.items() if vmap or k != "vmap"},
                                     repeats)
    t = {k: float(np.median(v)) for k, v in times.items()}
    spread = {k: f"{min(v):.2f}–{max(v):.2f}" for k, v in times.items()}
    reference = looped()
    k = len(devices)
    print(f"\n== eq. 10 grid: {g} initialisations x {n} images, {steps} outer steps (solve="
          f"{config.attack.hypergradient.solve}, {k} {jax.default_backend()} device(s)) ==")
    print(f"{'':50s} {'median s':>9s} {'min–max s':>13s} {'trdr loop / this':>17s} "
          f"{'1-device loop / this':>21s} {'max |Δ images| / rel. |Δ l| vs loop':>36s}")
    how = "unbatched lax.map" if batch == 1 else f"vmapped batches of {batch}"
    for name, key in (
        (f"jax.vmap over all {g} grid points", "vmap"),
        (f"one computation on {k} device(s), {how}", "map"),
        ("  the same, no all-gather: shards to the host", "split"),
        (f"trdr's loop: one start per device, {k} at once" if looped_k else
         f"trdr's layout at batch 1: one computation on {k}", "loop_k"),
        (f"  the same in chunks of {every} steps, the next queued", "queued"),
        ("  the same, waiting at each chunk's end", "waiting"),
        ("Python loop over grid points on one device", "loop")):
      if key in t:  # each way's result once more (the same call), against the reference
        delta = "(reference)" if key == "loop" else difference(calls[key](), reference)
        print(f"{name:50s} {t[key]:9.3f} {spread[key]:>13s} {t['loop_k'] / t[key]:16.2f}x "
              f"{t['loop'] / t[key]:20.2f}x {delta:>36s}")
    print(f"(median of {repeats} alternating rounds; a ratio ≥ 1: not slower than that loop)")


def difference(result, reference) -> str:
  """Largest |Δ| of the final images and largest relative |Δ| of l of the grid ``result``
  (states, metrics), against the loop's per-point results."""
  state, step_metrics = result
  images = max(float(np.abs(state.images[i] - r[0].images).max())
               for i, r in enumerate(reference))
  loss = max(float(np.max(np.abs(step_metrics.upper_loss[i] - r[1].upper_loss)
                          / np.maximum(np.abs(r[1].upper_loss), 1e-12)))
             for i, r in enumerate(reference))
  return f"{images:.1e} / {loss:.1e}"
