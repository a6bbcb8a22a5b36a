"""experiments/colab.ipynb runs headless on CPU with the smoke configs (nbclient)."""

import os
import shutil

import pytest

from trdr.configs import bilevel_affine
from trdr.report import artefacts
from trdr.runtime import files, rundir

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.slow


def test_colab_notebook_runs_headless(smoke_report_dir, subprocess_env, tmp_path,
                                      monkeypatch):
  """Every cell runs; the DecoReco attack runs from scratch, the landscape is the :smoke
  report's finished run.

  The notebook's bilevel cell reuses a finished landscape.json in its work dir, and the
  :smoke report's `landscape_bilevel` run has exactly the notebook's config
  (bilevel_affine.py:smoke), so the test copies it there instead of computing it a third
  time (the resume test runs it too); that cell still draws all its figures. The DecoReco
  cell's config (decoreco_cifar.py:smoke) is none of the report's, so it trains its victim
  and attacks. The kernel shares the session's compilation cache (conftest.py).
  """
  shutil.copytree(artefacts.run_dir(smoke_report_dir, "landscape_bilevel"),
                  tmp_path / "bilevel_affine")
  assert files.read_json(tmp_path / "bilevel_affine" / rundir.CONFIG_FILE) == files.to_jsonable(
      bilevel_affine.get_config("smoke"))
  for name, value in subprocess_env.items():
    monkeypatch.setenv(name, value)
  monkeypatch.setenv("TRDR_NOTEBOOK_SIZE", "smoke")
  monkeypatch.setenv("TRDR_ROOT", REPO)
  monkeypatch.setenv("TRDR_NOTEBOOK_WORKDIR", str(tmp_path))
  monkeypatch.setenv("JAX_PLATFORMS", "cpu")
  import nbformat  # here, not at collection: the fast tier does not run this test
  from nbclient import NotebookClient
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
  for name in ("bilevel_affine/fig10_heatmaps.png", "decoreco/summary.json"):
    assert os.path.exists(tmp_path / name), name
