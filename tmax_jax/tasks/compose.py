"""A task's docker-compose.yaml -> the containers of a trial: one sandbox, or a podman pod.

TB1 tasks (and Harbor tasks) may ship environment/docker-compose.yaml. With one service its
`environment:` becomes the task env at conversion (tasks/tb1.py). With several the runner starts
them as one podman pod (`pod_spec` -> sandbox.PodSpec, backends/pod.py): each service's image is
built by sandbox/images/builder.py from its build context / Dockerfile, or from `FROM <its image:>`
through the base-image mapping (images/base_images.py), then the services start in depends_on order.

The main service (the agent's shell and the verifier run in it; terminal-bench's harness attaches
to it) is, in this order: the service whose container_name is
${T_BENCH_TASK_DOCKER_CLIENT_CONTAINER_NAME}; the service named `client` (TB1) or `main`
(Harbor); the only service built from the environment dir itself. Its command is not run (the
sandbox's own shell replaces it, as TB1's `sleep infinity` does), its logs/tests volumes are the
sandbox's own /logs and /tests.

Honoured per service: build (context, dockerfile), image, command, entrypoint, environment,
env_file, volumes (the harness's logs dirs, named and anonymous volumes, host paths inside the
task), depends_on (list or conditions), healthcheck (and the Dockerfile's HEALTHCHECK),
working_dir, user, container_name / hostname (as aliases). Keys that change what a service may do
(privileged, cap_add, network_mode, pid, devices, build args, secrets ...) make the task
unsupported with that reason; keys without effect in a pod (ports, networks, restart, deploy, ...)
are ignored with a note recorded in the trial.
"""

from __future__ import annotations

import dataclasses
import pathlib
import posixpath
import re
import shlex
import tempfile
from collections.abc import Callable
from typing import Any

import yaml

from tmax_jax.sandbox import EnvironmentSpec, HealthCheck, Mount, PodSpec, ServiceSpec
from tmax_jax.sandbox.images import base_images, builder
from tmax_jax.sandbox.images import dockerfile as dockerfile_lib
from tmax_jax.sandbox.images.image import Image
from tmax_jax.tasks.format import Task, TaskFormatError

# The environment's compose file (Harbor's and TB1's name). Other names are task data (e.g. a
# docker-compose.yml the agent is asked to fix), never the trial's containers.
COMPOSE_FILE = "docker-compose.yaml"
# What TB1 compose files reference (terminal-bench's harness sets these): container-side paths,
# and the host-side trial logs dirs (a volume source "@logs" is the sandbox's own /logs).
CONTAINER_VARS = {
  "T_BENCH_TEST_DIR": "/tests",
  "T_BENCH_CONTAINER_LOGS_PATH": "/logs",
  "T_BENCH_CONTAINER_AGENT_LOGS_PATH": "/logs/agent",
}
HOST_LOGS_VARS = {"T_BENCH_TASK_LOGS_PATH": "logs", "T_BENCH_TASK_AGENT_LOGS_PATH": "logs/agent"}
CLIENT_VAR = "T_BENCH_TASK_DOCKER_CLIENT_CONTAINER_NAME"
MAIN_NAMES = ("client", "main")
_UNSUPPORTED = {
  "privileged": "runs privileged",
  "cap_add": "adds capabilities",
  "devices": "needs devices",
  "network_mode": "sets network_mode",
  "pid": "shares a pid namespace",
  "ipc": "sets ipc",
  "sysctls": "sets sysctls",
  "secrets": "uses secrets",
  "configs": "uses configs",
  "extends": "extends another file",
  "userns_mode": "sets userns_mode",
  "runtime": "sets a runtime",
  "volumes_from": "uses volumes_from",
}
_NO_EFFECT = (
  "ports",
  "expose",
  "networks",
  "restart",
  "deploy",
  "labels",
  "logging",
  "init",
  "stop_grace_period",
  "stop_signal",
  "tty",
  "stdin_open",
  "platform",
  "mem_limit",
  "memswap_limit",
  "cpus",
  "cpu_shares",
  "ulimits",
  "shm_size",
  "dns",
  "domainname",
  "extra_hosts",
  "security_opt",
  "read_only",
  "tmpfs",
  "links",
  "cap_drop",
  "mem_reservation",
  "oom_score_adj",
  "pull_policy",
  "profiles",
)
_VAR = re.compile(r"\$(?:\$|\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")
_HC = HealthCheck(())  # compose's and Docker's defaults (interval, timeout, retries, start)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(us|ms|s|m|h)")


