"""Process-wide sandbox housekeeping: temp dirs, cgroups, cleanup on exit and a stale-dir sweeper.

Every sandbox of this process keeps its host dirs under one per-process root
`<tmp>/tmax_sandboxes/p<pid>-<start ticks>/` and its cgroups under `tmax_jax/p<pid>-<start
ticks>-<n>` (cgroups.py: v1 memory + pids, or a delegated v2 subtree); the trials' scratch dirs
(`scratch_dir`) live under the same root. `close_all()` runs at exit and on SIGTERM/SIGHUP
(`install_signal_handlers`, from the main thread); `sweep_stale()` removes roots, mounts and
cgroups left by processes that died without cleaning up (SIGKILL): their sandboxes' own processes
already died with them (the anchor exits on pipe EOF). census.py counts and sweeps every backend's
leftovers.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import threading

from tmax_jax.sandbox import cgroups
from tmax_jax.sandbox.api import SandboxError

_lock = threading.Lock()
_live: set = set()  # strong refs: a sandbox dropped without close() is still closed at exit
_installed = False
_signal_lock = threading.Lock()
_signals_installed = False
_closing = threading.Event()  # close_all ran: the process is ending
_starting: set[int] = set()  # threads building a sandbox (guarded by _started)
_started = threading.Condition()
STARTING_WAIT_S = 10.0  # what close_all gives sandboxes being built to tear themselves down


def _start_ticks(pid: int) -> str | None:
  try:
    stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
  except OSError:
    return None
  return stat.rsplit(")", 1)[1].split()[19]


def owner_tag(pid: int | None = None) -> str:
  """`p<pid>-<start ticks>`: names a process uniquely even after its pid is reused."""
  pid = pid or os.getpid()
  return f"p{pid}-{_start_ticks(pid)}"


def _tag_alive(tag: str) -> bool:
  try:
    pid_s, ticks = tag[1:].split("-", 1)
    return _start_ticks(int(pid_s)) == ticks.split("-", 1)[0]
  except ValueError:
    return True  # not ours: leave it alone


def tmp_base() -> pathlib.Path:
  return pathlib.Path(os.environ.get("TMAX_SANDBOX_TMP", "/tmp")) / "tmax_sandboxes"


def process_root() -> pathlib.Path:
  """This process's root of sandbox host dirs (created on first use; not once close_all ran:
  the process is ending and what it made there is being removed)."""
  root = tmp_base() / owner_tag()
  with _lock:  # close_all sets _closing under it, then removes the root
    if _closing.is_set():
      raise SandboxError("this process is shutting down its sandboxes; no new one starts")
    root.mkdir(parents=True, exist_ok=True)
  tmp_base().chmod(0o755)
  return root


def scratch_dir(prefix: str) -> tempfile.TemporaryDirectory:
  """A temporary directory under this process's root, so that the sweep removes it when this
  process dies without cleaning up (a plain /tmp/<prefix>* dir would be left behind)."""
  return tempfile.TemporaryDirectory(prefix=prefix, dir=process_root())


def mounts_under(path: pathlib.Path) -> list[str]:
  """Mount points at or below `path` (deepest first), from /proc/self/mountinfo."""
  prefix = str(path)
  found = []
  with contextlib.suppress(OSError):
    for line in pathlib.Path("/proc/self/mountinfo").read_text().splitlines():
      point = line.split()[4].encode().decode("unicode_escape")
      if point == prefix or point.startswith(prefix + "/"):
        found.append(point)
  return sorted(found, key=len, reverse=True)


def remove_tree(path: pathlib.Path) -> None:
  """Unmounts everything below `path`, then deletes it."""
  for point in mounts_under(path):
    subprocess.run(["umount", "-l", point], check=False, capture_output=True)
  if mounts_under(path):  # never delete through a bind mount (e.g. a trial's logs dir)
    raise OSError(f"could not unmount everything under {path}: {mounts_under(path)}")
  shutil.rmtree(path, ignore_errors=True)


# ------------------------------------------------------------------------------------------------
# cleanup registry


def register(sandbox) -> None:
  """Tracks a live sandbox so that exit / fatal signals close it. Refuses once the process is
  closing them (close_all): a sandbox started then would outlive the sweep of its owner's dirs."""
  global _installed
  with _lock:
    if _closing.is_set():
      raise SandboxError("this process is shutting down its sandboxes; no new one starts")
    _live.add(sandbox)
    if not _installed:
      _installed = True
      atexit.register(close_all)
      with contextlib.suppress(Exception):  # leftovers of crashed processes (their owners are dead)
        sweep_stale()
      install_signal_handlers()


