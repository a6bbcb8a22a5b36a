"""The package's layout: the pipeline order of `trdr`'s docstring, checked on the code.

The order of the packages and modules is written once, in `trdr/__init__.py`'s docstring;
these tests read it from there and check every import of the package against it.
"""

import ast
import os
import re

import trdr

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(REPO, "trdr")


def _flow() -> list[str]:
  """The stages of the pipeline, in order, from `trdr`'s docstring: its two-space
  indented lines "  name  description" before the rules."""
  text = trdr.__doc__.split("Rules")[0]
  return ["trdr." + m for m in re.findall(r"^  ([a-z_]+)\s{2,}\S", text, re.M)]


def _modules() -> dict[str, str]:
  """Module name -> path, for every .py file under trdr/ (a package is its __init__)."""
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
  """The trdr modules that the file at ``path`` imports (any form of import, at any depth
  of the file: lazy imports inside functions count)."""
  out = set()
  for node in ast.walk(ast.parse(_source(path))):
    if isinstance(node, ast.Import):
      out |= {a.name for a in node.names if a.name.split(".")[0] == "trdr"}
    elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("trdr"):
      for alias in node.names:
        name = f"{node.module}.{alias.name}"
        out.add(name if name in modules else node.module)
  return out


def _stage(module: str, flow: list[str]) -> str | None:
  """The stage of ``flow`` that ``module`` belongs to (itself or its package)."""
  return next((s for s in flow if module == s or module.startswith(s + ".")), None)


def test_every_module_belongs_to_a_stage_of_the_flow():
  flow = _flow()
  assert flow[0] == "trdr.runtime" and flow[-1] == "trdr.cli", flow
  assert [m for m in _modules() if m != "trdr" and _stage(m, flow) is None] == []
  assert all(_stage(s, flow) == s and s in _modules() for s in flow), flow


def test_no_import_runs_against_the_flow():
  flow, modules = _flow(), _modules()
  rank = {s: i for i, s in enumerate(flow)}
  backward = []
  for name, path in modules.items():
    if name == "trdr":   # the package's lazy `trdr.api` re-export (PEP 562)
      continue
    for imported in _imports(path, modules):
      if imported != "trdr" and rank[_stage(imported, flow)] > rank[_stage(name, flow)]:
        backward.append((name, imported))
  assert backward == [], f"imports against the flow (module, imported): {backward}"


def test_no_cycle_and_no_own_init_inside_a_package():
  flow, modules = _flow(), _modules()
  graph = {}
  for name, path in modules.items():
    stage = _stage(name, flow)
    if name == stage:   # a package's __init__ may gather its modules
      continue
    inside = {m for m in _imports(path, modules) if _stage(m, flow) == stage}
    assert stage not in inside, f"{name} imports its own package's __init__ ({stage})"
    graph[name] = inside
  state = {}

  def visit(node, path):
    if state.get(node) == "done":
      return
    assert state.get(node) != "open", f"import cycle: {' -> '.join(path + [node])}"
    state[node] = "open"
    for nxt in graph.get(node, ()):
      visit(nxt, path + [node])
    state[node] = "done"

  for node in graph:
    visit(node, [])


def test_the_checks_see_a_backward_import_and_a_cycle(tmp_path):
  """The checkers themselves: an attack importing the evaluation is against the flow, and
  two modules importing each other are a cycle."""
  flow, modules = _flow(), _modules()
  bad = tmp_path / "bad.py"
  bad.write_text("from trdr.evaluation import ssim\nfrom trdr.attacks import bilevel, ATTACKS\n")
  found = _imports(str(bad), modules)
  assert found == {"trdr.evaluation.ssim", "trdr.attacks.bilevel", "trdr.attacks"}
  rank = {s: i for i, s in enumerate(flow)}
  assert rank[_stage("trdr.evaluation.ssim", flow)] > rank[_stage("trdr.attacks.bilevel", flow)]


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


def test_no_package_name_shadows_one_of_its_modules():
  """A package's __init__ that re-exports a function named like one of its modules (say
  `trdr.victim.energy`, the function, over trdr/victim/energy.py) makes ``from
  trdr.victim import energy`` return the function: every module stays reachable by name."""
  import importlib
  import pkgutil
  shadowed = []
  for name in _flow():
    package = importlib.import_module(name)
    for info in pkgutil.iter_modules(getattr(package, "__path__", [])):
      module = importlib.import_module(f"{name}.{info.name}")
      if getattr(package, info.name) is not module:
        shadowed.append(f"{name}.{info.name}")
  assert shadowed == []
