"""The soak's fault injector (bench/chaos/faults.py) against sandboxes that end while it looks at
them: the 30-minute bubblewrap soak of 2026-12-05 died after 10 minutes on a cgroup listed by
live_sandboxes and removed by its sandbox before cgroup.procs was read."""

import contextlib
import os
import pathlib
import signal
import subprocess
import time

import pytest

from bench.chaos import faults


def _cgroups(tmp_path, monkeypatch, procs: dict[str, str | None]) -> pathlib.Path:
  """A pids parent with one directory per name; None: the cgroup went away (no cgroup.procs, as
  a removed cgroup reads)."""
  for name, text in procs.items():
    (tmp_path / name).mkdir()
    if text is not None:
      (tmp_path / name / "cgroup.procs").write_text(text)
  monkeypatch.setattr(faults, "_pids_parent", lambda: tmp_path)
  return tmp_path


def test_live_sandboxes_skips_a_cgroup_gone_since_the_listing(tmp_path, monkeypatch):
  _cgroups(tmp_path, monkeypatch, {"p1-a-1": f"{os.getpid()}\n", "p1-a-2": None, "p1-a-3": ""})
  assert faults.live_sandboxes("p1-a", "bubblewrap") == ["p1-a-1"]


def test_kill_and_lifetime_of_a_gone_sandbox(tmp_path, monkeypatch):
  _cgroups(tmp_path, monkeypatch, {"p1-a-2": None})
  assert faults.kill_sandbox("p1-a-2", "bubblewrap") == 0
  assert faults.lifetime_of("p1-a-2", "bubblewrap") == faults.GONE
  assert faults.lifetime_of("p1-a-9", "bubblewrap") == faults.GONE  # never existed


def _sandbox_with_watchdog(seconds: int) -> tuple[subprocess.Popen, subprocess.Popen, int]:
  """A process in a PID namespace of its own (its `unshare` parent in ours, as bwrap's outer
  process is) and a lifetime watchdog joined to that namespace as bubblewrap's is: host root,
  `nsenter -t <pid> -p -- sh -c ... tmax-life <seconds>` (the nsenter parent stays in ours)."""
  sandbox = subprocess.Popen(["unshare", "--pid", "--fork", "sleep", "60"], start_new_session=True)
  children = pathlib.Path(f"/proc/{sandbox.pid}/task/{sandbox.pid}/children")
  deadline = time.monotonic() + 10
  while not children.read_text().split():
    assert time.monotonic() < deadline, "unshare did not fork its child"
    time.sleep(0.05)
  inner = int(children.read_text().split()[0])
  watchdog = subprocess.Popen(
    [
      "nsenter",
      "-t",
      str(inner),
      "-p",
      "--",
      "/bin/sh",
      "-c",
      'sleep "$1"',
      "tmax-life",
      str(seconds),
    ],
    start_new_session=True,
  )
  deadline = time.monotonic() + 10
  while faults._watchdog_in({faults._ns(inner)}) != seconds:
    assert time.monotonic() < deadline, "the watchdog did not join the namespace"
    time.sleep(0.05)
  return sandbox, watchdog, inner


@pytest.fixture
def namespace_sandbox(tmp_path, monkeypatch):
  """Sandbox p1-a-1 (lifetime 77) in a cgroup of its own, and another owner's sandbox (14400,
  started first, so its processes come first in /proc) in none of ours."""
  if os.geteuid() != 0:
    pytest.skip("the watchdog joins a PID namespace as host root (nsenter -p needs root)")
  procs = []
  try:
    other_sandbox, other_watchdog, _ = _sandbox_with_watchdog(14400)
    procs += [other_sandbox, other_watchdog]
    sandbox, watchdog, inner = _sandbox_with_watchdog(77)
    procs += [sandbox, watchdog]
    _cgroups(tmp_path, monkeypatch, {"p1-a-1": f"{sandbox.pid}\n{inner}\n"})
    yield sandbox, inner
  finally:
    for proc in procs:
      with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
      proc.wait(timeout=10)


def test_lifetime_of_reads_the_watchdog_of_its_own_sandbox(namespace_sandbox):
  """The 2026-12-06 soak's 'lifetime enforcer 14400' (limit 600) when tests ran beside it:
  /proc/1's namespace was unreadable, so ours was not left out, and the scan found the nsenter
  parent (in our namespace) of another test's sandbox watchdog (the default 4 h lifetime)."""
  assert faults.lifetime_of("p1-a-1", "bubblewrap") == 77


def test_a_sandbox_that_ends_during_the_scan_is_gone(namespace_sandbox, monkeypatch):
  """A freed namespace id is handed out again at once (the lowest free one): a sandbox that ends
  while /proc is scanned may lend its id to another one, whose watchdog the scan then finds.
  Here the scan finds the watchdog, then the sandbox ends before the answer: GONE."""
  scan = faults._watchdog_in
  sandbox, inner = namespace_sandbox

  def scan_then_end(namespaces):
    found = scan(namespaces)
    os.killpg(sandbox.pid, signal.SIGKILL)
    sandbox.wait(timeout=10)
    deadline = time.monotonic() + 10
    while faults._ns(inner):  # the namespace's pid 1 is gone (its namespace with it)
      assert time.monotonic() < deadline, "the sandbox's process outlived SIGKILL"
      time.sleep(0.05)
    return found

  monkeypatch.setattr(faults, "_watchdog_in", scan_then_end)
  assert faults.lifetime_of("p1-a-1", "bubblewrap") == faults.GONE
