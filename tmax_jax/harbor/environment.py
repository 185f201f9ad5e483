"""A Harbor environment that runs trials in this project's sandboxes (bubblewrap or podman).

Harbor loads third-party environments by import path, so on a host without Docker:

  harbor run -p TASKS -a oracle -e tmax_jax.harbor.environment:TmaxEnvironment --ek backend=podman

The task's environment/Dockerfile is built by this project's image builder (images/builder.py:
layers cached by content, offline stand-ins, the Debian equivalents of public base images) and the
trial runs in `open_sandbox` exactly as our own runner starts it (tasks/environment.built_spec), so
a task scores the same under Harbor's trial loop as under ours. This module imports Harbor and runs
only in the Harbor venv (Python >= 3.12; tmax_jax/harbor/venv.py).

What differs from Harbor's Docker environment (docs/design/harbor.md): every command runs as the
sandbox user (uid 1000), whatever `user` Harbor asks for; the sandbox is offline unless
`--ek allow_network=true` (a task's allow_internet alone does not open it, as in our runner); CPU
quotas apply only on cgroup v2 hosts; a multi-service docker-compose task is refused.
"""

from __future__ import annotations

import asyncio
import pathlib
import shlex
from typing import Any, Literal

from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.environments.capabilities import (
  EnvironmentCapabilities,
  EnvironmentResourceCapabilities,
)
from harbor.environments.options import EnvironmentOptions

from tmax_jax.harbor import protocol
from tmax_jax.sandbox import Sandbox, open_sandbox
from tmax_jax.tasks import compose as compose_lib
from tmax_jax.tasks import environment as envlib
from tmax_jax.tasks.format import load_task

TYPE = "tmax"


class TmaxOptions(EnvironmentOptions):
  """`--ek` options of TmaxEnvironment."""

  backend: Literal["bubblewrap", "podman"] = "bubblewrap"
  allow_network: bool = False  # True: the task's allow_internet decides (bubblewrap/podman net)
  enforce_limits: bool = True  # False: run without per-sandbox cgroups (a warning per trial)


class TmaxEnvironment(BaseEnvironment):
  """One sandbox of ours per Harbor trial; see the module docstring."""

  options_model = TmaxOptions
  options: TmaxOptions

  def __init__(self, *args: Any, **kwargs: Any) -> None:
    self._sandbox: Sandbox | None = None
    self.limit_warning = ""
    super().__init__(*args, **kwargs)

  @staticmethod
  def type() -> str:
    return TYPE

  @classmethod
  def resource_capabilities(cls) -> EnvironmentResourceCapabilities:
    # Memory is a cgroup limit on both backends; CPU quotas only on cgroup v2 (cgroups.py).
    return EnvironmentResourceCapabilities(memory_limit=True)

  @property
  def capabilities(self) -> EnvironmentCapabilities:
    return EnvironmentCapabilities(disable_internet=True)

  def _validate_definition(self) -> None:
    task_dir = self.environment_dir.parent
    if not (task_dir / "task.toml").is_file():
      raise FileNotFoundError(f"{task_dir}: no task.toml (TmaxEnvironment runs task directories)")
    names = compose_lib.service_names(load_task(task_dir))
    if len(names) > 1:
      raise ValueError(
        f"{task_dir}: docker-compose with {len(names)} services ({', '.join(names)}) runs as a "
        "podman pod in tmax_jax's own runner; TmaxEnvironment starts one container per trial"
      )

  async def start(self, force_build: bool) -> None:
    del force_build  # the builder's layer cache is keyed by content: a changed step rebuilds
    task = load_task(self.environment_dir.parent)
    built = await asyncio.to_thread(
      envlib.built_spec,
      task,
      memory_mb=self.task_env_config.memory_mb,
      allow_network=self.options.allow_network and not self._network_disabled,
      enforce_limits=self.options.enforce_limits,
    )
    self.logger.debug(built.notes())
    self._sandbox = await asyncio.to_thread(open_sandbox, built.spec, self.options.backend)
    self.limit_warning = getattr(self._sandbox, "limit_warning", "") or ""
    await self.ensure_dirs(self._mount_targets(writable_only=True))

  async def stop(self, delete: bool) -> None:
    del delete  # nothing outlives close(): the sandbox's dirs, mounts and cgroups go with it
    sandbox, self._sandbox = self._sandbox, None
    if sandbox is not None:
      await asyncio.to_thread(sandbox.close)

  @property
  def sandbox(self) -> Sandbox:
    if self._sandbox is None:
      raise RuntimeError(f"{self.session_id}: the environment is not started")
    return self._sandbox

  async def exec(
    self,
    command: str,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    timeout_sec: int | None = None,
    user: str | int | None = None,
  ) -> ExecResult:
    del user  # every command runs as the sandbox user (module docstring)
    workdir = cwd or self.task_env_config.workdir or self.sandbox.spec.workdir
    script = protocol.exec_script(command, workdir, self._merge_env(env))
    res = await asyncio.to_thread(
      self.sandbox.exec,
      ["bash", "-c", script],
      timeout_s=timeout_sec or protocol.NO_TIMEOUT_S,
      max_output_chars=protocol.MAX_OUTPUT_CHARS,
    )
    if res.status == "timeout":  # what Harbor's own environments raise
      raise RuntimeError(f"Command timed out after {timeout_sec} seconds")
    return ExecResult(stdout=res.output, stderr=None, return_code=protocol.return_code(res))

  async def upload_file(self, source_path: pathlib.Path | str, target_path: str) -> None:
    await asyncio.to_thread(self.sandbox.upload, source_path, target_path)

  async def upload_dir(self, source_dir: pathlib.Path | str, target_dir: str) -> None:
    await asyncio.to_thread(self.sandbox.upload, source_dir, target_dir)

  async def download_file(self, source_path: str, target_path: pathlib.Path | str) -> None:
    await asyncio.to_thread(self.sandbox.download, source_path, target_path)

  async def download_dir(self, source_dir: str, target_dir: pathlib.Path | str) -> None:
    await asyncio.to_thread(self.sandbox.download, source_dir, target_dir)

  async def attach(self) -> None:
    raise NotImplementedError(
      f"attach to {self.session_id}: run `{shlex.join(['tmux', 'attach'])}` through exec instead"
    )
