"""The router (tmax_jax/inference/router.py) in front of two real launch/serve.py replicas
(configs/serve_tiny.py, small KV pools) on loopback: session affinity with prefix-cache hits,
admission by KV pages under a burst, a replica killed mid-run, a weight push reaching a replica
started after it."""

import asyncio
import concurrent.futures
import signal
import time

import pytest

from tests.inference import serve_process
from tmax_jax.inference import client as client_lib
from tmax_jax.inference import rl_proto, sampling
from tmax_jax.inference import router as router_lib
from tmax_jax.inference.server import free_port

GREEDY = sampling.SamplingParams(temperature=0.0)
PAGE, PAGES = 8, 64  # per replica: 64 pages of 8 tokens (one max_len sequence)
ENGINE = (
  "--config.serving.engine.max_len=512",
  "--config.serving.engine.max_prefill_length=256",
  "--config.serving.engine.max_concurrent_decodes=8",
  f"--config.serving.engine.page_size={PAGE}",
  f"--config.serving.engine.num_pages={PAGES}",
)
CLIENT = client_lib.ClientConfig(timeout_s=120, max_attempts=3, backoff_s=0.1)


class Replica:
  def __init__(self, tmp, name: str):
    self.port = free_port()
    self.address = f"127.0.0.1:{self.port}"
    self.ready, self.log = tmp / f"{name}.json", tmp / f"{name}.log"
    self.proc = None

  def start(self) -> "Replica":
    self.proc = serve_process.start(self.port, self.ready, self.log, *ENGINE)
    return self

  def stop(self) -> None:
    if self.proc is not None and self.proc.poll() is None:
      self.proc.send_signal(signal.SIGTERM)
      self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
  """(router thread, [replica A, replica B]): one pair for the module."""
  tmp = tmp_path_factory.mktemp("router")
  reps = [Replica(tmp, "a"), Replica(tmp, "b")]
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    list(pool.map(Replica.start, reps))
  router = router_lib.RouterThread(
    router_lib.RouterConfig(replicas=tuple(r.address for r in reps), port=0, poll_s=0.2)
  )
  yield router, reps
  router.stop()
  for r in reps:
    r.stop()


async def _status(address: str):
  async with client_lib.RolloutClient(address, CLIENT) as c:
    return await c.status()


def _session_replica(router, key: str) -> str:
  return router.router.sessions[key][0].address


def test_session_key():
  req = rl_proto.GenerateRequest
  assert router_lib.session_key(req(session_id="s", request_id="e/1")) == "s"
  assert router_lib.session_key(req(request_id="task/3/0/turn7")) == "task/3/0"
  assert router_lib.session_key(req(request_id="single")) == ""
  assert router_lib.parse_replicas("127.0.0.1:1, h:2") == ("127.0.0.1:1", "h:2")
  with pytest.raises(ValueError, match="HOST:PORT"):
    router_lib.parse_replicas("127.0.0.1")


def test_episode_stays_on_one_replica_with_prefix_hits(fleet):
  router, reps = fleet

  async def go():
    prompt, hits, served = list(range(1, 17)), [], set()
    async with client_lib.RolloutClient(router.address, CLIENT) as c:
      for turn in range(20):
        before = {r.address: await _status(r.address) for r in reps}
        out = await c.generate(prompt, 4, GREEDY, session_id="episode-1")
        assert out.finish_reason and len(out.token_ids) >= 1
        where = _session_replica(router, "episode-1")
        served.add(where)
        after = {r.address: await _status(r.address) for r in reps}
        for r in reps:
          b, a = before[r.address], after[r.address]
          moved = a.prefill_tokens + a.cached_prompt_tokens - b.prefill_tokens
          moved -= b.cached_prompt_tokens
          assert (moved > 0) == (r.address == where), (turn, r.address, moved)
        hits.append(after[where].cached_prompt_tokens - before[where].cached_prompt_tokens)
        prompt = prompt + out.token_ids + [100 + turn, 101, 102, 103]
    return hits, served

  hits, served = asyncio.run(go())
  assert len(served) == 1
  assert hits[0] == 0 and all(h >= PAGE for h in hits[1:]), hits


