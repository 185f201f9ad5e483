"""Pool, load (32 sandboxes x 20 commands on 2 cores, ~5-10 s so not marked slow) and leak checks on
real bubblewrap sandboxes."""

from __future__ import annotations

import asyncio
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tmax_jax.sandbox import cgroups, runtime
from tmax_jax.sandbox.api import EnvironmentSpec, SandboxError
from tmax_jax.sandbox.pool import SandboxPool

pytestmark = pytest.mark.timeout(600)


def _settle(resource_snapshot, before: dict, timeout_s: float = 10.0) -> dict:
  deadline = time.monotonic() + timeout_s
  while True:
    now = resource_snapshot()
    if now == before or time.monotonic() > deadline:
      return now
    time.sleep(0.1)


def test_pool_is_bounded_and_closes_on_success_and_failure(rootfs, snapshot):
  spec = EnvironmentSpec(image=str(rootfs))
  resource_snapshot = snapshot
  before = resource_snapshot()
  pool = SandboxPool(2, backend="bubblewrap")
  peak = []

  async def job(i):
    async with pool.asession(spec) as sb:
      peak.append(pool.in_use)
      res = await asyncio.to_thread(sb.run, f"echo job{i}")
      assert res.output == f"job{i}\n"
      if i == 3:
        raise ValueError("agent failed")
    return i

  async def main():
    return await asyncio.gather(*(job(i) for i in range(5)), return_exceptions=True)

  results = asyncio.run(main())
  assert [r for r in results if not isinstance(r, ValueError)] == [0, 1, 2, 4]
  assert max(peak) <= 2 and pool.in_use == 0
  with pool.session(spec) as sb:
    assert sb.run("echo sync").output == "sync\n"
  assert _settle(resource_snapshot, before) == before


def test_pool_cleans_up_on_timeout_cancellation(rootfs, snapshot):
  spec = EnvironmentSpec(image=str(rootfs))
  resource_snapshot = snapshot
  before = resource_snapshot()
  pool = SandboxPool(4, backend="bubblewrap")

  async def stuck():
    async with pool.asession(spec) as sb:
      await asyncio.to_thread(sb.run, "sleep 2; echo x", timeout_s=30)
      await asyncio.sleep(60)

  async def main():
    with pytest.raises(asyncio.TimeoutError):
      await asyncio.wait_for(stuck(), timeout=4)

  asyncio.run(main())
  assert pool.in_use == 0
  assert _settle(resource_snapshot, before) == before


def test_bad_spec_fails_fast_in_the_pool(rootfs):
  pool = SandboxPool(1, backend="bubblewrap")
  with (
    pytest.raises(SandboxError, match="workdir"),
    pool.session(EnvironmentSpec(image=str(rootfs), workdir="not/absolute")),
  ):
    pass
  with pool.session(EnvironmentSpec(image=str(rootfs))) as sb:  # the slot was released
    assert sb.run("true").exit_code == 0


def test_parent_crash_leaves_nothing_after_sweep(rootfs, tmp_path):
  """A process SIGKILLed with live sandboxes: its sandbox processes die with it (anchor pipe EOF);
  the sweeper removes its temp dirs, mounts and cgroups."""
  script = tmp_path / "crash.py"
  script.write_text(
    textwrap.dedent(f"""
      import os, sys, time
      sys.path.insert(0, {str(pathlib.Path(__file__).resolve().parents[2])!r})
      from tmax_jax.sandbox import open_sandbox, runtime
      from tmax_jax.sandbox.api import EnvironmentSpec
      sbs = [open_sandbox(EnvironmentSpec(image={str(rootfs)!r}), backend="bubblewrap") for _ in range(2)]
      sbs[0].run("sleep 1000 >/dev/null 2>&1 &")
      print(runtime.owner_tag(), flush=True)
      time.sleep(1000)
  """)  # noqa: E501 (embedded script, kept verbatim)
  )
  proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
  tag = proc.stdout.readline().strip()
  assert tag.startswith("p")
  root = runtime.tmp_base() / tag
  assert root.exists() and len(list(root.iterdir())) == 2
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  deadline = time.monotonic() + 10
  while time.monotonic() < deadline:  # the sandboxes' processes die on their own
    out = subprocess.run(
      ["pgrep", "-f", "sleep 1000"], capture_output=True, text=True
    ).stdout.split()
    if not out:
      break
    time.sleep(0.2)
  assert not out
  SandboxPool.sweep()  # (another process's first sandbox may have swept it already)
  assert not root.exists()
  assert not runtime.mounts_under(root)
  for parent in cgroups.parents_for_sweep():
    if parent.is_dir():
      assert not [c for c in parent.iterdir() if c.name.startswith(tag)]


def test_load_32_sandboxes_x_20_commands_no_leaks(rootfs, snapshot):
  spec = EnvironmentSpec(image=str(rootfs))
  resource_snapshot = snapshot
  before = resource_snapshot()
  pool = SandboxPool(32, backend="bubblewrap")

  async def worker(i):
    async with pool.asession(spec) as sb:
      outs = []
      for j in range(20):
        res = await asyncio.to_thread(sb.run, f"echo {i}-{j} $(( {i} * {j} ))")
        outs.append(res.output)
      return outs

  async def main():
    return await asyncio.gather(*(worker(i) for i in range(32)))

  start = time.monotonic()
  results = asyncio.run(main())
  elapsed = time.monotonic() - start
  for i, outs in enumerate(results):
    assert outs == [f"{i}-{j} {i * j}\n" for j in range(20)]
  assert _settle(resource_snapshot, before) == before, (before, resource_snapshot())
  print(f"32 x 20 commands in {elapsed:.1f} s")


@pytest.mark.slow
def test_load_32_podman_sandboxes_x_20_commands_no_leaks(podman_image, snapshot):
  spec = EnvironmentSpec(image=podman_image)
  before = snapshot()
  pool = SandboxPool(32, backend="podman")

  async def worker(i):
    async with pool.asession(spec) as sb:
      return [(await asyncio.to_thread(sb.run, f"echo {i}-{j}")).output for j in range(20)]

  async def main():
    return await asyncio.gather(*(worker(i) for i in range(32)))

  results = asyncio.run(main())
  assert results == [[f"{i}-{j}\n" for j in range(20)] for i in range(32)]
  assert _settle(snapshot, before) == before
  from tmax_jax.sandbox.backends import podman

  ps = podman.run_podman(
    ["ps", "-a", "--filter", f"label=tmax_owner={runtime.owner_tag()}", "--format", "{{.Names}}"]
  )
  assert ps.stdout.strip() == b""


@pytest.mark.skipif(cgroups.detect().version != 1, reason="needs root with writable cgroup v1")
def test_sweeper_removes_dirs_mounts_and_cgroups_of_dead_owners():
  tag = "p4194303-1"  # above pid_max: never alive
  root = runtime.tmp_base() / tag / "sbx"
  root.mkdir(parents=True)
  subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmax-sbx", str(root)], check=True)
  (root / "file").write_text("x")
  cg = cgroups.Cgroup(cgroups.detect(), f"{tag}-0", 64, 16)
  removed = runtime.sweep_stale()
  assert not (runtime.tmp_base() / tag).exists() and not runtime.mounts_under(root)
  assert all(not p.exists() for p in cg.paths)
  assert isinstance(removed, list)
