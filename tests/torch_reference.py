"""Haim et al.'s MLP as their reference code builds it, in PyTorch: the θ* of the tests that
train or load a PyTorch model (test_pretrained, test_torch_recipe, test_own_training_set).
PyTorch is imported when a net is built, so that a test file that imports this module is
still collected without it (those tests skip)."""


def haim_mlp(sizes, dtype=None):
  """``self.layers`` of nn.Linear over ``sizes`` (D, widths…, 1), a bias on the first layer
  only, ReLU between, inputs x.view(N, −1) of NCHW images, Φ float[N]; every layer at
  PyTorch's default initialisation (callers copy another θ0 in where they need one).

  Args:
    sizes: the layer sizes, the input dimension first and 1 last.
    dtype: the parameters' torch dtype (None: torch's default, float32).
  """
  import torch  # noqa: PLC0415  (optional dependency: the [torch] extra)

  class ReferenceMLP(torch.nn.Module):

    def __init__(self):
      super().__init__()
      self.layers = torch.nn.ModuleList(
          torch.nn.Linear(a, b, bias=k == 0, dtype=dtype)
          for k, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])))

    def forward(self, x):
      h = x.view(x.shape[0], -1)
      for k, layer in enumerate(self.layers):
        h = layer(h)
        if k < len(self.layers) - 1:
          h = torch.relu(h)
      return h[:, 0]

  return ReferenceMLP()
