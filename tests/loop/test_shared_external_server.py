"""loop/policy_server.SharedExternalServer against a real launch/serve.py that is SIGKILLed and
started again, one process playing process 0 and another process: process 0's resync pushes its
host copy of the last version by itself (params not needed, no collective; once per instance),
and the other's resync waits until the server reports that version."""

import asyncio

import numpy as np
import pytest

from tests.inference import serve_process
from tests.loop.rl_helpers import tiny_rl_config
from tests.loop.test_rl_fault import SERVE
from tmax_jax.agents.episode import EpisodeConfig
from tmax_jax.inference.client import ClientConfig, RolloutClient
from tmax_jax.inference.sampling import SamplingParams
from tmax_jax.inference.server import free_port
from tmax_jax.loop import policy
from tmax_jax.loop.policy_server import SharedExternalServer

CLIENT = ClientConfig(timeout_s=120, max_attempts=200, backoff_s=0.1, backoff_max_s=1.0)


async def _sample(address: str):
  """(served version, tokens, logprobs) of a fixed seeded sample."""
  async with RolloutClient(address, CLIENT) as c:
    got = await c.generate([1, 2, 3, 4], 8, SamplingParams(temperature=1.0, seed=7))
    return (await c.status()).version, got.token_ids, np.asarray(got.logprobs)


@pytest.mark.slow  # two server starts (~15 s each on the test machine)
def test_restart_resynced_by_process_0_alone_while_the_other_waits(tmp_path):
  port = free_port()
  address, ready, log = f"127.0.0.1:{port}", tmp_path / "ready.json", tmp_path / "server.log"
  procs = [serve_process.start(port, ready, log, *SERVE)]
  _, params, _ = policy.load_policy(tiny_rl_config(tmp_path, 1).model, EpisodeConfig())

  def restart():
    procs[0].kill()
    procs[0].wait(timeout=30)
    procs.append(serve_process.start(port, ready, log, *SERVE))

  def pushes() -> int:
    return log.read_text().count("weights updated to version 5")

  async def scenario():
    main = SharedExternalServer(address, CLIENT, main=True)
    other = SharedExternalServer(address, CLIENT, main=False)
    await main.push(params, 5, replace=True)
    pushed = await _sample(address)
    await asyncio.get_running_loop().run_in_executor(None, restart)
    assert (await _sample(address))[0] == 0  # the new instance boots on its own weights
    waiting = asyncio.create_task(other.resync(None, 5))
    await asyncio.sleep(2)
    assert not waiting.done()  # no process samples before the version is back
    await main.resync(None, 5)  # from process 0's host copy
    await asyncio.wait_for(waiting, 30)
    assert pushes() == 2
    await main.resync(None, 5)  # that instance holds it already: nothing is pushed again
    assert pushes() == 2
    resynced = await _sample(address)
    await main.stop()
    await other.stop()
    return pushed, resynced

  try:
    pushed, resynced = asyncio.run(scenario())
  finally:
    for p in procs:
      p.kill()
  assert pushed[0] == resynced[0] == 5
  assert resynced[1] == pushed[1]  # the copy holds the pushed params, bit for bit
  np.testing.assert_array_equal(resynced[2], pushed[2])
