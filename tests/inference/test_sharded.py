"""The engine on its own mesh: 2 data-parallel replicas x 2-way tensor parallelism on 4 fake CPU
devices gives the single-device engine's tokens and logprobs (fp32); weights pushed in the
engine's param shardings are swapped in without a host round trip; the gRPC server runs one
scheduler per replica and routes multi-turn sessions to the replica holding their prefix."""

import asyncio

import inference_helpers as helpers
import jax
import numpy as np
import pytest

from tmax_jax.inference import client as client_lib
from tmax_jax.inference import engine as engine_lib
from tmax_jax.inference import sampling, scheduler
from tmax_jax.inference import server as server_lib
from tmax_jax.models import hf_io

ECFG = engine_lib.EngineConfig(**helpers.ENGINE)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  d1, d2 = tmp_path_factory.mktemp("m1"), tmp_path_factory.mktemp("m2")
  m1, m2 = helpers.save_tiny("qwen3", d1, seed=0), helpers.save_tiny("qwen3", d2, seed=1)
  cfg, params = hf_io.load_pretrained(d1)
  _, params2 = hf_io.load_pretrained(d2)
  single = engine_lib.TmaxEngine(cfg, ECFG, lambda: params)
  sharded = engine_lib.TmaxEngine(
    cfg, ECFG, lambda: params, mesh=engine_lib.serving_mesh(replicas=2, tensor=2)
  )
  for e in (single, sharded):
    for rep in e.replicas:
      rep.start(lambda events: None)
  return dict(cfg=cfg, params=params, params2=params2, m1=m1, m2=m2, single=single, sharded=sharded)


def _requests(prompts):
  greedy = sampling.SamplingParams(temperature=0.0)
  return [
    scheduler.Sequence(i, p, 16, greedy if i % 2 else sampling.SamplingParams(seed=i))
    for i, p in enumerate(prompts)
  ]


def test_params_are_tensor_sharded_and_replicated(setup):
  eng = setup["sharded"]
  q = eng.served_params()["model"]["layers"]["self_attn"]["q_proj"]["kernel"]  # [L,D,N,H]
  assert tuple(q.sharding.spec)[:3] == (None, None, "tensor")
  assert len(q.sharding.device_set) == 2  # replica 0's two devices
  devices = [
    set(r.load_params().get()[0]["params"]["model"]["norm"]["scale"].sharding.device_set)
    for r in eng.replicas
  ]
  assert not devices[0] & devices[1] and len(devices[0] | devices[1]) == 4


@pytest.mark.slow  # 17 s; the sharded server's other tests stay
def test_sharded_replicas_match_single_device(setup):
  prompts = helpers.prompts(8, seed=1)
  one = helpers.collect(setup["single"].replicas[0].scheduler, _requests(prompts))
  eng = setup["sharded"]
  routed = []
  for p, seq in zip(prompts, _requests(prompts), strict=True):  # route + submit, as the driver does
    routed.append(eng.route(p).scheduler)
    routed[-1].submit(seq)
  assert len(set(routed)) == 2  # both replicas serve
  two = helpers.collect(routed, [])
  for i in range(len(prompts)):
    assert [e.token for e in two[i]] == [e.token for e in one[i]]
    np.testing.assert_allclose(
      [e.logprob for e in two[i]], [e.logprob for e in one[i]], rtol=0, atol=1e-5
    )


def test_multi_turn_session_routes_to_its_replica(setup):
  eng = setup["sharded"]
  prompt = helpers.prompts(1, seed=2, lo=30, hi=31)[0]
  first = eng.route(prompt)
  out = helpers.collect(first.scheduler, _requests([prompt]))[0]
  follow_up = prompt + [e.token for e in out] + [5, 6, 7]
  assert eng.route(follow_up) is first
  assert first.scheduler.cached_prefix(follow_up) >= len(prompt)


def test_swap_of_params_in_param_shardings_has_no_host_round_trip(setup):
  eng = setup["sharded"]
  new = jax.device_put(setup["params2"], eng.param_shardings())  # the trainer's side
  try:
    with (
      jax.transfer_guard_host_to_device("disallow_explicit"),
      jax.transfer_guard_device_to_host("disallow_explicit"),
    ):
      eng.swap(new, version=1)
    assert eng.version == 1
    prompts = helpers.prompts(2, seed=3)
    greedy = sampling.SamplingParams(temperature=0.0)
    out = helpers.collect(
      [eng.replicas[0].scheduler, eng.replicas[1].scheduler],
      [scheduler.Sequence(i, p, 8, greedy) for i, p in enumerate(prompts)],
    )
    want = helpers.hf_greedy(setup["m2"], prompts, 8)
    assert [[e.token for e in out[i]] for i in range(2)] == want
    assert {e.version for i in range(2) for e in out[i]} == {1}
  finally:  # the module's engine is shared: the tests after this one (any order) see m1 again
    eng.swap(jax.device_put(setup["params"], eng.param_shardings()), version=0, replace=True)


def test_grpc_server_over_replicas(tmp_path):
  """A fresh 2 x 2 engine behind the real server: concurrent requests, Status counts pages of
  both replicas."""
  model = helpers.save_tiny("qwen3", tmp_path)
  cfg, params = hf_io.load_pretrained(tmp_path)
  engine = engine_lib.TmaxEngine(
    cfg, ECFG, lambda: params, mesh=engine_lib.serving_mesh(replicas=2, tensor=2)
  )
  server = server_lib.start_server(engine, server_lib.ServerConfig(port=0))
  prompts = helpers.prompts(6, seed=4)

  async def go():
    async with client_lib.RolloutClient(
      server.address, client_lib.ClientConfig(timeout_s=120)
    ) as c:
      outs = await asyncio.gather(
        *[c.generate(p, 12, sampling.SamplingParams(temperature=0.0)) for p in prompts]
      )
      # each replica retires a request and publishes its status before sending its last token
      return outs, await c.status()

  try:
    outs, status = asyncio.run(go())
  finally:
    server.stop()
  assert [o.token_ids for o in outs] == helpers.hf_greedy(model, prompts, 12)
  assert status.replicas == 2
  assert status.pages_total == 2 * 4 * 64 and status.pages_used == 0
  assert status.pages_free + status.pages_cached == status.pages_total
