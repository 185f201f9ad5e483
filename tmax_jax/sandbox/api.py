"""The sandbox API shared by rollouts, verifiers and the task runner.

Backends (bubblewrap, podman, apptainer) implement `Sandbox`; `open_sandbox(spec, config)` picks
one. Paths inside a sandbox follow the Harbor layout: the task workdir (default /workspace), /tests
and /solution (uploaded only when needed), /logs/{agent,verifier,artifacts}.
"""

from __future__ import annotations

import abc
import dataclasses
import pathlib


class SandboxError(RuntimeError):
  """A sandbox could not be started, used or cleaned up; the message says which and why."""


@dataclasses.dataclass(frozen=True)
class Limits:
  """Per-sandbox resource limits: memory, processes and cpus per sandbox through cgroups (v1 or a
  delegated v2 subtree; podman's own cgroup), per process through rlimits (file size, CPU time).

  enforce_limits: when no cgroup can hold the sandbox (memory/pids would only be per-process
  rlimits), starting it is a SandboxError unless this is False (then the sandbox carries a
  `limit_warning` that the runner records per trial).

  lifetime_s: the sandbox's hard lifetime from its start, enforced by a process outside the one
  that started it and out of the sandbox user's reach (podman: conmon's `run --timeout`;
  bubblewrap: a host-root watchdog in the sandbox's PID namespace): a hung owner cannot keep a
  sandbox alive past it. A backstop above any episode + verifier time, not a per-command limit.
  """

  memory_mb: int = 4096
  max_processes: int = 512
  max_file_mb: int = 1024
  cpu_seconds: int | None = None
  disk_mb: int = 2048
  max_output_mb: int = 256  # a command writing more is killed (status "output_limit")
  cpus: float | None = None  # cgroup CPU quota (v2 cpu.max; podman --cpus); None = unlimited
  enforce_limits: bool = True
  lifetime_s: int = 4 * 3600  # above the recipe's episode (3600 s) + verifier (>= 600 s) + setup


@dataclasses.dataclass(frozen=True)
class EnvironmentSpec:
  """What a sandbox starts from.

  image: a rootfs directory (bubblewrap), a podman image name, or an apptainer .sif/definition.
  workdir: the writable working directory inside the sandbox.
  files: host path -> sandbox path, copied into the sandbox at start (task seeds).
  setup_commands: run once as root-in-sandbox after start (task-specific additions).
  env: extra environment variables for every command.
  """

  image: str
  workdir: str = "/workspace"
  files: tuple[tuple[str, str], ...] = ()
  setup_commands: tuple[str, ...] = ()
  env: tuple[tuple[str, str], ...] = ()
  limits: Limits = Limits()
  allow_network: bool = False
  logs_dir: str | None = (
    None  # host dir mounted at /logs (the trial dir); None -> a sandbox temp dir
  )


@dataclasses.dataclass(frozen=True)
class HealthCheck:
  """A service's readiness probe (compose `healthcheck:` / Dockerfile HEALTHCHECK): `test` argv
  run in the service container; healthy on its first exit 0, failed when it has not passed within
  start_period_s + retries * (interval_s + timeout_s)."""

  test: tuple[str, ...]
  interval_s: float = 30.0
  timeout_s: float = 30.0
  retries: int = 3
  start_period_s: float = 0.0


@dataclasses.dataclass(frozen=True)
class Mount:
  """A volume of a pod container. source: "logs" / "logs/agent" (the trial's /logs dirs),
  "volume:<name>" (a per-sandbox dir shared by every container naming it), or an absolute host
  path (copied into the sandbox at start, so the container never writes the task's own files)."""

  source: str
  target: str
  read_only: bool = False


@dataclasses.dataclass(frozen=True)
class ServiceSpec:
  """A side service of a pod: a container next to the main one (the agent's), same network.

  image: a built image record (images/builder.py .json); command: its argv (ENTRYPOINT + CMD);
  env: exactly the variables it gets (image ENV + compose environment); user: as `podman --user`;
  depends_on: (service, "service_started" | "service_healthy" | "service_completed_successfully").
  """

  name: str
  image: str
  command: tuple[str, ...]
  env: tuple[tuple[str, str], ...] = ()
  workdir: str = "/"
  user: str = "root"
  mounts: tuple[Mount, ...] = ()
  healthcheck: HealthCheck | None = None
  depends_on: tuple[tuple[str, str], ...] = ()
  aliases: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class PodSpec:
  """Several containers sharing one network namespace (a podman pod): `main` is the agent's
  sandbox (shell, exec, files, verifier) under the name `main_name`; `services` start in
  dependency order, each reachable from all containers on localhost and by name (and aliases).
  main_mounts: volumes of the main container beyond the sandbox's own binds."""

  main: EnvironmentSpec
  main_name: str = "main"
  services: tuple[ServiceSpec, ...] = ()
  main_depends_on: tuple[tuple[str, str], ...] = ()
  main_mounts: tuple[Mount, ...] = ()


@dataclasses.dataclass(frozen=True)
class CommandResult:
  """Outcome of one command in the persistent shell.

  output: stdout+stderr interleaved, decoded with errors="replace", head+tail truncated with a note.
  exit_code: the command's status; None when it was killed (timeout / OOM / limit).
  status: "ok", "timeout", "oom", "output_limit", "limit" (process / file size / disk / CPU limit;
    a process-limit hit resets the sandbox's processes), "crashed" (shell died; the sandbox was
    reset). A note saying what happened ends `output` whenever status is not "ok".
  """

  output: str
  exit_code: int | None
  status: str = "ok"
  duration_s: float = 0.0


class Sandbox(abc.ABC):
  """A started sandbox with one persistent bash session (cwd and env survive between commands)."""

  @abc.abstractmethod
  def run(
    self, command: str, *, timeout_s: float = 120.0, max_output_chars: int = 10_000
  ) -> CommandResult:
    """Runs `command` in the persistent shell; kills its whole process tree on timeout."""

  @abc.abstractmethod
  def exec(
    self, argv: list[str], *, timeout_s: float = 600.0, max_output_chars: int = 10_000
  ) -> CommandResult:
    """Runs a fresh process (not the persistent shell), e.g. a verifier `bash /tests/test.sh`."""

  @abc.abstractmethod
  def upload(self, host_path: str | pathlib.Path, sandbox_path: str) -> None:
    """Copies a host file or directory into the sandbox."""

  @abc.abstractmethod
  def download(self, sandbox_path: str, host_path: str | pathlib.Path) -> None:
    """Copies a sandbox file or directory to the host."""

  @abc.abstractmethod
  def reset(self) -> None:
    """Restarts the shell session (and restores the initial filesystem state where supported)."""

  @abc.abstractmethod
  def close(self) -> None:
    """Stops every process and removes every mount and temp dir; idempotent."""

  def lost(self) -> str:
    """ "" while the sandbox has kept working since it started; else why it stopped working at
    some point (its shell or container died, its hard lifetime ran out, ...), even if it was
    restarted since: whatever ran in it then was cut short by the infrastructure."""
    return ""

  def __enter__(self) -> Sandbox:
    return self

  def __exit__(self, *exc) -> None:
    self.close()
