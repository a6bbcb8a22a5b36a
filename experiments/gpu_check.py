r"""The paper's sizes on one accelerator within a wall-clock limit, each part's numbers in JSON.

  python experiments/gpu_check.py --size=paper --limit=540 --workdir=runs/gpu_check_paper
  make gpu-check                  # the same (one GPU, under ten minutes)
  make gpu-check SIZE=smoke       # the same code path on the CPU in about a minute (CI)
  make gpu-doc                     # docs/gpu.md from the calls kept in docs/gpu/ (gpu_doc.py)

On this project's GPU machines (no network; make gpu-wheels here first, carry .whl):
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
  PYTHONPATH=/tmp/site:$PWD python3 experiments/gpu_check.py --size=paper --output=$OUT

Three parts run in this order, each in its own process with its own time budget (`CAPS`,
and what is left of --limit; a part that outlives it is stopped; what it and the parts
before it wrote stays):

  decoreco    Haim et al.'s DecoReco at their size: MLP 3072-1000-1000-1 (configs/
              decoreco_cifar.py, paper size: n = 500, 250 per class group, m = 1,000
              candidates, 50,000 iterations, float64) with Haim et al.'s published tuned
              CIFAR-10 run b9dfyspx (`PUBLISHED_RUN`, ../shared/paper/
              reference_settings.md). The victim is trained with Haim et al.'s recipe
              (PyTorch's initialisation after the first layer, gradient-flow time 10⁴) at
              `VICTIM_LR` (20,000 epochs), not at their lr 0.01 for 10⁶ epochs, which does
              not fit the window; its KKT premise (`trdr.victim.kkt`) is recorded.
              Counts of training images reconstructed (SSIM ≥ 0.4, windows 11 and 3,
              and as best buddies) beside the same counts on the start images; the
              reconstructions beside their nearest training images (decoreco_grid.png);
              one iteration's time by trdr and by the PyTorch transcription of the reference
              (experiments/benchmarks/torch_reference.py) on the same device, alternated.
  one_hidden  the paper-size one-hidden ReLU victim (eq. 9, width 6144, n = 500, float32,
              configs/bilevel_one_hidden.py) trained by L-BFGS to ||∇θE|| < the lower
              level's tolerance or the config's iteration cap, and θ(x_GT), θ(partition),
              θ(noise) re-solved under every θ0 reading of `trdr.studies.readings`,
              (e) θ* first: l = ||θ* − θ(x)||² summed and per parameter, with the
              ||∇θE|| each solve reached and why it stopped, beside the paper's Table 1.
  notebook    experiments/colab.ipynb executed headless (nbclient) on this process's
              default JAX backend, at the notebook's ":cpu" sizes for --size=paper (its
              paper size is a longer DecoReco than part 1), ":smoke" for --size=smoke.

Files in --output (default WORKDIR/results/<UTC date and time>, one folder per call, as
docs/gpu/ keeps them): environment.json (device, versions, date,
caps), <part>.json for each part (status "finished", "running" while it runs, or
"stopped" / "failed" with the reason, and what it had measured; "wall_seconds": the part's
process from start to end), decoreco_grid.png and log.txt (every part's output). Run
directories go under --workdir; a part finds there what an earlier call with the same
--workdir finished (DecoReco resumes its checkpoint, the notebook reuses finished runs).

A window of 540 s should hold parts 1 and 2 but not the notebook beside them (times on an
H200, docs/gpu.md): run it in a window of its own, --parts=notebook.
"""

