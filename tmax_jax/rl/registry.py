"""A tiny name -> function registry, one table per kind of RL component.

Configs select components by name (`LossConfig.policy_loss = "dppo"`); the trainer looks them up here.
"""

from typing import Callable, TypeVar

F = TypeVar("F", bound=Callable)

KINDS = ("policy_loss", "advantage", "aggregation")
_TABLES: dict[str, dict[str, Callable]] = {kind: {} for kind in KINDS}


def register(kind: str, name: str) -> Callable[[F], F]:
  """Decorator: registers `fn` as `name` under `kind` (one of KINDS)."""
  if kind not in _TABLES:
    raise KeyError(f"unknown registry kind {kind!r}; expected one of {KINDS}")

  def wrap(fn: F) -> F:
    if name in _TABLES[kind]:
      raise KeyError(f"{kind} {name!r} is already registered")
    _TABLES[kind][name] = fn
    return fn

  return wrap


def get(kind: str, name: str) -> Callable:
  """Returns the function registered as `name` under `kind`; a clear KeyError otherwise."""
  if kind not in _TABLES:
    raise KeyError(f"unknown registry kind {kind!r}; expected one of {KINDS}")
  table = _TABLES[kind]
  if name not in table:
    raise KeyError(f"unknown {kind} {name!r}; registered: {sorted(table)}")
  return table[name]


def names(kind: str) -> list[str]:
  return sorted(_TABLES[kind])
