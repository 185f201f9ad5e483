"""The server under overload (issue 32): more concurrent streams than decode slots are queued and
each finishes whole; streams cut by the network (a TCP proxy resets every connection) are retried
from scratch and finish; a request whose deadline passes in the queue fails with a clear error;
nothing crashes the server. A real in-process server over gRPC on loopback."""

import asyncio

import inference_helpers as helpers
import pytest

from bench.chaos.proxy import TcpProxy
from tmax_jax.inference import client as client_lib
from tmax_jax.inference import engine as engine_lib
from tmax_jax.inference import sampling
from tmax_jax.inference import server as server_lib
from tmax_jax.models import hf_io

SLOTS, STREAMS, TOKENS = 2, 8, 64


@pytest.fixture(scope="module")
def server(tmp_path_factory):
  d = tmp_path_factory.mktemp("overload")
  helpers.save_tiny("qwen3", d)
  cfg, params = hf_io.load_pretrained(d)
  engine = engine_lib.TmaxEngine(
    cfg,
    engine_lib.EngineConfig(max_concurrent_decodes=SLOTS, max_len=512, max_prefill_length=64),
    lambda: params,
  )
  srv = server_lib.start_server(engine, server_lib.ServerConfig(port=server_lib.free_port()))
  yield srv
  srv.stop()


async def _until(predicate, timeout_s: float = 60.0):
  deadline = asyncio.get_running_loop().time() + timeout_s
  while not await predicate():
    assert asyncio.get_running_loop().time() < deadline, "timed out"
    await asyncio.sleep(0.01)


@pytest.mark.slow  # 10 s
def test_more_streams_than_slots_queue_and_survive_a_cut(server):
  proxy = TcpProxy(server.address)
  retry = client_lib.ClientConfig(timeout_s=300, max_attempts=20, backoff_s=0.05, backoff_max_s=0.5)

  async def go():
    async with (
      client_lib.RolloutClient(proxy.address, retry) as c,
      client_lib.RolloutClient(server.address) as direct,
    ):
      jobs = [
        asyncio.create_task(c.generate(p, TOKENS, sampling.SamplingParams(seed=i)))
        for i, p in enumerate(helpers.prompts(STREAMS, seed=5))
      ]
      seen = {}

      async def queued() -> bool:
        st = await direct.status()
        seen["active"], seen["waiting"] = st.active_requests, st.waiting_requests
        return st.waiting_requests > 0 and st.active_requests == SLOTS

      await _until(queued)
      cut = await asyncio.to_thread(proxy.cut)  # every live stream is reset mid-way
      outs = await asyncio.gather(*jobs)
      return seen, cut, outs, (await direct.status()).live

  try:
    seen, cut, outs, live = asyncio.run(go())
  finally:
    proxy.close()
  assert seen["waiting"] > 0 and seen["active"] == SLOTS  # queued, not refused or dropped
  assert cut == 1  # the client's one HTTP/2 connection carried every stream
  assert all(o.finish_reason == "length" and len(o.token_ids) == TOKENS for o in outs)
  assert all(len(o.logprobs) == len(o.versions) == TOKENS for o in outs)
  assert max(o.attempts for o in outs) >= 2  # the cut streams were retried from scratch
  assert live


def test_a_deadline_that_passes_in_the_queue_is_a_clear_error(server):
  async def go():
    cfg = client_lib.ClientConfig(timeout_s=300)
    async with client_lib.RolloutClient(server.address, cfg) as c:
      long = [
        asyncio.create_task(c.generate(p, 400, sampling.SamplingParams(seed=i)))
        for i, p in enumerate(helpers.prompts(3 * SLOTS, seed=7))
      ]
      await _until(lambda: _waiting(c))
      with pytest.raises(client_lib.ServerUnavailableError) as err:
        await c.generate([1, 2, 3], 8, timeout_s=0.5)
      outs = await asyncio.gather(*long)  # the queue and the server go on
      return str(err.value), outs

  message, outs = asyncio.run(go())
  assert "DEADLINE_EXCEEDED" in message and server.address in message, message
  assert all(len(o.token_ids) == 400 for o in outs)


async def _waiting(c) -> bool:
  return (await c.status()).waiting_requests > 0