import contextlib
import datetime
import os
import shutil
import subprocess
import sys
import time
import traceback

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from benchmarks import common, paper_size, torch_reference
from benchmarks import record as machine_record
from trdr import experiment, plotting
from trdr.configs import bilevel_one_hidden, decoreco_cifar
from trdr.studies import readings
from trdr.report import artefacts
from trdr.runtime import files

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PARTS = ("decoreco", "one_hidden", "notebook")
# The most seconds each part may take: its times on one H200 (docs/gpu.md; part 2's from
# its first re-solves, as each of its 12 takes about as long) with room. Parts run in
# order, each until it finishes or its cap or the --limit comes, so a part's unused time
# goes to the next: within 540 s parts 1 and 2 should fit, the notebook not beside them.
CAPS = {"decoreco": 200, "one_hidden": 420, "notebook": 260}
# Haim et al.'s published tuned CIFAR-10 reconstruction run b9dfyspx
# (../shared/paper/reference_settings.md): σ, lr (x), λ_min, α.
PUBLISHED_RUN = {"name": "b9dfyspx", "init_scale": 8.857e-4, "lr": 0.5549,
                 "lambda_min": 0.4983, "alpha": 19.14}
VICTIM_LR = 0.5              # the gradient-flow time 10⁴ of the config in 20,000 epochs
VICTIM_MAX_EPOCHS = 20_000
SSIM_THRESHOLD = 0.4         # "reconstructed": the count of the paper's Figs. 6–9
TIMED_ITERATIONS = {"paper": 20, "smoke": 3}   # alternated rounds, trdr vs the reference
TIMING_CANDIDATES = {"paper": 1000, "smoke": 10}
GRID_FIGURE = "reconstructions_vs_train.png"   # `trdr.plotting`: an attack's grid
ENVIRONMENT_BUDGET = 60
# float32 products as float32 (on a GPU, JAX's default precision rounds them to TF32, whose
# 10-bit mantissa would floor ||∇θE|| far above the lower level's tolerance).
MATMUL_PRECISION = "highest"

def _write(output: str, name: str, record: dict) -> None:
  files.write_json(os.path.join(output, f"{name}.json"), record)


def _amend(output: str, name: str, missing: dict, **fields) -> dict:
  """The part's record as it last wrote it (``missing`` if it wrote none), updated with
  ``fields`` and written back."""
  path = os.path.join(output, f"{name}.json")
  record = files.read_json(path) if os.path.exists(path) else dict(missing)
  record.update(fields)
  _write(output, name, record)
  return record


def _stop_reason(grad_norm: float, num_iter: int, tol: float, max_iter: int) -> str:
  """Why an L-BFGS solve (`trdr.victim.solver`) ended."""
  if grad_norm < tol:
    return "tolerance reached"
  return "iteration cap" if num_iter >= max_iter else "stalled (line search made no progress)"


