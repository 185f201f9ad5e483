"""Every package's public face (docs/architecture.md, "Public faces"): a module outside a faced
package imports only what the package's `__init__.py` lists in `__all__`.

The rule, for an import by module M of a path under package P (P faced: its `__init__.py` assigns a
literal `__all__`), M outside P:
- `from tmax_jax.P import name`: `name` is in P's `__all__`;
- a deeper path `tmax_jax.P.sub...` (`import`, `from ... import`): `sub` is in P's `__all__`, which
  makes the submodule public. A public submodule that is a faced package is checked the same way
  one level down; a public plain module (or unfaced subpackage) is public whole.
Faces nest: a module inside P but outside a faced subpackage P.Q goes through P.Q's face. Modules of
tmax_jax/, launch/, bench/ and configs/ are checked, function-level imports included; tests/ are
not outsiders (unit tests may reach internals). Read with `ast`, nothing imported; string imports
(importlib) are not seen. A face may load names lazily (tmax_jax.lazy_face: `_HOMES` plus the same
imports under TYPE_CHECKING, which the tests below keep in step).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import pathlib

import pytest

ROOT = pathlib.Path(__file__).parents[1]
CHECKED_DIRS = ("tmax_jax", "launch", "bench", "configs")

BEING_EDITED = "being edited in another change: its imports move to the face after it lands"

# Top-level packages without a face yet, each with why; a package leaves this list when its
# __init__.py declares `__all__` (test_unfaced_packages_are_listed keeps the list exact).
UNFACED = {
  "cluster": BEING_EDITED,
  "rehearse": BEING_EDITED,
}

# Outsider imports the check lets through for now: (importer path prefix, face) -> why. Each must
# still match a breach (test_every_allowance_is_still_needed), so the list only shrinks.
ALLOWED = {
  ("tmax_jax/cluster/", "tmax_jax.sandbox"): BEING_EDITED,
  ("bench/task_pipeline.py", "tmax_jax.pipeline"): (
    "runs the pipeline CLI's main() in-process (entry points move to one CLI layer in move 5 "
    "point 2)"
  ),
  ("tmax_jax/recipes.py", "tmax_jax.agents"): BEING_EDITED,
  ("tmax_jax/recipes.py", "tmax_jax.loop"): BEING_EDITED,
  ("tmax_jax/recipes.py", "tmax_jax.models"): BEING_EDITED,
  ("tmax_jax/recipes.py", "tmax_jax.train"): BEING_EDITED,
  ("tmax_jax/sandbox/__main__.py", "tmax_jax.sandbox.images"): (
    "the base-rootfs CLI at the package's old name reuses images/__main__.py's flags (entry "
    "points move to one CLI layer in move 5 point 2)"
  ),
}


@dataclasses.dataclass(frozen=True)
class Breach:
  """One outsider import that bypasses a face: where, what, and which face it should go through."""

  file: str
  line: int
  target: str
  face: str

  def __str__(self) -> str:
    return f"{self.file}:{self.line}: {self.target} is not in the face of {self.face}"


def _module_name(root: pathlib.Path, path: pathlib.Path) -> str:
  parts = list(path.relative_to(root).with_suffix("").parts)
  if parts[-1] == "__init__":
    parts.pop()
  return ".".join(parts)


def _assigned_all(tree: ast.Module) -> list[str] | None:
  """The literal `__all__` a module assigns at its top, or None."""
  for node in tree.body:
    targets = node.targets if isinstance(node, ast.Assign) else []
    if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
      return list(ast.literal_eval(node.value))
  return None


def faces(root: pathlib.Path = ROOT) -> dict[str, frozenset[str]]:
  """Package name -> its `__all__`, for every package of tmax_jax/ whose __init__ assigns one."""
  out = {}
  for init in sorted((root / "tmax_jax").rglob("__init__.py")):
    names = _assigned_all(ast.parse(init.read_text(), str(init)))
    if names is not None:
      out[_module_name(root, init)] = frozenset(names)
  return out


def _imports(tree: ast.Module, module: str, is_package: bool):
  """(line, module path, imported name or None) for every import of a tmax_jax path, function-level
  ones included; relative imports resolved."""
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      yield from ((node.lineno, a.name, None) for a in node.names if a.name.startswith("tmax_jax"))
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        parent = module.split(".")[: len(module.split(".")) - node.level + is_package]
        base = ".".join(parent + ([base] if base else []))
      if base.startswith("tmax_jax"):
        yield from ((node.lineno, base, a.name) for a in node.names)


def _inside(module: str, package: str) -> bool:
  return module == package or module.startswith(package + ".")


def breach(importer: str, target: str, name: str | None, faced: dict) -> str | None:
  """The faced package whose face `importer` bypasses by importing `name` from module `target`
  (`name` None: `import target`), or None when the import keeps every face on its path."""
  path = target.split(".")
  if name not in (None, "*"):
    path.append(name)  # a submodule or a name defined in `target`: a face lists both alike
  for depth in range(1, len(path)):
    package = ".".join(path[:depth])
    if package in faced and not _inside(importer, package) and path[depth] not in faced[package]:
      return package
  return None


@functools.cache
def breaches(root: pathlib.Path = ROOT) -> list[Breach]:
  """Every import in CHECKED_DIRS that bypasses a face."""
  faced, out = faces(root), []
  for top in CHECKED_DIRS:
    for path in sorted((root / top).rglob("*.py")):
      module = _module_name(root, path)
      tree = ast.parse(path.read_text(), str(path))
      for line, target, name in _imports(tree, module, path.name == "__init__.py"):
        face = breach(module, target, name, faced)
        if face is not None:
          shown = f"{target}.{name}" if name else target
          out.append(Breach(str(path.relative_to(root)), line, shown, face))
  return out


def _allowance(b: Breach) -> tuple[str, str] | None:
  return next((k for k in ALLOWED if b.file.startswith(k[0]) and b.face == k[1]), None)


def test_outsiders_import_only_what_faces_list():
  found = [str(b) for b in breaches() if _allowance(b) is None]
  assert found == [], "\n".join(found)


def test_every_allowance_is_still_needed():
  used = {_allowance(b) for b in breaches()}
  assert set(ALLOWED) - used == set(), (
    "these imports keep their faces now: remove them from ALLOWED"
  )


def test_unfaced_packages_are_listed():
  """Every top-level package has a face, or is in UNFACED with its reason (and only then)."""
  top = {p.parent.name for p in (ROOT / "tmax_jax").glob("*/__init__.py")}
  faced = {name.split(".")[1] for name in faces() if name.count(".") == 1}
  assert top - faced == set(UNFACED)


def _bound_names(init: pathlib.Path) -> set[str]:
  """Names the __init__ binds at its top (imports, defs, assignments; TYPE_CHECKING imports of a
  lazy face) plus the package's submodules."""
  tree = ast.parse(init.read_text(), str(init))
  names = {p.stem for p in init.parent.glob("*.py")} | {
    p.parent.name for p in init.parent.glob("*/__init__.py")
  }
  for node in tree.body:
    body = node.body if isinstance(node, ast.If) else [node]
    for stmt in body:
      if isinstance(stmt, ast.Import | ast.ImportFrom):
        names |= {(a.asname or a.name).split(".")[0] for a in stmt.names}
      elif isinstance(stmt, ast.FunctionDef | ast.ClassDef):
        names.add(stmt.name)
      elif isinstance(stmt, ast.Assign | ast.AnnAssign):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        names |= {t.id for t in targets if isinstance(t, ast.Name)}
  return names


