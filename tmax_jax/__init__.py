"""tmax_jax: the TMAX terminal-agent RL recipe as one JAX stack.

Importing the package (or any module of it) changes no process-wide setting; entry points that
run XLA:CPU programs (launch/*.py, bench/*.py, the tests) call host_memory.reuse_freed_memory()
first.
"""

import importlib

__version__ = "0.1.0"


def lazy_face(package: str, homes: dict[str, str]):
  """A package face's module `__getattr__` for names that load on first use (`homes`: name -> the
  submodule defining it, relative to `package`), so importing the package, or any light module of
  it, does not import its heavy modules. The package's `if TYPE_CHECKING:` block imports the same
  names from the same modules, for the type checker and the import graph (tests/test_faces.py
  checks the two agree)."""

  def __getattr__(name: str):
    if name not in homes:
      raise AttributeError(f"module {package!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{package}.{homes[name]}"), name)

  return __getattr__
