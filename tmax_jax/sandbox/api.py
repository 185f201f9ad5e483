"""The sandbox API shared by rollouts, verifiers and the task runner.

Backends (bubblewrap, podman, apptainer) implement `Sandbox`; `open_sandbox(spec, config)` picks one.
Paths inside a sandbox follow the Harbor layout: the task workdir (default /workspace), /tests and
/solution (uploaded only when needed), /logs/{agent,verifier,artifacts}.
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
  """

  memory_mb: int = 4096
  max_processes: int = 512
  max_file_mb: int = 1024
  cpu_seconds: int | None = None
  disk_mb: int = 2048
  max_output_mb: int = 256  # a command writing more is killed (status "output_limit")
  cpus: float | None = None  # cgroup CPU quota (v2 cpu.max; podman --cpus); None = unlimited
  enforce_limits: bool = True


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
  logs_dir: str | None = None  # host dir mounted at /logs (the trial dir); None -> a sandbox temp dir


@dataclasses.dataclass(frozen=True)
class CommandResult:
  """Outcome of one command in the persistent shell.

  output: stdout+stderr interleaved, decoded with errors="replace", head+tail truncated with a note.
  exit_code: the command's status; None when it was killed (timeout / OOM / limit).
  status: "ok", "timeout", "oom", "output_limit", "limit" (process / file size / disk / CPU limit;
    a process-limit hit resets the sandbox's processes), "crashed" (shell died; the sandbox was reset).
    A note saying what happened ends `output` whenever status is not "ok".
  """

  output: str
  exit_code: int | None
  status: str = "ok"
  duration_s: float = 0.0


class Sandbox(abc.ABC):
  """A started sandbox with one persistent bash session (cwd and env survive between commands)."""

  @abc.abstractmethod
  def run(self, command: str, *, timeout_s: float = 120.0, max_output_chars: int = 10_000) -> CommandResult:
    """Runs `command` in the persistent shell; kills its whole process tree on timeout."""

  @abc.abstractmethod
  def exec(self, argv: list[str], *, timeout_s: float = 600.0, max_output_chars: int = 10_000) -> CommandResult:
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

  def __enter__(self) -> "Sandbox":
    return self

  def __exit__(self, *exc) -> None:
    self.close()
