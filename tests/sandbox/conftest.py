"""Fixtures: the base rootfs (built once per machine, cached) and sandboxes per backend."""

from __future__ import annotations

import os
import pathlib
import shutil

import pytest

from tmax_jax.sandbox import cgroups, open_sandbox, runtime
from tmax_jax.sandbox.api import EnvironmentSpec, Limits


@pytest.fixture(scope="session")
def rootfs() -> pathlib.Path:
  if os.geteuid() != 0 and not (shutil.which("debootstrap")):
    pytest.skip("building the base rootfs needs root and debootstrap")
  from tmax_jax.sandbox.images.base_rootfs import ensure_base_rootfs

  return ensure_base_rootfs(quiet=True)


@pytest.fixture(scope="session")
def podman_image(rootfs) -> str:
  from tmax_jax.sandbox.backends import podman
  from tmax_jax.sandbox.images import podman_store

  reason = podman.podman_available()
  if reason:
    pytest.skip(f"podman cannot run here: {reason}")
  return podman_store.ensure_podman_image(rootfs)


def image_for(backend: str, request) -> str:
  if backend == "podman":
    return request.getfixturevalue("podman_image")
  return str(request.getfixturevalue("rootfs"))


@pytest.fixture(params=["bubblewrap", "podman"])
def backend(request) -> str:
  return request.param


@pytest.fixture
def make_sb(backend, request):
  """make_sb(**spec fields) -> a started sandbox of the parametrized backend, closed afterwards."""
  opened = []

  def make(limits: Limits | None = None, **kw):
    spec = EnvironmentSpec(image=image_for(backend, request), limits=limits or Limits(), **kw)
    sb = open_sandbox(spec, backend=backend)
    opened.append(sb)
    return sb

  yield make
  for sb in opened:
    sb.close()


@pytest.fixture
def sb(make_sb):
  return make_sb()


def descendants(pid: int | None = None) -> list[int]:
  """Live descendants of `pid` (default: this test process)."""
  pid = pid or os.getpid()
  children: dict[int, list[int]] = {}
  for p in pathlib.Path("/proc").iterdir():
    if not p.name.isdigit():
      continue
    try:
      stat = (p / "stat").read_text()
    except OSError:
      continue
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] != "Z":
      children.setdefault(int(fields[1]), []).append(int(p.name))
  out, todo = [], [pid]
  while todo:
    for child in children.get(todo.pop(), []):
      out.append(child)
      todo.append(child)
  return out


def resource_snapshot() -> dict[str, int]:
  """Counts of what sandboxes could leak: descendant processes, mounts and dirs under this
  process's sandbox root, and this process's cgroups."""
  root = runtime.tmp_base() / runtime.owner_tag()
  dirs = len(list(root.iterdir())) if root.exists() else 0
  count = 0
  for parent in cgroups.parents_for_sweep():
    if parent.is_dir():
      count += sum(
        1 for c in parent.iterdir() if c.is_dir() and c.name.startswith(runtime.owner_tag())
      )
  return {
    "procs": len(descendants()),
    "mounts": len(runtime.mounts_under(root)),
    "dirs": dirs,
    "cgroups": count,
  }


@pytest.fixture
def snapshot():
  """resource_snapshot as a fixture (test modules here are not a package)."""
  return resource_snapshot
