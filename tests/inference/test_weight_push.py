"""Versioned weight pushes through the Rollout service while requests are in flight."""

import asyncio

import jax
import numpy as np
import pytest

import inference_helpers as helpers
from tmax_jax.inference import client as client_lib
from tmax_jax.inference import engine as engine_lib
from tmax_jax.inference import sampling, updates
from tmax_jax.inference import server as server_lib
from tmax_jax.models import hf_io

GREEDY = sampling.SamplingParams(temperature=0.0)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
  d1, d2 = tmp_path_factory.mktemp("v0"), tmp_path_factory.mktemp("v1")
  m1 = helpers.save_tiny("qwen3", d1, seed=0)
  m2 = helpers.save_tiny("qwen3", d2, seed=1)  # the "trained" policy: different weights
  cfg, params = hf_io.load_pretrained(d1)
  _, params2 = hf_io.load_pretrained(d2)
  engine = engine_lib.TmaxEngine(
      cfg, engine_lib.EngineConfig(max_concurrent_decodes=4, max_len=512, max_prefill_length=64),
      lambda: params)
  server = server_lib.start_server(engine, server_lib.ServerConfig(port=0))
  yield dict(server=server, m1=m1, m2=m2, params2=params2, d2=d2)
  server.stop()


def test_push_changes_outputs_and_inflight_requests_complete(served):
  server = served["server"]
  prompts = helpers.prompts(3, seed=10)

  async def go():
    async with client_lib.RolloutClient(server.address,
                                        client_lib.ClientConfig(timeout_s=120)) as c:
      before = await c.generate(prompts[0], 16, GREEDY)
      long = [asyncio.create_task(c.generate(p, 400, sampling.SamplingParams(seed=i)))
              for i, p in enumerate(prompts)]
      while (await c.status()).active_requests < len(prompts):
        await asyncio.sleep(0.01)
      await asyncio.sleep(0.2)  # let them stream a few tokens under version 0
      version = await c.update_weights(served["params2"], version=1)
      inflight = await asyncio.gather(*long)
      after = await c.generate(prompts[0], 16, GREEDY)
      return before, version, inflight, after

  before, version, inflight, after = asyncio.run(go())
  assert version == 1
  assert before.token_ids == helpers.hf_greedy(served["m1"], prompts[:1], 16)[0]
  assert after.token_ids == helpers.hf_greedy(served["m2"], prompts[:1], 16)[0]
  assert after.versions == [1] * 16
  assert after.token_ids != before.token_ids
  for out in inflight:
    assert out.finish_reason == "length" and len(out.token_ids) == 400
    v = np.asarray(out.versions)
    assert set(v.tolist()) == {0, 1}, "the push landed while the request was decoding"
    assert np.all(np.diff(v) >= 0)  # one switch, between two decode steps


def test_push_from_checkpoint_path_and_version_checks(served):
  server = served["server"]

  async def go():
    async with client_lib.RolloutClient(server.address,
                                        client_lib.ClientConfig(timeout_s=60)) as c:
      with pytest.raises(client_lib.RolloutError, match="must be greater"):
        await c.update_weights(served["params2"], version=0)
      bad = jax.tree.map(lambda x: x, served["params2"])
      bad["model"]["norm"]["scale"] = np.ones(3, np.float32)
      with pytest.raises(client_lib.RolloutError, match=r"model.*norm.*scale.*shape"):
        await c.update_weights(bad, version=7)
      v = await c.update_weights(path=str(served["d2"]), version=5)
      return v, (await c.status()).version

  assert asyncio.run(go()) == (5, 5)


def test_update_payload_round_trip(served):
  p = served["params2"]
  blob = updates.to_bytes(p)
  assert sum(len(c) for c in updates.chunks(blob, 1000)) == len(blob)
  back = updates.from_bytes(blob, p)
  jax.tree.map(np.testing.assert_array_equal, back, p)
  with pytest.raises(updates.WeightUpdateError, match="msgpack"):
    updates.from_bytes(b"not msgpack", p)
