"""A server restarted under a client: the request it cut is lost (ServerRestartedError), the new
instance is resynced once through `on_restart`, and later requests run on it. Real in-process
servers over gRPC on one loopback port."""

import asyncio

import inference_helpers as helpers
import pytest

from tmax_jax.inference import client as client_lib
from tmax_jax.inference import engine as engine_lib
from tmax_jax.inference import sampling
from tmax_jax.inference import server as server_lib
from tmax_jax.models import hf_io

GREEDY = sampling.SamplingParams(temperature=0.0)


def _start(d, port: int) -> server_lib.RolloutServer:
  cfg, params = hf_io.load_pretrained(d)
  engine = engine_lib.TmaxEngine(
    cfg,
    engine_lib.EngineConfig(max_concurrent_decodes=2, max_len=2048, max_prefill_length=64),
    lambda: params,
  )
  return server_lib.start_server(engine, server_lib.ServerConfig(port=port))


def test_restart_loses_the_cut_request_and_resyncs_once(tmp_path):
  boot, trained = tmp_path / "boot", tmp_path / "trained"
  helpers.save_tiny("qwen3", boot, seed=0)
  m_trained = helpers.save_tiny("qwen3", trained, seed=1)
  _, trained_params = hf_io.load_pretrained(trained)
  port = server_lib.free_port()
  first = _start(boot, port)
  prompt = helpers.prompts(1, seed=4)[0]
  pushes, restarted = [], {}

  async def go():
    cfg = client_lib.ClientConfig(
      timeout_s=120, max_attempts=200, backoff_s=0.05, backoff_max_s=0.5
    )

    async def resync():  # what the RL loop does: the new instance gets the current policy
      pushes.append(await c.update_weights(trained_params, version=3))

    async with client_lib.RolloutClient(first.address, cfg, on_restart=resync) as c:
      await c.update_weights(trained_params, version=3)
      known = (await c.status()).instance_id
      long = asyncio.create_task(c.generate(prompt, 1500, sampling.SamplingParams(seed=1)))
      while (await c.status()).active_requests < 1:
        await asyncio.sleep(0.01)
      await asyncio.to_thread(first.stop)  # the stream is cut with UNAVAILABLE
      restarted["server"] = await asyncio.to_thread(_start, boot, port)  # boots on old weights
      with pytest.raises(client_lib.ServerRestartedError, match="restarted"):
        await long
      after = await c.generate(prompt, 12, GREEDY)
      again = await c.generate(prompt, 12, GREEDY)
      return known, c.instance_id, c.restarts, after, again

  try:
    known, now, restarts, after, again = asyncio.run(go())
  finally:
    if "server" in restarted:
      restarted["server"].stop()
  assert known == first.instance_id and now == restarted["server"].instance_id != known
  assert restarts == 1 and pushes == [3]  # one resync, by the callback, at the policy version
  ref = helpers.hf_greedy(m_trained, [prompt], 12)[0]
  assert after.token_ids == ref and set(after.versions) == {3}  # the resynced weights serve
  assert again.token_ids == ref