def decoreco(size: str, workdir: str, output: str, budget: float) -> dict:
  """Part 1; returns its record (also written to decoreco.json as it goes)."""

  del budget  # the attack's checkpoints keep its finished chunks when it is stopped
  config = decoreco_cifar.get_config("" if size == "paper" else "smoke")
  config.attack.update({k: v for k, v in PUBLISHED_RUN.items() if k != "name"})
  if size == "paper":
    config.victim.lr, config.victim.max_epochs = VICTIM_LR, VICTIM_MAX_EPOCHS
  record = {"part": "decoreco", "status": "running", "published_run": PUBLISHED_RUN,
            "n_train": 2 * config.data.n_per_class, "widths": list(config.victim.widths),
            "candidates": config.attack.candidates_per_image * 2 * config.data.n_per_class,
            "steps": config.attack.steps, "victim_lr": config.victim.lr,
            "victim_max_epochs": config.victim.max_epochs,
            "victim_flow_time": config.victim.get("flow_time"),
            "victim_later_init": config.victim.get("later_init"), "float64": config.float64}
  _write(output, "decoreco", record)
  run_dir = os.path.join(workdir, "decoreco")
  began = time.perf_counter()
  summary = experiment.run(config, run_dir, "attack").summary
  plotting.run_figures(run_dir)
  shutil.copyfile(os.path.join(run_dir, GRID_FIGURE), os.path.join(output, "decoreco_grid.png"))
  key = f"ssim_ge_{SSIM_THRESHOLD}"
  counts = lambda prefix: {
      "window_11": summary[f"{prefix}reconstructed"][key],
      "window_3": summary[f"{prefix}reconstructed_w3"][key],
      "best_buddies_window_11": summary[f"{prefix}reconstructed_best_buddies"][key],
      "best_buddies_window_3": summary[f"{prefix}reconstructed_best_buddies_w3"][key]}
  record.update(victim=summary["victim"], phase_seconds=summary["phase_seconds"],
                seconds=time.perf_counter() - began, ssim_threshold=SSIM_THRESHOLD,
                reconstructed=counts(""), start_reconstructed=counts("start_"),
                mean_best_ssim=summary["mean_best_ssim"], final_loss=summary["final_loss"],
                kkt_premise=summary.get("kkt_premise"))
  _write(output, "decoreco", record)

  # One iteration (loss, ∇(x, λ), SGD-momentum steps), trdr's fused kkt_mlp vs the PyTorch
  # transcription of the reference, alternated on this device, float64 as the run above.
  with jax.enable_x64(True):
    mlp = paper_size.model()
    params, images, lambdas, labels = paper_size.inputs(mlp, jnp.float64,
                                                        TIMING_CANDIDATES[size])
    step = paper_size.momentum_step(paper_size.methods(mlp)["fused"], labels)
    state = (params, images, lambdas, jnp.zeros_like(images), jnp.zeros_like(lambdas))
    calls = {"trdr": lambda: step(*state)[0]}
    reference = torch_reference.iteration(params, images, lambdas, labels)
    if reference is not None:
      calls["reference"] = reference
    times = common.timed_alternately(calls, TIMED_ITERATIONS[size])
  median = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
  record["iteration_ms"] = {"candidates": TIMING_CANDIDATES[size],
                            "rounds": TIMED_ITERATIONS[size], **median}
  record["reference_over_trdr"] = (median["reference"] / median["trdr"]
                                   if "reference" in median else None)
  record["attack_ms_per_iteration"] = 1e3 * summary["phase_seconds"]["attack"] / config.attack.steps
  record["status"] = "finished"
  return record


def one_hidden(size: str, workdir: str, output: str, budget: float) -> dict:
  """Part 2; returns its record (also written to one_hidden.json after every solve)."""

  del budget  # the record is kept after every solve
  config = bilevel_one_hidden.get_config("" if size == "paper" else "smoke")
  config.victim.activation = "relu"        # the paper's (the smoke config's is softplus)
  if size == "smoke":
    config.victim.max_iter = 50
  ll, v = config.attack.lower_level, config.victim
  # The re-solves share the victim's budget (as configs/paper_figures.py's readings), so
  # that under reading (b) the re-solve at x_GT can retrace the victim's training.
  ll.max_iter, ll.tol, ll.memory_size = v.max_iter, v.tol, v.memory_size
  record = {"part": "one_hidden", "status": "running", "width": v.width,
            "activation": v.activation, "n_train": 2 * config.data.n_per_class,
            "float64": config.float64, "tol": v.tol, "max_iter": v.max_iter,
            "matmul_precision": MATMUL_PRECISION,
            "paper_table1": artefacts.PAPER_TABLE1["one_hidden"],
            "readings_in_words": {r: words for r, (_, _, words) in readings.READINGS.items()}}
  began = time.perf_counter()

  def keep(out: dict) -> None:
    p = out["parameters"]
    record.update(parameters=p, seconds=time.perf_counter() - began, victims={
        init: {**report, "stopped": _stop_reason(report["grad_norm"], report["num_iter"],
                                                 v.tol, v.max_iter)}
        for init, report in out["victims"].items()}, readings={
        r: {s: {**solve, "distance_per_parameter": solve["distance"] / p,
                "stopped": _stop_reason(solve["grad_norm"], solve["num_iter"], ll.tol,
                                        ll.max_iter)}
            for s, solve in sets.items()} for r, sets in out["readings"].items()})
    _write(output, "one_hidden", record)

  _write(output, "one_hidden", record)
  with jax.enable_x64(bool(config.float64)), jax.default_matmul_precision(MATMUL_PRECISION):
    out = readings.solves(config, os.path.join(workdir, "one_hidden"),
                          order=("e", "a", "b", "c"), on_solve=keep)
  keep(out)
  tolerance = artefacts.RULES["small_param_distance"]
  record.update(minimiser_tolerance=tolerance, status="finished",
                x_gt_minimises=readings.minimiser_readings(out["readings"], tolerance))
  return record


