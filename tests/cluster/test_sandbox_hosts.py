"""Sandbox hosts on a local Ray cluster of real raylets (tmax_jax/cluster/sandbox_hosts.py): two
nodes offering `sandbox`, one SandboxHost actor each, real bubblewrap sandboxes. Trials opened
through RunnerConfig.sandbox_hosts='ray' spread over both hosts and score as local ones (files
shipped both ways); a host SIGKILLed under running commands ends its trials as the infrastructure
failure 'sandbox_lost' while the other host's finish scored, the lost host cools down, Ray
restarts it, its restart sweeps what it left, and nothing of any host's is left (by the project's
markers) once the hosts stop."""

import concurrent.futures
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest

ray = pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[cluster]')")

from tests.cluster import ray_local  # noqa: E402
from tests.conftest import require_base_rootfs  # noqa: E402
from tmax_jax.cluster import sandbox_hosts as hosts_lib  # noqa: E402
from tmax_jax.cluster.leases import LeasePolicy  # noqa: E402
from tmax_jax.errors import UserError  # noqa: E402
from tmax_jax.sandbox import census  # noqa: E402
from tmax_jax.sandbox.api import EnvironmentSpec, SandboxError  # noqa: E402
from tmax_jax.tasks.format import AgentConfig, Task, TaskConfig, VerifierConfig, write_task  # noqa: E402
from tmax_jax.tasks.runner import RunnerConfig, run_trial, task_spec  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = pathlib.Path(__file__).resolve().parents[2]
COOLDOWN_S = 20.0
RESTART_S = 120.0
# reward 1 iff the agent left /workspace/done holding what was uploaded to it
TEST_SH = b'#!/bin/bash\n[ "$(cat /workspace/done)" = shipped ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n'  # noqa: E501


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
  """-> (the placed hosts' actors, every host owner tag seen, a task, the cluster's address): two
  sandbox nodes."""
  require_base_rootfs()
  marker = tmp_path_factory.mktemp("sandbox_hosts")
  config = TaskConfig(agent=AgentConfig(timeout_sec=120), verifier=VerifierConfig(timeout_sec=60))
  task = write_task(Task("act", config, tests={"test.sh": TEST_SH}), marker / "task")
  with ray_local.local_cluster(0, str(marker), sandbox_nodes=2) as c:
    with hosts_lib.hosts_for(RunnerConfig()) as none:  # a job with local sandboxes places none
      assert none == [] and not ray.util.list_named_actors(all_namespaces=True)
      with pytest.raises(UserError, match="no sandbox host is placed.*launch/cluster.py places"):
        hosts_lib.find_hosts()
    with hosts_lib.hosts_for(RunnerConfig(sandbox_hosts="ray")) as actors:  # as launch/cluster.py
      infos = ray.get([a.info.remote() for a in actors])
      owners = {i.owner for i in infos}
      assert len(owners) == len({i.node_id for i in infos}) == 2  # one host per sandbox node
      yield actors, owners, task, c.address
    left = census.take(owners)  # every node is this machine: one census sees all hosts'
    assert left.total == 0, str(left)


def _agent(seconds: float, started: threading.Semaphore | None = None):
  """Uploads a file, then (signalling `started`) copies it to /workspace/done after `seconds`
  of a running command; checks a download of it."""

  def act(sb):
    src = pathlib.Path(tempfile.mkdtemp(prefix="hosted-test-")) / "payload"
    src.write_text("shipped")
    sb.upload(src, "/workspace/payload")
    if started is not None:
      started.release()
    out = sb.run(f"sleep {seconds}; cp /workspace/payload /workspace/done; cat /workspace/done")
    assert out.output.strip() == "shipped", out
    dest = src.parent / "back"
    sb.download("/workspace/done", dest)
    assert dest.read_text() == "shipped"

  return act


# A trainer process's view (cluster/trainer.py gives it RAY_ADDRESS): another process, not yet a
# Ray driver, whose episode threads open sandboxes through RunnerConfig.sandbox_hosts='ray'.
TRAINER_SIDE = """
import concurrent.futures, pathlib, sys
from tmax_jax.tasks.format import load_task
from tmax_jax.tasks.runner import RunnerConfig, run_trial
cfg = RunnerConfig(sandbox_hosts="ray", memory_mb=1024, min_verifier_timeout_s=0)
def agent(sb):
  sb.run("echo shipped > /workspace/done")
with concurrent.futures.ThreadPoolExecutor(2) as pool:
  results = list(pool.map(lambda _: run_trial(load_task(sys.argv[1]), agent, cfg), range(2)))
print("RESULTS", sorted((r.failure, r.reward, r.sandbox.split("/")[0]) for r in results))
"""


def _restarted(hosts, pid: int):
  """Host 0's HostInfo once Ray has restarted it on its node (its start-up sweep done)."""
  deadline = time.monotonic() + RESTART_S
  while True:
    try:
      now = hosts.infos(timeout_s=10)[0]
    except ray.exceptions.RayError:
      now = None
    if now is not None and now.pid != pid:
      return now
    assert time.monotonic() < deadline, "host 0 was not restarted"
    time.sleep(1.0)


def _host(result) -> int:
  return int(result.sandbox.split("/", 1)[0].removeprefix("host"))


