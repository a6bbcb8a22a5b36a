"""trdr from Python: the documented entry points, importable as ``trdr.<name>``.

  config = trdr.get_config("decoreco_cifar", "smoke")    # an ml_collections.ConfigDict
  task = trdr.load_task(config)                          # training / test images
  target = trdr.load_victim("model.pth", config, task)   # θ* from a file (or train_victim)
  trdr.save_victim(target, "theta.npz")                  # θ* to a file (.npz or .pth)
  images = trdr.attack(target, config, task)             # reconstructions float[m, H, W, C]
  images = trdr.informed_attack(target, task, [3, 7])    # all training images but 3, 7 known
  found = trdr.evaluate_reconstructions(images, task)    # nearest training images by SSIM
  trdr.run_experiment(config, "runs/mine", "attack")     # all of it, with files and resume
  results = trdr.load_results("runs/mine")               # its results.npz arrays

Every image array is in the victim's input space (pixels in [0, 1], minus the training
mean when ``config.data.subtract_mean``), NHWC.
"""

import importlib
import tempfile

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from trdr import data, experiment, models, victim
from trdr.attacks import ATTACKS, informed
from trdr.attacks import init as inits
from trdr.evaluation import evaluate
from trdr.experiment import loop, starts
from trdr.victim import pretrained


def get_config(name: str, variant: str = "") -> ml_collections.ConfigDict:
  """The config ``trdr/configs/<name>.py`` of ``variant`` ("" paper size, "cpu", "smoke").

  Raises:
    ModuleNotFoundError: no such config; ValueError: unknown variant.
  """
  return importlib.import_module(f"trdr.configs.{name}").get_config(variant)


def load_task(config: ml_collections.ConfigDict) -> data.Task:
  """The task of ``config.data`` (or of a data config itself): train, partition and test
  images float32[N, H, W, C] in the victim's input space, labels float32[N] in {−1, +1}.

  Raises:
    ValueError: bad data (`trdr.data.make_task`).
  """
  return data.make_task(config.data if "data" in config else config)


def train_victim(config: ml_collections.ConfigDict, task: data.Task,
                 directory: str) -> victim.Victim:
  """θ* of ``config.victim`` trained on ``task`` (L-BFGS, or Haim et al.'s GD when
  ``victim.training="gd"``), cached in ``directory`` (`trdr.victim.load_or_train`)."""
  models.check_labels(config.victim, task.train_labels)
  with jax.enable_x64(bool(config.float64)):
    return victim.load_or_train(config, task, directory)


def load_victim(path: str, config: ml_collections.ConfigDict,
                task: data.Task) -> victim.Victim:
  """θ* from a .pth, .npz, Flax .msgpack or orbax directory (`trdr.victim.pretrained`); its
  architecture is read from the arrays where unambiguous, else from ``config.victim``.

  ``config.victim.load`` is set to ``path`` and its architecture fields to the file's
  (``config`` is changed in place, so that `attack` builds the same model).

  Raises:
    ValueError: a key, shape, dtype or value that does not fit, naming it.
    ModuleNotFoundError: a .pth without PyTorch installed.
  """
  with config.unlocked():
    config.victim.load = path
    config.victim = pretrained.resolve(config, task.train_images.shape[1:]).victim
  with jax.enable_x64(bool(config.float64)):
    return pretrained.load(config, task)


def save_victim(target: victim.Victim, path: str, image_shape=None) -> str:
  """Writes θ* to ``path`` (.npz in trdr's Flax names, or .pth/.pt as a PyTorch state_dict)
  in a layout `load_victim` reads back bitwise (`trdr.victim.pretrained.export`, whose
  docstring gives the layouts and errors). Returns ``path``."""
  return pretrained.export(target, path, image_shape)


def attack(target: victim.Victim, config: ml_collections.ConfigDict, task: data.Task,
           workdir: str | None = None) -> np.ndarray:
  """One attack of ``config.attack`` (bilevel or DecoReco) on ``target`` from
  ``config.init.kind``, for ``config.attack.steps`` steps.

  Args:
    target: the victim (`train_victim`, `load_victim`).
    config: the experiment config (sections seed, float64, attack, init).
    task: the task: its labels (their count per class) and, for image starts, images.
    workdir: where the checkpoint and metrics.jsonl go (a temporary directory if None).
  Returns:
    The reconstructions float[m, H, W, C] in the victim's input space.
  Raises:
    ValueError: bad attack settings; FloatingPointError: the attack diverged.
  """
  with jax.enable_x64(bool(config.float64)), tempfile.TemporaryDirectory() as scratch:
    dtype = jnp.float64 if config.float64 else jnp.float32
    a = experiment.attack_config(config)
    start = starts.attack_starts(config, a, task, dtype)
    reconstruction = ATTACKS[a.name](target, a, start.labels, key=start.build_key,
                                     box=inits.pixel_box(task.mean))
    states = jax.vmap(reconstruction.init, in_axes=(0, None))(start.images, start.init_keys)
    states, _, _ = loop.run(reconstruction, states, steps=a.steps, log_every=a.log_every,
                            grid_batch_size=a.grid_batch_size, workdir=workdir or scratch,
                            resume=False, stop_on_divergence=True)
    return np.asarray(reconstruction.images(states))[0]


