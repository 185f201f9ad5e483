"""Versioned weight pushes through the Rollout service while requests are in flight."""

import asyncio
import dataclasses

import grpc
import inference_helpers as helpers
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tmax_jax.inference import client as client_lib
from tmax_jax.inference import engine as engine_lib
from tmax_jax.inference import rl_proto, sampling, updates
from tmax_jax.inference import server as server_lib
from tmax_jax.models import hf_io

GREEDY = sampling.SamplingParams(temperature=0.0)
LONG = 2000  # tokens of the requests in flight during a push


@pytest.fixture(scope="module")
def served(tmp_path_factory):
  d1, d2 = tmp_path_factory.mktemp("v0"), tmp_path_factory.mktemp("v1")
  m1 = helpers.save_tiny("qwen3", d1, seed=0)
  m2 = helpers.save_tiny("qwen3", d2, seed=1)  # the "trained" policy: different weights
  cfg, params = hf_io.load_pretrained(d1)
  _, params2 = hf_io.load_pretrained(d2)
  # Long enough that the in-flight requests below outlast a push (helpers.ENGINE's 512 did not
  # always once decode got faster).
  ecfg = engine_lib.EngineConfig(**dict(helpers.ENGINE, max_len=LONG + 64))
  engine = engine_lib.TmaxEngine(cfg, ecfg, lambda: params)
  server = server_lib.start_server(engine, server_lib.ServerConfig(port=0))
  yield dict(server=server, m1=m1, m2=m2, params=params, params2=params2, d2=d2)
  server.stop()


@pytest.mark.slow  # 16 s; the push protocol's tests stay
def test_push_changes_outputs_and_inflight_requests_complete(served):
  server = served["server"]
  prompts = helpers.prompts(3, seed=10)

  async def go():
    async with client_lib.RolloutClient(
      server.address, client_lib.ClientConfig(timeout_s=120)
    ) as c:
      # the module's server as it started (version 0, m1's weights), whichever tests ran before
      assert await c.update_weights(served["params"], version=0, replace=True) == 0
      before = await c.generate(prompts[0], 16, GREEDY)
      long = [
        asyncio.create_task(c.generate(p, LONG, sampling.SamplingParams(seed=i)))
        for i, p in enumerate(prompts)
      ]
      while (await c.status()).active_requests < len(prompts):
        await asyncio.sleep(0.01)
      stats = server.engine.replicas[0].scheduler.stats
      started = stats["decode_steps"]
      while stats["decode_steps"] < started + 3:  # every request has streamed under version 0
        await asyncio.sleep(0.01)
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
    assert out.finish_reason == "length" and len(out.token_ids) == LONG
    v = np.asarray(out.versions)
    assert set(v.tolist()) == {0, 1}, "the push landed while the request was decoding"
    assert np.all(np.diff(v) >= 0)  # one switch, between two decode steps


def _greedy(server, prompt, n=12):
  async def go():
    async with client_lib.RolloutClient(server.address, client_lib.ClientConfig(timeout_s=60)) as c:
      return await c.generate(prompt, n, GREEDY)

  return asyncio.run(go())


async def _raw_push(address: str, messages: list) -> None:
  """Sends hand-made UpdateWeights messages (a sender that breaks the protocol)."""
  async with grpc.aio.insecure_channel(address) as channel:
    call = channel.stream_unary(
      rl_proto.method_path("UpdateWeights"),
      request_serializer=lambda m: m.SerializeToString(),
      response_deserializer=rl_proto.UpdateWeightsResponse.FromString,
    )
    await call(iter(messages), timeout=30)


def _stream(params, version: int, chunk: int = 1000) -> list:
  """The messages RolloutClient.update_weights sends, as a list (to corrupt one of them)."""
  specs = updates.manifest(params)
  out = [
    rl_proto.UpdateWeightsRequest(
      version=version,
      manifest=[rl_proto.TensorSpec(name=s.name, shape=s.shape, dtype=s.dtype) for s in specs],
    )
  ]
  for i, (spec, leaf) in enumerate(zip(specs, updates.named_leaves(params).values(), strict=True)):
    data, crc = updates.tensor_bytes(leaf, spec)
    for offset, piece in updates.chunks(data, chunk):
      out.append(
        rl_proto.UpdateWeightsRequest(
          version=version, tensor=i, offset=offset, data=piece, crc32=crc if offset == 0 else ""
        )
      )
  return out