def test_trials_spread_over_both_hosts_and_score(cluster):
  _, _, task, _ = cluster
  cfg = RunnerConfig(sandbox_hosts="ray", memory_mb=1024, min_verifier_timeout_s=0)
  with concurrent.futures.ThreadPoolExecutor(4) as pool:
    results = list(pool.map(lambda _: run_trial(task, _agent(2), cfg), range(4)))
  assert [(r.failure, r.reward) for r in results] == [("", 1.0)] * 4, results
  assert sorted(_host(r) for r in results) == [0, 0, 1, 1]


def test_a_host_killed_under_its_commands_ends_its_trials_as_infra_failures(cluster):
  actors, owners, task, _ = cluster
  hosts = hosts_lib.SandboxHosts(actors, LeasePolicy(cooldown_s=COOLDOWN_S))
  before = hosts.infos()
  cfg = RunnerConfig(memory_mb=1024, min_verifier_timeout_s=0)
  started = threading.Semaphore(0)
  with concurrent.futures.ThreadPoolExecutor(4) as pool:
    futures = [
      pool.submit(run_trial, task, _agent(12, started), cfg, open_fn=hosts.open) for _ in range(4)
    ]
    for _ in range(4):
      assert started.acquire(timeout=120)
    time.sleep(1.0)  # every agent's `sleep` is running
    killed_at = time.monotonic()
    os.kill(before[0].pid, signal.SIGKILL)
    results = [f.result(timeout=300) for f in futures]
  by_host = sorted((_host(r), r.failure, r.reward) for r in results)
  assert by_host == [(0, "sandbox_lost", 0.0)] * 2 + [(1, "", 1.0)] * 2, results
  assert all("sandbox host 0 failed" in r.reason for r in results if r.failure), results
  until = hosts.leases.loads()[0].cooldown_until  # the lease's clock: time.monotonic
  assert hosts.leases.cooling(0) and until >= killed_at + COOLDOWN_S
  with hosts.open(task_spec(task, cfg)) as sb:  # host 0 cools down: host 1 takes it
    assert sb.host == 1 and sb.run("echo ok").output.strip() == "ok"

  now = _restarted(hosts, before[0].pid)
  owners.add(now.owner)
  assert now.node_id == before[0].node_id and now.swept > 0, now
  for actor in actors:
    assert ray.get(actor.leftovers.remote([before[0].owner])) == ""
  time.sleep(max(0.0, until + 0.1 - time.monotonic()))
  assert not hosts.leases.cooling(0)
  with hosts.open(task_spec(task, cfg)) as a, hosts.open(task_spec(task, cfg)) as b:
    assert sorted([a.host, b.host]) == [0, 1]  # back in the lease, the least loaded first
    assert a.run("echo ok").output.strip() == b.run("echo ok").output.strip() == "ok"


def test_a_trainer_process_joins_the_cluster_from_an_episode_thread(cluster):
  _, _, task, address = cluster
  env = {**os.environ, "RAY_ADDRESS": address}
  out = subprocess.run(
    [sys.executable, "-c", TRAINER_SIDE, str(task.path)],
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert out.returncode == 0, out.stderr[-3000:]
  lines = [x for x in out.stdout.splitlines() if x.startswith("RESULTS")]
  assert lines == ["RESULTS [('', 1.0, 'host0'), ('', 1.0, 'host1')]"], out.stdout[-2000:]


def test_podman_hosts_a_killed_host_loses_its_sandboxes_and_its_restart_sweeps(cluster):
  from tmax_jax.sandbox.backends import podman  # noqa: PLC0415 (podman only for this test)
  from tmax_jax.sandbox.images import podman_store  # noqa: PLC0415

  reason = podman.podman_available()
  if reason:
    pytest.skip(f"podman cannot run here: {reason}")
  actors, owners, _, _ = cluster
  spec = EnvironmentSpec(image=podman_store.ensure_podman_image(require_base_rootfs()))
  hosts = hosts_lib.SandboxHosts(actors, LeasePolicy(cooldown_s=COOLDOWN_S))
  before = hosts.infos()
  doomed, kept, idle = (hosts.open(spec, "podman") for _ in range(3))
  assert (doomed.host, kept.host, idle.host) == (0, 1, 0)
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    runs = [pool.submit(sb.run, "sleep 6; echo done") for sb in (doomed, kept)]
    time.sleep(2.0)
    os.kill(before[0].pid, signal.SIGKILL)
    with pytest.raises(SandboxError, match="its sandbox host 0 failed"):
      runs[0].result(timeout=120)
    assert runs[1].result(timeout=120).output.strip() == "done"
  assert "its sandbox host 0 failed" in doomed.lost() and not kept.lost()
  doomed.close()
  kept.close()
  now = _restarted(hosts, before[0].pid)
  owners.add(now.owner)
  assert now.swept > 0, now  # what the killed host left: its container (by its label), its dirs
  for actor in actors:
    assert ray.get(actor.leftovers.remote([before[0].owner])) == ""
  with pytest.raises(SandboxError, match="sandbox host 0 restarted since it opened"):
    idle.run("true")  # no call was out when its host died: the restarted host says it is gone
  assert "restarted since it opened" in idle.lost()
  idle.close()
