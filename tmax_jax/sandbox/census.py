"""What this project's sandboxes leave on the host, found by their own markers, and the sweep that
removes what dead owners left.

Markers (never process names): the owner tag `p<pid>-<start ticks>` (runtime.owner_tag) names
every sandbox root `<tmp>/tmax_sandboxes/<tag>/` (scratch dirs and overlay mounts inside), every
per-sandbox cgroup `tmax_jax/<tag>-<n>` (bubblewrap's processes, host-side helpers included, run in
it) and the `tmax_owner=<tag>` label of every podman container and pod (its processes: those in
the container's PID namespace). Build scratch (half-built layers, COPY staging) carries its
builder's pid. An owner is dead when no process has that pid and start time.

`take(owners="dead")` counts what dead owners left (what the next start must reap); `take("all")`
everything (zero once every job has ended). `sweep()` is the one start-up sweep of every backend:
the RL loop runs it before its first rollout.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import shutil

from tmax_jax.sandbox import cgroups, runtime
from tmax_jax.sandbox.backends import apptainer, podman
from tmax_jax.sandbox.images import layers

KINDS = ("processes", "containers", "pods", "cgroups", "mounts", "dirs")


@dataclasses.dataclass
class Census:
  """Leftovers by kind; each entry names the thing and its owner tag."""

  processes: list[str] = dataclasses.field(default_factory=list)
  containers: list[str] = dataclasses.field(default_factory=list)
  pods: list[str] = dataclasses.field(default_factory=list)
  cgroups: list[str] = dataclasses.field(default_factory=list)
  mounts: list[str] = dataclasses.field(default_factory=list)
  dirs: list[str] = dataclasses.field(default_factory=list)

  def counts(self) -> dict[str, int]:
    return {k: len(getattr(self, k)) for k in KINDS}

  @property
  def total(self) -> int:
    return sum(self.counts().values())

  def __str__(self) -> str:
    parts = [f"{k} {len(v)}: {', '.join(v[:5])}" for k in KINDS if (v := getattr(self, k))]
    return "; ".join(parts) or "nothing"


def _owner(name: str) -> str:
  """The owner tag at the start of a sandbox/cgroup name (`p<pid>-<ticks>[-<n>]`)."""
  parts = name.split("-")
  return "-".join(parts[:2]) if len(parts) >= 2 and name.startswith("p") else ""


def _wanted(owner: str, owners) -> bool:
  if not owner:
    return False
  if owners == "all":
    return True
  if owners == "dead":
    return not runtime._tag_alive(owner)
  return owner in owners


def _read(path: pathlib.Path) -> str:
  try:
    return path.read_text()
  except OSError:
    return ""


def _sandbox_cgroups(owners) -> list[pathlib.Path]:
  found = []
  for parent in cgroups.parents_for_sweep():
    if parent.is_dir():
      found += [
        c for c in sorted(parent.iterdir()) if c.is_dir() and _wanted(_owner(c.name), owners)
      ]
  return found


def _podman_ready() -> bool:
  """Podman is worth asking: installed, and this project's storage exists (else nothing of ours)."""
  return shutil.which("podman") is not None and (podman.podman_dir() / "storage").is_dir()


def _podman_rows(kind: str) -> list[tuple[str, str, str]]:
  """(name, owner tag, id) of every tmax-labelled container ("ps") or pod ("pod")."""
  args = ["ps", "-a"] if kind == "ps" else ["pod", "ps"]
  name = "{{.Names}}" if kind == "ps" else "{{.Name}}"
  fmt = f"{name} {{{{.Labels.tmax_owner}}}} {{{{.ID}}}}"
  res = podman.run_podman([*args, "--filter", "label=tmax_owner", "--format", fmt], check=False)
  rows = []
  for line in res.stdout.decode(errors="replace").splitlines():
    parts = line.split()
    if len(parts) == 3:
      rows.append((parts[0], parts[1], parts[2]))
  return rows


def _pid_namespace(pid: int) -> str:
  with contextlib.suppress(OSError):
    return os.readlink(f"/proc/{pid}/ns/pid")
  return ""


def _container_processes(container_id: str) -> list[int]:
  """The processes in a running container's PID namespace (none when it is not running)."""
  res = podman.run_podman(["inspect", "--format", "{{.State.Pid}}", container_id], check=False)
  pid = res.stdout.decode().strip()
  if not pid.isdigit() or pid == "0":
    return []
  ns = _pid_namespace(int(pid))
  if not ns:
    return []
  return [
    int(p.name)
    for p in pathlib.Path("/proc").iterdir()
    if p.name.isdigit() and _pid_namespace(int(p.name)) == ns
  ]


def take(owners="dead") -> Census:
  """Leftovers of `owners`: "dead" (owners no longer running), "all", or a set of owner tags."""
  found = Census()
  base = runtime.tmp_base()
  if base.is_dir():
    for root in sorted(base.iterdir()):
      if _wanted(root.name, owners):
        found.dirs.append(str(root))
        found.mounts += runtime.mounts_under(root)
  if owners in ("dead", "all"):
    found.dirs += [str(p) for p in layers.stale_scratch()]
  pids = set()
  for cg in _sandbox_cgroups(owners):
    found.cgroups.append(str(cg))
    pids |= {int(p) for p in _read(cg / "cgroup.procs").split() if p.isdigit()}
  if _podman_ready():
    for name, owner, cid in _podman_rows("ps"):
      if _wanted(owner, owners):
        found.containers.append(f"{name} ({owner})")
        pids |= set(_container_processes(cid))
    found.pods += [f"{n} ({o})" for n, o, _ in _podman_rows("pod") if _wanted(o, owners)]
  found.processes = [f"{p}: {_read(pathlib.Path(f'/proc/{p}/comm')).strip()}" for p in sorted(pids)]
  return found


def sweep() -> list[str]:
  """Removes what dead owners left, on every backend: roots, mounts, cgroups (killing their
  processes), podman containers and pods, apptainer instances, build scratch."""
  removed = runtime.sweep_stale()
  if _podman_ready():
    with contextlib.suppress(Exception):
      if podman.podman_available() is None:
        removed += podman.sweep_stale_containers()
  with contextlib.suppress(Exception):
    removed += apptainer.sweep_stale_instances()
  return removed + layers.sweep_tmp()
