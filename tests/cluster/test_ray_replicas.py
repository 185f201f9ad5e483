"""Inference replicas placed by Ray (tmax_jax/cluster) on a local cluster of real raylets (a head
offering `trainer`, three nodes offering `inference`, one of them spare): two
configs/serve_random.py servers behind the router, a 20-turn session kept on one replica with
prefix hits in the router's Status, a killed server and a removed node each restarted by Ray and
routed to again, the errors said in one line, the launcher stopped by SIGTERM, and nothing of
Ray's or the servers' left running afterwards."""

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
from tests.inference.test_router import CLIENT, ENGINE, GREEDY, PAGE  # noqa: E402
from tmax_jax.cluster import fleet as fleet_lib  # noqa: E402
from tmax_jax.cluster import roles  # noqa: E402
from tmax_jax.cluster.replica import ServerSpec  # noqa: E402
from tmax_jax.errors import UserError  # noqa: E402
from tmax_jax.inference import client as client_lib  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = pathlib.Path(__file__).resolve().parents[2]
SERVE_RANDOM = str(ROOT / "configs/serve_random.py")
RESTART_S = 240  # a killed server's actor restarted and its new server ready


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
  """-> (the Cluster, the log dir marking this module's servers): three inference nodes, one of
  them spare."""
  log_dir = tmp_path_factory.mktemp("cluster")
  with ray_local.local_cluster(3, str(log_dir)) as c:
    yield c, log_dir


def _fleet_config(log_dir, replicas: int, *overrides: str) -> fleet_lib.FleetConfig:
  spec = ServerSpec(SERVE_RANDOM, (*ENGINE, *overrides), openai=False, log_dir=str(log_dir))
  return fleet_lib.FleetConfig(server=spec, replicas=replicas, router_port=0, poll_s=0.2)


async def _counters(address: str) -> dict[str, tuple[int, int]]:
  """The router's Status: each replica's (prompt tokens prefilled, prompt tokens from cache),
  read after a few of its polls (so it holds what just ran)."""
  await asyncio.sleep(0.6)
  async with client_lib.RolloutClient(address, CLIENT) as c:
    st = await c.status()
  return {r.address: (r.prefill_tokens, r.cached_prompt_tokens) for r in st.replica_status}


async def _live(address: str) -> int:
  async with client_lib.RolloutClient(address, CLIENT) as c:
    return sum(r.live for r in (await c.status()).replica_status)


async def _turns(fleet, session: str, prompt: list[int], n: int) -> tuple[set, list, list]:
  """`n` turns of one session through the router -> (replicas whose counters moved per turn,
  prompt tokens served from cache per turn, the conversation so far)."""
  served, hits = set(), []
  async with client_lib.RolloutClient(fleet.router_address, CLIENT) as c:
    before = await _counters(fleet.router_address)
    for turn in range(n):
      out = await c.generate(prompt, 4, GREEDY, session_id=session)
      after = await _counters(fleet.router_address)
      moved = [a for a in after if after[a] != before.get(a)]
      assert len(moved) == 1, (turn, before, after)
      served.add(moved[0])
      hits.append(after[moved[0]][1] - before[moved[0]][1])
      prompt = prompt + out.token_ids + [200 + turn, 201, 202, 203]
      before = after
  return served, hits, prompt


async def _back_and_routed_to(fleet, lost, burst: str) -> None:
  """Waits until Ray restarted the replica `lost` was (a new server, the router's 2 replicas
  live), then sends 8 sessions at once: both replicas get some."""
  deadline = time.monotonic() + RESTART_S
  while fleet.replicas()[lost.index] == lost or await _live(fleet.router_address) < 2:
    assert time.monotonic() < deadline, fleet.replicas()
    await asyncio.sleep(0.5)
  back = fleet.replicas()[lost.index]
  assert back.pid != lost.pid and not ray_local.alive(lost.pid)
  async with client_lib.RolloutClient(fleet.router_address, CLIENT) as c:
    prompts = [list(range(10 + i, 40 + i)) for i in range(8)]
    await asyncio.gather(
      *(c.generate(p, 16, GREEDY, session_id=f"{burst}-{i}") for i, p in enumerate(prompts))
    )
  sessions = fleet.router.router.sessions
  homes = {sessions[f"{burst}-{i}"][0].address for i in range(8)}
  assert homes == {r.address for r in fleet.replicas()}


