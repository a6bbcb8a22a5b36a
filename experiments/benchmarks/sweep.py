"""Section 4: the DecoReco hyperparameter sweep, vmapped as one computation vs a loop.

At the size of the sweep config (configs/decoreco_cifar.py:cpu: D-1000-1000-1, m = 200,
float64, fused gradient) against an untrained victim, S settings drawn from the config's
ranges (`trdr.experiment.starts.sample_settings`), ``steps`` iterations of
`trdr.attacks.decoreco.run_steps`: as ONE vmapped computation (`trdr.runtime.sharding.grid_map`,
the sweep's code path) and in a Python loop over the settings (each setting's run jitted
once). Prints both times, their ratio and the largest difference of the final candidates.
"""

import functools
import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from benchmarks import common
from trdr import models, victim
from trdr.attacks import decoreco
from trdr.experiment import loop as trdr_loop
from trdr.experiment import starts as start_images
from trdr.runtime import sharding


def run(config: ml_collections.ConfigDict, num_settings: int, steps: int, repeats: int) -> None:
  """Prints section 4 for the DecoReco ``config``, in the config's precision."""
  with common.x64(config.float64):
    dtype = jnp.float64 if config.float64 else jnp.float32
    model = models.build_model(config.victim)
    shape = (32, 32, 3)
    target = victim.Victim(model, models.init_params(model, jax.random.key(0), shape, dtype),
                           config.victim, {})
    m = config.attack.candidates_per_image * 2 * config.data.n_per_class
    settings = start_images.sample_settings(jax.random.key(1), num_settings,
                                          config.sweep.ranges, dtype)
    keys = jax.random.split(jax.random.key(2), num_settings)
    starts = jax.vmap(lambda k, sigma: decoreco.init_state(*common.decoreco_candidates(
        k, m, shape, sigma, dtype)[:2]))(keys, settings.init_scale)
    labels = common.decoreco_candidates(keys[0], m, shape, 1.0, dtype)[2]
    loss_and_grad = decoreco.make_loss_and_grad(target, config.attack, labels)
    steps_of = functools.partial(decoreco.run_steps, num_steps=steps,
                                 loss_and_grad=loss_and_grad,
                                 lambda_lr=config.attack.lambda_lr,
                                 momentum=config.attack.momentum)
    devices, _ = trdr_loop.grid_layout(num_settings)  # as a sweep run lays it out
    vmapped = jax.jit(lambda s, h: sharding.grid_map(lambda sh: steps_of(sh[0], sh[1]), (s, h),
                                                     num_settings, devices))
    one = jax.jit(steps_of)
    pick = lambda tree, i: jax.tree.map(lambda t: t[i], tree)
    loop = lambda: [one(pick(starts, i), pick(settings, i)) for i in range(num_settings)]
    t_vmap = common.median_time(lambda: vmapped(starts, settings), repeats)
    t_loop = common.median_time(loop, repeats)
    together, _ = vmapped(starts, settings)
    alone = np.stack([np.asarray(r[0].images) for r in loop()])
    diff = float(np.nanmax(np.abs(np.asarray(together.images) - alone)))
    print(f"\n## DecoReco sweep: {num_settings} settings × {steps} iterations, m = {m}, "
          f"widths {tuple(config.victim.widths)}, "
          f"{'float64' if config.float64 else 'float32'}, "
          f"{'fused' if decoreco.fused_applies(target) else 'autodiff'} gradient, "
          f"load average {os.getloadavg()[0]:.1f}\n")
    print("| sweep as | seconds | loop time / this |\n|---|---:|---:|")
    print(f"| one vmapped computation (`sharding.grid_map`) | {t_vmap:.2f} | "
          f"{t_loop / t_vmap:.2f}× |")
    print(f"| a Python loop over the settings | {t_loop:.2f} | 1.00× |")
    print(f"\nmax |Δ final candidates|, vmapped vs loop: {diff:.1e}")
