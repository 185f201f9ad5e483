"""Per-sandbox cgroups on v1 (one hierarchy per controller) and v2 (a delegated unified subtree).

v1 (our machines): `<fs>/{memory,pids}/tmax_jax/<name>`, limits memory.limit_in_bytes / pids.max,
OOM kills from memory.oom_control, pids-limit hits from pids.events.
v2 (current distributions, GKE, SLURM): `<root>/tmax_jax/<name>` under a delegated subtree: the
root given by $TMAX_CGROUP_ROOT, else the cgroup this process is in (/proc/self/cgroup "0::/x"),
else the unified mount itself. Controllers are enabled top-down in cgroup.subtree_control (the
root's own must already allow memory + pids); limits memory.max, memory.swap.max = 0, pids.max
and cpu.max; events from memory.events (`oom_kill`) and pids.events (`max`); cgroup.kill ends
every process at once. A subtree that still holds processes cannot delegate controllers (v2's
"no internal processes" rule): detect() then says why and the sandbox falls back to rlimits,
which is an error unless `Limits.enforce_limits` is False.

`$TMAX_CGROUPFS` moves the mount root (tests point it at a fake cgroupfs tree).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import signal
import threading

PARENT = "tmax_jax"
V1_CONTROLLERS = ("memory", "pids")
V2_CONTROLLERS = ("memory", "pids", "cpu")  # cpu is optional (cpu.max only when enabled)


def fs_root() -> pathlib.Path:
  return pathlib.Path(os.environ.get("TMAX_CGROUPFS", "/sys/fs/cgroup"))


@dataclasses.dataclass(frozen=True)
class CgroupHost:
  """Where per-sandbox cgroups go: version 1 or 2, the parent dir(s), or why none can be made."""

  version: int  # 0 = none usable
  parents: tuple[pathlib.Path, ...] = ()
  reason: str = ""
  controllers: tuple[str, ...] = ()


def _read(path: pathlib.Path, default: str = "") -> str:
  try:
    return path.read_text()
  except OSError:
    return default


def _own_v2_path(proc_cgroup: pathlib.Path) -> str | None:
  for line in _read(proc_cgroup).splitlines():
    if line.startswith("0::"):
      return line[3:].strip() or "/"
  return None


def detect(*, proc_cgroup: pathlib.Path = pathlib.Path("/proc/self/cgroup")) -> CgroupHost:
  """The usable cgroup hierarchy for sandboxes of this process (v1 preferred where mounted)."""
  root = fs_root()
  if os.environ.get("TMAX_SANDBOX_NO_CGROUPS"):
    return CgroupHost(0, reason="TMAX_SANDBOX_NO_CGROUPS is set")
  v1 = [root / c for c in V1_CONTROLLERS]
  if all((p / "cgroup.procs").exists() for p in v1):
    if all(os.access(p, os.W_OK) for p in v1):
      return CgroupHost(1, tuple(p / PARENT for p in v1), controllers=V1_CONTROLLERS)
    return CgroupHost(0, reason=f"cgroup v1 hierarchies under {root} are not writable (not root?)")
  if not (root / "cgroup.controllers").exists():
    return CgroupHost(0, reason=f"no cgroup v1 memory+pids hierarchies and no cgroup v2 at {root}")
  return _detect_v2(root, proc_cgroup)


def _detect_v2(root: pathlib.Path, proc_cgroup: pathlib.Path) -> CgroupHost:
  env = os.environ.get("TMAX_CGROUP_ROOT")
  rel = env if env else (_own_v2_path(proc_cgroup) or "/")
  base = root / rel.lstrip("/")
  available = _read(base / "cgroup.controllers").split()
  missing = [c for c in ("memory", "pids") if c not in available]
  if missing:
    return CgroupHost(
      0,
      reason=f"cgroup v2 subtree {base} does not delegate {', '.join(missing)} "
      f"(cgroup.controllers: {' '.join(available) or 'empty'})",
    )
  if not os.access(base, os.W_OK):
    return CgroupHost(
      0,
      reason=f"cgroup v2 subtree {base} is not writable by uid {os.geteuid()} "
      "(ask for a delegated subtree, e.g. systemd Delegate=yes, or set "
      "TMAX_CGROUP_ROOT)",
    )
  wanted = tuple(c for c in V2_CONTROLLERS if c in available)
  parent = base / PARENT
  try:
    _enable(base, wanted)
    parent.mkdir(exist_ok=True)
    _enable(parent, wanted)
  except OSError as err:
    why = (
      "it holds processes (v2 allows controllers only in cgroups without processes); move "
      "them into a leaf or point TMAX_CGROUP_ROOT at an empty delegated cgroup"
      if err.errno == 16
      else str(err)
    )
    return CgroupHost(
      0, reason=f"cannot enable {'+'.join(wanted)} in cgroup v2 subtree {base}: {why}"
    )
  return CgroupHost(2, (parent,), controllers=wanted)


def _enable(cgroup: pathlib.Path, controllers: tuple[str, ...]) -> None:
  current = _read(cgroup / "cgroup.subtree_control").split()
  todo = [c for c in controllers if c not in current]
  if todo:
    (cgroup / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in todo))


class Cgroup:
  """One sandbox's cgroup(s). `stats()` reports OOM kills and pids-limit hits (cumulative)."""

  def __init__(
    self, host: CgroupHost, name: str, memory_mb: int, max_processes: int, cpus: float | None = None
  ):
    if host.version not in (1, 2):
      raise OSError(f"no usable cgroup hierarchy: {host.reason}")
    self.version = host.version
    self.paths = [parent / name for parent in host.parents]
    for path in self.paths:
      path.mkdir(parents=True, exist_ok=True)
    limit = str(memory_mb << 20)
    if self.version == 1:
      mem, pids = self.paths
      (mem / "memory.limit_in_bytes").write_text(limit)
      with contextlib.suppress(OSError):  # no swap accounting on most hosts
        (mem / "memory.memsw.limit_in_bytes").write_text(limit)
      (pids / "pids.max").write_text(str(max_processes))
      return
    (path,) = self.paths
    (path / "memory.max").write_text(limit)
    with contextlib.suppress(OSError):  # swap accounting may be off
      (path / "memory.swap.max").write_text("0")
    (path / "pids.max").write_text(str(max_processes))
    if cpus and "cpu" in host.controllers:
      period = 100_000
      (path / "cpu.max").write_text(f"{int(cpus * period)} {period}")

  def procs_files(self) -> list[str]:
    return [str(p / "cgroup.procs") for p in self.paths]

  def stats(self) -> dict[str, int]:
    """{"oom_kill": n, "pids_max_hits": n} from memory.oom_control or memory.events, and
    pids.events."""
    mem = self.paths[0]
    pids = self.paths[-1]
    events = "memory.oom_control" if self.version == 1 else "memory.events"
    return {
      "oom_kill": _counter(mem / events, "oom_kill"),
      "pids_max_hits": _counter(pids / "pids.events", "max"),
    }

  def pids(self) -> list[int]:
    return [int(x) for x in _read(self.paths[-1] / "cgroup.procs").split() if x.isdigit()]

  def kill_all(self) -> None:
    if self.version == 2 and (self.paths[0] / "cgroup.kill").exists():
      with contextlib.suppress(OSError):
        (self.paths[0] / "cgroup.kill").write_text("1")
    for _ in range(20):
      pids = self.pids()
      if not pids:
        return
      for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
          os.kill(pid, signal.SIGKILL)
      threading.Event().wait(0.02)

  def remove(self) -> None:
    self.kill_all()
    for path in self.paths:
      remove_dir(path)


