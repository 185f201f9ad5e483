"""End to end through the real gRPC server (in process, 127.0.0.1): parity with transformers,
DPPO logprob invariant, weight pushes, concurrency, JetStream's own Decode, bad requests."""

import asyncio
import functools
import time

import grpc
import inference_helpers as helpers
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tmax_jax import formats
from tmax_jax.agents import episode
from tmax_jax.inference import client as client_lib
from tmax_jax.inference import engine as engine_lib
from tmax_jax.inference import sampling
from tmax_jax.inference import server as server_lib
from tmax_jax.models import hf_io, logprobs, registry

GREEDY = sampling.SamplingParams(temperature=0.0)
ENGINE = engine_lib.EngineConfig(**helpers.ENGINE)


class Served:
  """A model served in-process: its config/params (for trainer-side checks) and its address."""

  def __init__(self, ckpt, engine_cfg=ENGINE, **overrides):
    self.cfg, self.params = hf_io.load_pretrained(ckpt, **overrides)
    self.engine = engine_lib.TmaxEngine(self.cfg, engine_cfg, lambda: self.params)
    self.server = server_lib.start_server(self.engine, server_lib.ServerConfig(port=0))
    self.address = self.server.address

  def client(self, **kw):
    return client_lib.RolloutClient(self.address, client_lib.ClientConfig(**kw))


@pytest.fixture(scope="module", params=["qwen2", "qwen3"])
def served(request, tiny_ckpts):
  ckpt, torch_model = tiny_ckpts[request.param]
  s = Served(ckpt)
  s.torch_model = torch_model
  yield s
  s.server.stop()


def _generate_all(address, prompts, max_tokens, params=GREEDY, **kw):
  async def go():
    async with client_lib.RolloutClient(address, client_lib.ClientConfig(timeout_s=120)) as c:
      return await asyncio.gather(*[c.generate(p, max_tokens, params, **kw) for p in prompts])

  return asyncio.run(go())


def test_greedy_matches_transformers_through_grpc(served):
  # 6 prompts of different lengths on 4 slots: exercises slot reuse (continuous batching) too.
  prompts = helpers.prompts(6, seed=1)
  outs = _generate_all(served.address, prompts, 64)
  ref = helpers.hf_greedy(served.torch_model, prompts, 64)
  for p, o, r in zip(prompts, outs, ref, strict=True):
    assert o.finish_reason == "length"
    assert o.token_ids == r, f"prompt length {len(p)}"
    assert o.versions == [0] * 64


@functools.cache
def _trainer_fn(cfg, temperature):
  """The trainer's path, jitted once per (cfg, T): full forward without cache, chunked
  token_logprobs. seq [1,P] is right-padded (segment 0), which cannot affect earlier positions."""
  model = registry.build_model(cfg)

  @jax.jit
  def fn(params, seq, n):
    t = seq.shape[1]
    seg = (jnp.arange(t)[None] < n).astype(jnp.int32)
    hidden, _ = model.apply({"params": params}, seq, jnp.arange(t)[None], seg)
    lp, _ = logprobs.token_logprobs(
      hidden[:, :-1],
      registry.head_weight(params, cfg),
      seq[:, 1:],
      chunk_size=16,
      head_dtype=cfg.dtypes.head,
      temperature=temperature,
    )
    return lp[0]

  return fn


def _trainer_logprobs(cfg, params, prompt, completion, temperature, pad_to=128):
  """logp of each completion token under the trainer's computation -> [len(completion)]."""
  ids = prompt + completion
  seq = np.zeros((1, max(pad_to, len(ids))), np.int32)
  seq[0, : len(ids)] = ids
  lp = _trainer_fn(cfg, float(temperature))(params, jnp.asarray(seq), len(ids))
  return np.asarray(lp[len(prompt) - 1 : len(ids) - 1])


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_server_logprobs_equal_trainer_logprobs(served, temperature):
  prompts = helpers.prompts(3, seed=2)
  sp = sampling.SamplingParams(temperature=temperature, seed=11)
  outs = _generate_all(served.address, prompts, 24, sp)
  for p, o in zip(prompts, outs, strict=True):
    ref = _trainer_logprobs(served.cfg, served.params, p, o.token_ids, temperature)
    np.testing.assert_allclose(np.asarray(o.logprobs), ref, rtol=0, atol=1e-4)


def test_sampling_is_seeded_per_request(served):
  p = helpers.prompts(1, seed=3)
  a = _generate_all(served.address, p * 2, 16, sampling.SamplingParams(seed=5))
  b = _generate_all(served.address, p, 16, sampling.SamplingParams(seed=6))
  assert a[0].token_ids == a[1].token_ids  # same seed, different slots -> same stream
  assert a[0].token_ids != b[0].token_ids


def test_stop_tokens_end_the_stream(served):
  p = helpers.prompts(1, seed=4)
  free = _generate_all(served.address, p, 32)[0]
  stop = free.token_ids[5]
  first = free.token_ids.index(stop)
  out = _generate_all(served.address, p, 32, stop_token_ids=[stop])[0]
  assert out.finish_reason == "stop"
  assert (
    out.token_ids == free.token_ids[: first + 1]
  )  # the stop token is returned (RL trains on it)


