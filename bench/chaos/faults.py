"""Fault injection through real mechanisms, and inspection of live sandboxes by their markers.

  live_sandboxes(tag, backend)     the sandboxes a trainer (owner tag) has open right now
  kill_sandbox(name, backend)      SIGKILL every process of one (its cgroup / its container)
  lifetime_of(name, backend)       the hard lifetime its enforcer was given (watchdog / conmon)
  BuildLock(layer_ids)             holds the build locks of the soak's image layer (a concurrent
                                   builder): every trial start that builds the image waits
  server_status(address)           the server's Status (slots, active and waiting requests)
Process faults (server / trainer SIGKILL and restart, a stream cut at the proxy) are driven by
soak.py with procs.py and proxy.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import pathlib
import signal
import threading
import time

from tmax_jax.inference.client import RolloutClient
from tmax_jax.sandbox import cgroups
from tmax_jax.sandbox.backends import podman
from tmax_jax.sandbox.images import layers


def _pids_parent() -> pathlib.Path | None:
  """Where per-sandbox cgroups list their processes (the pids hierarchy on v1)."""
  parents = cgroups.parents_for_sweep()
  return parents[-1] if parents else None


def _procs(cgroup: pathlib.Path) -> list[int] | None:
  """The pids in a sandbox's cgroup; None once the cgroup is gone (a sandbox that ends between
  a listing of the cgroups and this read removes its own)."""
  try:
    return [int(p) for p in (cgroup / "cgroup.procs").read_text().split()]
  except OSError:
    return None


def live_sandboxes(tag: str, backend: str) -> list[str]:
  """Names of the sandboxes owner `tag` has running (bubblewrap: its cgroups; podman: its
  labelled, running containers)."""
  if backend == "podman":
    res = podman.run_podman(
      ["ps", "--filter", f"label=tmax_owner={tag}", "--format", "{{.Names}}"], check=False
    )
    names = res.stdout.decode().split()
    return [n.removeprefix("tmax-") for n in names]
  parent = _pids_parent()
  if parent is None or not parent.is_dir():
    return []
  return sorted(c.name for c in parent.iterdir() if c.name.startswith(tag + "-") and _procs(c))


def kill_sandbox(name: str, backend: str) -> int:
  """SIGKILLs every process of sandbox `name` from the host; returns how many were signalled."""
  if backend == "podman":
    res = podman.run_podman(["kill", "-s", "KILL", f"tmax-{name}"], check=False)
    return int(res.returncode == 0)
  cgroup, killed = _pids_parent() / name, 0
  for _ in range(2):  # what runs now, and what it forked meanwhile (not what restarts later)
    pids = _procs(cgroup)
    if pids is None:
      break
    for pid in pids:
      with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
        killed += 1
    time.sleep(0.05)
  return killed


def _ns(pid: int) -> str:
  with contextlib.suppress(OSError):
    return os.readlink(f"/proc/{pid}/ns/pid")
  return ""


GONE = -1  # lifetime_of: the sandbox ended (or had not started) before it was inspected


def lifetime_of(name: str, backend: str) -> int | None:
  """The seconds the sandbox's lifetime enforcer was given when it (re)started; None when it has
  none; GONE when the sandbox is not running. podman: conmon's --timeout; bubblewrap: the
  watchdog that sleeps in the sandbox's PID namespace as host root (found in that namespace)."""
  if backend == "podman":
    res = podman.run_podman(
      ["inspect", "--format", "{{.Config.Timeout}} {{.State.Running}}", f"tmax-{name}"],
      check=False,
    )
    value, _, running = res.stdout.decode().strip().partition(" ")
    if res.returncode != 0 or running != "true":
      return GONE
    return int(value) if value.isdigit() and int(value) > 0 else None
  pids = _procs(_pids_parent() / name)
  if pids is None:
    return GONE
  # This process runs in the host's namespace (/proc/1 may not be readable in a container: its
  # '' once let the host namespace in, where every sandbox's nsenter parent carries `tmax-life N`).
  host = _ns(os.getpid())
  members = {p: (_ns(p), _started(p)) for p in pids}
  inner = {ns for ns, _ in members.values()} - {host, ""}
  if not inner:
    return GONE
  given = _watchdog_in(inner)
  # A namespace's id is reused as soon as it is freed (the kernel hands out the lowest free one):
  # a sandbox that ended during the scan may have passed its id to another sandbox, whose
  # watchdog the scan then found. The answer is the sandbox's only if one of its processes lived
  # through the whole scan (same pid, same start time, same namespace), keeping the id taken.
  if not any(
    ns in inner and started and (_ns(p), _started(p)) == (ns, started)
    for p, (ns, started) in members.items()
  ):
    return GONE
  return given


def _started(pid: int) -> str:
  """The process's start time in clock ticks since boot ('' when it is gone): with the pid, names
  one process (a pid is reused, a pid and a start time are not)."""
  with contextlib.suppress(OSError):
    stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[19]
  return ""


def _watchdog_in(namespaces: set[str]) -> int | None:
  """The seconds of the lifetime watchdog running in one of `namespaces` (bubblewrap's: host
  root, `sh -c ... tmax-life <seconds>`), None when there is none."""
  for proc in pathlib.Path("/proc").iterdir():
    if not proc.name.isdigit() or _ns(int(proc.name)) not in namespaces:
      continue
    with contextlib.suppress(OSError):
      if proc.stat().st_uid == 0:  # only the watchdog runs as host root in there
        argv = (proc / "cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        if len(argv) > 2 and argv[-2] == b"tmax-life" and argv[-1].isdigit():
          return int(argv[-1])
  return None


class BuildLock:
  """Holds the build locks of `layer_ids` for `seconds` in a thread (as a concurrent build of the
  same layers would): every build_image of an image with them waits until release."""

  def __init__(self, layer_ids: list[str]):
    self.paths = [layers.store() / "locks" / f"{lid}.lock" for lid in layer_ids]

  def hold(self, seconds: float) -> threading.Thread:
    held = threading.Event()

    def run() -> None:
      files = [open(p, "w") for p in self.paths]  # noqa: SIM115  (closed in the finally below)
      try:
        for f in files:
          fcntl.flock(f, fcntl.LOCK_EX)
        held.set()
        time.sleep(seconds)
      finally:
        for f in files:
          f.close()  # releases the lock

    thread = threading.Thread(target=run, daemon=True, name="build-lock")
    thread.start()
    held.wait(timeout=60)
    return thread


def server_status(address: str, timeout_s: float = 3.0):
  """The server's StatusResponse, or None when it does not answer."""

  async def ask():
    async with RolloutClient(address) as client:
      return await client.status(timeout_s=timeout_s)

  try:
    return asyncio.run(ask())
  except Exception:  # down or restarting: no status
    return None
