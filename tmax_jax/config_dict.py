"""ml_collections <-> frozen config dataclasses.

The library's configs are typed, frozen dataclasses with their defaults defined once. A launch
config file (`configs/*.py`) starts from `to_config_dict(SomeConfig())`, overrides fields, and the
launcher turns the (flag-overridden, locked) ConfigDict back with `from_config_dict`, which rejects
unknown fields with their dotted path.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import pathlib
import typing
from typing import Any

import ml_collections

from tmax_jax.errors import ConfigError


def load_config_file(path: str | os.PathLike) -> ml_collections.ConfigDict:
  """`get_config()` of a launch config file (configs/*.py), as absl's --config flag loads it, for
  callers outside an absl main (it imports jax through the config, but starts no backend)."""
  path = pathlib.Path(path)
  spec = importlib.util.spec_from_file_location(f"_config_{path.stem}", path)
  module = importlib.util.module_from_spec(spec)
  try:
    spec.loader.exec_module(module)
  except SyntaxError as e:
    raise syntax_error(e) from e
  return module.get_config()


def syntax_error(e: SyntaxError) -> ConfigError:
  """A config file that is not valid Python: `file:line: not valid Python (why)` and the line."""
  text = f"{e.filename}:{e.lineno}: not valid Python ({e.msg})"
  return ConfigError(f"{text}\n  {e.text.strip()}" if e.text and e.text.strip() else text)


def to_config_dict(obj: Any) -> ml_collections.ConfigDict:
  """A dataclass instance -> ConfigDict (nested dataclasses become nested ConfigDicts; tuples stay
  tuples, which ml_collections can override from the command line: --config.seeds='(0,1,2)')."""

  def conv(v):
    if dataclasses.is_dataclass(v):
      return {f.name: conv(getattr(v, f.name)) for f in dataclasses.fields(v)}
    if isinstance(v, tuple):
      return tuple(conv(x) for x in v)
    if isinstance(v, dict):
      return {k: conv(x) for k, x in v.items()}
    return v

  return ml_collections.ConfigDict(conv(obj))


SCALARS = (bool, int, float, str)


def _check_items(path: str, hint: Any, value: tuple) -> None:
  """The items of a `tuple[X, ...]` field are X (ml_collections checks a scalar field's type on
  an override, but not a tuple's items: --config.seeds=zero arrives as ('zero',))."""
  args = typing.get_args(hint)
  if len(args) != 2 or args[1] is not Ellipsis or args[0] not in SCALARS:
    return
  kind = args[0]
  for item in value:
    ok = isinstance(item, kind) and (kind is bool or not isinstance(item, bool))
    ok = ok or (kind is float and isinstance(item, int) and not isinstance(item, bool))
    if not ok:
      raise ConfigError(f"{path}={value!r}: expected a tuple of {kind.__name__}, got {item!r}")


def _coerce(path: str, hint: Any, value: Any) -> Any:
  origin = typing.get_origin(hint)
  if dataclasses.is_dataclass(hint):
    return from_config_dict(hint, value, path)
  if origin is tuple and isinstance(value, (list, tuple)):
    _check_items(path, hint, value)
    return tuple(value)
  if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if value is None:
      return None
    if len(args) == 1:
      return _coerce(path, args[0], value)
    return tuple(value) if isinstance(value, list) else value
  if hint is float and isinstance(value, int) and not isinstance(value, bool):
    return float(value)
  if hint is dict and isinstance(value, ml_collections.ConfigDict):
    return value.to_dict()
  return value


def from_config_dict(cls: type, cd: Any, path: str = "config") -> Any:
  """ConfigDict (or dict) -> an instance of dataclass `cls`. Unknown keys and values its
  validation rejects raise ConfigError naming the dotted path."""
  data = cd.to_dict() if isinstance(cd, ml_collections.ConfigDict) else dict(cd)
  hints = typing.get_type_hints(cls)
  names = {f.name for f in dataclasses.fields(cls)}
  unknown = sorted(set(data) - names)
  if unknown:
    raise ConfigError(f"{path}: unknown field(s) {unknown}; {cls.__name__} has {sorted(names)}")
  kwargs = {k: _coerce(f"{path}.{k}", hints[k], v) for k, v in data.items()}
  try:
    return cls(**kwargs)
  except ConfigError:
    raise  # a nested config's error, already with its path
  except (ValueError, TypeError) as e:  # the dataclass's own validation (__post_init__)
    raise ConfigError(f"{path}: {e}") from e