class UnsupportedCompose(ValueError):
  """A valid compose file asking for something the pods here cannot give (the reason says what)."""


@dataclasses.dataclass(frozen=True)
class Service:
  """One compose service, variables substituted. context: build context relative to the compose
  file's dir (None: built `FROM image`); mounts: sandbox.Mount sources (see sandbox/api.py)."""

  name: str
  context: str | None = None
  dockerfile: str = "Dockerfile"
  image: str | None = None
  command: tuple[str, ...] | None = None
  entrypoint: tuple[str, ...] | None = None
  environment: tuple[tuple[str, str], ...] = ()
  mounts: tuple[Mount, ...] = ()
  depends_on: tuple[tuple[str, str], ...] = ()
  healthcheck: HealthCheck | None = None
  healthcheck_disabled: bool = False
  working_dir: str | None = None
  user: str | None = None
  aliases: tuple[str, ...] = ()
  client: bool = False  # container_name is the TB1 harness's client container
  unsupported: tuple[str, ...] = ()
  notes: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Compose:
  """A parsed compose file: services in file order and the main service's name."""

  path: pathlib.Path
  services: tuple[Service, ...]
  main: str

  def service(self, name: str) -> Service:
    return next(s for s in self.services if s.name == name)

  @property
  def names(self) -> list[str]:
    return [s.name for s in self.services]


# ----------------------------------------------------------------------------------------------
# parsing


def _substitute(value: Any, env: dict[str, str]) -> str:
  """Compose's ${VAR}, ${VAR:-default}, $VAR and $$; unknown variables are empty (as compose)."""

  def one(m: re.Match) -> str:
    if m.group(0) == "$$":
      return "$"
    name = m.group(1) or m.group(3)
    return env.get(name) or (m.group(2) or "")

  return _VAR.sub(one, str(value))


def _err(path: pathlib.Path, field: str, problem: str) -> TaskFormatError:
  return TaskFormatError(path, field, problem)


def _argv(value: Any, path: pathlib.Path, field: str) -> tuple[str, ...] | None:
  if value is None:
    return None
  if isinstance(value, str):
    return tuple(shlex.split(value))
  if isinstance(value, list) and all(isinstance(v, (str, int, float)) for v in value):
    return tuple(str(v) for v in value)
  raise _err(path, field, f"expected a string or a list of strings, got {value!r}")


def _seconds(value: Any, default: float, path: pathlib.Path, field: str) -> float:
  if value is None:
    return default
  if isinstance(value, (int, float)) and not isinstance(value, bool):
    return float(value)
  text = str(value).strip()
  parts = _DURATION.findall(text)
  if not parts or "".join(n + u for n, u in parts) != text:
    raise _err(path, field, f"expected a duration like 10s, 1m30s or 500ms, got {value!r}")
  scale = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
  return sum(float(n) * scale[u] for n, u in parts)


def _healthcheck(raw: Any, path: pathlib.Path, field: str) -> tuple[HealthCheck | None, bool]:
  """compose `healthcheck:` -> (check, disabled)."""
  if not isinstance(raw, dict):
    raise _err(path, field, f"expected a mapping, got {raw!r}")
  test = raw.get("test")
  if raw.get("disable") or test == ["NONE"]:
    return None, True
  if isinstance(test, str):
    argv = ("/bin/sh", "-c", test)
  elif isinstance(test, list) and test and test[0] in ("CMD", "CMD-SHELL"):
    argv = (
      tuple(map(str, test[1:]))
      if test[0] == "CMD"
      else ("/bin/sh", "-c", " ".join(map(str, test[1:])))
    )
  else:
    raise _err(
      path,
      f"{field}.test",
      f"expected a string, [CMD, ...], [CMD-SHELL, cmd] or [NONE], got {test!r}",
    )
  retries = raw.get("retries", _HC.retries)
  if isinstance(retries, bool) or not isinstance(retries, int) or retries < 1:
    raise _err(path, f"{field}.retries", f"expected a positive int, got {retries!r}")
  return HealthCheck(
    argv,
    _seconds(raw.get("interval"), _HC.interval_s, path, f"{field}.interval"),
    _seconds(raw.get("timeout"), _HC.timeout_s, path, f"{field}.timeout"),
    retries,
    _seconds(raw.get("start_period"), _HC.start_period_s, path, f"{field}.start_period"),
  ), False


