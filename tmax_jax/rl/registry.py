"""A tiny name -> component registry, one table per kind of RL component.

Configs select components by name (`LossConfig.policy_loss = "dppo"`); the trainer looks them up
here. A component declares, where it has them, its hyperparameters (a frozen dataclass whose
instance it receives as `hyper`) and the trainer-batch fields it reads (`train.batch.TrainBatch`
field names, possibly depending on the hyperparameters), so that a config can be validated against
what its data path produces before anything is traced. A policy loss also names the group advantage
estimator its objective is defined with (GRPO's is std-normalised), which a config takes unless it
names another.
"""

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable)

KINDS = ("policy_loss", "advantage", "aggregation")


@dataclasses.dataclass(frozen=True)
class Entry:
  """A registered component.

  fn: the function. hyper: its hyperparameter dataclass (None: it takes none). inputs:
  hyper instance (or None) -> the TrainBatch fields it needs beyond tokens / positions /
  segment_ids / targets / loss_mask, which every batch has. advantage: a policy loss's own
  advantage estimator (a name of kind "advantage"; None: it reads no advantages).
  """

  name: str
  fn: Callable
  hyper: type | None = None
  inputs: Callable[[Any], tuple[str, ...]] = lambda hyper: ()
  advantage: str | None = None


_TABLES: dict[str, dict[str, Entry]] = {kind: {} for kind in KINDS}


def _table(kind: str) -> dict[str, Entry]:
  if kind not in _TABLES:
    raise KeyError(f"unknown registry kind {kind!r}; expected one of {KINDS}")
  return _TABLES[kind]


def register(
  kind: str,
  name: str,
  *,
  hyper: type | None = None,
  inputs: Sequence[str] | Callable[[Any], Sequence[str]] = (),
  advantage: str | None = None,
) -> Callable[[F], F]:
  """Decorator: registers `fn` as `name` under `kind` (one of KINDS), with its hyperparameter
  dataclass, the batch fields it reads (a tuple, or a function of the hyperparameters) and, for a
  policy loss, its own advantage estimator."""
  table = _table(kind)
  if hyper is not None and not dataclasses.is_dataclass(hyper):
    raise TypeError(f"{kind} {name!r}: hyper must be a dataclass type, got {hyper!r}")
  needs = inputs if callable(inputs) else (lambda _, fields=tuple(inputs): fields)

  def wrap(fn: F) -> F:
    if name in table:
      raise KeyError(f"{kind} {name!r} is already registered")
    table[name] = Entry(name, fn, hyper, lambda h: tuple(needs(h)), advantage)
    return fn

  return wrap


def entry(kind: str, name: str) -> Entry:
  """The registration of `name` under `kind`; a KeyError naming the registered ones otherwise."""
  table = _table(kind)
  if name not in table:
    raise KeyError(f"unknown {kind} {name!r}; registered: {sorted(table)}")
  return table[name]


def get(kind: str, name: str) -> Callable:
  """The function registered as `name` under `kind`."""
  return entry(kind, name).fn


def names(kind: str) -> list[str]:
  return sorted(_table(kind))