def informed_attack(target: victim.Victim, task: data.Task, unknown, *,
                    attack_config: ml_collections.ConfigDict | None = None,
                    restarts: int = 4, steps: int = 1000, seed: int = 0) -> np.ndarray:
  """The informed adversary (`trdr.attacks.informed`; Balle et al. 2022): it knows θ*, the
  training recipe and every training image of ``task`` but those at ``unknown``, and
  their labels; it reconstructs them in closed form where one applies, else from
  ``restarts`` starts (`trdr.attacks.informed.start_images`), keeping the lowest loss.

  Args:
    target: a victim trained on ``task`` (to stationarity of E for the closed forms; by
      gradient descent, the DecoReco loss with the known images fixed).
    task: its task; unknown: int indices into its training set, k of them.
    attack_config: the attack section of configs/knowledge.py (its ":cpu" one if None).
    restarts, steps, seed: the starts, the steps from each (DecoReco's too) and the
      starts' PRNG seed.
  Returns:
    float[k, H, W, C] reconstructions in the victim's input space, in ``unknown``'s order.
  Raises:
    ValueError: indices out of range or repeated.
  """
  n = task.train_images.shape[0]
  unknown = np.asarray(unknown, int)
  if unknown.ndim != 1 or len(set(unknown.tolist())) != len(unknown) or (
      len(unknown) and (unknown.min() < 0 or unknown.max() >= n)):
    raise ValueError(f"unknown must be distinct training indices in [0, {n}), got "
                     f"{unknown.tolist()}")
  a = (attack_config or get_config("knowledge", "cpu").attack
       ).copy_and_resolve_references().unlock()
  a.steps = a.kkt.steps = int(steps)
  dtype = jax.tree.leaves(target.params)[0].dtype
  with jax.enable_x64(dtype == jnp.float64):
    x = jnp.asarray(task.train_images, dtype)
    y = jnp.asarray(task.train_labels, dtype)
    known = np.setdiff1d(np.arange(n), unknown)
    starts = jax.vmap(lambda key: informed.start_images(
        target, a, key, (len(unknown), *x.shape[1:]), task.mean, dtype))(
            jax.random.split(jax.random.key(seed), restarts))
    return informed.reconstruct(target, a, (x[known], y[known]), y[unknown], starts,
                                box=inits.pixel_box(task.mean)).images


def evaluate_reconstructions(images: np.ndarray, task: data.Task, *,
                             ssim_window: int = evaluate.SSIM_WINDOW,
                             thresholds=(0.4,)) -> dict[str, np.ndarray]:
  """Nearest neighbours of reconstructions float[m, H, W, C] (victim input space) in the
  training set and the partition by SSIM (`trdr.evaluation.evaluate.reconstructions`, images shown
  as pixels): train_index/train_ssim/train_l2 [m], the same for partition, and each
  training image's best reconstruction (best_ssim_per_train [n]) and the count of
  training images with SSIM ≥ each threshold (count_ssim_ge)."""
  return evaluate.reconstructions(np.asarray(images), task.mean,
                                  evaluate.comparison_sets(task), thresholds=thresholds,
                                  ssim_window=ssim_window)


def run_experiment(config: ml_collections.ConfigDict, workdir: str, mode: str = "attack",
                   overwrite: bool = False) -> experiment.Finished:
  """`trdr.experiment.run`: ``mode`` "landscape", "attack", "sweep" or "membership" (one
  run of `trdr.studies.membership`; the whole measurement is `trdr.studies.membership.run`)
  with every file written, checked and resumable; returns its `experiment.Finished`
  (``.summary``, and ``.records`` of a landscape)."""
  return experiment.run(config, workdir, mode, overwrite=overwrite)


def load_results(run_dir: str) -> experiment.results.Results:
  """A finished run's results.npz as name -> np.ndarray, every array as the run computed
  it (a landscape's start images regenerated, its final images spread over the grid's
  duplicate points: `trdr.experiment.results`); each read when first used.

  Raises:
    FileNotFoundError: no results.npz in ``run_dir``.
  """
  return experiment.load_results(run_dir)