@pytest.mark.slow  # 10 s; the 20-turn episode stays
def test_burst_waits_in_the_router_within_each_page_budget(fleet):
  router, reps = fleet
  n, prompt_len, max_tokens = 16, 100, 28  # 16 pages each: 4 fit a replica, 16 x 16 > 2 x 64
  peak = {r.address: 0 for r in reps}
  waited = []

  async def snapshot():
    rt = router.router
    return rt.waiting, {r.address: sum(f.pages for f in r.flights) for r in rt.replicas}

  async def go():
    async with client_lib.RolloutClient(router.address, CLIENT) as c:
      calls = [
        c.generate([1 + (i % 200)] * prompt_len, max_tokens, GREEDY, session_id=f"burst-{i}")
        for i in range(n)
      ]
      tasks = [asyncio.ensure_future(x) for x in calls]
      while not all(t.done() for t in tasks):
        waiting, reserved = await asyncio.to_thread(router.call, snapshot())
        waited.append(waiting)
        for address, pages in reserved.items():
          peak[address] = max(peak[address], pages)
        for r in reps:
          st = await _status(r.address)
          assert st.pages_used <= st.pages_total == PAGES
        await asyncio.sleep(0.05)
      return await asyncio.gather(*tasks)

  outs = asyncio.run(go())
  assert all(len(o.token_ids) == max_tokens for o in outs)
  assert max(waited) > 0  # some sessions waited in the router for pages
  assert all(0 < p <= PAGES for p in peak.values()), peak  # both used, neither over-committed
  homes = {_session_replica(router, f"burst-{i}") for i in range(n)}
  assert homes == {r.address for r in reps}


@pytest.mark.slow
def test_killed_replica_fails_its_requests_and_a_restarted_one_gets_the_weights(fleet):
  router, reps = fleet
  from tmax_jax.loop.config import ModelSpec
  from tmax_jax.loop.policy import model_from_spec

  serve_tiny = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128}
  serve_tiny |= {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
  _, params_fn = model_from_spec(ModelSpec(overrides=dict(serve_tiny, head_dim=16), seed=1))
  params = params_fn()

  async def go():
    async with client_lib.RolloutClient(router.address, CLIENT) as c:
      long = {  # 63 pages each: one per replica
        k: asyncio.ensure_future(c.generate([5, 6, 7], 500, GREEDY, session_id=k))
        for k in ("long-0", "long-1")
      }
      deadline = time.monotonic() + 60
      while not all(k in router.router.sessions for k in long):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
      homes = {k: _session_replica(router, k) for k in long}
      assert sorted(homes.values()) == sorted(r.address for r in reps)
      victim = next(r for r in reps if r.address == homes["long-1"])
      assert not long["long-1"].done()
      victim.proc.send_signal(signal.SIGKILL)
      with pytest.raises(client_lib.ServerUnavailableError, match="lost"):
        await long["long-1"]
      assert len((await long["long-0"]).token_ids) == 500  # the other replica's goes on
      for i in range(4):  # new sessions go to the survivor
        await c.generate([9, i], 4, GREEDY, session_id=f"after-{i}")
        assert _session_replica(router, f"after-{i}") == homes["long-0"]
      assert await c.update_weights(params, version=5) == 5  # reaches the survivor only
      victim.proc.wait(timeout=30)
      await asyncio.to_thread(victim.start)  # boots on seed-0 weights at version 0
      deadline = time.monotonic() + 60
      while sum(s.live for s in (await c.status()).replica_status) < 2:  # rejoined, resynced
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
      outs = []
      for r in reps:
        async with client_lib.RolloutClient(r.address, CLIENT) as direct:
          assert (await direct.status()).version == 5
          outs.append(await direct.generate([3, 1, 4, 1, 5], 8, GREEDY))
      return outs

  a, b = asyncio.run(go())
  assert a.token_ids == b.token_ids and set(a.versions) == set(b.versions) == {5}