def _environment(
  raw: Any, env_files: list[pathlib.Path], subst: dict, path: pathlib.Path, field: str
) -> tuple[tuple[str, str], ...]:
  out: dict[str, str] = {}
  for file in env_files:
    for line in file.read_text(encoding="utf-8").splitlines():
      key, eq, value = line.strip().partition("=")
      if eq and key and not key.startswith("#"):
        out[key.strip()] = value.strip().strip("'\"")
  if isinstance(raw, dict):
    items = [(k, v) for k, v in raw.items()]
  elif isinstance(raw, list):
    items = [tuple(str(e).partition("=")[::2]) for e in raw]
  elif raw is None:
    items = []
  else:
    raise _err(path, field, f"expected a mapping or a list of NAME=value, got {raw!r}")
  for key, value in items:
    value = _substitute("" if value is None else value, subst)
    if value:  # NAME alone means "from the host's environment": nothing of the host goes in
      out[str(key)] = value
  return tuple(out.items())


def _mounts(raw: Any, name: str, path: pathlib.Path, field: str) -> tuple[list[Mount], list[str]]:
  """volumes: -> (mounts, reasons they cannot be honoured)."""
  if raw is None:
    return [], []
  if not isinstance(raw, list):
    raise _err(path, field, f"expected a list, got {raw!r}")
  subst = {**CONTAINER_VARS, **{k: f"@{v}" for k, v in HOST_LOGS_VARS.items()}}
  mounts, unsupported = [], []
  for i, entry in enumerate(raw):
    if isinstance(entry, dict):
      source, target = entry.get("source") or "", entry.get("target")
      read_only = bool(entry.get("read_only"))
    elif isinstance(entry, str):
      parts = entry.split(":")
      source, target = (parts[0], parts[1]) if len(parts) > 1 else ("", parts[0])
      read_only = len(parts) > 2 and "ro" in parts[2].split(",")
    else:
      raise _err(path, f"{field}[{i}]", f"expected a string or a mapping, got {entry!r}")
    source, target = _substitute(source, subst), _substitute(target or "", subst)
    if not target.startswith("/"):
      raise _err(path, f"{field}[{i}]", f"expected an absolute container path, got {target!r}")
    if source.startswith("@"):
      mounts.append(Mount(source[1:], target, read_only))
    elif source.startswith((".", "/", "~")):
      host = (path.parent / source).resolve()
      if not host.is_relative_to(path.parent.resolve()) or not host.exists():
        unsupported.append(
          f"service {name} mounts host path {source!r}, which is not in the task's environment/"
        )
      else:
        mounts.append(Mount(str(host), target, read_only))
    else:
      mounts.append(Mount(f"volume:{source or f'anon-{name}-{i}'}", target, read_only))
  return mounts, unsupported


def _depends_on(raw: Any, path: pathlib.Path, field: str) -> tuple[tuple[str, str], ...]:
  if raw is None:
    return ()
  if isinstance(raw, list):
    return tuple((str(d), "service_started") for d in raw)
  if isinstance(raw, dict):
    return tuple(
      (str(d), str((c or {}).get("condition", "service_started"))) for d, c in raw.items()
    )
  raise _err(
    path, field, f"expected a list or a mapping of service: {{condition: ...}}, got {raw!r}"
  )


def _build(raw: Any, path: pathlib.Path, field: str) -> tuple[str | None, str, list[str]]:
  """build: -> (context relative to the compose dir, dockerfile, unsupported reasons)."""
  if raw is None:
    return None, "Dockerfile", []
  if isinstance(raw, str):
    raw = {"context": raw}
  if not isinstance(raw, dict):
    raise _err(path, field, f"expected a path or a mapping, got {raw!r}")
  context = posixpath.normpath(_substitute(raw.get("context") or ".", CONTAINER_VARS))
  dockerfile = _substitute(raw.get("dockerfile") or "Dockerfile", CONTAINER_VARS)
  unsupported = [
    f"build.{k} is not supported by the image builder"
    for k in ("args", "target", "secrets", "ssh")
    if raw.get(k)
  ]
  return context, dockerfile, unsupported


