"""How close θ* is to the KKT point that DecoReco assumes: the premise of the attack, measured.

Haim et al. (2022) and Buzaglo et al. (2023) reconstruct from the stationarity of margin
maximisation, which gradient descent on the logistic loss approaches only in direction and
slowly (Lyu & Li 2020; Ji & Telgarsky 2020):

  c θ* = Σ_i λ_i ∇θ s_i(θ*),   λ_i ≥ 0,

with s_i the margin of training point i (y_i Φ(x_i) for one output, Φ_{y_i} − max_{k≠y_i} Φ_k
for C outputs; `trdr.victim.signed_outputs`, `margins`) and c = 1 (c = wd for a victim
trained with weight decay, Buzaglo et al.'s form). `fit` finds the λ ≥ 0 that explain θ*
best from the TRUE training images, by non-negative least squares (scipy's `nnls`), and
reports what stays unexplained, per parameter tensor and relative to that tensor's ‖cθ*‖²:

  r = c θ* − Σ_i λ_i ∇θ s_i(θ*),    relative[t] = ‖r_t‖² / ‖c θ*_t‖²

(one λ for all tensors, as in the KKT conditions; the whole θ*'s fraction is in [0, 1], a
small tensor's may exceed 1 where explaining the large ones overshoots it).

That is the best any candidate set can do at the true images, so ‖r‖² is the floor of
DecoReco's residual term there (its λ prior aside; the attack's 1/m is absorbed in λ). A
relative residual near 1 in the first layer, where the images enter, means θ* is not near
the point the attack looks for, and a count of "0 reconstructed" then says nothing about
privacy. The ReLU's derivative is the plain step (autodiff's), not the attack's sigmoid(αz).

Method: the Gram matrix K_t = A_t A_tᵀ of the per-sample gradients a_i = ∇θ s_i (rows of
A, per tensor t) and b_t = A_t c θ*_t are built a block of rows at a time (a VJP per row
for A's block, a JVP of each row restricted to one tensor for K_t's block), so memory is
``chunk`` × P, never n × P. λ minimises λᵀKλ − 2bᵀλ (K = Σ_t K_t, b = Σ_t b_t) as
``nnls(√w Vᵀ, (Vᵀb)/√w)`` from K's eigendecomposition V diag(w) Vᵀ (directions with w below
rounding dropped: b has no component there, as b = A cθ* lies in K's range). r is then
formed explicitly by one VJP, so the residual is a sum of squares, never a difference of
large numbers.
"""

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize

from trdr.victim.objective import class_index, margins, signed_outputs

Params = Any


@dataclasses.dataclass(frozen=True)
class KKTFit:
  """The best KKT explanation of θ* by its training images (all plain Python values).

  Attributes:
    relative: {tensor path: ‖r_t‖² / ‖c θ*_t‖²} ≥ 0 (0: explained exactly; above 1 where
      the joint fit overshoots a small tensor to explain the large ones), the path as
      "dense_0/kernel".
    residual: {tensor path: ‖r_t‖²}, absolute.
    norm: {tensor path: ‖c θ*_t‖²}.
    relative_total: Σ_t ‖r_t‖² / Σ_t ‖c θ*_t‖², in [0, 1] (λ = 0 gives 1).
    residual_total: Σ_t ‖r_t‖², DecoReco's residual floor at the true images.
    first_layer: the path of the first layer's kernel (where the images enter).
    positive: how many λ_i > 0 (of n).
    n: the number of training images fitted.
    form: "binary", "weight_decay" or "multiclass".
  """
  relative: dict
  residual: dict
  norm: dict
  relative_total: float
  residual_total: float
  first_layer: str
  positive: int
  n: int
  form: str

  def to_json(self) -> dict:
    return dataclasses.asdict(self)

  def line(self) -> str:
    """One log line: the relative residual per tensor, and of θ* as a whole, with how to
    read them."""
    per = ", ".join(f"{k} {v:.3f}" for k, v in self.relative.items())
    return (f"KKT premise (Haim et al.: θ* = Σ λ_i ∇θ s_i, λ ≥ 0, fitted on the {self.n} "
            f"training images): unexplained fraction per tensor {per}; whole θ* "
            f"{self.relative_total:.3f} (‖r‖² = {self.residual_total:.4g}); "
            f"{self.positive} of {self.n} λ_i > 0 (a fraction is 0 where θ* is a KKT point "
            "of these images and 1 where none of it is; the attack reads the images from "
            f"the first layer, {self.first_layer}, which the premise warning judges)")


def _path(key_path) -> str:
  return "/".join(str(getattr(k, "key", k)) for k in key_path)


def _margin_fn(form: str, num_outputs: int) -> Callable:
  if form in ("binary", "weight_decay"):
    if num_outputs != 1:
      raise ValueError(f"form {form!r} needs one output, the victim has {num_outputs}: "
                       "use form 'multiclass'")
    return signed_outputs
  if form == "multiclass":
    if num_outputs < 2:
      raise ValueError("form 'multiclass' needs a victim with C > 1 outputs, this one has "
                       "one: use form 'binary'")
    return lambda logits, labels: margins(logits, class_index(labels, logits.shape[1]))
  raise ValueError(f"unknown KKT form {form!r}; known: binary, weight_decay, multiclass")


