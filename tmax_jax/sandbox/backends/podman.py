"""The podman backend: runc containers from the debootstrap rootfs imported as an image.

Every podman call goes through the project's storage and containers.conf (sandbox/images/
podman_store.py, where the base rootfs is imported as an image). The anchor is an attached
`podman run -i --rm ... sh -c 'read x'`: when this process dies its stdin closes, the container
exits and is removed. Limits: --memory, --pids-limit, --ulimit fsize/data/cpu, --network none,
--cap-drop ALL, no-new-privileges, --read-only root with the same writable binds as bubblewrap.
Hard lifetime (Limits.lifetime_s): `--timeout <seconds left>` on every container, enforced by its
conmon (outside the container and outside this process).
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import pathlib
import select
import shutil
import subprocess
import time

from tmax_jax.sandbox import base, cgroups, runtime
from tmax_jax.sandbox.api import EnvironmentSpec, SandboxError
from tmax_jax.sandbox.images.image import is_image_file
from tmax_jax.sandbox.images.podman_store import (
  ensure_podman_image,
  image_exists,
  podman_cmd,
  podman_dir,
  podman_env,
  run_podman,
)


@functools.lru_cache(maxsize=1)
def podman_available() -> str | None:
  """None when podman can run containers here, else the reason it cannot."""
  for binary in ("podman", "runc"):
    if shutil.which(binary) is None:
      return f"{binary} is not installed (apt-get install podman runc)"
  try:
    res = run_podman(["info", "--format", "{{.Host.OCIRuntime.Name}}"], timeout=60, check=False)
  except (OSError, subprocess.TimeoutExpired) as err:
    return f"podman info failed: {err}"
  if res.returncode != 0:
    return f"podman info failed: {res.stderr.decode(errors='replace').strip()[-500:]}"
  return None


def sweep_stale_containers() -> list[str]:
  """Removes tmax pods and containers whose owner process died (normally they exit with it)."""
  removed = []
  for kind, fmt, rm in (
    (["pod", "ps"], "{{.Name}}", ["pod", "rm"]),
    (["ps", "-a"], "{{.Names}}", ["rm"]),
  ):
    for _ in range(3):  # a listing fails while containers are being removed: list again
      res = run_podman(
        [*kind, "--filter", "label=tmax_owner", "--format", fmt + " {{.Labels.tmax_owner}}"],
        check=False,
      )
      if res.returncode == 0:
        break
      time.sleep(0.5)
    for line in res.stdout.decode(errors="replace").splitlines():
      name, _, owner = line.partition(" ")
      if (
        owner
        and not runtime._tag_alive(owner)
        and run_podman([*rm, "-f", "-t", "0", name], check=False).returncode == 0
      ):
        removed.append(name)
  return removed


def limit_args(lim, lifetime_left_s: float) -> list[str]:
  """`podman run` options for `Limits` (every container of a sandbox or pod gets them); the hard
  lifetime is what is left of it (`lifetime_left_s`: a restarted container gets no new one)."""
  args = [
    "--timeout",
    str(max(1, math.ceil(lifetime_left_s))),
    "--memory",
    f"{lim.memory_mb}m",
    "--memory-swap",
    f"{lim.memory_mb}m",
    "--pids-limit",
    str(lim.max_processes),
    *(["--cpus", f"{lim.cpus:g}"] if lim.cpus else []),
    # --ulimit replaces default_ulimits, and runc cannot raise nofile past our hard limit.
    "--ulimit",
    "nofile=1024:1024",
    "--ulimit",
    "nproc=4096:4096",
    "--ulimit",
    f"fsize={lim.max_file_mb << 20}:{lim.max_file_mb << 20}",
    # podman has no RLIMIT_AS; RLIMIT_DATA covers malloc/mmap (an 8 GB calloc fails at once).
    "--ulimit",
    f"data={lim.memory_mb << 20}:{lim.memory_mb << 20}",
  ]
  if lim.cpu_seconds:
    args += ["--ulimit", f"cpu={lim.cpu_seconds}:{lim.cpu_seconds}"]
  return args


def hardened_run_args(
  name: str,
  lim,
  lifetime_left_s: float,
  user: str,
  workdir: str,
  extra: tuple[str, ...] = (),
  caps: tuple[str, ...] = (),
) -> list[str]:
  """The `podman run` arguments every container of a sandbox or pod starts with (after the global
  options): removed on exit, catatonit as pid 1 (--init reaps the orphans of killed commands), our
  owner label, `extra` (network or pod), the `Limits`, every capability dropped but `caps`, no
  new privileges, no log driver. One list for both container kinds, so their security flags
  cannot drift apart."""
  return [
    "run",
    "--rm",
    "-i",
    "--init",
    *extra,
    "--name",
    name,
    "--label",
    f"tmax_owner={runtime.owner_tag()}",
    *limit_args(lim, lifetime_left_s),
    "--cap-drop",
    "ALL",
    *(a for cap in caps for a in ("--cap-add", cap)),
    "--security-opt",
    "no-new-privileges",
    "--user",
    user,
    "--workdir",
    workdir,
    "--log-driver",
    "none",
  ]


class PodmanSandbox(base.SandboxBase):
  """See the module docstring."""

  backend = "podman"
  writable_image_root = True  # runc makes mount points (/run/podman-init, /etc/hosts) in it

  def __init__(self, spec: EnvironmentSpec):
    reason = podman_available()
    if reason:
      raise SandboxError(f"podman backend unavailable: {reason}")
    if is_image_file(spec.image):
      self.image = ""  # runs the mounted image layers with --rootfs (see _mount_image)
    elif isinstance(spec.image, str) and spec.image.startswith("/"):
      if not pathlib.Path(spec.image).is_dir():
        raise SandboxError(
          f"podman: EnvironmentSpec.image {spec.image!r} does not exist (expected a rootfs "
          "directory or an image name)"
        )
      self.image = ensure_podman_image(spec.image)
    else:
      self.image = spec.image
      if not isinstance(spec.image, str) or not spec.image or not image_exists(spec.image):
        raise SandboxError(
          f"podman: image {spec.image!r} does not exist in {podman_dir() / 'storage'}"
        )
    self._anchor: subprocess.Popen | None = None
    self._cgroup_dirs: list[pathlib.Path] = []
    super().__init__(spec)

  def _make_cgroup(self) -> None:
    """podman makes (and limits) its own cgroup for the container."""

  @property
  def container(self) -> str:
    return f"tmax-{self.name}"

  def run_args(self) -> list[str]:
    """The `podman run` arguments of the anchor container (after the global options)."""
    args = [
      *hardened_run_args(
        self.container,
        self.spec.limits,
        self.lifetime_left(),
        f"{base.SANDBOX_UID}:{base.SANDBOX_UID}",
        self.spec.workdir,
        extra=tuple(self._network_args()),
      ),
      "--read-only",
      "--read-only-tmpfs=false",
    ]
    for target, source in sorted(self.binds.items()):
      args += ["-v", f"{source}:{target}:rw"]
    image = ["--rootfs", str(self.image_root)] if self.image_root else [self.image]
    return [*args, *image, "/bin/sh", "-c", "echo tmax-anchor-ready; read x; exit 0"]

  def _network_args(self) -> list[str]:
    """A container of its own: loopback only (or slirp4netns with allow_network), its hostname."""
    return [
      "--network",
      "slirp4netns" if self.spec.allow_network else "none",
      "--hostname",
      "sandbox",
    ]

  def _start_anchor(self) -> None:
    run_podman(["rm", "-f", "-t", "0", self.container], check=False)
    self._anchor = subprocess.Popen(
      [*podman_cmd(), *self.run_args()],
      env=podman_env(),
      stdin=subprocess.PIPE,
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      start_new_session=True,
    )
    fd = self._anchor.stdout.fileno()
    deadline, buf = time.monotonic() + base.START_TIMEOUT_S, b""
    while b"tmax-anchor-ready" not in buf and time.monotonic() < deadline:
      ready, _, _ = select.select([fd], [], [], 0.5)
      if ready:
        chunk = os.read(fd, 4096)
        if not chunk:
          break
        buf += chunk
    if b"tmax-anchor-ready" not in buf:
      with contextlib.suppress(subprocess.TimeoutExpired):
        self._anchor.wait(timeout=2)
      err = (
        self._anchor.stderr.read().decode(errors="replace")
        if self._anchor.poll() is not None
        else ""
      )
      self._stop_anchor()
      raise SandboxError(
        f"podman failed to start a container from {self.image}: {err.strip()[-1500:]}"
      )
    cid = run_podman(["inspect", "--format", "{{.Id}}", self.container]).stdout.decode().strip()
    self._cgroup_dirs = cgroups.find_container_cgroups(cid)

  def _stop_anchor(self) -> None:
    anchor, self._anchor = self._anchor, None
    run_podman(["rm", "-f", "-t", "0", self.container], check=False)
    self._cgroup_dirs = []
    if anchor is None:
      return
    with contextlib.suppress(ProcessLookupError, PermissionError):
      os.killpg(anchor.pid, 9)
    with contextlib.suppress(subprocess.TimeoutExpired):
      anchor.wait(timeout=10)
    for pipe in (anchor.stdin, anchor.stdout, anchor.stderr):
      with contextlib.suppress(OSError):
        pipe.close()

  def _host_env(self) -> dict[str, str]:
    return podman_env()

  def _anchor_exit(self) -> str:
    code = self._anchor.poll() if self._anchor is not None else None
    return "" if code is None else f"podman run exit {code}"

  def _enter(self, argv: list[str], *, root: bool = False) -> list[str]:
    uid = "0:0" if root else f"{base.SANDBOX_UID}:{base.SANDBOX_UID}"
    return [*podman_cmd(), "exec", "-i", "--user", uid, self.container, *argv]

  def _limit_stats(self) -> dict[str, int]:
    return cgroups.container_stats(self._cgroup_dirs)
