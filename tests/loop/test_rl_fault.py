"""The RL loop against a separately launched server (launch/serve.py) that is killed in the middle
of rollouts and started again: the loop reconnects, pushes its current weights to the new
instance, drops the groups that lost episodes (counted), and finishes its steps."""

import asyncio
import dataclasses
import signal
import threading
import time

import pytest

from tests.conftest import require_base_rootfs
from tests.inference import serve_process
from tests.loop.rl_helpers import TINY
from tests.loop.test_rl_loop import _config
from tmax_jax.inference.client import RolloutClient
from tmax_jax.inference.server import free_port
from tmax_jax.loop.rl import run_rl
from tmax_jax.train.metrics import read_jsonl

# launch/serve.py flags for the loop's model (weights differ: the loop pushes its own) and shape
SERVE = [
  f"--config.model.overrides.{k}={v}"
  for k, v in dict(
    vocab_size=151936, **{k: v for k, v in TINY.items() if k != "tie_word_embeddings"}
  ).items()
]
SERVE += [
  "--config.model.seed=11",
  "--config.serving.engine.max_len=384",
  "--config.serving.engine.max_prefill_length=384",
  "--config.serving.engine.max_concurrent_decodes=4",
]


async def _active(address: str) -> int:
  async with RolloutClient(address) as c:
    return (await c.status(timeout_s=2.0)).active_requests


def restart_during_rollouts(procs: list, port: int, ready, log, metrics) -> tuple:
  """Starts a thread that, once step 1's metrics are written and episodes generate, SIGKILLs the
  server procs[0] on `port` and starts it again (appended to `procs`) -> (the thread, a dict it
  fills: "at" the kill's monotonic time, "version" the steps done then)."""
  address, killed = f"127.0.0.1:{port}", {}

  def run():
    while not (metrics.exists() and metrics.read_text().strip()):  # step 1 is done
      time.sleep(0.2)
    while asyncio.run(_active(address)) < 1:  # episodes are generating
      time.sleep(0.05)
    procs[0].send_signal(signal.SIGKILL)
    procs[0].wait(timeout=30)
    killed["at"] = time.monotonic()
    killed["version"] = len(read_jsonl(metrics))  # what a new instance is resynced to
    procs.append(serve_process.start(port, ready, log, *SERVE))

  thread = threading.Thread(target=run, daemon=True)
  thread.start()
  return thread, killed


async def _served_version(address: str) -> tuple[int, str]:
  async with RolloutClient(address) as c:
    s = await c.wait_until_ready(timeout_s=60)
    return s.version, s.instance_id


@pytest.mark.slow  # the default suite's budget (docs/design/ci.md)
def test_server_killed_mid_rollouts_is_reconnected_resynced_and_counted(tmp_path):
  require_base_rootfs()
  port = free_port()
  address = f"127.0.0.1:{port}"
  ready, log = tmp_path / "ready.json", tmp_path / "server.log"
  procs = [serve_process.start(port, ready, log, *SERVE)]
  cfg = _config(tmp_path, steps=3)
  cfg = dataclasses.replace(cfg, serving=dataclasses.replace(cfg.serving, address=address))
  metrics = tmp_path / "run" / "metrics.jsonl"
  monitor, killed = restart_during_rollouts(procs, port, ready, log, metrics)
  try:
    result = run_rl(cfg)
    monitor.join(timeout=300)
    version, instance = asyncio.run(_served_version(address))
  finally:
    for p in procs:
      p.kill()
  assert "at" in killed, "the server was not killed during the run"
  m = result.metrics
  assert [x["step"] for x in m] == [1, 2, 3]
  assert all(x["policy_version"] == x["step"] for x in m)
  assert m[-1]["server_restarts"] == 1
  assert m[-1]["rollout/groups_dropped_server"] >= 1  # the groups the kill cut
  assert version == 3  # the new instance got the policy (resync, then the later pushes)
  assert instance and len(procs) == 2