def _counter(path: pathlib.Path, key: str) -> int:
  for line in _read(path).splitlines():
    name, _, value = line.partition(" ")
    if name == key:
      with contextlib.suppress(ValueError):
        return int(value)
  return 0


def remove_dir(path: pathlib.Path) -> None:
  """rmdir of a cgroup whose processes are exiting (a fake tree's interface files go first)."""
  for _ in range(50):
    try:
      path.rmdir()
      return
    except FileNotFoundError:
      return
    except OSError as err:
      if err.errno == 39 and not _is_cgroupfs(path):  # ENOTEMPTY in a fake (plain-dir) tree
        for f in path.iterdir():
          if f.is_file():
            f.unlink()
        continue
      threading.Event().wait(0.02)


def _is_cgroupfs(path: pathlib.Path) -> bool:
  return str(path).startswith("/sys/fs/cgroup")


def parents_for_sweep() -> list[pathlib.Path]:
  """Every dir that may hold per-sandbox cgroups of any process (v1 and v2 layouts)."""
  host = detect()
  if host.version:
    return list(host.parents)
  return []


def find_container_cgroups(container_id: str) -> list[pathlib.Path]:
  """The cgroup dirs podman/runc made for a container (v1: one per controller; v2: one).

  The walk skips what vanishes under it: other containers' cgroups come and go meanwhile (the
  podman chaos soak of 2026-12-05 failed episodes on pathlib's rglob raising FileNotFoundError
  for a sibling container's cgroup removed mid-walk)."""
  found = []
  root = fs_root()
  candidates = [root / c for c in V1_CONTROLLERS] if (root / "memory").is_dir() else [root]
  for top in candidates:
    dirs = [
      pathlib.Path(parent, name)
      for parent, names, _ in os.walk(top)  # os.walk ignores a dir it can no longer list
      for name in names
      if container_id in name
    ]
    if dirs:
      found.append(min(dirs, key=lambda p: len(str(p))))
  return found


def container_stats(dirs: list[pathlib.Path]) -> dict[str, int]:
  """OOM kills / pids-limit hits of a container's cgroups (found by find_container_cgroups)."""
  out = {"oom_kill": 0, "pids_max_hits": 0}
  for d in dirs:
    events = d / ("memory.events" if (d / "memory.events").exists() else "memory.oom_control")
    out["oom_kill"] = max(out["oom_kill"], _counter(events, "oom_kill"))
    out["pids_max_hits"] = max(out["pids_max_hits"], _counter(d / "pids.events", "max"))
  return out
