"""One inference server (launch/serve.py, its own process and JAX runtime) kept by a Ray actor.

The actor starts the server on the node Ray placed it on, bound to the node's address on a free
port, and returns from its constructor once the server's ready file is written. The server's life
is the actor's: the actor exits when the server exits unasked (Ray reports the actor lost and
restarts it, which starts a new server), and the server is killed when the actor's process dies
(PR_SET_PDEATHSIG), so neither outlives the other.

Devices: the server sees what Ray gave the actor: with GPUs, Ray's CUDA_VISIBLE_DEVICES; without,
JAX_PLATFORMS=cpu unless the node's environment sets JAX_PLATFORMS itself.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import logging
import os
import pathlib
import queue
import signal
import subprocess
import sys
import threading
import time

import ray

log = logging.getLogger(__name__)

ROOT = pathlib.Path(__file__).resolve().parents[2]
SERVE = ROOT / "launch" / "serve.py"
PR_SET_PDEATHSIG = 1  # linux/prctl.h


class ReplicaStartError(RuntimeError):
  """The server exited, or did not get ready in time, before it served."""


@dataclasses.dataclass(frozen=True)
class ServerSpec:
  """How each replica's server is started (the same on every node)."""

  serve_config: str  # a configs/serve_*.py file; the same path on every node
  overrides: tuple[str, ...] = ()  # `--config.a.b=VALUE` flags for launch/serve.py (they win)
  openai: bool = True  # serve the OpenAI API too (on a free port of the node)
  log_dir: str = "/tmp/tmax_cluster"  # on each node: the servers' logs and ready files
  start_timeout_s: float = 600.0


@dataclasses.dataclass(frozen=True)
class ReplicaInfo:
  """Where a running replica serves."""

  index: int
  address: str  # HOST:PORT of its gRPC Rollout service (HOST: its node's address)
  pid: int  # the server process, on its node
  node_ip: str
  node_id: str  # Ray's id of its node (hex)
  openai_base_url: str = ""


def die_with_parent() -> None:
  """In the server's process before exec: SIGKILL when the thread that started it ends."""
  if sys.platform.startswith("linux"):
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def stop_process(proc: subprocess.Popen | None, timeout_s: float) -> None:
  """SIGTERM to `proc` (it stops cleanly), SIGKILL after `timeout_s`; nothing if it has ended."""
  if proc is None or proc.poll() is not None:
    return
  proc.send_signal(signal.SIGTERM)
  try:
    proc.wait(timeout=timeout_s)
  except subprocess.TimeoutExpired:
    proc.kill()
    proc.wait()


def log_tail(path: pathlib.Path) -> str:
  """The server's `error: ...` line if it printed one, else its last line."""
  lines = [x.strip() for x in path.read_text(errors="replace").splitlines() if x.strip()]
  errors = [x for x in lines if x.startswith("error:")]
  return (errors or lines or ["(no output)"])[-1]


def server_env(gpu_ids) -> dict[str, str]:
  """The server's environment: the actor's (Ray's CUDA_VISIBLE_DEVICES for its GPUs), with
  JAX_PLATFORMS=cpu when Ray gave it no GPU and the node does not choose a platform itself."""
  env = dict(os.environ)
  if not gpu_ids:
    env.setdefault("JAX_PLATFORMS", "cpu")
  return env


class ServerReplica:
  """The actor class (tmax_jax.cluster.fleet wraps it with ray.remote); `index` names its files."""

  def __init__(self, index: int, spec: ServerSpec):
    self._index, self._spec = index, spec
    self._ip = ray.util.get_node_ip_address()
    self._stopping, self._ready = threading.Event(), threading.Event()
    self._failure = ""
    out = pathlib.Path(spec.log_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"replica-{index}-{os.getpid()}"
    self._log, ready = stem.with_suffix(".log"), stem.with_suffix(".json")
    ready.unlink(missing_ok=True)
    cmd = [
      sys.executable,
      str(SERVE),
      f"--config={spec.serve_config}",
      f"--config.host={self._ip}",
      "--config.serving.port=0",
      f"--config.ready_file={ready}",
      *(
        (f"--config.openai.host={self._ip}", "--config.openai.port=0")
        if spec.openai
        else ("--config.openai.port=-1",)
      ),
      *spec.overrides,
    ]
    started: queue.Queue = queue.Queue(1)
    env = server_env(ray.get_gpu_ids())
    threading.Thread(target=self._keep, args=(cmd, env, started), daemon=True).start()
    self._proc = started.get()
    if isinstance(self._proc, OSError):
      raise self._proc
    self._info = self._wait_ready(ready)

  def _keep(self, cmd: list[str], env: dict, started: queue.Queue) -> None:
    """Starts the server and waits on it, from this thread (its PDEATHSIG follows the thread that
    started it, and this one lives as long as the server). A server that exits unasked after it
    was ready takes the actor with it: Ray sees the actor lost and restarts it."""
    try:
      with self._log.open("a") as out:
        proc = subprocess.Popen(
          cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, preexec_fn=die_with_parent
        )
    except OSError as e:  # raised in the constructor, which waits for this
      started.put(e)
      return
    started.put(proc)
    code = proc.wait()
    if self._ready.is_set() and not self._stopping.is_set():
      log.error("replica %d: its server exited (code %s); the actor exits", self._index, code)
      logging.shutdown()
      os._exit(1)

  def _wait_ready(self, ready: pathlib.Path) -> ReplicaInfo | None:
    deadline = time.monotonic() + self._spec.start_timeout_s
    where = f"replica {self._index} on {self._ip}"
    while not ready.exists():
      code = self._proc.poll()
      if code is not None:
        self._failure = f"{where}: its server exited ({code}): {log_tail(self._log)} [{self._log}]"
        return None
      if time.monotonic() > deadline:
        self._proc.kill()
        self._failure = (
          f"{where}: its server was not ready in {self._spec.start_timeout_s:g} s "
          f"(ServerSpec.start_timeout_s) [{self._log}]"
        )
        return None
      time.sleep(0.2)
    payload = json.loads(ready.read_text())
    self._ready.set()
    return ReplicaInfo(
      index=self._index,
      address=payload["address"],
      pid=payload["pid"],
      node_ip=self._ip,
      node_id=ray.get_runtime_context().get_node_id(),
      openai_base_url=payload.get("openai_base_url", ""),
    )

  def info(self) -> ReplicaInfo:
    """Where it serves; ReplicaStartError (the server's error line) when it did not start."""
    if self._info is None:
      raise ReplicaStartError(self._failure)
    return self._info

  def stop(self, timeout_s: float = 30.0) -> None:
    """SIGTERM to the server (it stops cleanly), SIGKILL after `timeout_s`."""
    self._stopping.set()
    stop_process(self._proc, timeout_s)
