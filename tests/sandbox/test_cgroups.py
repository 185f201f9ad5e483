"""cgroups.py against fake cgroupfs trees (v2 delegated subtree, v1 hierarchies), and the
"limits cannot be enforced" error of a real sandbox without cgroups."""

from __future__ import annotations

import pathlib
import warnings

import pytest

from tmax_jax.sandbox import cgroups, open_sandbox
from tmax_jax.sandbox.api import EnvironmentSpec, Limits, SandboxError


def _v2_tree(root: pathlib.Path, job_controllers: str = "cpu memory pids") -> pathlib.Path:
  (root / "cgroup.controllers").parent.mkdir(parents=True, exist_ok=True)
  (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
  (root / "cgroup.subtree_control").write_text("")
  job = root / "system.slice" / "job42"
  job.mkdir(parents=True)
  (job / "cgroup.controllers").write_text(job_controllers + "\n")
  (job / "cgroup.subtree_control").write_text("")
  proc = root.parent / "self-cgroup"
  proc.write_text("0::/system.slice/job42\n")
  return proc


def test_v2_delegated_subtree_limits_and_events(tmp_path, monkeypatch):
  fs = tmp_path / "cgroupfs"
  proc = _v2_tree(fs)
  monkeypatch.setenv("TMAX_CGROUPFS", str(fs))
  monkeypatch.delenv("TMAX_SANDBOX_NO_CGROUPS", raising=False)
  monkeypatch.delenv("TMAX_CGROUP_ROOT", raising=False)
  host = cgroups.detect(proc_cgroup=proc)
  job = fs / "system.slice" / "job42"
  assert host.version == 2 and host.parents == (job / "tmax_jax",), host
  assert set(job.joinpath("cgroup.subtree_control").read_text().split()) == {
    "+cpu",
    "+memory",
    "+pids",
  }
  cg = cgroups.Cgroup(host, "p1-2-0", 256, 64, cpus=1.5)
  d = job / "tmax_jax" / "p1-2-0"
  assert (d / "memory.max").read_text() == str(256 << 20)
  assert (d / "memory.swap.max").read_text() == "0"
  assert (d / "pids.max").read_text() == "64"
  assert (d / "cpu.max").read_text() == "150000 100000"
  assert cg.procs_files() == [str(d / "cgroup.procs")]
  assert cg.stats() == {"oom_kill": 0, "pids_max_hits": 0}
  (d / "memory.events").write_text("low 0\nhigh 0\nmax 7\noom 2\noom_kill 2\noom_group_kill 0\n")
  (d / "pids.events").write_text("max 3\n")
  assert cg.stats() == {"oom_kill": 2, "pids_max_hits": 3}
  (d / "cgroup.kill").write_text("")
  cg.remove()
  assert not d.exists()


def test_v2_root_override_and_missing_controllers_are_named(tmp_path, monkeypatch):
  fs = tmp_path / "cgroupfs"
  proc = _v2_tree(fs, job_controllers="cpu memory")
  monkeypatch.setenv("TMAX_CGROUPFS", str(fs))
  monkeypatch.delenv("TMAX_SANDBOX_NO_CGROUPS", raising=False)
  host = cgroups.detect(proc_cgroup=proc)
  assert host.version == 0 and "does not delegate pids" in host.reason and "job42" in host.reason
  monkeypatch.setenv("TMAX_CGROUP_ROOT", "/")  # the unified root delegates everything
  host = cgroups.detect(proc_cgroup=proc)
  assert host.version == 2 and host.parents == (fs / "tmax_jax",)
  assert "cpu" in host.controllers
  bad = tmp_path / "busy"
  _v2_tree(bad)
  (bad / "cgroup.subtree_control").unlink()
  (bad / "cgroup.subtree_control").mkdir()  # writing it fails like a busy (EBUSY) subtree does
  monkeypatch.setenv("TMAX_CGROUPFS", str(bad))
  host = cgroups.detect(proc_cgroup=proc)
  assert host.version == 0 and "cannot enable" in host.reason


def test_v1_hierarchies(tmp_path, monkeypatch):
  fs = tmp_path / "v1"
  for ctrl in ("memory", "pids"):
    (fs / ctrl).mkdir(parents=True)
    (fs / ctrl / "cgroup.procs").write_text("")
  monkeypatch.setenv("TMAX_CGROUPFS", str(fs))
  monkeypatch.delenv("TMAX_SANDBOX_NO_CGROUPS", raising=False)
  host = cgroups.detect()
  assert host.version == 1
  cg = cgroups.Cgroup(host, "p9-9-0", 128, 32)
  mem, pids = fs / "memory" / "tmax_jax" / "p9-9-0", fs / "pids" / "tmax_jax" / "p9-9-0"
  assert (mem / "memory.limit_in_bytes").read_text() == str(128 << 20)
  assert (pids / "pids.max").read_text() == "32"
  (mem / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 4\n")
  (pids / "pids.events").write_text("max 5\n")
  assert cg.stats() == {"oom_kill": 4, "pids_max_hits": 5}
  assert cgroups.container_stats([mem, pids]) == {"oom_kill": 4, "pids_max_hits": 5}
  cg.remove()
  assert not mem.exists() and not pids.exists()


def test_unenforceable_limits_are_an_error_unless_allowed(monkeypatch):
  from tests.conftest import require_base_rootfs

  rootfs = str(require_base_rootfs())
  monkeypatch.setenv("TMAX_SANDBOX_NO_CGROUPS", "1")
  with pytest.raises(SandboxError, match="cannot be enforced.*enforce_limits=False"):
    open_sandbox(EnvironmentSpec(image=rootfs), backend="bubblewrap")
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with open_sandbox(
      EnvironmentSpec(image=rootfs, limits=Limits(enforce_limits=False)), backend="bubblewrap"
    ) as sb:
      assert sb.cgroup is None and "per process" in sb.limit_warning
      assert sb.run("echo ok").output == "ok\n"
  assert any("cannot be enforced" in str(w.message) for w in caught)


def test_container_cgroups_found_while_other_containers_come_and_go(tmp_path, monkeypatch):
  """A sibling container's cgroup removed between its parent's listing and its own (the podman
  chaos soak's FileNotFoundError from pathlib's rglob) is skipped; the container's is found."""
  fs = tmp_path / "cgroupfs"
  ours, gone = "abc123", "f00d"
  for ctl in cgroups.V1_CONTROLLERS:
    for cid in (gone, ours):
      (fs / ctl / "libpod_parent" / f"libpod-{cid}" / "sub").mkdir(parents=True)
  monkeypatch.setenv("TMAX_CGROUPFS", str(fs))
  real = cgroups.os.scandir

  def scandir(path="."):  # the sibling ends after its parent was listed, before its own listing
    if gone in str(path) and pathlib.Path(path).exists():
      (pathlib.Path(path) / "sub").rmdir()
      pathlib.Path(path).rmdir()
    return real(path)

  monkeypatch.setattr(cgroups.os, "scandir", scandir)
  found = cgroups.find_container_cgroups(ours)
  assert found == [fs / c / "libpod_parent" / f"libpod-{ours}" for c in cgroups.V1_CONTROLLERS]
