"""Section 3: one DecoReco attack iteration at the size of Haim et al. (2022).

`paper_size`: MLP 3072-1000-1000-1 with only the first layer's bias, Haim initialisation,
m = 1000 candidates x ~ N(0, 10⁻⁶), α = 20, loss + ∇(x, λ) + SGD-momentum steps as in the
reference code; in float64 and float32, by (a) autodiff, ``jax.value_and_grad(
decoreco.stationarity_loss)``, and (b) the fused `trdr.attacks.kkt_mlp.value_and_grad`;
jitted, median of ``repeats`` after a warm-up, the two timed alternately. Printed as a
Markdown table: ms / iteration, GFLOP/s on each matmul FLOP count (XLA's own count too),
fused / autodiff in this run; the fused loss's and gradients' largest relative difference
from autodiff's; with torch installed, the PyTorch transcription of the reference
iteration (`torch_reference`) timed alongside, in the same run. No ratio to a time
measured elsewhere is printed: CPUs of our kind differ 2× in matmul peak.
"""

import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import common, paper_size, torch_reference


def _measure(mlp, dtype, repeats: int, flops: dict) -> tuple[list, list]:
  """(table rows, notes) of one dtype."""
  name = jnp.dtype(dtype).name
  methods = paper_size.methods(mlp)
  args = params, images, lambdas, labels = paper_size.inputs(mlp, dtype)
  state = (images, lambdas, jnp.zeros_like(images), jnp.zeros_like(lambdas))
  steps = {k: paper_size.momentum_step(f, labels) for k, f in methods.items()}
  xla_flops = {k: jax.jit(f).lower(*args).compile().cost_analysis().get("flops", float("nan"))
               for k, f in methods.items()}
  times = {k: [] for k in steps}
  for step in steps.values():
    jax.block_until_ready(step(params, *state))     # compile and warm up
  for _ in range(repeats):                           # alternate, so load hits both alike
    for k, step in steps.items():
      start = time.perf_counter()
      jax.block_until_ready(step(params, *state))
      times[k].append(time.perf_counter() - start)
  ms = {k: 1e3 * float(np.median(t)) for k, t in times.items()}
  fastest = {k: 1e3 * float(np.min(t)) for k, t in times.items()}
  (ref_value, ref_grads), (value, grads) = (jax.jit(methods[k])(*args)
                                            for k in ("autodiff", "fused"))
  rel = lambda a, b: float(jnp.max(jnp.abs(a - b)) / jnp.max(jnp.abs(b)))
  notes = [(f"{name}: fused vs autodiff, max |Δ| / max |autodiff|: loss "
            f"{rel(value, ref_value):.1e}, ∇x {rel(grads[0], ref_grads[0]):.1e}, "
            f"∇λ {rel(grads[1], ref_grads[1]):.1e}; XLA cost analysis: autodiff "
            f"{xla_flops['autodiff'] / 1e9:.1f}, fused {xla_flops['fused'] / 1e9:.1f} GFLOP")]
  rows = [(name, k, ms[k], fastest[k], flops[k] / ms[k] / 1e6, ms[k] / ms["autodiff"])
          for k in steps]
  torch_iteration = torch_reference.iteration(*args)
  if torch_iteration is None:
    notes.append(f"{name}: PyTorch transcription skipped (import torch failed)")
  else:
    seconds = common.median_time(torch_iteration, repeats)
    rows.append((name, "PyTorch transcription (this run)", 1e3 * seconds, float("nan"),
                 paper_size.TORCH_GFLOP / seconds, 1e3 * seconds / ms["autodiff"]))
  return rows, notes


def run(repeats: int) -> None:
  """Prints section 3: the Markdown table of one DecoReco iteration, float64 and float32."""
  flops = paper_size.flops(paper_size.M, paper_size.D, paper_size.WIDTHS)
  mlp = paper_size.model()
  rows, notes = [], []
  with common.x64(True):
    for dtype in (jnp.float64, jnp.float32):
      more_rows, more_notes = _measure(mlp, dtype, repeats, flops)
      rows, notes = rows + more_rows, notes + more_notes
  load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
  print(f"\n== DecoReco iteration, MLP {paper_size.D}-{'-'.join(map(str, paper_size.WIDTHS))}"
        f"-1 (first-layer bias only), m = {paper_size.M}, α = {paper_size.ALPHA:g}, loss + "
        f"∇(x, λ) + SGD momentum; median of {repeats} (backend {jax.default_backend()}, "
        f"{os.cpu_count()} CPUs, load average {load} at the end: other processes share the "
        "CPUs if it exceeds their number) ==\n")
  print("| dtype | method | ms / iteration, median | fastest | GFLOP/s (median) | "
        "/ autodiff (this run) |")
  print("|---|---|---:|---:|---:|---:|")
  for name, method, ms, fastest, gflops, ratio in rows:
    print(f"| {name} | {method} | {ms:.0f} | {fastest:.0f} | {gflops:.0f} | {ratio:.2f} |")
  print(f"\nMatmul FLOPs per iteration: autodiff {flops['autodiff'] / 1e9:.1f} GFLOP, fused "
        f"{flops['fused'] / 1e9:.1f} GFLOP (PyTorch reference {paper_size.TORCH_GFLOP}, with "
        "unused parameter gradients).")
  for note in notes:
    print(f"- {note}")