def test_every_name_in_a_face_exists():
  for package, names in faces().items():
    init = ROOT / package.replace(".", "/") / "__init__.py"
    assert names <= _bound_names(init), (package, sorted(names - _bound_names(init)))


def _lazy_homes(init: pathlib.Path) -> tuple[dict, dict]:
  """A lazy face's `_HOMES` (name -> module) and its TYPE_CHECKING imports (name -> module)."""
  package = _module_name(ROOT, init)
  homes, checked = {}, {}
  for node in ast.parse(init.read_text(), str(init)).body:
    if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "_HOMES" for t in node.targets):
      homes = {k: f"{package}.{v}" for k, v in ast.literal_eval(node.value).items()}
    if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
      for stmt in node.body:
        checked |= {a.asname or a.name: stmt.module for a in stmt.names}
  return homes, checked


def test_lazy_faces_name_the_same_homes_for_the_type_checker():
  """A name a face loads on first use (`_HOMES`, tmax_jax.lazy_face) is imported from the same
  module under TYPE_CHECKING (what mypy and the import graph see), and the other way round."""
  lazy = 0
  for package in faces():
    homes, checked = _lazy_homes(ROOT / package.replace(".", "/") / "__init__.py")
    assert homes == checked, package
    lazy += bool(homes)
  assert lazy > 0


def test_lazy_names_resolve():
  """Each name a face loads on first use is its home module's object (loading imports it)."""
  for package in faces():
    face = importlib.import_module(package)
    for name, home in getattr(face, "_HOMES", {}).items():
      assert getattr(face, name) is getattr(importlib.import_module(f"{package}.{home}"), name)
    if hasattr(face, "_HOMES"):
      with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        face.not_a_name  # noqa: B018


def _write(root: pathlib.Path, files: dict[str, str]) -> None:
  for rel, text in files.items():
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text(text)


def test_the_check_finds_a_bypass_and_keeps_nested_faces(tmp_path):
  _write(
    tmp_path,
    {
      "tmax_jax/__init__.py": "",
      "tmax_jax/p/__init__.py": "from tmax_jax.p.a import f\n__all__ = ['f', 'pub', 'q']\n",
      "tmax_jax/p/a.py": "def f(): ...\ndef g(): ...\n",
      "tmax_jax/p/pub.py": "def h(): ...\n",
      "tmax_jax/p/q/__init__.py": "__all__ = ['x']\n",
      "tmax_jax/p/q/x.py": "from tmax_jax.p import a\n",
      "tmax_jax/p/q/y.py": "",
      "tmax_jax/p/b.py": "from tmax_jax.p.a import g\nfrom tmax_jax.p.q import y\n",
      "launch/main.py": (
        "from tmax_jax.p import f, pub, q\nfrom tmax_jax.p.pub import h\nimport tmax_jax.p.q.x\n"
        "from tmax_jax.p.a import g\nimport tmax_jax.p.q.y\ndef run():\n"
        "  from tmax_jax.p import a\n"
      ),
    },
  )
  found = {(b.file, b.line, b.target, b.face) for b in breaches(tmp_path)}
  assert found == {
    ("launch/main.py", 4, "tmax_jax.p.a.g", "tmax_jax.p"),
    ("launch/main.py", 5, "tmax_jax.p.q.y", "tmax_jax.p.q"),
    ("launch/main.py", 7, "tmax_jax.p.a", "tmax_jax.p"),
    ("tmax_jax/p/b.py", 1 + 1, "tmax_jax.p.q.y", "tmax_jax.p.q"),
  }


if __name__ == "__main__":
  print("\n".join(str(b) for b in breaches()))
