"""The prior-aware reconstruction attack on full-batch DP-SGD (Hayes, Mahloujifar and
Balle, "Bounding training data reconstruction in DP-SGD", NeurIPS 2023, arXiv
2302.07225, Sec. 4 and Alg. 2).

Threat model (the one the accountant covers). The mechanism is full-batch DP-SGD
(`trdr.victim.dp_sgd`, q = 1) on D = D⁻ ∪ {z*}, and the release is the whole sequence
θ_0 … θ_T. The adversary knows D⁻ (the other n − 1 training images and their labels),
θ_0, the recipe (η, C, σ, T, wd, the loss and the architecture) and a prior of K
candidates z_1 … z_K of the target's class, z* one of them uniformly at random; it
answers one candidate. Without the release its success is exactly κ = 1/K.

The attack. Step t released θ_{t+1} = θ_t − η (S_t / n + wd θ_t) with
S_t = Σ_{i ∈ D⁻} ḡ_i(θ_t) + ḡ_{z*}(θ_t) + N(0, σ²C² I), ḡ the gradient clipped to C. The
adversary recomputes S_t from θ_t and θ_{t+1} and subtracts the clipped gradients of the
images it knows: R_t = S_t − Σ_{i ∈ D⁻} ḡ_i(θ_t) = ḡ_{z*}(θ_t) + noise (`residual`). Given
the candidate z, the R_t are independent Gaussians N(ḡ_z(θ_t), σ²C² I) (θ_t is known, and
the noise of step t is independent of the past), so the log-likelihood of the release is
−Σ_t ||R_t − ḡ_z(θ_t)||² / (2σ²C²) + const (`step_scores`, summed over t), and the answer
is its argmax: the maximum a posteriori candidate under the uniform prior, the Bayes-
optimal answer for this release. At σ = 0 the R_t equal ḡ_{z*}(θ_t) and the argmax is z*
unless two candidates have the same clipped gradients at every step.

The final-θ* release (Hayes et al.'s headline threat model is the trajectory; the bound
covers both, since θ_T is post-processing of the trajectory): the likelihood of θ_T alone
given z is the T-fold composition of a map non-linear in θ (the loss, the clip) with
Gaussian noise, a density over θ_T that integrates over the T − 1 unreleased θ_t, a
(T − 1)·dim θ-dimensional integral with no closed form; it is not computed here.

Cost: the candidates and D⁻ span an m ≤ n + K-dimensional subspace of the d pixels. For a
victim whose first layer is dense on the flattened image (`trdr.models`' Affine and
HaimMLP), replaying the mechanism in that subspace (`basis`, `project_params`: the first
layer's kernel K ↦ Q K) gives every forward pass, every per-example gradient norm and
every candidate's score exactly (up to float rounding) as in pixel space: each example's
gradient of K lies in the span, the noise's projection onto it is N(0, σ²C² I_m) again,
and the noise orthogonal to it enters no forward pass and adds the same term
||R_t^⊥||² to every candidate's score, so it cannot change the argmax.

Not in `trdr.attacks.ATTACKS`: its input is the released trajectory and the prior, not θ*,
and its answer is one of the K candidates, not an image reconstructed by optimisation;
the Attack protocol serves neither. It lives in `attacks` (it reads the mechanism's parts
from `trdr.victim.dp_sgd`, above it) and is run by `trdr.studies.dp`.
"""

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from trdr.victim import dp_sgd
from trdr.victim.objective import Params


class Recipe(NamedTuple):
  """The full-batch DP-SGD recipe the adversary knows (`trdr.victim.dp_sgd`).

  Attributes:
    lr: η > 0.
    clip_norm: C > 0, or inf (no clipping).
    noise_multiplier: σ ≥ 0 (noise std σC; σ·1 when C is inf).
    steps: T ≥ 1.
    weight_decay: wd ≥ 0.
  """
  lr: float
  clip_norm: float
  noise_multiplier: float
  steps: int
  weight_decay: float

  def noise_std(self):
    """σC (σ where C is inf, as `dp_sgd.train_dp` has it); traceable (every field but
    steps may be a traced scalar)."""
    return self.noise_multiplier * jnp.where(jnp.isfinite(self.clip_norm), self.clip_norm,
                                             1.0)