def test_replicas_keep_sessions_and_come_back_after_a_killed_server_or_node(cluster):
  nodes, log_dir = cluster
  fleet = fleet_lib.place_replicas(_fleet_config(log_dir, 2))
  try:
    first = fleet.replicas()
    assert len({r.node_id for r in first}) == 2 and all(ray_local.alive(r.pid) for r in first)
    served, hits, prompt = asyncio.run(_turns(fleet, "episode-1", list(range(1, 25)), 20))
    assert len(served) == 1
    assert hits[0] == 0 and all(h >= PAGE for h in hits[1:]), hits
    (home,) = served
    victim = next(r for r in first if r.address == home)
    survivor = next(r for r in first if r.address != home)
    os.kill(victim.pid, signal.SIGKILL)

    async def after_kill():
      async with client_lib.RolloutClient(fleet.router_address, CLIENT) as c:
        with pytest.raises(client_lib.ServerUnavailableError, match="lost"):
          await c.generate(prompt, 4, GREEDY, session_id="episode-1")  # its replica is gone
        await c.generate([7, 8, 9], 4, GREEDY, session_id="while-down")
      assert fleet.router.router.sessions["while-down"][0].address == survivor.address
      await _back_and_routed_to(fleet, victim, "after-kill")

    asyncio.run(after_kill())
    lost = fleet.replicas()[survivor.index]
    node = next(n for n in nodes.list_all_nodes() if n.node_id == lost.node_id)
    nodes.remove_node(node)  # its raylet, workers and (tied to its actor) its server die
    asyncio.run(_back_and_routed_to(fleet, lost, "after-node"))
    assert fleet.replicas()[survivor.index].node_id != lost.node_id  # on the spare node
  finally:
    fleet.stop()
  assert not ray_local.marked(str(log_dir))  # both servers stopped with the fleet


def test_errors_say_what_the_cluster_lacks_and_why_a_server_did_not_start(cluster):
  _, log_dir = cluster
  with pytest.raises(UserError, match="9 replica.* needs 9 'inference' and the cluster's nodes"):
    fleet_lib.place_replicas(_fleet_config(log_dir, 9))
  with pytest.raises(UserError, match="no node of the Ray cluster offers the 'sandbox'"):
    roles.require(roles.SANDBOX, 1, "a sandbox host")
  bad = "--config.serving.engine.max_lenn=8"
  with pytest.raises(
    UserError, match=r"replica 0 on .*: its server exited \(2\): error: .*max_lenn"
  ):
    fleet_lib.place_replicas(_fleet_config(log_dir, 1, bad))
  assert not ray_local.marked(str(log_dir))


def test_launcher_serves_until_sigterm_and_says_a_missing_cluster_in_one_line(cluster, tmp_path):
  _, log_dir = cluster
  missing = subprocess.run(
    [sys.executable, "launch/cluster.py", "--address=127.0.0.1:1"],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert missing.returncode == 2, missing.stderr
  assert missing.stderr.strip().startswith("error: --address=127.0.0.1:1: nothing answers")
  assert len(missing.stderr.strip().splitlines()) == 1
  ready = tmp_path / "ready.json"
  cmd = [
    sys.executable,
    "launch/cluster.py",
    f"--address={ray.get_runtime_context().gcs_address}",
    "--replicas=1",
    "--router_port=0",
    "--noopenai",
    f"--server_log_dir={log_dir}",
    f"--ready_file={ready}",
    *(f"--serve_override={o.removeprefix('--config.')}" for o in ENGINE),
  ]
  log = tmp_path / "launcher.log"
  proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT)
  try:
    deadline = time.monotonic() + RESTART_S
    while not ready.exists():
      assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
      time.sleep(0.5)
    placed = json.loads(ready.read_text())
    assert asyncio.run(_live(placed["router"])) == 1
    (replica,) = placed["replicas"]
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)
  finally:
    proc.kill()
  out = log.read_text()
  assert proc.returncode == 0 and out.rstrip().endswith("STOPPED"), out[-3000:]
  assert not ray_local.alive(replica["pid"]) and not ray_local.marked(str(log_dir))