def notebook(size: str, workdir: str, output: str, budget: float) -> dict:
  """Part 3; returns its record: the notebook's printed lines, figures and cell times."""
  import nbformat  # here: the test extra's, not needed by the other parts
  from nbclient import NotebookClient

  notebook_size = "cpu" if size == "paper" else "smoke"
  directory = os.path.join(workdir, "notebook")
  os.environ.update(TRDR_NOTEBOOK_SIZE=notebook_size, TRDR_ROOT=REPO,
                    TRDR_NOTEBOOK_WORKDIR=directory)
  # The notebook reuses a finished run it finds in its work dir (a call after a stopped one).
  record = {"part": "notebook", "status": "running", "notebook_size": notebook_size,
            "backend": jax.default_backend(), "reused": [
                f for f in ("bilevel_affine/landscape.json", "decoreco/summary.json")
                if os.path.exists(os.path.join(directory, f))]}
  _write(output, "notebook", record)
  nb = nbformat.read(os.path.join(REPO, "experiments", "colab.ipynb"), as_version=4)
  began = time.perf_counter()
  # Each cell may take what is left of the budget: nbclient then stops the kernel it started.
  NotebookClient(nb, timeout=max(int(budget) - 15, 10), kernel_name="python3",
                 record_timing=True,
                 resources={"metadata": {"path": os.path.join(REPO, "experiments")}}).execute()
  cells = [c for c in nb.cells if c.cell_type == "code"]
  text = "".join(o.get("text", "") for c in cells for o in c.outputs)
  record.update(status="finished", seconds=time.perf_counter() - began, printed=text,
                figures=sum(1 for c in cells for o in c.outputs
                            if o.get("output_type") == "display_data"
                            and "image/png" in o.get("data", {})),
                files=sorted(os.path.relpath(os.path.join(d, f), directory)
                             for d, _, fs in os.walk(directory) for f in fs
                             if f.endswith((".png", ".json"))),
                cell_seconds=[_cell_seconds(c) for c in cells])
  return record


def _cell_seconds(cell) -> float | None:
  timing = cell.metadata.get("execution", {})
  start, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
  if not (start and end):
    return None
  parse = lambda s: datetime.datetime.fromisoformat(s.replace("Z", "+00:00"))
  return (parse(end) - parse(start)).total_seconds()


def environment(size: str, workdir: str, output: str, budget: float) -> dict:
  """environment.json (written by `main` with the caps) completed with the device, the
  versions and the date, in a child process as the parts (JAX claims the device there)."""
  del size, workdir, budget
  out = files.read_json(os.path.join(output, "environment.json"))
  out.update(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
             backend=jax.default_backend(), devices=[d.device_kind for d in jax.devices()],
             machine=machine_record.machine(), versions=machine_record.versions(),
             status="finished")
  return out


def _run_part(name: str, size: str, workdir: str, output: str, budget: float) -> None:
  """Runs one part in this process; its record on success, its traceback on failure."""
  try:
    record = _RUNS[name](size, workdir, output, budget)
  except Exception:  # pylint: disable=broad-except  (kept in the part's JSON, then re-raised)
    _amend(output, name, {"part": name}, status="failed",
           error=traceback.format_exc(limit=8))
    raise
  _write(output, name, record)


# --part -> the function that runs it in this process.
_RUNS = {"environment": environment, "decoreco": decoreco, "one_hidden": one_hidden,
         "notebook": notebook}