def install_signal_handlers() -> bool:
  """SIGTERM / SIGHUP close every live sandbox before the process ends. Only the main thread can
  install them: a job whose sandboxes start in worker threads (the RL loop) calls this first.
  Returns whether they are installed."""
  global _signals_installed
  if threading.current_thread() is not threading.main_thread():
    return _signals_installed
  with _signal_lock:
    if not _signals_installed:
      for sig in (signal.SIGTERM, signal.SIGHUP):
        _chain_signal(sig)
      _signals_installed = True
  return True


def unregister(sandbox) -> None:
  with _lock:
    _live.discard(sandbox)


def _chain_signal(sig: int) -> None:
  previous = signal.getsignal(sig)

  def handler(signum, frame):
    close_all()
    if callable(previous):
      previous(signum, frame)
    else:
      signal.signal(signum, signal.SIG_DFL)
      os.kill(os.getpid(), signum)

  with contextlib.suppress(ValueError):
    signal.signal(sig, handler)


@contextlib.contextmanager
def starting():
  """Around a sandbox's construction: close_all waits (STARTING_WAIT_S at most) for every other
  thread's to end, so one that it closed half-built tears down what it made after the close
  (a cgroup made then would outlive the process)."""
  me = threading.get_ident()
  with _started:
    _starting.add(me)
  try:
    yield
  finally:
    with _started:
      _starting.discard(me)
      _started.notify_all()


def _wait_for_starting(timeout_s: float) -> None:
  me = threading.get_ident()  # the signal handler may run in a thread that is building one
  with _started:
    _started.wait_for(lambda: not (_starting - {me}), timeout=timeout_s)


def close_all() -> None:
  """Closes every live sandbox of this process, then removes the process root with whatever is
  left in it (the scratch dirs of trials that were running: the process is ending). Sandboxes
  that other threads are starting meanwhile are closed too, and waited for while they tear down
  what they made (`starting`)."""
  with _lock:
    _closing.set()
  for _ in range(50):
    with _lock:
      live = list(_live)
    if not live:
      break
    for sb in live:
      with contextlib.suppress(Exception):
        sb.close()
      unregister(sb)
  _wait_for_starting(STARTING_WAIT_S)
  root = tmp_base() / owner_tag()
  if root.exists():
    with contextlib.suppress(OSError):
      remove_tree(root)


def sweep_stale() -> list[str]:
  """Removes sandbox roots and cgroups whose owner process is dead; returns what it removed."""
  removed = []
  base = tmp_base()
  if base.is_dir():
    for root in base.iterdir():
      if root.name.startswith("p") and not _tag_alive(root.name):
        with contextlib.suppress(OSError):
          remove_tree(root)
          removed.append(str(root))
  for parent in cgroups.parents_for_sweep():
    if not parent.is_dir():
      continue
    for cg in parent.iterdir():
      if cg.is_dir() and cg.name.startswith("p") and not _tag_alive(cg.name):
        with contextlib.suppress(OSError):
          for pid in (cg / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):
              os.kill(int(pid), signal.SIGKILL)
          threading.Event().wait(0.05)
          cgroups.remove_dir(cg)
          removed.append(str(cg))
  return removed
