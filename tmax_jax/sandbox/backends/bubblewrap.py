"""The bubblewrap backend: namespaces without a daemon (~ms to start).

The anchor is `bwrap --unshare-all ... -- sh -c 'read x'` whose stdin is a pipe from this process:
when we exit or die the pipe closes, the anchor exits and the kernel kills every process of the
sandbox's PID namespace. The shell and `exec` processes join the anchor's namespaces with `nsenter`
as the sandbox uid. As root, bwrap itself runs as a per-sandbox unprivileged host uid (setpriv), so
the sandbox user is uid 1000 inside and a nobody-like uid outside; rlimits (prlimit) and cgroup v1
memory/pids limits apply to every process.

Root filesystem: a tmpfs root with each top-level entry of the image rootfs bind-mounted read-only
(directories that contain a writable bind are mirrored one level deeper), the writable binds on top,
then `--remount-ro /`. So nothing outside the binds can be written and any workdir can be a bind.

Hard lifetime (Limits.lifetime_s): a watchdog `sleep <left>; kill -KILL -1` joins the sandbox's PID
namespace only (nsenter -p), as host root in its own session: it outlives a hung or killed owner,
the sandbox user can neither signal nor stop it (another user namespace), and it dies with the
namespace when the sandbox ends first. kill -1 from inside the namespace ends every process but
pid 1, whose exit then takes the namespace down. Not root: it joins the sandbox's user namespace
too, so the sandbox user could kill it (the owner's pipe EOF still ends the sandbox).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pathlib
import posixpath
import random
import select
import shutil
import subprocess
import time

from tmax_jax.sandbox import base
from tmax_jax.sandbox.api import EnvironmentSpec, SandboxError
from tmax_jax.sandbox.images.image import is_image_file

_SKIP_TOP = {"proc", "dev", "sys", "tmp"}


def bwrap_available() -> str | None:
  """None when bubblewrap can run here, else the reason it cannot."""
  if shutil.which("bwrap") is None:
    return "bwrap is not installed (apt-get install bubblewrap)"
  if shutil.which("nsenter") is None:
    return "nsenter (util-linux) is not installed"
  return None


def mount_plan(rootfs: pathlib.Path, targets: list[str]) -> list[str]:
  """bwrap args that mirror `rootfs` read-only so that every path in `targets` can be bound."""
  args: list[str] = []

  def needs_mirror(rel: str) -> bool:
    return any(t.startswith(rel + "/") for t in targets)

  def walk(rel: str) -> None:
    host = rootfs / rel.lstrip("/") if rel != "/" else rootfs
    for entry in sorted(os.scandir(host), key=lambda e: e.name):
      path = posixpath.join(rel, entry.name)
      if (
        rel == "/" and (entry.name in _SKIP_TOP or entry.name.startswith(".tmax"))
      ) or path in targets:
        continue
      if entry.is_symlink():
        args.extend(["--symlink", os.readlink(entry.path), path])
      elif entry.is_dir(follow_symlinks=False) and needs_mirror(path):
        args.extend(["--dir", path])
        walk(path)
      else:
        args.extend(["--ro-bind", entry.path, path])

  walk("/")
  return args


class BubblewrapSandbox(base.SandboxBase):
  """See the module docstring."""

  backend = "bubblewrap"

  def __init__(self, spec: EnvironmentSpec):
    reason = bwrap_available()
    if reason:
      raise SandboxError(f"bubblewrap backend unavailable: {reason}")
    rootfs = pathlib.Path(spec.image) if isinstance(spec.image, str) and spec.image else None
    if rootfs is None or not (
      is_image_file(spec.image) or (rootfs.is_dir() and (rootfs / "bin").exists())
    ):
      raise SandboxError(
        f"bubblewrap needs EnvironmentSpec.image to be a built image (.json) or a "
        f"rootfs directory with /bin; {spec.image!r} is neither (build one with "
        "images.builder.build_image or images.base_rootfs.ensure_base_rootfs)"
      )
    self.rootfs = rootfs.resolve()
    self._uid = random.randrange(200_000, 300_000) if os.geteuid() == 0 else os.getuid()
    self._anchor: subprocess.Popen | None = None
    self._watchdog: subprocess.Popen | None = None
    self._child_pid = 0
    super().__init__(spec)

  @property
  def host_uid(self) -> int:
    return self._uid

  def bwrap_args(self) -> list[str]:
    """The anchor's full bwrap argv (without the privilege-dropping prefix)."""
    ro_extra = {"/etc/resolv.conf": "/etc/resolv.conf"} if self.spec.allow_network else {}
    targets = sorted(set(self.binds) | set(ro_extra))
    args = [
      "bwrap",
      "--unshare-all",
      "--unshare-user",
      "--uid",
      str(base.SANDBOX_UID),
      "--gid",
      str(base.SANDBOX_UID),
      "--cap-drop",
      "ALL",
      "--new-session",
      "--die-with-parent",
      "--disable-userns",
      "--hostname",
      "sandbox",
    ]
    if self.spec.allow_network:
      args.append("--share-net")
    args += mount_plan(self.image_root or self.rootfs, targets)
    args += ["--proc", "/proc", "--dev", "/dev"]
    for target, host in sorted(self.binds.items()):
      args += ["--bind", str(host), target]
    for target, host in ro_extra.items():
      args += ["--ro-bind", host, target]
    args += ["--remount-ro", "/", "--chdir", self.spec.workdir]
    return args

  def _start_anchor(self) -> None:
    info_r, info_w = os.pipe()
    prefix = (
      ["setpriv", f"--reuid={self._uid}", f"--regid={self._uid}", "--clear-groups"]
      if os.geteuid() == 0
      else []
    )
    argv = self._in_cgroup(
      [
        *self._prlimit(),
        *prefix,
        *self.bwrap_args(),
        "--info-fd",
        str(info_w),
        "--",
        "/bin/sh",
        "-c",
        "echo tmax-anchor-ready; read x; exit 0",
      ]
    )
    self._anchor = subprocess.Popen(
      argv,
      stdin=subprocess.PIPE,
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      pass_fds=[info_w],
      start_new_session=True,
      env=self._host_env(),
    )
    os.close(info_w)
    try:
      deadline = time.monotonic() + base.START_TIMEOUT_S
      self._child_pid = _read_child_pid(info_r, deadline)
      # The child pid is reported before the inner user namespace is set up: wait for the anchor.
      if self._child_pid and not _read_ready(self._anchor.stdout.fileno(), deadline):
        self._child_pid = 0
    finally:
      os.close(info_r)
    if not self._child_pid:
      err = b""
      if self._anchor.poll() is not None:
        err = self._anchor.stderr.read()
      self._stop_anchor()
      raise SandboxError(
        f"bubblewrap failed to start the sandbox from {self.rootfs}: "
        f"{err.decode(errors='replace').strip() or 'no child pid reported'}"
      )
    self._watchdog = subprocess.Popen(
      self.watchdog_args(),
      stdin=subprocess.DEVNULL,
      stdout=subprocess.DEVNULL,
      stderr=subprocess.DEVNULL,
      start_new_session=True,  # not in our process group: outlives a killed owner
      env=self._host_env(),
    )

  def watchdog_args(self) -> list[str]:
    """The lifetime watchdog's argv (module docstring): in the sandbox's PID namespace."""
    if os.geteuid() == 0:
      ns = ["-p"]
    else:
      uid = str(base.SANDBOX_UID)
      ns = ["-U", "-p", "-S", uid, "-G", uid]
    left = str(max(1, math.ceil(self.lifetime_left())))
    script = 'sleep "$1"; kill -KILL -1'
    return [
      "nsenter",
      "-t",
      str(self._child_pid),
      *ns,
      "--",
      "/bin/sh",
      "-c",
      script,
      "tmax-life",
      left,
    ]

  def _anchor_exit(self) -> str:
    code = self._anchor.poll() if self._anchor is not None else None
    return "" if code is None else f"exit {code}"

  def _stop_anchor(self) -> None:
    anchor, self._anchor = self._anchor, None
    if anchor is None:
      return
    with contextlib.suppress(ProcessLookupError, PermissionError):
      os.killpg(anchor.pid, 9)
    with contextlib.suppress(ProcessLookupError):
      if self._child_pid:
        os.kill(self._child_pid, 9)  # pid 1 of the sandbox: the kernel kills the rest
    with contextlib.suppress(subprocess.TimeoutExpired):
      anchor.wait(timeout=5)
    for pipe in (anchor.stdin, anchor.stdout, anchor.stderr):
      with contextlib.suppress(OSError):
        pipe.close()
    self._child_pid = 0
    watchdog, self._watchdog = self._watchdog, None
    if watchdog is not None:  # it died with the namespace; reap it (or end it if it did not)
      try:
        watchdog.wait(timeout=5)
      except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
          os.killpg(watchdog.pid, 9)
        watchdog.wait(timeout=5)

  def _enter(self, argv: list[str], *, root: bool = False) -> list[str]:
    if not self._child_pid:
      raise SandboxError(f"bubblewrap sandbox {self.name} is not running")
    uid = "0" if root else str(base.SANDBOX_UID)
    return self._in_cgroup(
      [
        *self._prlimit(),
        "setpriv",
        "--no-new-privs",
        "nsenter",
        "-t",
        str(self._child_pid),
        "-U",
        "-m",
        "-n",
        "-i",
        "-u",
        "-p",
        "-r",
        "-S",
        uid,
        "-G",
        uid,
        "--",
        *argv,
      ]
    )


def _read_child_pid(fd: int, deadline: float) -> int:
  buf = b""
  while time.monotonic() < deadline:
    ready, _, _ = select.select([fd], [], [], 0.5)
    if not ready:
      continue
    chunk = os.read(fd, 4096)
    if not chunk:
      break
    buf += chunk
    with contextlib.suppress(ValueError):
      return int(json.loads(buf)["child-pid"])
  return 0


def _read_ready(fd: int, deadline: float) -> bool:
  buf = b""
  while b"tmax-anchor-ready" not in buf and time.monotonic() < deadline:
    ready, _, _ = select.select([fd], [], [], 0.5)
    if ready:
      chunk = os.read(fd, 4096)
      if not chunk:
        return False
      buf += chunk
  return b"tmax-anchor-ready" in buf