def test_refused_pushes_name_the_tensor_and_keep_serving(served):
  server, prompt = served["server"], helpers.prompts(1, seed=3)[0]
  before_version = server.driver.version
  before = _greedy(server, prompt)
  p2 = served["params2"]
  name = "model/layers/mlp/down_proj/kernel"
  assert name in updates.named_leaves(p2)

  bad_shape = jax.tree.map(lambda x: x, p2)
  bad_shape["model"]["norm"]["scale"] = np.ones(3, np.float32)
  msgs = _stream(p2, before_version + 1)
  target = next(
    i
    for i, m in enumerate(msgs)
    if m.tensor and m.data and m.offset > 0 and msgs[0].manifest[m.tensor].name == name
  )
  corrupt = list(msgs)
  data = bytearray(corrupt[target].data)
  data[7] ^= 0x01  # one flipped bit in the middle of the tensor
  corrupt[target] = rl_proto.UpdateWeightsRequest(
    version=before_version + 1,
    tensor=corrupt[target].tensor,
    offset=corrupt[target].offset,
    data=bytes(data),
  )
  truncated = msgs[:target]

  async def go():
    async with client_lib.RolloutClient(server.address, client_lib.ClientConfig(timeout_s=60)) as c:
      with pytest.raises(client_lib.RolloutError, match=r"model/norm/scale: shape \(3,\)"):
        await c.update_weights(bad_shape, version=before_version + 1)
    for messages, pattern in (
      (corrupt, f"{name}: checksum mismatch"),
      (truncated, "ended early: tensors .*" + name),
    ):
      with pytest.raises(grpc.aio.AioRpcError, match=pattern) as err:
        await _raw_push(server.address, messages)
      assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION

  asyncio.run(go())
  assert server.driver.version == before_version
  after = _greedy(server, prompt)
  assert after.token_ids == before.token_ids and set(after.versions) == {before_version}


def test_bf16_push_is_rounded_once_and_swapped_whole(served):
  server = served["server"]
  fresh = jax.tree.map(lambda x: np.asarray(x) * 0.5, served["params2"])
  version = server.driver.version + 1

  async def go():
    async with client_lib.RolloutClient(server.address, client_lib.ClientConfig(timeout_s=60)) as c:
      return await c.update_weights(fresh, version=version, dtype="bfloat16")

  assert asyncio.run(go()) == version
  core = server.engine.replicas[0].core
  got = updates.named_leaves(server.engine.load_params()[0].get()[0]["params"])
  for key, want in updates.named_leaves(core.served_layout(fresh)).items():
    rounded = np.asarray(want).astype(jnp.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(got[key]), rounded, err_msg=key)
    assert got[key].dtype == np.float32  # cast to the served dtype


def test_assembler_checks_the_protocol(served):
  p = served["params2"]
  specs = updates.manifest(p)
  asm = updates.TensorStreamAssembler(p)
  with pytest.raises(updates.WeightUpdateError, match="before the manifest"):
    asm.chunk(0, 0, b"", "00000000")
  asm.start(specs)
  with pytest.raises(updates.WeightUpdateError, match=f"{specs[1].name}: must start at offset 0"):
    asm.chunk(1, 0, b"x", "00000000")  # tensor 0 first
  data, crc = updates.tensor_bytes(updates.named_leaves(p)[specs[0].name], specs[0])
  asm.chunk(0, 0, bytes(data[:8]), crc)
  with pytest.raises(updates.WeightUpdateError, match=f"{specs[0].name}: chunk at offset 16"):
    asm.chunk(0, 16, bytes(data[16:24]), "")
  with pytest.raises(updates.WeightUpdateError, match="dtype 'int8'"):
    updates.check_manifest([dataclasses.replace(specs[0], dtype="int8")] + specs[1:], p)
  with pytest.raises(updates.WeightUpdateError, match="missing .*" + specs[-1].name):
    updates.check_manifest(specs[:-1], p)


def test_push_from_checkpoint_path_and_version_checks(served):
  server = served["server"]

  async def go():
    async with client_lib.RolloutClient(server.address, client_lib.ClientConfig(timeout_s=60)) as c:
      v0 = (await c.status()).version
      v = await c.update_weights(path=str(served["d2"]), version=v0 + 5)
      with pytest.raises(client_lib.RolloutError, match=f"older than the served version {v}"):
        await c.update_weights(served["params2"], version=v - 1)
      again = await c.update_weights(served["params2"], version=v)  # a resync: idempotent
      status = (await c.status()).version
      # a restarted trainer's checkpoint replaces the newer version its killed predecessor pushed
      back = await c.update_weights(served["params2"], version=v - 2, replace=True)
      out = await c.generate([1, 2, 3], 4, sampling.SamplingParams(seed=1))
      forward = await c.update_weights(served["params2"], version=v)  # and it goes on from there
      return v0, v, again, status, back, out.versions, forward

  v0, v, again, status, back, versions, forward = asyncio.run(go())
  assert v == again == status == forward == v0 + 5
  assert back == v - 2 and versions == [v - 2] * 4
