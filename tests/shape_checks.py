"""Runtime checks of the library's jaxtyping annotations, for the tests only.

The library only annotates (`Float[Array, "B T"]`): nothing is checked on its hot paths. Here
jaxtyping checks them with beartype: `checked(fn)` for a function's arguments and result, and
`check_fields(cls, values)` for the fields of an annotated record (a dataclass such as TrainBatch,
or a TypedDict such as DecodeState), with one shape memo over all fields, so a dimension named in
two fields must agree. A mismatch raises jaxtyping.TypeCheckError.
"""

import dataclasses
import functools
import typing
from collections.abc import Callable, Mapping
from typing import Any

from beartype import beartype
from jaxtyping import TypeCheckError, jaxtyped

__all__ = ["TypeCheckError", "check_fields", "checked", "fields_of"]


def checked(fn: Callable) -> Callable:
  """`fn` with its annotated arguments and return value checked on every call."""
  return jaxtyped(typechecker=beartype)(fn)


def fields_of(record: Any) -> dict[str, Any]:
  """A dataclass instance's or a mapping's fields by name."""
  if isinstance(record, Mapping):
    return dict(record)
  return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}


def check_fields(cls: type, record: Any) -> None:
  """Checks `record` (an instance of dataclass `cls`, or a dict typed as TypedDict `cls`) against
  `cls`'s field annotations; a TypedDict's absent NotRequired keys are not checked."""
  values = fields_of(record)
  unknown = sorted(set(values) - set(typing.get_type_hints(cls)))
  if unknown:
    raise TypeCheckError(f"{cls.__name__}: fields {unknown} are not annotated on it")
  _checker(cls, frozenset(values))(**values)


@functools.cache
def _checker(cls: type, names: frozenset[str]) -> Callable[..., Any]:
  """A dataclass of `cls`'s annotated fields in `names`, all required, whose __init__ jaxtyping
  checks: one call checks them all in one shape memo. (get_type_hints drops NotRequired.)"""
  fields = [(n, t) for n, t in typing.get_type_hints(cls).items() if n in names]
  record = dataclasses.make_dataclass(f"Checked{cls.__name__}", fields, frozen=True)
  return jaxtyped(typechecker=beartype)(record)
