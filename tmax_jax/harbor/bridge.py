"""The Harbor side of the sandbox bridge: one Harbor environment driven over stdin/stdout.

Started by tmax_jax/harbor/sandbox.py as `<harbor venv>/bin/python -m tmax_jax.harbor.bridge` (the
project itself runs on Python 3.11, Harbor needs >= 3.12). Requests and replies are JSON lines
(protocol.py), handled one at a time on one asyncio loop, through Harbor's own environment API
(EnvironmentFactory, BaseEnvironment.start/exec/upload/download/stop), so any environment type
Harbor has (docker, podman, daytona, modal, e2b, gke, singularity, ...) or an import path works.
The protocol owns this process's original stdout; everything else printed goes to stderr. When
stdin closes (the client died) the environment is stopped and the bridge exits.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import sys
import traceback

from harbor.environments.base import BaseEnvironment
from harbor.environments.factory import EnvironmentFactory
from harbor.models.environment_type import EnvironmentType
from harbor.models.task.config import NetworkMode, NetworkPolicy
from harbor.models.task.task import Task
from harbor.models.trial.paths import TrialPaths

from tmax_jax.harbor import protocol


def _environment(req: dict) -> BaseEnvironment:
  """The Harbor environment of a start request: `kind` is an EnvironmentType value or an import
  path (module:Class); kwargs are its --ek options."""
  task_dir = pathlib.Path(req["task_dir"])
  paths = TrialPaths(pathlib.Path(req["trial_dir"]))
  paths.mkdir()
  task = Task(task_dir)
  kind, kwargs = req["kind"], dict(req.get("kwargs") or {})
  import_path = kind if ":" in kind else None
  env_type = None if import_path else EnvironmentType(kind)
  EnvironmentFactory.run_preflight(env_type, import_path, kwargs)
  args = dict(
    environment_dir=task.paths.environment_dir,
    environment_name=task_dir.name,
    session_id=req["session_id"],
    trial_paths=paths,
    task_env_config=task.config.environment,
    override_memory_mb=req.get("memory_mb"),
    override_cpus=req.get("cpus"),
    network_policy=NetworkPolicy(network_mode=NetworkMode(req["network"])),
    **kwargs,
  )
  if import_path:
    return EnvironmentFactory.create_environment_from_import_path(import_path, **args)
  return EnvironmentFactory.create_environment(env_type, **args)


class Bridge:
  """Holds the one environment and answers requests about it."""

  def __init__(self):
    self.env: BaseEnvironment | None = None

  async def start(self, req: dict) -> dict:
    if self.env is not None:
      raise RuntimeError("this bridge already started an environment")
    env = _environment(req)
    self.env = env
    await env.start(force_build=bool(req.get("force_build")))
    res = type(env).resource_capabilities()
    return {
      "type": str(getattr(env.type(), "value", env.type())),
      "workdir": env.task_env_config.workdir,
      "network": env.network_policy.network_mode.value,
      "limit_warning": getattr(env, "limit_warning", ""),
      "capabilities": env.capabilities.model_dump(),
      "resource_capabilities": res.model_dump() if res is not None else {},
    }

  async def exec(self, req: dict) -> dict:
    res = await self._env().exec(
      req["command"],
      cwd=req.get("cwd"),
      env=req.get("env"),
      timeout_sec=req.get("timeout_sec"),
      user=req.get("user"),
    )
    return {"stdout": res.stdout or "", "stderr": res.stderr or "", "return_code": res.return_code}

  async def upload_file(self, req: dict) -> dict:
    await self._env().upload_file(req["source"], req["target"])
    return {}

  async def upload_dir(self, req: dict) -> dict:
    await self._env().upload_dir(req["source"], req["target"])
    return {}

  async def download_file(self, req: dict) -> dict:
    await self._env().download_file(req["source"], req["target"])
    return {}

  async def download_dir(self, req: dict) -> dict:
    await self._env().download_dir(req["source"], req["target"])
    return {}

  async def stop(self, req: dict | None = None) -> dict:
    env, self.env = self.env, None
    if env is not None:
      await env.stop(delete=bool((req or {}).get("delete", True)))
    return {}

  def _env(self) -> BaseEnvironment:
    if self.env is None:
      raise RuntimeError("no environment: send start first")
    return self.env


OPS = ("start", "exec", "upload_file", "upload_dir", "download_file", "download_dir", "stop")


async def serve(reader, writer) -> None:
  """Answers requests from `reader` (binary lines) on `writer` until EOF or a stop request."""
  bridge, loop = Bridge(), asyncio.get_running_loop()
  try:
    while True:
      line = await loop.run_in_executor(None, reader.readline)
      if not line:
        return
      req = protocol.decode(line, "request")
      op = req.get("op")
      try:
        if op not in OPS:
          raise ValueError(f"unknown op {op!r}; expected one of {OPS}")
        reply = {"id": req.get("id"), "ok": True, **await getattr(bridge, op)(req)}
      except Exception as err:  # sent to the client
        traceback.print_exc(file=sys.stderr)
        reply = {
          "id": req.get("id"),
          "ok": False,
          "error": {"type": type(err).__name__, "message": str(err)},
        }
      writer.write(protocol.encode(reply))
      writer.flush()
      if op == "stop":
        return
  finally:
    await bridge.stop()


def main() -> None:
  # The protocol keeps the original stdout; prints of Harbor or a provider SDK go to stderr.
  out = os.fdopen(os.dup(sys.stdout.fileno()), "wb", buffering=0)
  os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
  asyncio.run(serve(sys.stdin.buffer, out))


if __name__ == "__main__":
  main()