def fit(apply_fn: Callable[[Params, jax.Array], jax.Array], params: Params,
        images: jax.Array, labels: jax.Array, *, form: str = "binary",
        weight_decay: float = 0.0, chunk: int = 10) -> KKTFit:
  """Fits λ ≥ 0 to c θ* ≈ Σ_i λ_i ∇θ s_i(θ*) on the training images (module docstring).

  Args:
    apply_fn: (θ, images float[n, H, W, C]) -> logits float[n] (one output) or float[n, C].
    params: θ*, a pytree of float arrays (float32 or float64; the Gram matrix and the
      non-negative least squares are computed in float64 on the host).
    images: float[n, H, W, C], the training images as the victim saw them (mean
      subtracted where the task does); labels: float[n] in {−1, +1}, or the classes
      0 … C−1 (C-output victims, form "multiclass").
    form: "binary" (Haim et al., c = 1), "weight_decay" (Buzaglo et al., c = wd) or
      "multiclass" (Buzaglo et al.'s margins, c = 1).
    weight_decay: wd, for form "weight_decay" (> 0 there).
    chunk: rows of A formed at a time (memory chunk × P floats).
  Returns:
    `KKTFit`.
  Raises:
    ValueError: unknown form; a form that does not fit the victim's outputs; labels not of
      shape (n,); weight_decay ≤ 0 with form "weight_decay"; θ* that is zero in every entry.
  """
  images, labels = jnp.asarray(images), jnp.asarray(labels)
  n = images.shape[0]
  if labels.shape != (n,):
    raise ValueError(f"labels must have shape ({n},) for {n} images, got {labels.shape}")
  logits = apply_fn(params, images[:1])
  margin = _margin_fn(form, 1 if logits.ndim == 1 else logits.shape[1])
  if form == "weight_decay" and not weight_decay > 0:
    raise ValueError(f"form 'weight_decay' needs weight_decay > 0, got {weight_decay}")
  c = weight_decay if form == "weight_decay" else 1.0
  target = jax.tree.map(lambda p: c * p, params)
  paths_leaves = jax.tree_util.tree_flatten_with_path(params)[0]
  paths = [_path(k) for k, _ in paths_leaves]
  norm = {p: float(np.sum(np.square(np.asarray(t, np.float64))))
          for p, t in zip(paths, jax.tree.leaves(target))}
  if not sum(norm.values()) > 0:
    raise ValueError("θ* is zero in every entry: there is nothing to explain")

  structure = jax.tree.structure(params)
  masks = [jax.tree.unflatten(structure, [i == j for j in range(len(paths))])
           for i in range(len(paths))]

  @jax.jit
  def block(params, images, labels, rows):  # rows float[k, n] of I -> K_t[rows], b_t[rows]
    s = lambda p: margin(apply_fn(p, images), labels)
    _, vjp = jax.vjp(s, params)
    _, jvp = jax.linearize(s, params)
    grads = jax.vmap(lambda e: vjp(e)[0])(rows)             # A[rows], leading axis k
    target = jax.tree.map(lambda p: c * p, params)
    out = []
    for mask in masks:
      only = jax.tree.map(lambda g, keep: g if keep else jnp.zeros_like(g), grads, mask)
      gram = jax.vmap(jvp)(only)                             # A_t[rows] A_tᵀ: float[k, n]
      proj = sum(jnp.sum((g * t).reshape(g.shape[0], -1), axis=1)
                 for g, t, keep in zip(jax.tree.leaves(grads), jax.tree.leaves(target),
                                       jax.tree.leaves(mask)) if keep)
      out.append((gram, proj))
    return out

  explain = jax.jit(lambda params, images, labels, lambdas: jax.vjp(
      lambda p: margin(apply_fn(p, images), labels), params)[1](lambdas)[0])

  eye = jnp.eye(n, dtype=jax.tree.leaves(params)[0].dtype)
  grams = [np.zeros((n, n)) for _ in paths]
  projs = [np.zeros(n) for _ in paths]
  for start in range(0, n, chunk):
    rows = eye[start:start + chunk]
    for t, (gram, proj) in enumerate(block(params, images, labels, rows)):
      grams[t][start:start + rows.shape[0]] = np.asarray(gram, np.float64)
      projs[t][start:start + rows.shape[0]] = np.asarray(proj, np.float64)
  gram, proj = sum(grams), sum(projs)
  gram = 0.5 * (gram + gram.T)
  w, v = np.linalg.eigh(gram)
  keep = w > w.max() * n * np.finfo(np.float64).eps * 16 if w.max() > 0 else w > 0
  root = np.sqrt(w[keep])
  lambdas, _ = scipy.optimize.nnls(root[:, None] * v[:, keep].T, (v[:, keep].T @ proj) / root,
                                   maxiter=50 * n)
  explained = explain(params, images, labels, jnp.asarray(lambdas, eye.dtype))
  residual = {p: float(np.sum(np.square(np.asarray(t, np.float64) - np.asarray(e, np.float64))))
              for p, t, e in zip(paths, jax.tree.leaves(target), jax.tree.leaves(explained))}
  first = next((p for p in paths if p.endswith("kernel")), paths[0])
  return KKTFit(
      relative={p: residual[p] / norm[p] if norm[p] > 0 else 0.0 for p in paths},
      residual=residual, norm=norm,
      relative_total=sum(residual.values()) / sum(norm.values()),
      residual_total=sum(residual.values()), first_layer=first,
      positive=int(np.sum(lambdas > 0)), n=int(n), form=form)


def victim_form(victim_config, attack_form: str | None = None) -> str:
  """The KKT form of a victim: the attack's where given (``attack.form`` other than
  "gradient_norm"), else from how the victim was trained: C > 1 outputs "multiclass",
  one output "binary"."""
  if attack_form in ("binary", "weight_decay", "multiclass"):
    return attack_form
  return "multiclass" if victim_config.get("num_outputs", 1) > 1 else "binary"
