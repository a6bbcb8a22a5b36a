"""A PyTorch transcription of the reference DecoReco iteration (Haim et al. 2022), timed
beside JAX in section 3 when ``import torch`` works."""

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import paper_size


def iteration(params, images, lambdas, labels):
  """One reference iteration on copies of the inputs, or None without torch.

  Args:
    params: θ of a `trdr.models.HaimMLP` (first-layer bias only).
    images: float[m, H, W, C]; lambdas, labels: float[m].
  Returns:
    On the GPU when JAX's default backend is one and torch sees CUDA, else on the CPU:
    a function running one iteration (forward, KKT loss with a create-graph backward,
    double backward, SGD-momentum steps) and returning the loss, or None.
  """
  try:
    import torch  # pylint: disable=import-outside-toplevel
  except ImportError:
    return None
  dtype = torch.float64 if images.dtype == jnp.float64 else torch.float32
  # On the device JAX computes on: a GPU run times both on the GPU, a CPU run both on CPU.
  device = "cuda" if jax.default_backend() == "gpu" and torch.cuda.is_available() else "cpu"

  class ReluSigmoidBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z):
      ctx.save_for_backward(z)
      return z.clamp(min=0)

    @staticmethod
    def backward(ctx, grad):
      (z,) = ctx.saved_tensors
      return grad * torch.sigmoid(paper_size.ALPHA * z)   # differentiable: double backward

  tensor = lambda a: torch.tensor(np.asarray(a), dtype=dtype, device=device)
  # Flax kernels are [in, out]; torch.nn.functional.linear takes [out, in].
  weights = [tensor(params[n]["kernel"]).T.contiguous().requires_grad_()
             for n in sorted(params, key=lambda n: (n == "output", n))]
  bias = tensor(params["dense_0"]["bias"]).requires_grad_()
  x = tensor(images).reshape(images.shape[0], -1).requires_grad_()
  lam = tensor(lambdas).requires_grad_()
  y = tensor(labels)
  optimizer = torch.optim.SGD([{"params": [x], "lr": paper_size.LR_IMAGES},
                               {"params": [lam], "lr": paper_size.LR_LAMBDAS}],
                              momentum=paper_size.MOMENTUM)
  theta = [weights[0], bias, *weights[1:]]

  def run():
    optimizer.zero_grad()
    h = torch.nn.functional.linear(x, weights[0], bias)
    for w in weights[1:]:
      h = torch.nn.functional.linear(ReluSigmoidBackward.apply(h), w)
    outputs = h[:, 0] * y
    grads = torch.autograd.grad(outputs, theta, grad_outputs=lam / x.shape[0],
                                create_graph=True)
    loss = sum(((t - g) ** 2).sum() for t, g in zip(theta, grads))
    loss = loss + (torch.relu(x - 1) ** 2).sum() + (torch.relu(-1 - x) ** 2).sum()
    loss = loss + 5.0 * (torch.relu(0.05 - lam) ** 2).sum()
    loss.backward()
    optimizer.step()
    return float(loss.detach())

  return run
