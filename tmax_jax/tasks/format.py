"""The Terminal-Bench 2 / Harbor task directory: load, validate and write it.

Layout (see shared/docs/formats.md):
  <task>/instruction.md        what the agent is told
  <task>/task.toml             metadata and limits (TaskConfig)
  <task>/environment/          Dockerfile and/or seeds/ (copied into the workdir)
  <task>/tests/test.sh         hidden verifier, uploaded to /tests after the agent finishes
  <task>/solution/solve.sh     oracle, uploaded to /solution only for oracle runs

A `Task` holds the three directories in memory as {relative path: bytes} so that generators can
build tasks without touching disk; `write_task` writes one atomically (temp dir, then rename).
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import pathlib
import re
import shutil
import tempfile
import tomllib
from collections.abc import Mapping
from typing import Any

from tmax_jax.errors import UserError

INSTRUCTION_FILE = "instruction.md"
CONFIG_FILE = "task.toml"
SECTIONS = ("environment", "tests", "solution")
TEST_SCRIPT = "tests/test.sh"
SOLVE_SCRIPT = "solution/solve.sh"


class TaskFormatError(UserError):
  """A task directory or task.toml is malformed; the message names the file and the field."""

  def __init__(self, file: str | os.PathLike, field: str, problem: str):
    self.file = str(file)
    self.field = field
    self.problem = problem
    super().__init__(f"{self.file}: {field}: {problem}")


@dataclasses.dataclass(frozen=True)
class TaskInfo:
  """[task]: identity of the task."""

  name: str = ""
  description: str = ""
  authors: tuple[str, ...] = ()
  keywords: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class VerifierConfig:
  """[verifier]: how the hidden tests run."""

  timeout_sec: float = 600.0
  env: Mapping[str, str] = dataclasses.field(default_factory=dict)
  user: str | None = None


@dataclasses.dataclass(frozen=True)
class AgentConfig:
  """[agent]: limits for the agent (and the oracle, which runs under the agent timeout)."""

  timeout_sec: float = 600.0
  user: str | None = None


@dataclasses.dataclass(frozen=True)
class EnvironmentConfig:
  """[environment]: what the sandbox starts from and its resources."""

  build_timeout_sec: float = 600.0
  docker_image: str | None = None
  cpus: float = 1.0
  memory_mb: int = 2048
  storage_mb: int = 10240
  gpus: int = 0
  allow_internet: bool = True
  env: Mapping[str, str] = dataclasses.field(default_factory=dict)
  workdir: str | None = None
  healthcheck: Mapping[str, Any] | None = None


@dataclasses.dataclass(frozen=True)
class SolutionConfig:
  """[solution]: environment variables for the oracle run."""

  env: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class TaskConfig:
  """task.toml. Unknown keys are kept in `extra` ({"section.key": value}) and written back."""

  schema_version: str = "1.0"
  task: TaskInfo = TaskInfo()
  metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  verifier: VerifierConfig = VerifierConfig()
  agent: AgentConfig = AgentConfig()
  environment: EnvironmentConfig = EnvironmentConfig()
  solution: SolutionConfig = SolutionConfig()
  extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)


Files = Mapping[str, bytes]


@dataclasses.dataclass(frozen=True)
class Task:
  """A task in memory. Paths in `environment`, `tests`, `solution` are relative to that directory;
  `executables` lists "<section>/<path>" entries written with mode 0755 (*.sh always are)."""

  instruction: str
  config: TaskConfig
  environment: Files = dataclasses.field(default_factory=dict)
  tests: Files = dataclasses.field(default_factory=dict)
  solution: Files = dataclasses.field(default_factory=dict)
  executables: frozenset[str] = frozenset()
  path: pathlib.Path | None = None

  @property
  def name(self) -> str:
    return self.config.task.name or (self.path.name if self.path else "")


# ----------------------------------------------------------------------------------------------
# task.toml parsing

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)
_SIZE_MB = {"": 1.0 / (1024 * 1024), "K": 1.0 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0 * 1024}


def parse_size_mb(value: Any, file: str, field: str) -> int:
  """'2G' / '512M' / '1.5G' / an int of MB -> MB. A bare number string is bytes (docker style)."""
  if isinstance(value, bool):
    raise TaskFormatError(
      file, field, f"expected a size like '2G' or an integer of MB, got {value!r}"
    )
  if isinstance(value, (int, float)):
    return int(value)
  if isinstance(value, str):
    m = _SIZE_RE.match(value)
    if m:
      return max(1, int(round(float(m.group(1)) * _SIZE_MB[m.group(2).upper()])))
  raise TaskFormatError(
    file, field, f"expected a size like '2G' or an integer of MB, got {value!r}"
  )


class _Section:
  """Typed reads from one TOML table; every error names file and dotted field."""

  def __init__(self, data: Any, file: str, name: str):
    if not isinstance(data, dict):
      raise TaskFormatError(file, name, f"expected a table, got {type(data).__name__}")
    self.data, self.file, self.name = dict(data), file, name
    self.used: set[str] = set()

  def _get(self, key: str):
    self.used.add(key)
    return self.data.get(key)

  def field(self, key: str) -> str:
    return f"{self.name}.{key}"

  def number(self, key: str, default):
    v = self._get(key)
    if v is None:
      return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
      raise TaskFormatError(
        self.file, self.field(key), f"expected a non-negative number, got {v!r}"
      )
    return type(default)(v) if default is not None else v

  def string(self, key: str, default):
    v = self._get(key)
    if v is None:
      return default
    if not isinstance(v, str):
      raise TaskFormatError(self.file, self.field(key), f"expected a string, got {v!r}")
    return v

  def boolean(self, key: str, default: bool) -> bool:
    v = self._get(key)
    if v is None:
      return default
    if not isinstance(v, bool):
      raise TaskFormatError(self.file, self.field(key), f"expected true or false, got {v!r}")
    return v

  def str_list(self, key: str) -> tuple[str, ...]:
    v = self._get(key)
    if v is None:
      return ()
    if isinstance(v, str):
      return (v,)
    if not isinstance(v, list):
      raise TaskFormatError(self.file, self.field(key), f"expected a list of strings, got {v!r}")
    out = []
    for i, item in enumerate(v):
      if isinstance(item, dict):  # authors = [{name = "...", email = "..."}]
        item = " ".join(str(item[k]) for k in ("name", "email") if k in item) or str(item)
      if not isinstance(item, str):
        raise TaskFormatError(
          self.file, f"{self.field(key)}[{i}]", f"expected a string, got {item!r}"
        )
      out.append(item)
    return tuple(out)

  def env(self, key: str) -> dict[str, str]:
    v = self._get(key)
    if v is None:
      return {}
    if not isinstance(v, dict):
      raise TaskFormatError(self.file, self.field(key), f"expected a table of strings, got {v!r}")
    out = {}
    for k, val in v.items():
      if isinstance(val, bool) or not isinstance(val, (str, int, float)):
        raise TaskFormatError(
          self.file, f"{self.field(key)}.{k}", f"expected a string, got {val!r}"
        )
      out[str(k)] = str(val)
    return out

  def extras(self) -> dict[str, Any]:
    return {f"{self.name}.{k}": v for k, v in self.data.items() if k not in self.used}


def _parse_environment(s: _Section) -> EnvironmentConfig:
  d = EnvironmentConfig()
  memory = s._get("memory_mb")
  if memory is None:
    memory = s._get("memory")  # older files: memory = "2G"
  storage = s._get("storage_mb")
  if storage is None:
    storage = s._get("storage")
  health = s._get("healthcheck")
  if health is not None and not (
    isinstance(health, dict) and isinstance(health.get("command"), str)
  ):
    raise TaskFormatError(
      s.file, s.field("healthcheck"), f"expected a table with a string 'command', got {health!r}"
    )
  workdir = s.string("workdir", d.workdir)
  if workdir is not None and not workdir.startswith("/"):
    raise TaskFormatError(s.file, s.field("workdir"), f"expected an absolute path, got {workdir!r}")
  return EnvironmentConfig(
    build_timeout_sec=s.number("build_timeout_sec", d.build_timeout_sec),
    docker_image=s.string("docker_image", d.docker_image),
    cpus=s.number("cpus", d.cpus),
    memory_mb=d.memory_mb
    if memory is None
    else parse_size_mb(memory, s.file, s.field("memory_mb")),
    storage_mb=d.storage_mb
    if storage is None
    else parse_size_mb(storage, s.file, s.field("storage_mb")),
    gpus=s.number("gpus", d.gpus),
    allow_internet=s.boolean("allow_internet", d.allow_internet),
    env=s.env("env"),
    workdir=workdir,
    healthcheck=health,
  )


def parse_task_config(data: Mapping[str, Any], file: str = CONFIG_FILE) -> TaskConfig:
  """A parsed TOML document -> TaskConfig; raises TaskFormatError naming the field."""
  root = _Section(data, file, "")
  version = root._get("schema_version")
  if version is None:
    version = root._get("version")
  if version is None:
    version = "1.0"
  if not isinstance(version, (str, int, float)) or not str(version).startswith("1"):
    raise TaskFormatError(file, "schema_version", f"expected a 1.x version, got {version!r}")

  def section(name: str) -> _Section:
    return _Section(root._get(name) or {}, file, name)

  t = section("task")
  info = TaskInfo(
    name=t.string("name", ""),
    description=t.string("description", ""),
    authors=t.str_list("authors"),
    keywords=t.str_list("keywords"),
  )
  meta = section("metadata")
  metadata = dict(meta.data)
  v, a, e, so = section("verifier"), section("agent"), section("environment"), section("solution")
  dv, da = VerifierConfig(), AgentConfig()
  verifier = VerifierConfig(
    timeout_sec=v.number("timeout_sec", dv.timeout_sec),
    env=v.env("env"),
    user=v.string("user", dv.user),
  )
  agent = AgentConfig(
    timeout_sec=a.number("timeout_sec", da.timeout_sec), user=a.string("user", da.user)
  )
  environment = _parse_environment(e)
  solution = SolutionConfig(env=so.env("env"))
  extra = {}
  for s in (t, v, a, e, so):
    extra.update(s.extras())
  extra.update({k: v for k, v in root.data.items() if k not in root.used})
  return TaskConfig(
    schema_version=str(version),
    task=info,
    metadata=metadata,
    verifier=verifier,
    agent=agent,
    environment=environment,
    solution=solution,
    extra=extra,
  )


def load_task_config(path: str | os.PathLike) -> TaskConfig:
  path = pathlib.Path(path)
  try:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
  except FileNotFoundError:
    raise TaskFormatError(path, "task.toml", "file is missing") from None
  except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
    raise TaskFormatError(path, "toml", f"not valid TOML: {err}") from None
  return parse_task_config(data, str(path))


# ----------------------------------------------------------------------------------------------
# task.toml writing (a tiny TOML emitter: tables of scalars, lists and inline tables)


def _toml_value(v: Any) -> str:
  if isinstance(v, bool):
    return "true" if v else "false"
  if isinstance(v, (int, float)):
    return repr(v)
  if isinstance(v, (datetime.datetime, datetime.date, datetime.time)):
    return v.isoformat()
  if isinstance(v, str):
    return (
      '"'
      + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
      + '"'
    )
  if isinstance(v, (list, tuple)):
    return "[" + ", ".join(_toml_value(x) for x in v) + "]"
  if isinstance(v, Mapping):
    return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"
  raise TypeError(f"cannot write {v!r} ({type(v).__name__}) to TOML")


def _toml_key(k: str) -> str:
  return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else _toml_value(k)


def config_to_dict(cfg: TaskConfig) -> dict[str, dict[str, Any]]:
  """TaskConfig -> the TOML document as nested dicts (None fields dropped)."""

  def clean(d: Mapping[str, Any]) -> dict[str, Any]:
    return {
      k: (list(v) if isinstance(v, tuple) else dict(v) if isinstance(v, Mapping) else v)
      for k, v in d.items()
      if v is not None and v != () and not (isinstance(v, Mapping) and not v)
    }

  doc: dict[str, Any] = {"schema_version": cfg.schema_version}
  doc["task"] = clean(dataclasses.asdict(cfg.task))
  doc["metadata"] = dict(cfg.metadata)
  for name in ("verifier", "agent", "environment", "solution"):
    doc[name] = clean(dataclasses.asdict(getattr(cfg, name)))
  for dotted, v in cfg.extra.items():
    sec, _, key = dotted.rpartition(".")
    (doc.setdefault(sec, {}) if sec else doc)[key] = v
  return doc


def dumps_task_config(cfg: TaskConfig) -> str:
  return dumps_toml(config_to_dict(cfg))


def dumps_toml(doc: Mapping[str, Any]) -> str:
  """A task.toml document (top-level keys, then one table per dict) as TOML text."""
  lines = [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in doc.items() if not isinstance(v, dict)]
  for sec, body in doc.items():
    if isinstance(body, dict) and body:
      lines += ["", f"[{sec}]"] + [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in body.items()]
  return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------
# directories


def _read_tree(root: pathlib.Path, section: str) -> tuple[dict[str, bytes], set[str]]:
  files, execs = {}, set()
  if not root.is_dir():
    return files, execs
  for p in sorted(root.rglob("*")):
    if p.is_file():
      rel = p.relative_to(root).as_posix()
      files[rel] = p.read_bytes()
      if os.access(p, os.X_OK):
        execs.add(f"{section}/{rel}")
  return files, execs


def validate_task(task: Task, where: str | os.PathLike | None = None) -> None:
  """Raises TaskFormatError for what would make the task unrunnable."""
  base = pathlib.Path(where or task.path or "<task>")
  if not task.instruction.strip():
    raise TaskFormatError(base / INSTRUCTION_FILE, "instruction", "is empty")
  if "test.sh" not in task.tests:
    raise TaskFormatError(
      base / TEST_SCRIPT, "tests/test.sh", "file is missing (the verifier entrypoint)"
    )
  if not task.tests["test.sh"].strip():
    raise TaskFormatError(base / TEST_SCRIPT, "tests/test.sh", "file is empty")
  if task.solution and "solve.sh" not in task.solution:
    raise TaskFormatError(
      base / SOLVE_SCRIPT,
      "solution/solve.sh",
      "solution/ exists but has no solve.sh (the oracle entrypoint)",
    )
  for sec in SECTIONS:
    for rel in getattr(task, sec):
      if rel.startswith("/") or ".." in pathlib.PurePosixPath(rel).parts:
        raise TaskFormatError(base / sec / rel, f"{sec}/{rel}", "path escapes its directory")
  if task.config.verifier.timeout_sec <= 0:
    raise TaskFormatError(base / CONFIG_FILE, "verifier.timeout_sec", "must be > 0")
  if task.config.agent.timeout_sec <= 0:
    raise TaskFormatError(base / CONFIG_FILE, "agent.timeout_sec", "must be > 0")


def load_task(directory: str | os.PathLike) -> Task:
  """Reads and validates a TB2/Harbor task directory."""
  d = pathlib.Path(directory)
  if not d.is_dir():
    raise TaskFormatError(d, "task directory", "does not exist or is not a directory")
  try:
    instruction = (d / INSTRUCTION_FILE).read_text(encoding="utf-8")
  except FileNotFoundError:
    raise TaskFormatError(d / INSTRUCTION_FILE, "instruction.md", "file is missing") from None
  config = load_task_config(d / CONFIG_FILE)
  trees, execs = {}, set()
  for sec in SECTIONS:
    trees[sec], ex = _read_tree(d / sec, sec)
    execs |= ex
  task = Task(instruction=instruction, config=config, executables=frozenset(execs), path=d, **trees)
  validate_task(task, d)
  return task


def _is_executable(task: Task, rel: str) -> bool:
  return rel.endswith(".sh") or rel in task.executables


def write_task(task: Task, directory: str | os.PathLike, *, overwrite: bool = False) -> Task:
  """Validates `task` and writes it atomically to `directory`; returns it with `path` set."""
  dest = pathlib.Path(directory)
  validate_task(task, dest)
  if dest.exists() and not overwrite:
    raise FileExistsError(f"{dest}: task directory already exists (pass overwrite=True)")
  dest.parent.mkdir(parents=True, exist_ok=True)
  tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
  try:
    (tmp / INSTRUCTION_FILE).write_text(task.instruction, encoding="utf-8")
    (tmp / CONFIG_FILE).write_text(dumps_task_config(task.config), encoding="utf-8")
    for sec in SECTIONS:
      for rel, data in getattr(task, sec).items():
        p = tmp / sec / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        p.chmod(0o755 if _is_executable(task, f"{sec}/{rel}") else 0o644)
    tmp.chmod(0o755)
    if dest.exists():
      old = dest.with_name(f".{dest.name}.old.{os.getpid()}")
      dest.rename(old)
      tmp.rename(dest)
      shutil.rmtree(old, ignore_errors=True)
    else:
      tmp.rename(dest)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
  return dataclasses.replace(task, path=dest)