def test_multi_turn_token_prompt_continuation(served):
  """Turn 2 = turn-1 prompt + completion + observation tokens, sent as token ids."""
  turn1 = helpers.prompts(1, seed=5)[0]
  out1 = _generate_all(served.address, [turn1], 12)[0]
  turn2 = turn1 + out1.token_ids + [7, 8, 9]
  out2 = _generate_all(served.address, [turn2], 20)[0]
  assert out2.token_ids == helpers.hf_greedy(served.torch_model, [turn2], 20)[0]


def test_64_concurrent_requests_complete(served):
  prompts = helpers.prompts(64, seed=6, hi=20)
  start = time.monotonic()
  outs = _generate_all(served.address, prompts, 12, sampling.SamplingParams(seed=1))
  assert all(len(o.token_ids) == 12 and o.finish_reason == "length" for o in outs)
  assert all(np.all(np.isfinite(o.logprobs)) and max(o.logprobs) <= 0 for o in outs)
  assert time.monotonic() - start < 120


def test_bad_request_is_rejected_with_a_clear_error(served):
  async def go():
    async with served.client(timeout_s=10) as c:
      with pytest.raises(client_lib.RolloutError, match="max_prefill_length"):
        await c.generate(list(range(1, 100)), 4)
      with pytest.raises(client_lib.RolloutError, match="outside the vocabulary"):
        await c.generate([1, 10_000], 4)
      with pytest.raises(client_lib.RolloutError, match="max_len"):
        await c.generate([1, 2], 1000)

  asyncio.run(go())


def test_top_logprobs_through_grpc_and_status_pages(served):
  prompt = helpers.prompts(1, seed=8)[0]

  async def go():
    async with served.client(timeout_s=60) as c:
      out = await c.generate(prompt, 6, sampling.SamplingParams(seed=3), top_logprobs=3)
      plain = await c.generate(prompt, 6, sampling.SamplingParams(seed=3))
      with pytest.raises(client_lib.RolloutError, match="max_topk"):
        await c.generate(prompt, 2, top_logprobs=5)
      return out, plain, await c.status()

  out, plain, status = asyncio.run(go())
  assert out.token_ids == plain.token_ids and plain.topk_ids == []
  assert len(out.topk_ids) == len(out.topk_logprobs) == 6
  for tok, lp, ids, lps in zip(
    out.token_ids, out.logprobs, out.topk_ids, out.topk_logprobs, strict=True
  ):
    assert len(ids) == 3 and lps == sorted(lps, reverse=True)
    assert lps[0] >= lp and (tok not in ids or abs(lps[ids.index(tok)] - lp) < 1e-6)
  traj = formats.TokenTrajectory(eos_id=0)
  traj.add_prompt(prompt)
  episode.add_generated(traj, out)  # the rollout's trajectory carries the top-K to the batch
  assert traj.topk_ids == [[]] * len(prompt) + out.topk_ids
  assert traj.topk_logprobs[len(prompt) :] == out.topk_logprobs
  assert status.max_topk == 4 and status.page_size == 8
  client_lib.check_top_logprobs(status, 4, served.address)  # what the RL loop checks at start
  with pytest.raises(ValueError, match="worker.top_logprobs=5 .* max_topk=4"):
    client_lib.check_top_logprobs(status, 5, served.address)
  assert status.pages_used == 0 and status.pages_free + status.pages_cached == status.pages_total
  assert status.cached_prompt_tokens > 0  # the second request found the first one's prompt


def test_jetstream_decode_and_health_check_still_served(served):
  from jetstream.core.proto import jetstream_pb2, jetstream_pb2_grpc

  prompt = helpers.prompts(1, seed=7)[0]
  with grpc.insecure_channel(served.address) as ch:
    stub = jetstream_pb2_grpc.OrchestratorStub(ch)
    assert stub.HealthCheck(jetstream_pb2.HealthCheckRequest(), timeout=10).is_live
    req = jetstream_pb2.DecodeRequest(
      token_content=jetstream_pb2.DecodeRequest.TokenContent(token_ids=prompt), max_tokens=10
    )
    ids = [
      t for r in stub.Decode(req, timeout=60) for s in r.stream_content.samples for t in s.token_ids
    ]
  # The engine's default sampling is greedy.
  assert ids == helpers.hf_greedy(served.torch_model, [prompt], 10)[0]


def test_jetstream_text_request_without_tokenizer_fails_clearly(served):
  from jetstream.core.proto import jetstream_pb2, jetstream_pb2_grpc

  with grpc.insecure_channel(served.address) as ch:
    stub = jetstream_pb2_grpc.OrchestratorStub(ch)
    req = jetstream_pb2.DecodeRequest(
      text_content=jetstream_pb2.DecodeRequest.TextContent(text="hello"), max_tokens=4
    )
    with pytest.raises(grpc.RpcError) as err:
      list(stub.Decode(req, timeout=30))
    assert "tokenizer_path" in err.value.details()
    assert stub.HealthCheck(jetstream_pb2.HealthCheckRequest(), timeout=10).is_live  # still up
