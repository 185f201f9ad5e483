"""Sandboxes on each backend under infrastructure faults: a hard lifetime enforced outside the
owner (the owner stays alive and does nothing), a sandbox killed from the host is `lost()` for good
(what ran in it is never scored), a SIGKILLed owner with live sandboxes (plain, from a built image
with its overlay mounts, a pod on podman, a scratch dir) leaves nothing once the next start has
swept, and a SIGTERMed one (sandboxes started in worker threads, more starting as it ends) leaves
nothing at all: zero processes, containers, pods, cgroups, mounts and dirs, counted by the
project's own markers (sandbox/census.py)."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tmax_jax.sandbox import census
from tmax_jax.sandbox.api import Limits, SandboxError
from tmax_jax.sandbox.backends import podman

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _wait(predicate, timeout_s: float, what: str):
  deadline = time.monotonic() + timeout_s
  while time.monotonic() < deadline:
    value = predicate()
    if value:
      return value
    time.sleep(0.2)
  raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def _processes(sb) -> list[int]:
  """The sandbox's own processes, by its markers: its cgroup (bubblewrap), its container's PID
  namespace (podman)."""
  if sb.backend == "podman":
    return census._container_processes(sb.container)
  return sb.cgroup.pids()


def _kill_from_the_host(sb) -> None:
  if sb.backend == "podman":
    podman.run_podman(["kill", "-s", "KILL", sb.container], check=False)
  else:
    for pid in sb.cgroup.pids():
      subprocess.run(["kill", "-KILL", str(pid)], check=False)


def test_hard_lifetime_ends_the_sandbox_while_its_owner_lives(make_sb):
  sb = make_sb(limits=Limits(lifetime_s=4))
  sb.run("sleep 1000 >/dev/null 2>&1 &")
  if sb.backend == "bubblewrap":  # the watchdog is out of the sandbox user's reach
    out = sb.run(
      "for p in $(ps -eo pid=,user= | awk '$2 != \"agent\" {print $1}'); do "
      "kill -STOP $p || echo refused $p; done"
    ).output
    assert out.count("refused") >= 1 and "Operation not permitted" in out, out
  assert _processes(sb) and not sb.lost()
  _wait(lambda: not _processes(sb), 20, "the lifetime to end the sandbox's processes")
  assert "hard lifetime of 4 s ran out" in _wait(sb.lost, 10, "lost()")
  with pytest.raises(SandboxError, match="hard lifetime of 4 s is over"):
    sb.run("echo again")


def test_a_sandbox_killed_from_the_host_is_lost_for_good(make_sb):
  sb = make_sb()
  assert sb.run("echo up").output.strip() == "up" and sb.lost() == ""
  _kill_from_the_host(sb)
  res = sb.run("echo after", timeout_s=20)  # restarted (files kept), but the loss is remembered
  assert res.status == "crashed" or res.output.strip() == "after", res
  # the shell (podman exec) may notice before the anchor (podman run) client has exited
  lost = sb.lost()
  assert lost.startswith((f"its {sb.backend} anchor process ended", "its shell")), lost
  assert sb.run("echo again").output.strip() == "again" and sb.lost()


def test_a_shell_that_dies_between_the_check_and_the_send_is_restarted(make_sb):
  """The race of a kill from the host: the shell still looks alive to run()'s check, but its
  stdin is already a broken pipe. The command runs in a restarted shell and the loss is kept."""
  sb = make_sb()
  assert sb.run("echo up").output.strip() == "up"
  read_end, write_end = os.pipe()
  os.close(read_end)
  real_stdin, sb._proc.stdin = sb._proc.stdin, os.fdopen(write_end, "wb")
  try:  # the real stdin stays open: the shell is alive, only the pipe the host writes is broken
    assert sb._proc.poll() is None
    assert sb.run("echo after").output.strip() == "after"
  finally:
    real_stdin.close()
  assert sb.lost().startswith("its shell had died"), sb.lost()


CHILD = """
import sys, time
sys.path.insert(0, {root!r})
from tmax_jax.sandbox import open_pod, open_sandbox, runtime
from tmax_jax.sandbox.images import builder
from tmax_jax.sandbox.api import EnvironmentSpec, PodSpec, ServiceSpec
backend, plain, built = sys.argv[1], sys.argv[2], sys.argv[3]
boxes = [open_sandbox(EnvironmentSpec(image=plain), backend=backend),
         open_sandbox(EnvironmentSpec(image=built), backend=backend)]
if backend == "podman":
  svc = ServiceSpec(name="db", image=built, command=("sleep", "1000"))
  boxes.append(open_pod(PodSpec(main=EnvironmentSpec(image=built), services=(svc,))))
for sb in boxes:
  sb.run("sleep 1000 >/dev/null 2>&1 &")
