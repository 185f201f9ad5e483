"""The entry points' command-line plumbing: one error path and one flag style for every main
(launch/*.py, `python3 -m tmax_jax.*`, bench/*.py).

Every entry point through `run` / `run_absl` also gets the host malloc setting (host_memory), the
choice an importer of the library does not make.

Error path: a user error (errors.UserError and subclasses; a missing file or directory; a flag
absl rejects; a config file that does not exist; a `--config.a.b=...` override of a field the
config does not have) prints `error: <message>` on stderr, at most three lines naming the field or
file, and exits 2. `--debug` shows the traceback instead. Any other exception is a bug and keeps
its traceback.

  absl mains:     `cli.run_absl(main, verbosity=logging.INFO)`  (the verbosity is the default
                  of absl's -v/--verbosity, so `-v` still decides)
  argparse mains: `cli.run(main)` with `main(argv) -> int | None` building a `cli.ArgumentParser`

`ArgumentParser` is argparse with `--debug`, every flag's help text required, its default shown
in --help, and flag names spelled with underscores as absl's are (`--prune_days`); the dashed
spelling (`--prune-days`, documented before) is still accepted.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import os
import re
import socket
import sys
import urllib.parse
from collections.abc import Callable, Sequence
from typing import NoReturn

from tmax_jax import errors, host_memory

EXIT_USER_ERROR = 2
DEBUG_FLAG = "--debug"
DEBUG_HELP = "on an error, show its traceback instead of the short message"
MAX_MESSAGE_LINES = 3

# What an entry point reports without a traceback: the user fixes these by changing a flag, a
# config, a file or the environment, not the code.
USER_ERRORS = (
  errors.UserError,
  FileNotFoundError,
  NotADirectoryError,
  IsADirectoryError,
  PermissionError,
  FileExistsError,
)


def user_error_message(exc: BaseException) -> str:
  """The short text of a user error: at most MAX_MESSAGE_LINES lines."""
  if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
    text = f"{exc.filename}: {exc.strerror}"
  else:
    text = str(exc).strip() or type(exc).__name__
  lines = text.splitlines()
  if len(lines) > MAX_MESSAGE_LINES:
    lines = lines[: MAX_MESSAGE_LINES - 1] + [
      f"{lines[MAX_MESSAGE_LINES - 1]} [...] ({DEBUG_FLAG})"
    ]
  return "\n".join(lines)


def exit_user_error(message: str) -> NoReturn:
  print(f"error: {message}", file=sys.stderr, flush=True)
  sys.exit(EXIT_USER_ERROR)


@contextlib.contextmanager
def user_errors_exit(debug: bool):
  """Turns a user error raised in the block into `error: ...` and exit 2 (re-raised with debug)."""
  try:
    yield
  except USER_ERRORS as e:
    if debug:
      raise
    exit_user_error(user_error_message(e))


def wants_debug(argv: Sequence[str]) -> bool:
  args = list(argv)
  return DEBUG_FLAG in (args[: args.index("--")] if "--" in args else args)


def run(main: Callable[[list[str]], object], argv: Sequence[str] | None = None) -> NoReturn:
  """Runs an argparse main (`main(argv)`) through the error path and exits with its code (an
  int it returns; anything else, e.g. a bench's result dict for its tests, exits 0)."""
  argv = list(sys.argv[1:] if argv is None else argv)
  host_memory.reuse_freed_memory()  # an entry point's choice, before the first XLA allocation
  with user_errors_exit(wants_debug(argv)):
    code = main(argv)
  sys.exit(code if isinstance(code, int) else 0)


# --- argparse ---------------------------------------------------------------------------------


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
  """Keeps the description's line breaks; appends each flag's default to its help."""

  def _get_help_string(self, action):
    text = action.help or ""
    shown = action.default not in (None, argparse.SUPPRESS) and not action.required
    if shown and action.nargs != 0 and "%(default)" not in text:  # nargs 0: a switch
      text += " (default: %(default)s)"
    return text


def _module_prog() -> str | None:
  """`python3 -m package.module` when run with -m (argparse would say `module.py`)."""
  spec = getattr(sys.modules.get("__main__"), "__spec__", None)
  return f"python3 -m {spec.name}" if spec is not None and spec.name else None


class ArgumentParser(argparse.ArgumentParser):
  """argparse for our tools: `--debug`, help text required, defaults shown, underscores in flag
  names with the dashed spelling accepted as an alias."""

  def __init__(self, *args, **kwargs):
    kwargs.setdefault("formatter_class", HelpFormatter)
    kwargs.setdefault("prog", _module_prog())
    super().__init__(*args, **kwargs)

  def add_argument(self, *names, **kwargs):
    dashed = [n for n in names if n.startswith("--") and "-" in n[2:]]
    if dashed:
      raise TypeError(f"{dashed}: spell flag names with underscores (cli module docstring)")
    if not kwargs.get("help") and kwargs.get("help") is not argparse.SUPPRESS:
      raise TypeError(f"{names}: every flag needs help text")
    return super().add_argument(*names, **kwargs)

  def error(self, message: str) -> NoReturn:
    """One line instead of argparse's usage block (the usage is one --help away)."""
    exit_user_error(f"{message} ({self.prog} --help lists the flags)")

  def parse_known_args(self, args=None, namespace=None):
    if DEBUG_FLAG not in self._option_string_actions:  # added last: listed after the tool's own
      self.add_argument(DEBUG_FLAG, action="store_true", help=DEBUG_HELP)
    args = list(sys.argv[1:] if args is None else args)
    return super().parse_known_args(self._underscored(args), namespace)

  def _underscored(self, args: list[str]) -> list[str]:
    known = {s for action in self._actions for s in action.option_strings}
    out = []
    for i, arg in enumerate(args):
      if arg == "--":
        return out + args[i:]
      name, eq, value = arg.partition("=")
      alias = "--" + name[2:].replace("-", "_")
      if name.startswith("--") and name not in known and alias in known:
        arg = alias + eq + value
      out.append(arg)
    return out


# --- endpoints --------------------------------------------------------------------------------

CONNECT_TIMEOUT_S = 5.0


def check_reachable(what: str, address: str) -> None:
  """A TCP connection to `address` ("host:port" or an http(s) URL) succeeds, else a UserError
  naming `what` (the flag or config field)."""
  url = urllib.parse.urlsplit(address if "://" in address else f"tcp://{address}")
  try:
    port = url.port or {"http": 80, "https": 443}.get(url.scheme)
  except ValueError:
    port = None
  if not url.hostname or not port:
    raise errors.UserError(f"{what}={address!r}: expected host:port or an http(s) URL")
  try:
    with socket.create_connection((url.hostname, port), timeout=CONNECT_TIMEOUT_S):
      pass
  except OSError as e:
    raise errors.UserError(
      f"{what}={address}: nothing answers there ({e.strerror or e}); start the server or "
      f"correct {what}"
    ) from e


# --- absl ---------------------------------------------------------------------------------------
# absl and ml_collections are imported inside these functions: argparse tools load neither.


def run_absl(main: Callable[[list[str]], object], *, verbosity: int | None = None) -> None:
  """`absl.app.run(main)` through the error path: flag and config errors included. `verbosity`
  is the default of absl's -v/--verbosity (absl.logging levels: 0 INFO, -1 WARNING)."""
  from absl import app, flags  # noqa: PLC0415  (absl: not in the Harbor venv, which imports cli)

  flags.DEFINE_bool("debug", False, DEBUG_HELP)
  # Listed in the main module's --help (absl's --help shows the main module's key flags only).
  flags.FLAGS.register_key_flag_for_module(sys.argv[0], flags.FLAGS["debug"])
  if verbosity is not None:
    flags.FLAGS.set_default("verbosity", verbosity)

  def guarded(argv):
    host_memory.reuse_freed_memory()  # an entry point's choice, before the first XLA allocation
    with user_errors_exit(flags.FLAGS.debug):
      return main(argv)

  app.run(guarded, flags_parser=_parse_absl_flags)


def _parse_absl_flags(argv: list[str]) -> list[str]:
  from absl import flags  # noqa: PLC0415  (absl: not in the Harbor venv, which imports cli)

  with user_errors_exit(wants_debug(argv[1:])):
    _check_config_files(argv[1:])
    try:
      return flags.FLAGS(argv)
    except flags.Error as e:
      raise errors.UserError(f"{e}\n(--helpshort lists the flags)") from e
    except (AttributeError, KeyError, TypeError, IndexError) as e:  # ml_collections: an override
      # of a field the config lacks (the type depends on what stands at the missing field)
      unknown = _unknown_override(argv[1:])
      if unknown is None:
        raise
      raise unknown from e


def _config_flags() -> list[str]:
  """Names of the ml_collections config-file flags defined so far."""
  from absl import flags  # noqa: PLC0415  (absl: not in the Harbor venv, which imports cli)

  # is_config_flag is meant for users (its docstring) but not re-exported by the package.
  from ml_collections.config_flags import (  # noqa: PLC0415  (not in the Harbor venv)
    config_flags,
  )

  return [name for name in flags.FLAGS if config_flags.is_config_flag(flags.FLAGS[name])]


def _flag_value(argv: Sequence[str], name: str) -> str | None:
  for i, arg in enumerate(argv):
    match = re.fullmatch(rf"--?{re.escape(name)}(=(.*))?", arg)
    if match:
      return match.group(2) if match.group(1) else (argv[i + 1] if i + 1 < len(argv) else None)
  return None


def _check_config_files(argv: Sequence[str]) -> None:
  """ml_collections reports a missing config file only when the config is first read, as a
  multi-line OSError; say it here, naming the flag."""
  for name in _config_flags():
    value = _flag_value(argv, name)
    if value and not os.path.exists(value.split(":")[0]):
      raise errors.ConfigError(
        f"--{name}={value}: no such config file (expected a configs/*.py with get_config())"
      )


def _unknown_override(argv: Sequence[str]) -> errors.ConfigError | None:
  """The first `--<flag>.a.b=...` override whose field the config file lacks, as a ConfigError
  naming its full dotted path (ml_collections' own error names only the last component)."""
  # ml_collections only here: argparse tools import this module too, also in the Harbor venv,
  # which has no ml_collections (tmax_jax/harbor/venv.py installs this package without deps).
  from tmax_jax.config_dict import load_config_file  # noqa: PLC0415

  for name in _config_flags():
    value = _flag_value(argv, name)
    if not value or ":" in value:  # `file.py:arg` configs: get_config(arg), not reproduced here
      continue
    overrides = [m.group(1) for a in argv if (m := re.match(rf"--?{re.escape(name)}\.([^=]+)", a))]
    config = None
    for dotted in overrides:
      config = config if config is not None else load_config_file(value)
      error = unknown_field_error(name, config, dotted)
      if error is not None:
        return error
  return None


def unknown_field_error(root: str, config, dotted: str) -> errors.ConfigError | None:
  """A ConfigError naming the first component of `dotted` (a.b.c) that `config` (a ConfigDict or
  dict named `root`) does not have, with its parent's fields; None when every component exists."""
  node, path = config, root
  for part in dotted.split("."):
    fields = sorted(node.keys()) if hasattr(node, "keys") else None
    if fields is not None and part in fields:
      node, path = node[part], f"{path}.{part}"
      continue
    if fields is None:
      return errors.ConfigError(
        f"--{root}.{dotted}: {path} is a value ({type(node).__name__}), not a group of fields"
      )
    close = difflib.get_close_matches(part, fields, n=1)
    hint = f" (did you mean {path}.{close[0]}?)" if close else ""
    return errors.ConfigError(
      f"--{root}.{dotted}: unknown field {path}.{part}{hint}\nfields of {path}: {', '.join(fields)}"
    )
  return None