def basis(images: np.ndarray) -> np.ndarray:
  """An orthonormal basis of the span of the flattened images.

  Args:
    images: float[b, H, W, C] (any trailing shape; flattened to d values each).
  Returns:
    float64[m, d], rows orthonormal, m the numerical rank (singular values above
    max(b, d) · eps · the largest, numpy's matrix_rank rule).
  Raises:
    ValueError: no image, or all images zero.
  """
  flat = np.asarray(images, np.float64).reshape(len(images), -1)
  if flat.size == 0 or not np.any(flat):
    raise ValueError(f"basis needs at least one non-zero image, got shape {images.shape}")
  _, s, vt = np.linalg.svd(flat, full_matrices=False)
  rank = int(np.sum(s > s[0] * max(flat.shape) * np.finfo(np.float64).eps))
  return vt[:rank]


def project_images(images: np.ndarray, q: np.ndarray) -> np.ndarray:
  """The images' coordinates in the basis: float[b, m, 1, 1] (an image of m pixels that a
  model flattening its input reads as m values), in the images' dtype."""
  flat = np.asarray(images, np.float64).reshape(len(images), -1)
  return (flat @ q.T).reshape(len(images), q.shape[0], 1, 1).astype(np.asarray(images).dtype)


def project_params(params: Params, q: np.ndarray) -> Params:
  """θ with the first layer's kernel K (the one leaf of shape (d, ·)) replaced by Q K.

  Raises:
    ValueError: no leaf, or more than one, has d = q.shape[1] rows (a first layer that is
      not dense on the flattened image).
  """
  d = q.shape[1]
  paths = [p for p, v in jax.tree_util.tree_leaves_with_path(params)
           if v.ndim == 2 and v.shape[0] == d]
  if len(paths) != 1:
    raise ValueError(f"project_params needs exactly one kernel of {d} rows (a first layer "
                     f"dense on the flattened image); found {len(paths)}")

  def swap(path, v):
    return jnp.asarray(q, v.dtype) @ v if path == paths[0] else v
  return jax.tree_util.tree_map_with_path(swap, params)


def residual(theta: Params, theta_next: Params, known_sum: Params, n: int,
             recipe: Recipe) -> Params:
  """R_t = S_t − Σ_{D⁻} ḡ_i(θ_t), with S_t = n (θ_t − θ_{t+1}) / η − n wd θ_t the noisy
  sum the released step implies (full batch: the denominator is n)."""
  return jax.tree.map(lambda a, b, k: n * (a - b) / recipe.lr - n * recipe.weight_decay * a
                      - k, theta, theta_next, known_sum)


def step_scores(r: Params, candidates: Params) -> jax.Array:
  """−½ ||R_t − ḡ_z(θ_t)||² for each candidate: σ²C² times step t's log-likelihood up to a
  constant shared by the candidates.

  Args:
    r: R_t (`residual`), a pytree like θ.
    candidates: ḡ_z(θ_t) of the K candidates, leaves with a leading axis K.
  Returns:
    float[K].
  """
  return -0.5 * sum(jnp.sum((g - v[None]).reshape(g.shape[0], -1) ** 2, axis=1)
                    for v, g in zip(jax.tree.leaves(r), jax.tree.leaves(candidates)))


