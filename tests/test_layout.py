"""The package's layout: one-way imports along the pipeline, and small modules.

Data flows one way (../shared/STYLE.md): data → models → victim → attacks → loop →
evaluate → experiment → plotting → paper → report. `FLOW` lists every module of trdr in
that order; a module may import only modules before it. Infrastructure that knows
nothing of the pipeline (io, sharding, the L-BFGS solver) comes first.
"""

import ast
import os

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(REPO, "trdr")

FLOW = (
    "trdr", "trdr.io", "trdr.sharding", "trdr.distributed", "trdr.solver",
    "trdr.data", "trdr.configs", *(f"trdr.configs.{name}" for name in (
        "bilevel_affine", "bilevel_one_hidden", "decoreco_cifar", "decoreco_multiclass",
        "decoreco_landscape",
        "paper_figures", "decoreco_figures", "membership", "report")),
    "trdr.models", "trdr.victim", "trdr.pretrained",
    "trdr.attacks.protocol", "trdr.attacks.linear_solve", "trdr.attacks.init",
    "trdr.attacks.gradient_norm", "trdr.attacks.kkt_mlp", "trdr.attacks.bilevel",
    "trdr.attacks.decoreco", "trdr.attacks",
    "trdr.loop", "trdr.ssim", "trdr.ssim_mixtures", "trdr.metrics", "trdr.evaluate",
    "trdr.records", "trdr.starts", "trdr.experiment",
    "trdr.roc", "trdr.realism", "trdr.plotting", "trdr.report_figures", "trdr.paper",
    "trdr.membership", "trdr.claims", "trdr.decoreco_verdicts", "trdr.verdicts", "trdr.report",
    "trdr.api", "trdr.cli",
)
MAX_MODULE_LINES = 400
MAX_SCRIPT_LINES = 100


def _modules() -> dict[str, str]:
  """Module name -> path, for every .py file under trdr/."""
  found = {}
  for root, _, files in os.walk(PACKAGE):
    for name in files:
      if name.endswith(".py"):
        path = os.path.join(root, name)
        parts = os.path.relpath(path, REPO)[:-3].split(os.sep)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
  return found


def _source(path: str) -> str:
  with open(path, encoding="utf-8") as f:
    return f.read()


def _imports(path: str, modules) -> set[str]:
  """The trdr modules that the file at ``path`` imports (any form of import)."""
  out = set()
  for node in ast.walk(ast.parse(_source(path))):
    if isinstance(node, ast.Import):
      out |= {a.name for a in node.names if a.name.split(".")[0] == "trdr"}
    elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("trdr"):
      for alias in node.names:
        name = f"{node.module}.{alias.name}"
        out.add(name if name in modules else node.module)
  return out


def test_every_module_has_its_place_in_the_flow():
  assert sorted(_modules()) == sorted(FLOW)


def test_no_module_imports_one_later_in_the_flow():
  modules = _modules()
  rank = {name: i for i, name in enumerate(FLOW)}
  backward = [(name, imported) for name, path in modules.items()
              for imported in _imports(path, modules)
              if imported in rank and rank[imported] >= rank[name]
              and not (name == "trdr" or imported == "trdr")]
  assert backward == [], "imports against the flow (module, imported): %s" % backward


def test_the_check_sees_a_backward_import(tmp_path):
  """The checker itself: an attack importing evaluation is found."""
  bad = tmp_path / "bad.py"
  bad.write_text("from trdr import evaluate\nfrom trdr.attacks import bilevel, ATTACKS\n")
  assert _imports(str(bad), _modules()) == {"trdr.evaluate", "trdr.attacks.bilevel",
                                            "trdr.attacks"}


@pytest.mark.parametrize("folder, limit", [("trdr", MAX_MODULE_LINES),
                                           ("experiments", MAX_SCRIPT_LINES)])
def test_modules_and_scripts_are_small(folder, limit):
  long = []
  for root, _, files in os.walk(os.path.join(REPO, folder)):
    for name in files:
      if name.endswith(".py"):
        with open(os.path.join(root, name), encoding="utf-8") as f:
          lines = sum(1 for _ in f)
        if lines > limit:
          long.append((os.path.relpath(os.path.join(root, name), REPO), lines))
  assert long == [], f"over {limit} lines: {long}"


def test_each_paper_equation_is_tagged_in_exactly_one_docstring():
  """`grep "Runkel eq. N"` finds the one function implementing eq. N, and nothing else."""
  tags = {n: [] for n in (2, 3, 7, 8, 9, 10)}
  for name, path in _modules().items():
    tree = ast.parse(_source(path))
    for node in ast.walk(tree):
      if isinstance(node, ast.FunctionDef):
        doc = ast.get_docstring(node) or ""
        for n in tags:
          if f"Runkel eq. {n}" in doc.replace(f"Runkel eq. {n}0", ""):
            tags[n].append(f"{name}.{node.name}")
  assert all(len(where) == 1 for where in tags.values()), tags
  text = "".join(_source(path) for path in _modules().values())
  for n in tags:   # no comment or module docstring carries the tag either
    assert text.replace(f"Runkel eq. {n}0", "").count(f"Runkel eq. {n}") == 1, n
