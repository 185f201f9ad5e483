"""Show a job config as its launcher resolves it: every field with its value, its default and its
one-line meaning (the comment beside the field in the library's config dataclasses); then the
launcher's own input checks (preflight.check_inputs: a missing input, a server that does not
answer), whose error, if any, follows the table with exit 2, as the launcher would stop on it.

python3 -m tmax_jax.config show configs/X.py [--config.train.optimizer.warmup_ratio=0.1 ...]
python3 -m tmax_jax.config show configs/X.py --changed   (only the fields that differ from default)
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import pathlib
import sys
import textwrap
import types
from collections.abc import Iterator
from typing import Any

from absl import flags
from ml_collections import config_flags

from tmax_jax import cli, errors, jobs
from tmax_jax.config_dict import load_config_file, syntax_error
from tmax_jax.loop import check_inputs

USAGE = (
  "usage: python3 -m tmax_jax.config show CONFIG_FILE [--config.a.b=VALUE ...] [--changed] "
  "[--debug]"
)


@functools.cache
def field_comments(cls: type) -> dict[str, str]:
  """{field: meaning} from the comment after a field's annotation (or the comment lines right
  above it) in the source of dataclass `cls` and its bases."""
  out: dict[str, str] = {}
  for base in reversed(cls.__mro__[:-1]):
    if not dataclasses.is_dataclass(base):
      continue
    try:
      lines, _ = inspect.getsourcelines(base)
    except (OSError, TypeError):
      continue
    source = textwrap.dedent("".join(lines))
    source_lines = source.splitlines()
    for node in ast.parse(source).body[0].body:
      if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        out[node.target.id] = _comment_of(source_lines, node.lineno - 1, node.end_lineno - 1)
  return out


def _comment_of(lines: list[str], first: int, last: int) -> str:
  inline = lines[last].split("  # ", 1)
  if len(inline) == 2:
    return inline[1].strip()
  above = []
  i = first - 1
  while i >= 0 and lines[i].strip().startswith("#"):
    above.insert(0, lines[i].strip().lstrip("#").strip())
    i -= 1
  return " ".join(above)


@dataclasses.dataclass(frozen=True)
class Row:
  path: str
  value: Any
  default: Any
  meaning: str


def rows(cfg: Any, default: Any, prefix: str = "") -> Iterator[Row]:
  """One row per leaf field of dataclass `cfg`, depth first, with `default`'s value beside it."""
  meanings = field_comments(type(cfg))
  for f in dataclasses.fields(cfg):
    value = getattr(cfg, f.name)
    base = getattr(default, f.name, None) if default is not None else None
    path = f"{prefix}{f.name}"
    if dataclasses.is_dataclass(value):
      same_type = base if type(base) is type(value) else None
      yield from rows(value, same_type if same_type is not None else type(value)(), path + ".")
    elif (
      isinstance(value, dict) and value and all(dataclasses.is_dataclass(v) for v in value.values())
    ):
      for key, sub in value.items():
        sub_base = base.get(key) if isinstance(base, dict) else None
        yield from rows(sub, sub_base if sub_base is not None else type(sub)(), f"{path}.{key}.")
    else:
      yield Row(path, value, base, meanings.get(f.name, ""))


def field_defaults(cls: type) -> Any:
  """`cls()`, or, for a config that validates a field without a usable default (the Harbor
  eval's `tasks`), its fields' declared defaults (None where a field has none)."""
  try:
    return cls()
  except (TypeError, ValueError):
    values = {}
    for f in dataclasses.fields(cls):
      has_factory = f.default_factory is not dataclasses.MISSING
      default = f.default_factory() if has_factory else f.default
      values[f.name] = None if default is dataclasses.MISSING else default
    return types.SimpleNamespace(**values)


def render(cfg: Any, changed_only: bool = False) -> str:
  """The table: `path = value` and, where they differ, the default; then the meaning."""
  out = [f"# {type(cfg).__name__} (defaults: {type(cfg).__name__}())"]
  for row in rows(cfg, field_defaults(type(cfg))):
    if changed_only and row.value == row.default:
      continue
    line = f"{row.path} = {row.value!r}"
    if row.value != row.default:
      line += f"   [default {row.default!r}]"
    if row.meaning:
      line += f"   # {row.meaning}"
    out.append(line)
  return "\n".join(out)


def load(path: str, overrides: list[str]):
  """The typed job config of config file `path` with `--config.a.b=v` overrides, as the launcher
  parses them (absl + ml_collections, locked) and types them (jobs.job_config); the launcher's
  input checks are preflight.check_inputs, which `show` runs after the table."""
  values = flags.FlagValues()
  config_flags.DEFINE_config_file(
    "config", None, "job config", flag_values=values, lock_config=True
  )
  try:
    values([sys.argv[0], f"--config={path}", *overrides])
  except flags.Error as e:  # a wrong-typed value: `flag --config.a.b=x: invalid literal ...`
    raise errors.ConfigError(str(e).removeprefix("flag ")) from e
  except SyntaxError as e:
    raise syntax_error(e) from e
  return jobs.job_config(values.config)


def _check(path: str, overrides: list[str]) -> None:
  """A missing config file or an override of a field it lacks, said in one short error (the
  launchers' wording, tmax_jax/cli.py) instead of ml_collections' traceback."""
  if not pathlib.Path(path).is_file():
    raise errors.ConfigError(f"{path}: no such config file (expected a configs/*.py)")
  for override in overrides:
    if not override.startswith("--config."):
      raise errors.ConfigError(f"{override}: expected --config.a.b=VALUE or --changed")
    dotted = override.split("=", 1)[0][len("--config.") :]
    error = cli.unknown_field_error("config", load_config_file(path), dotted)
    if error is not None:
      raise error


def main(args: list[str]) -> int:
  """`show CONFIG_FILE [--config.a.b=VALUE ...] [--changed]` (the program name not included)."""
  if args and args[0] in ("-h", "--help"):
    print(f"{USAGE}\n\n{__doc__.strip()}")
    return 0
  if len(args) < 2 or args[0] != "show" or args[1].startswith("-"):
    cli.exit_user_error(f"expected `show CONFIG_FILE`; {USAGE}")
  changed = "--changed" in args
  overrides = [a for a in args[2:] if a not in ("--changed", cli.DEBUG_FLAG)]
  _check(args[1], overrides)
  cfg = load(args[1], overrides)
  print(render(cfg, changed_only=changed))
  sys.stdout.flush()
  check_inputs(cfg)  # the launcher's checks: what would stop it is said (exit 2) after the table
  return 0


if __name__ == "__main__":
  cli.run(main)