def _service(name: str, raw: Any, path: pathlib.Path) -> Service:
  field = f"services.{name}"
  if raw is None:
    raw = {}
  if not isinstance(raw, dict):
    raise _err(path, field, f"expected a mapping, got {raw!r}")
  subst = {**CONTAINER_VARS, **{k: f"/{v}" for k, v in HOST_LOGS_VARS.items()}}
  context, dockerfile, unsupported = _build(raw.get("build"), path, f"{field}.build")
  image = _substitute(raw["image"], subst) if raw.get("image") else None
  if context is None and not image:
    unsupported.append(f"service {name} has neither build: nor an image: name")
  mounts, bad = _mounts(raw.get("volumes"), name, path, f"{field}.volumes")
  unsupported += bad
  unsupported += [
    f"service {name} {why}"
    for key, why in _UNSUPPORTED.items()
    if raw.get(key) and not (key == "network_mode" and raw[key] in ("bridge", "default"))
  ]
  env_files = raw.get("env_file") or []
  env_files = [env_files] if isinstance(env_files, str) else env_files
  files = [(path.parent / _substitute(f, subst)).resolve() for f in env_files]
  unsupported += [
    f"service {name}: env_file {f} is not a file in the task's environment/"
    for f in files
    if not f.is_file() or not f.is_relative_to(path.parent.resolve())
  ]
  check, disabled = (
    _healthcheck(raw["healthcheck"], path, f"{field}.healthcheck")
    if raw.get("healthcheck")
    else (None, False)
  )
  container_name = str(raw.get("container_name") or "")
  aliases = [
    a
    for a in (_substitute(container_name, subst), str(raw.get("hostname") or ""))
    if a and "$" not in container_name
  ]
  known = {
    "build",
    "image",
    "command",
    "entrypoint",
    "environment",
    "env_file",
    "volumes",
    "depends_on",
    "healthcheck",
    "working_dir",
    "user",
    "container_name",
    "hostname",
    *_UNSUPPORTED,
    *_NO_EFFECT,
  }
  notes = [
    f"service {name}: {key} ignored ("
    + ("no effect in a pod" if key in _NO_EFFECT else "unknown key")
    + ")"
    for key in raw
    if key not in known - set(_NO_EFFECT) and key != "cap_drop" and not str(key).startswith("x-")
  ]
  if context is not None and image:
    notes.append(f"service {name}: image {image!r} ignored (it is built from {context})")
  return Service(
    name=name,
    context=context,
    dockerfile=dockerfile,
    image=None if context else image,
    command=_argv(raw.get("command"), path, f"{field}.command"),
    entrypoint=_argv(raw.get("entrypoint"), path, f"{field}.entrypoint"),
    environment=_environment(
      raw.get("environment"), [f for f in files if f.is_file()], subst, path, f"{field}.environment"
    ),
    mounts=tuple(mounts),
    depends_on=_depends_on(raw.get("depends_on"), path, f"{field}.depends_on"),
    healthcheck=check,
    healthcheck_disabled=disabled,
    working_dir=_substitute(raw["working_dir"], subst) if raw.get("working_dir") else None,
    user=str(raw["user"]) if raw.get("user") is not None else None,
    aliases=tuple(aliases),
    client=CLIENT_VAR in container_name,
    unsupported=tuple(unsupported),
    notes=tuple(notes),
  )


def _main_service(services: list[Service], path: pathlib.Path) -> str:
  clients = [s.name for s in services if s.client]
  if len(clients) == 1:
    return clients[0]
  names = [s.name for s in services]
  for name in MAIN_NAMES:
    if name in names:
      return name
  own = [s.name for s in services if s.context == "."]
  if len(own) == 1 or len(services) == 1:
    return (own or names)[0]
  raise _err(
    path,
    "services",
    f"cannot tell which service the agent runs in ({', '.join(names)})"
    f": expected one whose container_name is ${{{CLIENT_VAR}}}, one named "
    f"{' or '.join(MAIN_NAMES)}, or exactly one built from the environment dir itself",
  )


