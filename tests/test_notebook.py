"""experiments/colab.ipynb runs headless on CPU with the smoke configs (nbclient)."""

import os

import nbformat
from nbclient import NotebookClient

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_colab_notebook_runs_headless(subprocess_env, tmp_path, monkeypatch):
  """Its kernel runs the :smoke landscape and DecoReco attack from scratch.

  The kernel shares the session's compilation cache (conftest.py): the programs the :smoke
  report has compiled by then are loaded, the others compiled. Either way it computes the
  same numbers (a cache entry is the executable the kernel would compile), so the test
  does not wait for the report.
  """
  for name, value in subprocess_env.items():
    monkeypatch.setenv(name, value)
  monkeypatch.setenv("TRDR_NOTEBOOK_SIZE", "smoke")
  monkeypatch.setenv("TRDR_ROOT", REPO)
  monkeypatch.setenv("TRDR_NOTEBOOK_WORKDIR", str(tmp_path))
  monkeypatch.setenv("JAX_PLATFORMS", "cpu")
  nb = nbformat.read(os.path.join(REPO, "experiments", "colab.ipynb"), as_version=4)
  NotebookClient(nb, timeout=900, kernel_name="python3",
                 resources={"metadata": {"path": os.path.join(REPO, "experiments")}}).execute()
  outputs = {c.source.splitlines()[0]: c.outputs for c in nb.cells if c.cell_type == "code"}
  text = "\n".join(o.get("text", "") for outs in outputs.values() for o in outs)
  assert "backend: cpu" in text and "size: smoke" in text
  assert text.count("||θ* − θ||²") == 9          # the 3×3 smoke grid, printed
  assert "training images reconstructed" in text
  images = [o for outs in outputs.values() for o in outs
            if o.get("output_type") == "display_data" and "image/png" in o.get("data", {})]
  assert len(images) == 10                          # 6 landscape + 4 DecoReco figures
  for name in ("bilevel_affine/landscape.json", "decoreco/summary.json"):
    assert os.path.exists(tmp_path / name), name
