"""Dockerfile parsing: instructions with line numbers, variable substitution, COPY/ADD arguments.

Only what a single-stage task image needs is accepted (FROM, RUN, COPY, ADD, WORKDIR, ENV, ARG,
USER, SHELL, and the runtime-only CMD, ENTRYPOINT, EXPOSE, LABEL, VOLUME, HEALTHCHECK, STOPSIGNAL,
MAINTAINER, ONBUILD recorded as metadata). A second FROM (multi-stage), `COPY --from`,
`RUN --mount`, heredocs and unknown instructions are a `DockerfileError` naming the line.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex

from tmax_jax.errors import UserError

RUNTIME_ONLY = frozenset(
  {
    "CMD",
    "ENTRYPOINT",
    "EXPOSE",
    "LABEL",
    "VOLUME",
    "HEALTHCHECK",
    "STOPSIGNAL",
    "MAINTAINER",
    "ONBUILD",
  }
)
BUILD = frozenset({"FROM", "RUN", "COPY", "ADD", "WORKDIR", "ENV", "ARG", "USER", "SHELL"})
_VAR = re.compile(
  r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::?([-+])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))"
)


class DockerfileError(UserError):
  """A Dockerfile the builder cannot build: `file`, `line` and what was expected."""

  def __init__(self, file: str, line: int, problem: str):
    super().__init__(f"{file}: line {line}: {problem}")
    self.file, self.line, self.problem = file, line, problem


@dataclasses.dataclass(frozen=True)
class Instruction:
  """One instruction: `args` is the raw text after the keyword, `flags` its leading --k=v."""

  line: int
  cmd: str
  args: str
  flags: tuple[tuple[str, str], ...] = ()

  def flag(self, name: str) -> str | None:
    return dict(self.flags).get(name)


def instructions(text: str, file: str = "Dockerfile") -> list[Instruction]:
  """Joins continuation lines, drops comments and parser directives -> instructions."""
  out, buf, start = [], "", 0
  for no, raw in enumerate(text.splitlines(), 1):
    line = raw.rstrip()
    if line.lstrip().startswith("#") or (not buf and not line.strip()):
      continue
    if not buf:
      start = no
    if line.endswith("\\"):
      buf += line[:-1] + " "
      continue
    buf += line
    out.append(_instruction(start, buf.strip(), file))
    buf = ""
  if buf.strip():
    out.append(_instruction(start, buf.strip(), file))
  return out


def _instruction(line: int, text: str, file: str) -> Instruction:
  word, _, rest = text.partition(" ")
  cmd = word.upper()
  if not word.isalpha() or cmd not in BUILD | RUNTIME_ONLY:
    raise DockerfileError(file, line, f"expected a Dockerfile instruction, got {word!r}")
  rest = rest.strip()
  flags = []
  while cmd in ("FROM", "RUN", "COPY", "ADD") and rest.startswith("--"):
    flag, _, rest = rest.partition(" ")
    key, _, value = flag[2:].partition("=")
    flags.append((key, value))
    rest = rest.strip()
  if "<<" in rest and cmd in ("RUN", "COPY") and re.search(r"<<-?['\"]?[A-Za-z_]+['\"]?\s*$", rest):
    raise DockerfileError(file, line, f"{cmd} heredocs are not supported; use a script file")
  return Instruction(line, cmd, rest, tuple(flags))


def exec_form(args: str) -> list[str] | None:
  """The JSON (exec) form `["a", "b"]` as a list, else None (shell form)."""
  if args.startswith("["):
    try:
      value = json.loads(args)
    except json.JSONDecodeError:
      return None
    if isinstance(value, list) and all(isinstance(x, str) for x in value):
      return value
  return None


def substitute(text: str, env: dict[str, str]) -> str:
  """Docker's `$VAR`, `${VAR}`, `${VAR:-default}`, `${VAR:+alt}` (no substitution in RUN)."""
  return _VAR.sub(lambda m: _sub_one(m, env), text.replace("\\$", "\0")).replace("\0", "$")


def _sub_one(m: re.Match, env: dict[str, str]) -> str:
  name = m.group(1) or m.group(4)
  value = env.get(name, "")
  if m.group(2) == "-":
    return value or (m.group(3) or "")
  if m.group(2) == "+":
    return (m.group(3) or "") if value else ""
  return value


def key_values(ins: Instruction, env: dict[str, str], file: str) -> list[tuple[str, str]]:
  """ENV / LABEL / ARG pairs: `K=V K2="v 2"` or the legacy `K V with spaces`."""
  args = ins.args
  first = args.split(None, 1)[0] if args else ""
  if ins.cmd == "ARG" and "=" not in first:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", args):
      raise DockerfileError(file, ins.line, f"ARG expects NAME or NAME=default, got {args!r}")
    return [(args, "")]
  if "=" not in first:
    name, _, value = args.partition(" ")
    if not name:
      raise DockerfileError(file, ins.line, f"{ins.cmd} expects NAME VALUE or NAME=VALUE")
    return [(name, substitute(value.strip(), env))]
  try:
    parts = shlex.split(args, posix=True)
  except ValueError as err:
    raise DockerfileError(file, ins.line, f"{ins.cmd}: {err}") from None
  pairs = []
  for part in parts:
    name, eq, value = part.partition("=")
    if not eq or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", name):
      raise DockerfileError(file, ins.line, f"{ins.cmd}: expected NAME=VALUE, got {part!r}")
    pairs.append((name, substitute(value, env)))
  return pairs


def copy_args(ins: Instruction, env: dict[str, str], file: str) -> tuple[list[str], str]:
  """COPY/ADD sources and destination (after substitution)."""
  parts = exec_form(ins.args)
  if parts is None:
    try:
      parts = shlex.split(ins.args)
    except ValueError as err:
      raise DockerfileError(file, ins.line, f"{ins.cmd}: {err}") from None
  parts = [substitute(p, env) for p in parts]
  if len(parts) < 2:
    raise DockerfileError(
      file, ins.line, f"{ins.cmd} needs a source and a destination, got {ins.args!r}"
    )
  return parts[:-1], parts[-1]


def parse_from(ins: Instruction, env: dict[str, str], file: str) -> str:
  """The image reference of FROM (`AS name` dropped)."""
  parts = substitute(ins.args, env).split()
  if not parts or (len(parts) not in (1, 3)) or (len(parts) == 3 and parts[1].lower() != "as"):
    raise DockerfileError(file, ins.line, f"FROM expects IMAGE [AS NAME], got {ins.args!r}")
  return parts[0]
