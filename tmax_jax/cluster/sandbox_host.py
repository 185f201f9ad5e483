"""One sandbox host: a Ray actor on a node offering `sandbox` that opens sandboxes there with the
project's own backends (tmax_jax.sandbox.open_sandbox / open_pod: bubblewrap, podman, apptainer),
holds them by id and serves the Sandbox methods for callers on other nodes
(tmax_jax/cluster/sandbox_hosts.py: the proxy and the leases).

Files travel as tar bytes (uploads, downloads and the spec's `files`, unpacked into this
process's sandbox scratch root). The image, pod mounts and service images are paths the host must
have itself (the same build cache or shared storage).

A host that dies (SIGKILL, its node lost) leaves its sandboxes behind under its owner tag: the
bubblewrap ones' processes die with it (the anchor exits on pipe EOF), their dirs and cgroups stay,
podman's containers run on. Ray restarts the actor, and its constructor sweeps what dead owners
left on the node (census.sweep, by the project's markers) before it takes a sandbox.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import os
import pathlib
import tarfile
import threading

import ray

from tmax_jax.sandbox import census, open_pod, open_sandbox, runtime
from tmax_jax.sandbox.api import CommandResult, EnvironmentSpec, PodSpec, Sandbox, SandboxError


class HostRestartedError(SandboxError):
  """The sandbox was opened by an earlier run of this host, which died (it went with it)."""


@dataclasses.dataclass(frozen=True)
class HostInfo:
  """Who a host is right now: a restarted host has a new pid and owner tag."""

  index: int
  node_id: str  # Ray's id of its node (hex)
  node_ip: str
  pid: int
  owner: str  # runtime.owner_tag() of the actor's process: the marker on all it opens
  swept: int  # what its start-up sweep removed (a killed predecessor's leftovers)


@dataclasses.dataclass(frozen=True)
class Opened:
  """A sandbox the host started: its id there, its backend name, its limit warning."""

  sid: str
  name: str
  limit_warning: str | None


def pack(*members: tuple[str | pathlib.Path, str]) -> bytes:
  """(path, arcname) pairs (a path: a file or a directory) as one uncompressed tar, each path's
  top member named by its arcname."""
  buf = io.BytesIO()
  with tarfile.open(fileobj=buf, mode="w") as tar:
    for path, arcname in members:
      tar.add(str(path), arcname=arcname)
  return buf.getvalue()


def unpack(data: bytes, into: pathlib.Path) -> None:
  """Extracts a `pack` tar into the directory `into` (links out of it and devices refused)."""
  with tarfile.open(fileobj=io.BytesIO(data)) as tar:
    tar.extractall(into, filter="data")


def with_local_files(spec, files: bytes, into: pathlib.Path):
  """`spec` (EnvironmentSpec, or a PodSpec's main) with its `files` read from the shipped tar
  `files` (member i: the i-th host path) unpacked into `into`."""
  if isinstance(spec, PodSpec):
    return dataclasses.replace(spec, main=with_local_files(spec.main, files, into))
  if not spec.files:
    return spec
  unpack(files, into)
  local = tuple((str(into / str(i)), dest) for i, (_, dest) in enumerate(spec.files))
  return dataclasses.replace(spec, files=local)


class SandboxHost:
  """The actor class (sandbox_hosts.place_hosts wraps it with ray.remote, one per node)."""

  def __init__(self, index: int):
    self._index = index
    swept = census.sweep()  # before any sandbox of ours: only dead owners' are removed
    self._info = HostInfo(
      index=index,
      node_id=ray.get_runtime_context().get_node_id(),
      node_ip=ray.util.get_node_ip_address(),
      pid=os.getpid(),
      owner=runtime.owner_tag(),
      swept=len(swept),
    )
    self._boxes: dict[str, Sandbox] = {}
    self._lock = threading.Lock()
    self._ids = itertools.count()

  def info(self) -> HostInfo:
    return self._info

  def count(self) -> int:
    """The sandboxes it holds open."""
    with self._lock:
      return len(self._boxes)

  def open(self, spec: EnvironmentSpec | PodSpec, backend: str, files: bytes) -> Opened:
    """Starts a sandbox (a pod for a PodSpec) from `spec`, its `files` shipped in `files`."""
    main = spec.main if isinstance(spec, PodSpec) else spec
    if main.logs_dir:
      raise SandboxError(
        f"EnvironmentSpec.logs_dir={main.logs_dir!r}: a path of the caller's host; a sandbox on "
        "a sandbox host keeps its /logs inside (download them)"
      )
    with runtime.scratch_dir("hosted-files-") as tmp:
      local = with_local_files(spec, files, pathlib.Path(tmp))
      sb = open_pod(local, backend) if isinstance(spec, PodSpec) else open_sandbox(local, backend)
    sid = f"{self._info.owner}-{next(self._ids)}"
    with self._lock:
      self._boxes[sid] = sb
    return Opened(sid, getattr(sb, "name", sid), getattr(sb, "limit_warning", None))

  def _get(self, sid: str) -> Sandbox:
    with self._lock:
      sb = self._boxes.get(sid)
    if sb is None and not sid.startswith(self._info.owner + "-"):
      raise HostRestartedError(
        f"sandbox host {self._index} restarted since it opened sandbox {sid}: the sandbox is gone"
      )
    if sb is None:
      raise SandboxError(f"sandbox {sid} is closed (sandbox host {self._index})")
    return sb

  def run(self, sid: str, command: str, timeout_s: float, max_output_chars: int) -> CommandResult:
    return self._get(sid).run(command, timeout_s=timeout_s, max_output_chars=max_output_chars)

  def exec(self, sid: str, argv: list[str], timeout_s: float, max_chars: int) -> CommandResult:
    return self._get(sid).exec(argv, timeout_s=timeout_s, max_output_chars=max_chars)

  def upload(self, sid: str, data: bytes, sandbox_path: str) -> None:
    """Unpacks the shipped tar (member "x") here, then uploads it to `sandbox_path`."""
    sb = self._get(sid)
    with runtime.scratch_dir("hosted-upload-") as tmp:
      unpack(data, pathlib.Path(tmp))
      sb.upload(pathlib.Path(tmp) / "x", sandbox_path)

  def download(self, sid: str, sandbox_path: str) -> bytes:
    """`sandbox_path` as a tar whose one member is "x"."""
    sb = self._get(sid)
    with runtime.scratch_dir("hosted-download-") as tmp:
      dest = pathlib.Path(tmp) / "x"
      sb.download(sandbox_path, dest)
      if not dest.exists():
        raise SandboxError(f"download: {sandbox_path} came back empty from the sandbox")
      return pack((dest, "x"))

  def reset(self, sid: str) -> None:
    self._get(sid).reset()

  def lost(self, sid: str) -> str:
    return self._get(sid).lost()

  def service_logs(self, sid: str) -> dict[str, str]:
    return getattr(self._get(sid), "service_logs", dict)()

  def close(self, sid: str) -> None:
    """Closes and forgets the sandbox; nothing when it is not here (closed, or a restart)."""
    with self._lock:
      sb = self._boxes.pop(sid, None)
    if sb is not None:
      sb.close()

  def shutdown(self) -> int:
    """Closes every sandbox it holds, for good (the host ends next) -> how many it closed."""
    with self._lock:
      held = len(self._boxes)
      self._boxes.clear()
    runtime.close_all()
    return held

  def leftovers(self, owners: list[str]) -> str:
    """What the owners `owners` (tags) left on this node, by the project's markers ("" none)."""
    found = census.take(set(owners))
    return str(found) if found.total else ""
