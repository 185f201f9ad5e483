"""The RL job on a local Ray cluster of three nodes (issue 44's rehearsal): launch/cluster.py
--rl_config places one server per inference node (configs/serve_policy.py) behind the router and
two trainer processes (jax.distributed, 2 x 4 fake CPU devices) on the trainer node, which push
every version through the router to both servers and run their episodes against them. Two
steps (both servers took rollouts and end at version 2), then a resume to step 4 during which
one replica's server is SIGKILLed with requests in flight: its episodes are dropped (never
scored), Ray restarts it, the run goes on, every live replica ends at version 4; a prefix hit
on every step; nothing is left running."""

import asyncio
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

ray = pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[cluster]')")

from tests.cluster import ray_local  # noqa: E402
from tests.conftest import SLOW_COLLECTIVE_FLAGS, require_base_rootfs  # noqa: E402
from tmax_jax.inference import client as client_lib  # noqa: E402
from tmax_jax.train.metrics import read_jsonl  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = pathlib.Path(__file__).resolve().parents[2]


def _command(address: str, run: pathlib.Path, log_dir: pathlib.Path, steps: int) -> list[str]:
  return [
    sys.executable,
    "launch/cluster.py",
    f"--address={address}",
    "--rl_config=tests/loop/rl_tiny_config.py",
    "--rl_config.serving.placement=nodes",
    "--rl_config.serving.nodes=2",
    f"--rl_config.steps={steps}",
    f"--rl_config.output_dir={run}",
    "--router_port=0",
    "--noopenai",
    f"--server_log_dir={log_dir}",
    "--trainer_restarts=0",
    "--rl_config.topology.processes=2",
    "--rl_config.mesh.num_devices=0",  # every device trains: data 2 x fsdp 2 x tensor 2
    "--rl_config.mesh.data=2",
    "--rl_config.mesh.fsdp=2",
    "--rl_config.mesh.tensor=2",
    f"--trainer_env=XLA_FLAGS=--xla_force_host_platform_device_count=4 {SLOW_COLLECTIVE_FLAGS}",
  ]


def _replicas(out: str) -> list[dict]:
  return json.loads(out.split("REPLICAS ", 1)[1].splitlines()[0])


async def _first_busy(router: str, servers: dict[str, int], run: subprocess.Popen) -> str:
  """Polls the router until a replica among `servers` has requests in flight -> its address."""
  deadline = time.monotonic() + 900
  async with client_lib.RolloutClient(router) as c:
    while True:
      assert run.poll() is None, "the resumed run ended before a replica had requests in flight"
      assert time.monotonic() < deadline, "no replica had requests in flight"
      status = await c.status()
      if busy := {r.address for r in status.replica_status if r.active_requests} & servers.keys():
        return sorted(busy)[0]
      await asyncio.sleep(0.05)


def _kill_a_busy_replica(out: pathlib.Path, log_dir: pathlib.Path, run: subprocess.Popen) -> int:
  """SIGKILLs the server of a replica with requests in flight (its node's server, as a lost
  node's would die) as soon as the resumed run's rollouts start -> its pid. Killed in the first
  step's rollouts, not after a step's metrics: with async_steps=1 the next step's episodes may all
  be sampled by the time a step's metrics are written."""
  deadline = time.monotonic() + 900
  while "ROUTING " not in (text := out.read_text()):
    assert run.poll() is None and time.monotonic() < deadline, text[-3000:]
    time.sleep(0.2)
  router = text.split("ROUTING ", 1)[1].split()[0]
  # the router is printed once its replicas are ready: the newest two ready files are theirs
  ready = sorted(log_dir.glob("replica-*.json"), key=lambda p: p.stat().st_mtime)[-2:]
  servers = {json.loads(p.read_text())["address"]: json.loads(p.read_text())["pid"] for p in ready}
  pid = servers[asyncio.run(_first_busy(router, servers, run))]
  os.kill(pid, signal.SIGKILL)
  return pid


@pytest.mark.timeout(1500)
def test_rl_on_three_nodes_two_steps_then_a_resume_with_a_replica_killed(tmp_path):
  require_base_rootfs()
  log_dir, run = tmp_path / "nodes", tmp_path / "run"
  metrics = run / "metrics.jsonl"
  with ray_local.local_cluster(2, str(log_dir), trainers=2) as c:
    first = subprocess.run(
      _command(c.address, run, log_dir, 2), cwd=ROOT, capture_output=True, text=True, timeout=1200
    )
    assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
    assert "RL DONE" in first.stdout
    replicas = _replicas(first.stdout)
    assert len(replicas) == 2 and all(r["prefill_tokens"] > 0 for r in replicas), replicas
    assert {r["version"] for r in replicas} == {2}, replicas  # every push reached both
    # the resume to step 4, one replica's server killed mid-rollouts of step 3
    out = tmp_path / "again.log"
    again = subprocess.Popen(
      _command(c.address, run, log_dir, 4),
      cwd=ROOT,
      stdout=out.open("w"),
      stderr=subprocess.STDOUT,
      text=True,
    )
    try:
      killed = _kill_a_busy_replica(out, log_dir, again)
      again.wait(timeout=1200)
    finally:
      again.kill()
    text = out.read_text()
    assert again.returncode == 0, text[-4000:]
    logs = [p.read_text() for p in log_dir.glob("trainer-*.log")]
    assert len(logs) == 4 and any("resumed from step 2" in x for x in logs)
    assert not ray_local.alive(killed)
    assert len(list(log_dir.glob("replica-*.log"))) >= 5  # 2 + 2 launched, 1+ restarted by Ray
    assert all(r["version"] == 4 for r in _replicas(text) if r["live"]), text[-2000:]
  m = read_jsonl(metrics)
  assert [x["step"] for x in m] == [1, 2, 3, 4]
  assert all(x["policy_version"] == x["step"] for x in m)
  # the killed replica's requests failed as the server's (infrastructure: their episodes never
  # scored, the group run again or dropped), whichever step they were sampled for
  assert any("kind='server'" in x and "lost" in x for x in logs), "no episode saw the kill"
  rates = [x["prefix_hit_rate"] for x in m]  # each turn after an episode's first
  assert all(0.0 < r < 1.0 for r in rates), rates  # finds its prefix on its replica
  for p in range(2):  # each trainer process played its share of every step
    log = (run / f"rollouts.process_{p}_of_2.jsonl").read_text().splitlines()
    assert sorted({json.loads(x)["step"] for x in log}) == [1, 2, 3, 4]
