"""The entry points' command-line plumbing: one error path and one flag style for every main
(launch/*.py, `python3 -m tmax_jax.*`, bench/*.py).

Every entry point through `run` / `run_absl` also gets the host malloc setting (host_memory), the
choice an importer of the library does not make.

Error path: a user error (errors.UserError and subclasses; a missing file or directory; a JSON
Lines file with a line that is not JSON; a flag absl rejects, a wrong-typed value included; a
config file that does not exist or is not valid Python; a `--config.a.b=...` override of a field
the config does not have) prints `error: <message>` on stderr, at most three lines naming the
field or file, and exits 2. `--debug` shows the traceback instead. Any other exception is a bug
and keeps its traceback. `error:` is the one prefix: nothing else reports a failure.

  absl mains:     `cli.run_absl(main)`
  argparse mains: `cli.run(main)` with `main(argv) -> int | None` building a `cli.ArgumentParser`

Logging of absl mains: at the default verbosity our loggers (`tmax_jax.*`, `__main__`) log at
INFO (run_absl's `verbosity`) and every library's (JAX, Orbax, absl, JetStream, ...) only from
WARNING; an explicit `-v N` / `--verbosity=N` sets every logger's level (absl's rule: `-v 0` shows
the libraries' INFO lines too, `--verbosity=-1` only warnings).

Progress bars: `cli.progress(...)` is tqdm on a terminal; anywhere else (a CI log, a file) each
update is one whole line, at most one per PROGRESS_LOG_INTERVAL_S (tqdm's in-place redraws would
join into one carriage-return-separated line there).

`ArgumentParser` is argparse with `--debug`, every flag's help text required, its default shown
in --help, and flag names spelled with underscores as absl's are (`--prune_days`); the dashed
spelling (`--prune-days`, documented before) is still accepted.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import difflib
import errno
import logging
import os
import pathlib
import re
import socket
import sys
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from typing import NoReturn

from tmax_jax import errors, host_memory, json_io

EXIT_USER_ERROR = 2
DEBUG_FLAG = "--debug"
DEBUG_HELP = "on an error, show its traceback instead of the short message"
MAX_MESSAGE_LINES = 3

# What an entry point reports without a traceback: the user fixes these by changing a flag, a
# config, a file or the environment, not the code.
USER_ERRORS = (
  errors.UserError,
  json_io.MalformedJSONError,
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
    said = re.search(r"\bdefault\b", text)  # the help says it in words ("default: all")
    if shown and action.nargs != 0 and not said:  # nargs 0: a switch
      text += " (default: %(default)s)"
    return text


def _module_prog() -> str | None:
  """`python3 -m package.module` when run with -m (argparse would say `module.py`); a package's
  `__main__` is run as `python3 -m package`."""
  spec = getattr(sys.modules.get("__main__"), "__spec__", None)
  if spec is None or not spec.name:
    return None
  return f"python3 -m {spec.name.removesuffix('.__main__')}"


def description(doc: str | None) -> str:
  """The first paragraph of a module docstring, whole (a tool's --help description: a first line
  alone may stop mid-sentence)."""
  return (doc or "").strip().split("\n\n")[0]


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


# --- progress ---------------------------------------------------------------------------------

PROGRESS_LOG_INTERVAL_S = 10.0


def progress(iterable: Iterable | None = None, **kwargs):
  """A tqdm progress bar (tqdm's arguments) on stderr, or on `file`. On a terminal it redraws in
  place; anywhere else (a CI log, a file, a pipe) every update is one whole line, at most one per
  PROGRESS_LOG_INTERVAL_S, plus the final state."""
  import tqdm  # noqa: PLC0415  (the Harbor venv imports this module without tqdm)

  file = kwargs.pop("file", None) or sys.stderr
  if not _isatty(file):
    kwargs["mininterval"] = max(kwargs.get("mininterval", 0.0), PROGRESS_LOG_INTERVAL_S)
    file = _LineStream(file)
  return tqdm.tqdm(iterable, file=file, **kwargs)


def _isatty(file) -> bool:
  try:
    return file.isatty()
  except (AttributeError, ValueError):  # no isatty, or closed
    return False


_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class _LineStream:
  """What tqdm writes, as whole lines: tqdm redraws a bar by writing '\\r' + the bar and
  flushing; each redraw becomes one line (blank ones and repeats dropped)."""

  def __init__(self, stream):
    self._stream, self._pending, self._last = stream, "", ""

  @property
  def encoding(self) -> str | None:  # tqdm draws unicode bars only where the stream takes them
    return getattr(self._stream, "encoding", None)

  def write(self, text: str) -> int:
    # A bar below another one moves the cursor there and back (newlines, then ESC[A): the ESCs go
    for part in re.split(r"([\r\n])", _ANSI_ESCAPE.sub("", text)):
      if part in ("\r", "\n"):
        self._emit()
      else:
        self._pending += part
    return len(text)

  def flush(self) -> None:
    self._emit()
    self._stream.flush()

  def _emit(self) -> None:
    line, self._pending = self._pending.rstrip(), ""
    if line and line != self._last:
      self._stream.write(line + "\n")
      self._last = line


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


def check_port_free(what: str, host: str, port: int) -> None:
  """`port` can be listened on at `host` (port 0, any free one, always can), else a UserError
  naming `what` (the config field) and saying `port N is in use` when another socket listens there.

  Binds a plain socket with SO_REUSEADDR (as gRPC and aiohttp do, so that connections of a server
  that just exited do not count) but without SO_REUSEPORT, which would let it share the port with
  a gRPC server (gRPC sets SO_REUSEPORT by default), then closes it. A server job calls this before
  it builds its model; a server whose own bind failed calls it to say why."""
  if port == 0:
    return
  try:
    family, kind, proto, _, address = socket.getaddrinfo(
      host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    with socket.socket(family, kind, proto) as s:
      s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
      s.bind(address)
  except OSError as e:
    if e.errno == errno.EADDRINUSE:
      raise errors.UserError(
        f"{what}={port}: port {port} is in use on {host} (another server listens there); stop "
        f"it or choose another port (0 = any free one)"
      ) from e
    raise errors.UserError(
      f"{what}={port}: cannot listen on {host}:{port} ({e.strerror or e})"
    ) from e


# --- absl ---------------------------------------------------------------------------------------
# Where each job's config class is written (jobs.JOBS holds the classes themselves; reading the
# source keeps a launcher's --help from importing JAX). tests/test_entry_points.py checks that the
# two agree and that every launcher's --help lists its sections.
CONFIG_CLASSES = {
  "demo": ("loop/config.py", "DemoConfig"),
  "rl": ("loop/config.py", "RLConfig"),
  "sft": ("loop/config.py", "SFTConfig"),
  "eval": ("loop/evaluate/config.py", "EvalConfig"),
  "serve": ("loop/config.py", "ServeConfig"),
  "harbor": ("harbor/run.py", "HarborEvalConfig"),
  "math_eval": ("loop/math_eval/config.py", "MathEvalConfig"),
}


def config_sections(job: str) -> list[str]:
  """The top-level fields of `job`'s config class, in order, read from its source."""
  path, name = CONFIG_CLASSES[job]
  tree = ast.parse((pathlib.Path(__file__).parent / path).read_text())
  cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
  return [
    n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
  ]


def config_help(what: str, job: str, flag: str = "config") -> str:
  """A launcher's help for its config-file flag: what it takes, the config's top-level fields,
  how to override one and where to see every field."""
  return (
    f"{what}. Top-level fields: {', '.join(config_sections(job))}. Override one with "
    f"--{flag}.a.b=VALUE (underscores, as the config spells it). `python3 -m tmax_jax.config "
    f"show FILE [--config.a.b=VALUE ...]` prints every field as the launcher resolves and checks it"
  )


# absl and ml_collections are imported inside these functions: argparse tools load neither.


OWN_LOGGERS = ("tmax_jax", "__main__")


def run_absl(main: Callable[[list[str]], object], *, verbosity: int = 0) -> None:
  """`absl.app.run(main)` through the error path: flag and config errors included. `verbosity`
  (absl.logging levels: 0 INFO, -1 WARNING) is our loggers' level unless -v/--verbosity is given;
  the libraries' loggers log from WARNING then (module docstring)."""
  from absl import app, flags  # noqa: PLC0415  (absl: not in the Harbor venv, which imports cli)

  flags.DEFINE_bool("debug", False, DEBUG_HELP)
  # Listed in the main module's --help (absl's --help shows the main module's key flags only).
  flags.FLAGS.register_key_flag_for_module(sys.argv[0], flags.FLAGS["debug"])

  def guarded(argv):
    host_memory.reuse_freed_memory()  # an entry point's choice, before the first XLA allocation
    route_logging(verbosity, explicit=bool(flags.FLAGS["verbosity"].present))
    with user_errors_exit(flags.FLAGS.debug):
      return main(argv)

  app.run(guarded, flags_parser=_parse_absl_flags)


def route_logging(verbosity: int, explicit: bool) -> None:
  """Our loggers at absl level `verbosity`, the root logger (every library's) at WARNING; with
  `explicit` (-v given) every logger follows the root logger, which absl set to that level."""
  from absl.logging import converter  # noqa: PLC0415  (absl: not in the Harbor venv)

  if explicit:
    for name in OWN_LOGGERS:
      logging.getLogger(name).setLevel(logging.NOTSET)
    return
  logging.getLogger().setLevel(logging.WARNING)
  for name in OWN_LOGGERS:
    logging.getLogger(name).setLevel(converter.absl_to_standard(verbosity))


def _parse_absl_flags(argv: list[str]) -> list[str]:
  from absl import flags  # noqa: PLC0415  (absl: not in the Harbor venv, which imports cli)

  with user_errors_exit(wants_debug(argv[1:])):
    _check_config_files(argv[1:])
    try:
      return flags.FLAGS(argv)
    except flags.Error as e:
      raise errors.UserError(f"{e}\n(--helpshort lists the flags)") from e
    except SyntaxError as e:  # a config file that is not Python (ml_collections executes it)
      from tmax_jax.config_dict import syntax_error  # noqa: PLC0415  (not in the Harbor venv)

      raise syntax_error(e) from e
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
