"""Section 3: one DecoReco attack iteration at the size of Haim et al. (2022).

`paper_size`: MLP 3072-1000-1000-1 with only the first layer's bias, Haim initialisation,
m candidates x ~ N(0, 10⁻⁶) (--decoreco_candidates: 1000 as Haim et al., 200 as trdr's
`:cpu` runs), α = 20, loss + ∇(x, λ) + SGD-momentum steps as in the
reference code; in float64 and float32, by autodiff (``jax.value_and_grad(decoreco.
stationarity_loss)``), the fused `trdr.attacks.kkt_mlp.value_and_grad` and, with torch
installed, the PyTorch transcription of the reference (`torch_reference`), first checked to
give trdr's loss (float64: to `TRANSCRIPTION_RTOL`). Jitted, warmed up, timed in
alternating rounds (load hits all alike); a Markdown table of ms / iteration (median,
min–max), GFLOP/s and the ratios to autodiff and to the reference in this run. Without
torch no ratio to the reference is printed: none measured elsewhere is divided by."""

import os

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import common, paper_size, torch_reference
from trdr.attacks import kkt_mlp

# Float64 gate on the transcription's loss: both sum ~4.1e6 squares in different orders,
# whose rounding errors grow like √N · ε ≈ 2e-13 (a random walk); a wrong term is far off.
TRANSCRIPTION_RTOL = 1e-12


def _measure(mlp, dtype, repeats: int, m: int, flops: dict) -> tuple[list, list]:
  """(table rows, notes) of one dtype."""
  name = jnp.dtype(dtype).name
  methods = paper_size.methods(mlp)
  args = params, images, lambdas, labels = paper_size.inputs(mlp, dtype, m)
  state = (images, lambdas, jnp.zeros_like(images), jnp.zeros_like(lambdas))
  steps = {k: paper_size.momentum_step(f, labels) for k, f in methods.items()}
  xla_flops = {k: jax.jit(f).lower(*args).compile().cost_analysis().get("flops", float("nan"))
               for k, f in methods.items()}
  (ref_value, ref_grads), (value, grads) = (jax.jit(methods[k])(*args)
                                            for k in ("autodiff", "fused"))
  rel = lambda a, b: float(jnp.max(jnp.abs(a - b)) / jnp.max(jnp.abs(b)))
  notes = [(f"{name}: fused vs autodiff, max |Δ| / max |autodiff|: loss "
            f"{rel(value, ref_value):.1e}, ∇x {rel(grads[0], ref_grads[0]):.1e}, "
            f"∇λ {rel(grads[1], ref_grads[1]):.1e}; XLA cost analysis: autodiff "
            f"{xla_flops['autodiff'] / 1e9:.1f}, fused {xla_flops['fused'] / 1e9:.1f} GFLOP")]
  calls = {k: (lambda step=step: step(params, *state)) for k, step in steps.items()}
  reference = torch_reference.iteration(*args)
  if reference is None:
    notes.append(f"{name}: PyTorch not installed: no reference timed, no ratio to it")
  else:
    first = reference()      # its first iteration's loss is at the same (θ, x, λ)
    difference = abs(first - float(ref_value)) / abs(float(ref_value))
    notes.append(f"{name}: PyTorch transcription's loss vs trdr's: relative difference "
                 f"{difference:.1e}")
    if name == "float64" and not difference <= TRANSCRIPTION_RTOL:
      notes.append(f"{name}: the transcription differs by more than {TRANSCRIPTION_RTOL:g}: "
                   "not timed, no ratio")
    else:
      calls["reference"] = reference
  times = common.timed_alternately(calls, repeats)
  ms = {k: 1e3 * float(np.median(t)) for k, t in times.items()}
  span = {k: (1e3 * min(t), 1e3 * max(t)) for k, t in times.items()}
  label = {"autodiff": "JAX autodiff", "fused": "fused kkt_mlp",
           "reference": "PyTorch reference transcription"}
  rows = [(name, label[k], ms[k], span[k], flops[k] / ms[k] / 1e6, ms[k] / ms["autodiff"],
           ms[k] / ms["reference"] if "reference" in ms else float("nan")) for k in calls]
  return rows, notes


def run(repeats: int, m: int = paper_size.M) -> None:
  """Prints section 3: the Markdown table of one DecoReco iteration on m candidates (paper
  size: 1000; the `:cpu` runs: 200), float64 and float32."""
  flops = paper_size.flops(m, paper_size.D, paper_size.WIDTHS)
  mlp = paper_size.model()
  rows, notes = [], []
  with common.x64(True):
    for dtype in (jnp.float64, jnp.float32):
      more_rows, more_notes = _measure(mlp, dtype, repeats, m, flops)
      rows, notes = rows + more_rows, notes + more_notes
  load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
  print(f"\n== DecoReco iteration, MLP {paper_size.D}-{'-'.join(map(str, paper_size.WIDTHS))}"
        f"-1 (first-layer bias only), m = {m}, α = {paper_size.ALPHA:g}, loss + "
        f"∇(x, λ) + SGD momentum; median of {repeats} (backend {jax.default_backend()}, "
        f"{os.cpu_count()} CPUs, load average {load} at the end: other processes share the "
        "CPUs if it exceeds their number) ==\n")
  print("| dtype | method | ms / iteration, median | min–max | GFLOP/s (median) | "
        "/ autodiff | / reference (this run) |")
  print("|---|---|---:|---:|---:|---:|---:|")
  for name, method, ms, (low, high), gflops, ratio, to_reference in rows:
    reference = "—" if np.isnan(to_reference) else f"{to_reference:.2f}"
    print(f"| {name} | {method} | {ms:.4g} | {low:.4g}–{high:.4g} | {gflops:.0f} | "
          f"{ratio:.2f} | {reference} |")
  print(f"\nMatmul FLOPs per iteration: autodiff {flops['autodiff'] / 1e9:.1f} GFLOP, fused "
        f"{flops['fused'] / 1e9:.1f} GFLOP (layers in the Gram form: "
        f"{kkt_mlp.gram_layers(m, (paper_size.D, *paper_size.WIDTHS))}), PyTorch reference "
        f"{flops['reference'] / 1e9:.1f} GFLOP (with unused parameter gradients); fused / "
        f"reference {flops['fused'] / flops['reference']:.2f}.")
  for note in notes:
    print(f"- {note}")