def _define_flags() -> None:
  """The command line's flags (defined when run as a script, not on import: tests import
  this module beside other modules' flags)."""
  flags.DEFINE_enum("size", "paper", ["paper", "smoke"],
                    "paper: the paper's sizes (one GPU); smoke: toy sizes (CPU, CI).")
  flags.DEFINE_float("limit", 540.0, "Wall-clock seconds for all parts together.")
  flags.DEFINE_string("workdir", None, "Run directories (default runs/gpu_check_SIZE).")
  flags.DEFINE_string("output", None, "An empty or new folder for the JSON, PNG and log "
                      "(default WORKDIR/results/<UTC date and time>).")
  flags.DEFINE_list("parts", list(PARTS), f"Which of {list(PARTS)} to run, in order.")
  flags.DEFINE_enum("part", None, list(_RUNS),
                    "Internal: run this one part in this process.")
  flags.DEFINE_float("budget", 0.0, "Internal: the --part's seconds.")


def main(argv):
  del argv
  flag = flags.FLAGS
  size = flag.size
  workdir = os.path.abspath(flag.workdir or os.path.join("runs", f"gpu_check_{size}"))
  if flag.part:
    _run_part(flag.part, size, workdir, os.path.abspath(flag.output), flag.budget)
    return
  unknown = set(flag.parts) - set(PARTS)
  if unknown:
    raise app.UsageError(f"unknown --parts {sorted(unknown)}; known: {', '.join(PARTS)}")
  # One folder per call, never one an earlier call wrote (its results stay as they were).
  stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H-%M-%S")
  output = os.path.abspath(flag.output or os.path.join(workdir, "results", stamp))
  if os.path.isdir(output) and os.listdir(output):
    raise app.UsageError(f"--output {output!r} holds files already (another call's "
                         "results?); give an empty or new folder")
  os.makedirs(output, exist_ok=True)
  print(f"Results: {output}", flush=True)
  # This process never touches a device (it would claim a GPU's memory beside the parts'):
  # JAX starts its backend in each part's own process.
  began = time.monotonic()
  caps = {p: CAPS[p] for p in PARTS if p in flag.parts}
  _write(output, "environment", {"size": size, "limit_seconds": flag.limit,
                                 "caps_seconds": caps})
  with open(os.path.join(output, "log.txt"), "a", encoding="utf-8") as log:
    _launch("environment", size, workdir, output, min(ENVIRONMENT_BUDGET, flag.limit), log)
    for name, cap in caps.items():
      left = flag.limit - (time.monotonic() - began)
      if left < 1:
        _write(output, name, {"part": name, "status": "stopped",
                              "reason": f"the --limit of {flag.limit:g} s was reached first"})
        continue
      timeout = min(cap, left)
      status = _launch(name, size, workdir, output, timeout, log)
      print(f"{name}: {status} after {time.monotonic() - began:.0f} s of {flag.limit:g}",
            flush=True)


def _launch(name: str, size: str, workdir: str, output: str, timeout: float, log) -> str:
  """One part in a child process, stopped after ``timeout`` s; the status it ended with."""
  command = [sys.executable, os.path.abspath(__file__), f"--part={name}", f"--size={size}",
             f"--workdir={workdir}", f"--output={output}", f"--budget={timeout}"]
  env = dict(os.environ)
  # On a GPU, JAX takes 75 % of its memory at start; part 1 also runs PyTorch beside it.
  env.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.5")
  log.write(f"\n===== {name} (budget {timeout:.0f} s) =====\n")
  log.flush()
  began = time.monotonic()
  child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env,
                           start_new_session=True)
  try:
    child.wait(timeout=timeout)
  except subprocess.TimeoutExpired:
    with contextlib.suppress(ProcessLookupError):
      os.killpg(child.pid, 9)
    child.wait()
    return _amend(output, name, {"part": name}, status="stopped",
                  reason=f"its time budget of {timeout:.0f} s ran out",
                  wall_seconds=time.monotonic() - began)["status"]
  failed = {"part": name, "status": "failed",
            "error": f"exit status {child.returncode}; see log.txt"}
  # The wall includes the process's start.
  return _amend(output, name, failed, wall_seconds=time.monotonic() - began).get(
      "status", "unknown")


if __name__ == "__main__":
  _define_flags()
  app.run(main)