def load_compose(path: str | pathlib.Path) -> Compose:
  """Parses a compose file. Raises TaskFormatError naming the file and field."""
  path = pathlib.Path(path)
  try:
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
  except yaml.YAMLError as err:
    raise _err(path, "yaml", f"not valid YAML: {err}") from None
  services = data.get("services") if isinstance(data, dict) else None
  if not isinstance(services, dict) or not services:
    raise _err(path, "services", "expected a mapping of at least one service")
  parsed = [_service(str(name), raw, path) for name, raw in services.items()]
  return Compose(path, tuple(parsed), _main_service(parsed, path))


def compose_file(task: Task) -> pathlib.Path | None:
  file = task.path / "environment" / COMPOSE_FILE if task.path else None
  return file if file is not None and file.is_file() else None


def service_names(task: Task) -> list[str]:
  """The task's compose services (the file on disk, else metadata compose_services)."""
  file = compose_file(task)
  if file is not None:
    return load_compose(file).names
  return [str(s) for s in task.config.metadata.get("compose_services") or []]


# ----------------------------------------------------------------------------------------------
# building a pod


def build_context(
  svc: Service, env_dir: pathlib.Path, tmp: pathlib.Path
) -> tuple[pathlib.Path, str]:
  """(context dir, Dockerfile name) of a service: its build context inside environment/, or a
  generated `FROM <image>` context under `tmp` (mapped by sandbox/images/base_images.py)."""
  if svc.context is not None:
    context = (env_dir / svc.context).resolve()
    if not context.is_relative_to(env_dir.resolve()) or not (context / svc.dockerfile).is_file():
      raise UnsupportedCompose(
        f"service {svc.name}: build context {svc.context!r} with "
        f"{svc.dockerfile} is not inside the task's environment/"
      )
    return context, svc.dockerfile
  context = tmp / f"image-{svc.name}"
  context.mkdir(parents=True, exist_ok=True)
  (context / "Dockerfile").write_text(f"FROM {svc.image}\n")
  return context, "Dockerfile"


def _shell_form(text: str | None) -> list[str] | None:
  if text is None:
    return None
  argv = dockerfile_lib.exec_form(text)
  return argv if argv is not None else ["/bin/sh", "-c", text]


def service_command(svc: Service, image: Image) -> tuple[str, ...]:
  """ENTRYPOINT + CMD with Docker's rules: a compose entrypoint drops the image's CMD, a
  shell-form ENTRYPOINT ignores every CMD."""
  if svc.entrypoint is not None:
    argv = [*svc.entrypoint, *(svc.command or ())]
  else:
    text = image.runtime_arg("ENTRYPOINT")
    shell_entry = text is not None and dockerfile_lib.exec_form(text) is None
    cmd = svc.command if svc.command is not None else _shell_form(image.runtime_arg("CMD"))
    argv = [*(_shell_form(text) or []), *([] if shell_entry else cmd or [])]
  if not argv:
    raise UnsupportedCompose(
      f"service {svc.name}: nothing to run (no command/entrypoint, and its "
      f"image {svc.image or image.from_ref} has no CMD or ENTRYPOINT here)"
    )
  return tuple(argv)


def image_healthcheck(image: Image, where: str) -> HealthCheck | None:
  """The Dockerfile's HEALTHCHECK [--interval= ...] CMD ... (NONE / absent: None)."""
  text = image.runtime_arg("HEALTHCHECK")
  if not text or text.strip().upper() == "NONE":
    return None
  opts = {}
  while text.startswith("--"):
    flag, _, text = text.partition(" ")
    key, _, value = flag[2:].partition("=")
    opts[key] = value
    text = text.strip()
  if not text.upper().startswith("CMD"):
    raise UnsupportedCompose(f"{where}: HEALTHCHECK {text!r}: expected CMD or NONE")
  path, flag = pathlib.Path(where), "HEALTHCHECK --"
  retries = opts.get("retries", str(_HC.retries))
  if not retries.isdigit() or int(retries) < 1:
    raise _err(path, flag + "retries", f"expected a positive int, got {retries!r}")
  return HealthCheck(
    tuple(_shell_form(text[3:].strip())),
    _seconds(opts.get("interval"), _HC.interval_s, path, flag + "interval"),
    _seconds(opts.get("timeout"), _HC.timeout_s, path, flag + "timeout"),
    int(retries),
    _seconds(opts.get("start-period"), _HC.start_period_s, path, flag + "start-period"),
  )