scratch = runtime.scratch_dir("trial-")
print(runtime.owner_tag(), flush=True)
time.sleep(1000)
"""


@pytest.fixture(scope="module")
def built_image(rootfs, tmp_path_factory) -> str:
  from tmax_jax.sandbox.images import builder

  ctx = tmp_path_factory.mktemp("img")
  (ctx / "Dockerfile").write_text("FROM tmax-base:bookworm\nRUN echo census > /etc/census-test\n")
  return str(builder.build_image(ctx).path)


def test_sigkilled_owner_leaves_nothing_after_the_next_start(
  backend, request, built_image, tmp_path
):
  """The acceptance check of issue 32 on each backend: SIGKILL a process with live sandboxes,
  start the next one (its start-up sweep is census.sweep, as run_rl's), count zero leftovers."""
  script = tmp_path / "owner.py"
  script.write_text(textwrap.dedent(CHILD.format(root=str(ROOT))))
  plain = request.getfixturevalue("podman_image" if backend == "podman" else "rootfs")
  child = subprocess.Popen(
    [sys.executable, str(script), backend, str(plain), built_image],
    stdout=subprocess.PIPE,
    text=True,
  )
  try:
    tag = child.stdout.readline().strip()
    assert tag.startswith("p"), tag
    live = census.take({tag})
    assert live.processes and live.dirs and live.mounts, live  # overlay mounts of the built image
    if backend == "podman":
      assert len(live.containers) >= 3 and live.pods, live
    else:
      assert len(live.cgroups) >= 2, live  # one per sandbox (per controller on v1)
  finally:
    child.send_signal(signal.SIGKILL)
    child.wait()
  # the sandboxes' processes die with their owner (the anchors' pipes close), before any sweep
  _wait(lambda: not census.take({tag}).processes, 30, f"{tag}'s sandbox processes to exit")
  left = census.take({tag})
  assert left.dirs, "a SIGKILLed owner cannot remove its own dirs: the next start must"
  nxt = subprocess.run(
    [sys.executable, "-c", "from tmax_jax.sandbox import census; print(len(census.sweep()))"],
    cwd=ROOT,
    capture_output=True,
    text=True,
    check=True,
  )
  assert int(nxt.stdout.strip()) >= 1, nxt
  after = census.take({tag})
  assert after.total == 0, after


TERM_CHILD = """
import concurrent.futures, sys, threading, time
sys.path.insert(0, {root!r})
from tmax_jax.sandbox import open_sandbox, runtime
from tmax_jax.sandbox.api import EnvironmentSpec
backend, image = sys.argv[1], sys.argv[2]
runtime.install_signal_handlers()  # what run_rl does first, in the main thread
pool = concurrent.futures.ThreadPoolExecutor(4)
def episode(i):  # the RL loop's episode threads: sandboxes start and end in them
  while True:
    with runtime.scratch_dir("trial-"):
      sb = open_sandbox(EnvironmentSpec(image=image), backend=backend)
      sb.run("sleep 1000 >/dev/null 2>&1 &")
      if i == 0:
        print(runtime.owner_tag(), flush=True)
      time.sleep(0.5 if i else 1000)
      sb.close()
for i in range(3):
  pool.submit(episode, i)
time.sleep(1000)
"""


def test_sigterm_leaves_nothing_even_with_sandboxes_starting(backend, request, tmp_path):
  script = tmp_path / "owner.py"
  script.write_text(textwrap.dedent(TERM_CHILD.format(root=str(ROOT))))
  image = request.getfixturevalue("podman_image" if backend == "podman" else "rootfs")
  child = subprocess.Popen(
    [sys.executable, str(script), backend, str(image)], stdout=subprocess.PIPE, text=True
  )
  try:
    tag = child.stdout.readline().strip()
    assert tag.startswith("p") and census.take({tag}).processes, tag
    time.sleep(1.0)  # the other threads keep opening and closing sandboxes
  finally:
    child.send_signal(signal.SIGTERM)
    child.wait(timeout=120)
  assert child.returncode == -signal.SIGTERM
  left = census.take({tag})  # no sweep: the process cleaned up after itself
  assert left.total == 0, left


HALF_BUILT = """
import sys, threading, time
sys.path.insert(0, {root!r})
from tmax_jax.sandbox import runtime
from tmax_jax.sandbox.backends import bubblewrap
from tmax_jax.sandbox.api import EnvironmentSpec
class Late(bubblewrap.BubblewrapSandbox):
  # its cgroup made only once another thread closed it half-built, the rest of its start slow:
  # the order that left a cgroup behind a SIGTERMed owner (close_all returned, the process ended)
  def _make_cgroup(self):
    while not self._closed:
      time.sleep(0.01)
    super()._make_cgroup()
    print("cgroup", bool(self.cgroup), flush=True)
    time.sleep(1.0)
def build():
  try:
    Late(EnvironmentSpec(image=sys.argv[1]))
  except Exception as e:
    print("refused:", type(e).__name__, flush=True)
print(runtime.owner_tag(), flush=True)
threading.Thread(target=build, daemon=True).start()
while not runtime._live:
  time.sleep(0.01)
runtime.close_all()  # what the SIGTERM handler runs; the process ends right after it
time.sleep(0.3)
runtime.os._exit(0)
"""


def test_a_sandbox_closed_half_built_leaves_no_cgroup_when_its_owner_ends(rootfs, tmp_path):
  """close_all waits for sandboxes other threads are building to tear down what they made after
  it closed them (tests/sandbox/test_lifetime.py's SIGTERM test once found such a cgroup)."""
  script = tmp_path / "owner.py"
  script.write_text(textwrap.dedent(HALF_BUILT.format(root=str(ROOT))))
  out = subprocess.run(
    [sys.executable, str(script), str(rootfs)], capture_output=True, text=True, timeout=120
  )
  assert out.returncode == 0, out.stderr[-3000:]
  tag, *said = out.stdout.split()
  assert said[:2] == ["cgroup", "True"], out.stdout  # it made one after the close
  left = census.take({tag})
  assert left.total == 0, left
