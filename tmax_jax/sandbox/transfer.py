"""File transfer between the host and a sandbox (a mixin of SandboxBase).

The writable places inside a sandbox are binds of host dirs, so most uploads/downloads are host
copies; a path outside every bind (or one whose real path leaves its bind through a symlink) goes
through `tar` run inside the sandbox instead, so a symlink planted by the sandbox user can never
make the host read or write outside the sandbox.
"""

from __future__ import annotations

import contextlib
import io
import os
import pathlib
import posixpath
import shutil
import tarfile

from tmax_jax.sandbox.api import SandboxError


class FileTransfer:
  """upload/download for a sandbox with `binds` {sandbox dir: host dir}, `root`, `host_uid`,
  `_chown_tree`, `_enter`, `_inner` and `_exec_host` (see base.SandboxBase)."""

  def _host_path(self, sandbox_path: str) -> pathlib.Path | None:
    """The host path behind `sandbox_path` when it lies in a bind and resolves inside it."""
    path = posixpath.normpath(sandbox_path)
    for target, host in sorted(self.binds.items(), key=lambda kv: -len(kv[0])):
      if path == target or path.startswith(target + "/"):
        candidate = host / posixpath.relpath(path, target)
        real = pathlib.Path(os.path.realpath(candidate))
        host_real = pathlib.Path(os.path.realpath(host))
        if real == host_real or real.is_relative_to(host_real):
          return candidate if not candidate.is_symlink() else None
        return None
    return None

  def _absolute(self, sandbox_path: str) -> str:
    return (
      sandbox_path
      if sandbox_path.startswith("/")
      else posixpath.join(self.spec.workdir, sandbox_path)
    )

  def upload(self, host_path, sandbox_path: str) -> None:
    src = pathlib.Path(host_path)
    if not src.exists():
      raise SandboxError(f"upload: host path {src} does not exist")
    sandbox_path = self._absolute(sandbox_path)
    dest = self._host_path(sandbox_path)
    if dest is not None:
      if src.is_dir():
        shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True)
      else:
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest)
      self._chown_tree(dest)
      parent = dest.parent
      while parent != self.root and self.root in parent.parents:
        if os.geteuid() == 0:
          os.lchown(parent, self.host_uid, self.host_uid)
        parent = parent.parent
      return
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
      tar.add(src, arcname=posixpath.basename(sandbox_path.rstrip("/")))
    parent = posixpath.dirname(sandbox_path.rstrip("/")) or "/"
    argv = self._enter(
      self._inner(["sh", "-c", 'mkdir -p "$0" && tar -x --no-same-owner -C "$0"', parent])
    )
    res = self._exec_host(argv, 300, 2000, stdin_data=buf.getvalue())
    if res.exit_code != 0:
      raise SandboxError(f"upload of {src} to {sandbox_path} failed: {res.output.strip()}")

  def download(self, sandbox_path: str, host_path) -> None:
    dest = pathlib.Path(host_path)
    sandbox_path = self._absolute(sandbox_path)
    src = self._host_path(sandbox_path)
    if src is not None and src.exists():
      place(src, dest)
      return
    if src is not None:
      raise SandboxError(f"download: {sandbox_path} does not exist in the sandbox")
    parent, name = posixpath.split(posixpath.normpath(sandbox_path))
    argv = self._enter(self._inner(["tar", "-c", "-C", parent or "/", name]))
    with open_tmp(dest) as (tmp_tar, fh):
      res = self._exec_host(argv, 300, 2000, stdout_file=fh)
      if res.exit_code != 0:
        raise SandboxError(
          f"download of {sandbox_path} failed: {res.output.strip() or 'no such file'}"
        )
      extract(tmp_tar, name, dest)


@contextlib.contextmanager
def open_tmp(dest: pathlib.Path):
  dest.parent.mkdir(parents=True, exist_ok=True)
  tmp = dest.parent / f".{dest.name}.tmax-download.tar"
  try:
    with open(tmp, "wb") as fh:
      yield tmp, fh
  finally:
    with contextlib.suppress(OSError):
      tmp.unlink()


def extract(tar_path: pathlib.Path, name: str, dest: pathlib.Path) -> None:
  """Extracts member `name` (file or dir) of a sandbox tar to `dest`, refusing links out and
  devices."""
  with tarfile.open(tar_path) as tar:
    staging = dest.parent / f".{dest.name}.tmax-staging"
    shutil.rmtree(staging, ignore_errors=True)
    tar.extractall(staging, filter="data")
    place(staging / name, dest)
    shutil.rmtree(staging, ignore_errors=True)


def place(src: pathlib.Path, dest: pathlib.Path) -> None:
  """Copies a file or directory to `dest` as Sandbox.download places it: a directory merges into
  `dest`, links are copied as links, never followed."""
  if src.is_dir():
    shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True)
  else:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest, follow_symlinks=False)