def _side_service(
  svc: Service, env_dir: pathlib.Path, tmp: pathlib.Path, quiet: bool, notes: list[str]
) -> ServiceSpec:
  if (
    svc.image
    and base_images.resolve(svc.image).warning
    and svc.command is None
    and (svc.entrypoint is None)
  ):
    raise UnsupportedCompose(
      f"service {svc.name}: image {svc.image} has no local equivalent "
      "(no container registry here) and the service sets no command to "
      "run on the nearest base"
    )
  context, dockerfile = build_context(svc, env_dir, tmp)
  image = builder.build_image(context, dockerfile_name=dockerfile, quiet=quiet)
  notes.append(
    f"service {svc.name}: image {image.id} FROM {image.from_ref} (built in "
    f"{image.build_seconds:.1f} s)"
  )
  notes += [f"service {svc.name}: warning: {w}" for w in image.warnings]
  env = dict(image.env)
  env.update(svc.environment)
  check = (
    None
    if svc.healthcheck_disabled
    else (svc.healthcheck or image_healthcheck(image, str(context / dockerfile)))
  )
  return ServiceSpec(
    name=svc.name,
    image=str(image.path),
    command=service_command(svc, image),
    env=tuple(env.items()),
    workdir=svc.working_dir or image.workdir,
    user=svc.user or image.user or "root",
    mounts=svc.mounts,
    healthcheck=check,
    depends_on=svc.depends_on,
    aliases=svc.aliases,
  )


def _main_mounts(svc: Service, notes: list[str]) -> tuple[Mount, ...]:
  """The main service's volumes beyond the sandbox's own /logs and /tests."""
  out = []
  for m in svc.mounts:
    if m.source in HOST_LOGS_VARS.values() or m.target in ("/tests", *CONTAINER_VARS.values()):
      if (m.source, m.target) not in (("logs", "/logs"), ("logs/agent", "/logs/agent")):
        notes.append(
          f"service {svc.name}: volume {m.source} -> {m.target} ignored (the "
          "sandbox's own /logs and /tests are used)"
        )
    elif not m.source.startswith("volume:") and pathlib.Path(m.source).is_file():
      raise UnsupportedCompose(
        f"service {svc.name} (the agent's) mounts the file {m.source}; "
        "only directories can be mounted there"
      )
    else:
      out.append(m)
  return tuple(out)


def pod_spec(
  task: Task,
  comp: Compose,
  main_spec: Callable[[pathlib.Path, str], EnvironmentSpec],
  *,
  quiet: bool = True,
) -> tuple[PodSpec, str]:
  """The pod a trial of `task` runs in, and the notes the trial records (one line each).
  main_spec(context, dockerfile) builds the main service's sandbox spec (runner.task_spec).
  Raises UnsupportedCompose, TaskFormatError, or DockerfileError/SandboxError from a build."""
  reasons = [r for s in comp.services for r in s.unsupported]
  if reasons:
    raise UnsupportedCompose("; ".join(reasons))
  env_dir = task.path / "environment"
  main = comp.service(comp.main)
  notes = [
    f"compose: {len(comp.services)} services as one podman pod; the agent runs in {main.name}",
    *(n for s in comp.services for n in s.notes),
  ]
  if main.command is not None or main.entrypoint is not None:
    notes.append(f"service {main.name}: command/entrypoint not run (the agent's shell is)")
  with tempfile.TemporaryDirectory(prefix="tmax_compose_") as tmp:
    context, dockerfile = build_context(main, env_dir, pathlib.Path(tmp))
    spec = main_spec(context, dockerfile)
    if main.working_dir:
      spec = dataclasses.replace(spec, workdir=main.working_dir)
    if main.environment:
      spec = dataclasses.replace(
        spec, env=tuple({**dict(spec.env), **dict(main.environment)}.items())
      )
    services = tuple(
      _side_service(s, env_dir, pathlib.Path(tmp), quiet, notes)
      for s in comp.services
      if s.name != main.name
    )
  pod = PodSpec(
    main=spec,
    main_name=main.name,
    services=services,
    main_depends_on=main.depends_on,
    main_mounts=_main_mounts(main, notes),
  )
  return pod, "\n".join(notes) + "\n"