def scores_from_release(apply_fn: Callable, loss: Callable, trajectory: list[Params],
                        known_images: jax.Array, known_labels: jax.Array,
                        candidate_images: jax.Array, candidate_labels: jax.Array,
                        recipe: Recipe) -> jax.Array:
  """The attack on a released trajectory: Σ_t `step_scores` (the argmax is the answer).

  Args:
    apply_fn: (params, images) -> logits; loss: (logits, labels) -> mean (`GD_LOSSES`).
    trajectory: θ_0 … θ_T (T + 1 pytrees).
    known_images: float[n − 1, H, W, C], D⁻; known_labels: float[n − 1].
    candidate_images: float[K, H, W, C]; candidate_labels: float[K].
    recipe: the `Recipe`.
  Returns:
    float[K], σ²C² times the log-likelihood of the release under each candidate, up to a
    shared constant.
  Raises:
    ValueError: a trajectory of other than T + 1 points.
  """
  if len(trajectory) != recipe.steps + 1:
    raise ValueError(f"the trajectory has {len(trajectory)} points; the recipe's "
                     f"T = {recipe.steps} steps release T + 1")
  n = known_images.shape[0] + 1
  ones = jnp.ones(known_images.shape[0], known_images.dtype)
  total = jnp.zeros(candidate_images.shape[0], known_images.dtype)
  for a, b in zip(trajectory[:-1], trajectory[1:]):
    known, _ = dp_sgd.clipped_sum(apply_fn, loss, a, known_images, known_labels, ones,
                                  recipe.clip_norm)
    cand = dp_sgd.clipped_each(apply_fn, loss, a, candidate_images, candidate_labels,
                               recipe.clip_norm)
    total = total + step_scores(residual(a, b, known, n, recipe), cand)
  return total


def replay(apply_fn: Callable, loss: Callable, params0: Params, known_images: jax.Array,
           known_labels: jax.Array, candidate_images: jax.Array, candidate_labels: jax.Array,
           target: jax.Array, key: jax.Array, recipe: Recipe, *,
           trajectory: bool = False) -> jax.Array | tuple[jax.Array, Params]:
  """One trial: the mechanism trains on D⁻ ∪ {candidate ``target``} and releases θ_0 …
  θ_T, and the attack scores the K candidates on that release; traceable (vmap it over
  trials).

  The mechanism's step is `dp_sgd.train_dp`'s (`dp_sgd.clipped_sum` of D⁻ plus the
  target's clipped gradient, `dp_sgd.privatize` with the key of `dp_sgd.step_key`,
  `dp_sgd.update`): the same θ_T as `train_dp` on that training set with that key, up to
  the order of the float sums. The attack reads the release only: its Σ_{D⁻} ḡ_i(θ_t) is
  the number it computes from θ_t and D⁻ (shared with the mechanism's sum, the same
  expression), its R_t comes from θ_t and θ_{t+1} (`residual`), as in
  `scores_from_release`.

  Args:
    as `scores_from_release`; target: int[] in [0, K); key: the mechanism's noise key.
    trajectory: also return the θ_1 … θ_T (leaves with a leading axis T), for tests.
  Returns:
    float[K] scores (`scores_from_release`'s), or (scores, trajectory).
  """
  n = known_images.shape[0] + 1
  ones = jnp.ones(known_images.shape[0], known_images.dtype)
  std = recipe.noise_std()

  def step(carry, t):
    theta, total = carry
    known, _ = dp_sgd.clipped_sum(apply_fn, loss, theta, known_images, known_labels, ones,
                                  recipe.clip_norm)
    cand = dp_sgd.clipped_each(apply_fn, loss, theta, candidate_images, candidate_labels,
                               recipe.clip_norm)
    summed = jax.tree.map(lambda k, g: k + g[target], known, cand)
    _, k_noise = dp_sgd.step_key(key, t)
    theta_next = dp_sgd.update(theta, dp_sgd.privatize(summed, k_noise, std), n,
                               recipe.weight_decay, recipe.lr)
    total = total + step_scores(residual(theta, theta_next, known, n, recipe), cand)
    return (theta_next, total), (theta_next if trajectory else None)

  zero = jnp.zeros(candidate_images.shape[0], known_images.dtype)
  (_, total), path = jax.lax.scan(step, (params0, zero), jnp.arange(recipe.steps))
  return (total, path) if trajectory else total
