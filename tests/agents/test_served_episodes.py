"""The scored-episode path against a gRPC Rollout server through the real RolloutClient, episode
worker, harness, sandbox and group scheduler (issue 45): a legal slow turn is not dropped (the
request timeout is derived from the turn's caps), and a prompt over the caps (the episode's
max_prompt_tokens, the server's max_prefill_length) ends as the scoring rules say: kind
prompt_too_long, never scored, its group dropped and never rerun."""

import asyncio
import time
import types

import grpc
import pytest

from tests.conftest import require_base_rootfs
from tmax_jax.agents import rollout, shell, worker
from tmax_jax.agents.episode import EpisodeConfig
from tmax_jax.formats.tokens import encode
from tmax_jax.inference import client as client_lib
from tmax_jax.inference import engine as engine_lib
from tmax_jax.inference import rl_proto
from tmax_jax.inference import server as server_lib
from tmax_jax.tasks.procedural import registry
from tmax_jax.tasks.runner import RunnerConfig
from tmax_jax.tokenizers import load_tokenizer

RUNNER = RunnerConfig(memory_mb=2048)
# Scaled-down caps: a 64-token turn at a 16 tok/s decode floor (4 s) + a 512-token conversation at
# 1,000 tok/s (0.5 s), no wait: requests get ceil(4.5) = 5 s. The server takes 2.5 s per answer.
EPISODE = EpisodeConfig(family="qwen3", max_turns=2, turn_max_tokens=64, max_response_tokens=512)
FLOORS = dict(decode_floor_tok_s=16.0, prefill_floor_tok_s=1000.0, request_wait_s=0.0)
ANSWER_S = 2.5


@pytest.fixture(scope="module")
def tok():
  return load_tokenizer("qwen3")


class SlowServicer(server_lib.RolloutServicer):
  """The Rollout service's handlers with a Generate that answers `reply` after `delay_s`."""

  def __init__(self, reply: list[int], delay_s: float):
    super().__init__(None, None, "slow")
    self.reply, self.delay_s, self.requests = reply, delay_s, []

  async def Generate(self, req, context):
    self.requests.append(time.monotonic())
    await asyncio.sleep(self.delay_s)
    n = len(self.reply)
    yield rl_proto.GenerateResponse(
      token_ids=self.reply,
      logprobs=[-0.5] * n,
      policy_versions=[0] * n,
      finish_reason="stop",
      instance_id="slow",
    )


def _capped_servicer(max_prefill_length: int) -> server_lib.RolloutServicer:
  """The real Rollout service over an engine of these lengths: a request over them is refused
  before it reaches the (absent) driver."""
  cfg = engine_lib.EngineConfig(
    max_concurrent_decodes=1, max_len=4096, max_prefill_length=max_prefill_length
  )
  engine = types.SimpleNamespace(cfg=cfg, model_cfg=types.SimpleNamespace(vocab_size=151936))
  return server_lib.RolloutServicer(None, engine, "capped")


async def _serve(servicer) -> tuple[grpc.aio.Server, str]:
  server = grpc.aio.server()
  server.add_generic_rpc_handlers((servicer.generic_handler(),))
  port = server.add_insecure_port("127.0.0.1:0")
  await server.start()
  return server, f"127.0.0.1:{port}"


async def _trial(address, tok, episode_cfg, worker_cfg, task):
  async with client_lib.RolloutClient(address) as client:
    w = worker.EpisodeWorker.served(client, tok, episode_cfg, RUNNER, worker_cfg)
    try:
      return await w.trial(task, 0, 0)
    finally:
      await w.aclose()


def test_a_legal_slow_turn_is_not_dropped(tok):
  """A turn within the caps that takes 2.5 s: scored with the derived 5 s request timeout; the
  old rule (a fixed timeout shorter than the turn, here 1 s) dropped it as a "server" failure."""
  require_base_rootfs()
  task = registry.build_task("write_word", 0, 0)
  derived = worker.WorkerConfig(max_parallel_episodes=1, **FLOORS)
  assert worker.request_timeout_s(derived, EPISODE) == 5.0
  fixed = worker.WorkerConfig(max_parallel_episodes=1, request_timeout_s=1.0, **FLOORS)
  submit = encode(tok, shell.BASH_TOOL.submit_text(tok, EPISODE) + tok.eos_token)
  assert len(submit) <= EPISODE.turn_max_tokens

  async def go():
    servicer = SlowServicer(submit, ANSWER_S)
    server, address = await _serve(servicer)
    try:
      return await asyncio.gather(
        _trial(address, tok, EPISODE, derived, task), _trial(address, tok, EPISODE, fixed, task)
      )
    finally:
      await server.stop(None)

  slow, cut = asyncio.run(go())
  assert slow.error is None and slow.failure == "", slow.error
  ep = slow.result(task.name)
  assert ep.status == "submitted" and ep.num_turns == 1 and ep.reward_reason  # scored
  assert ep.trajectory.loss_mask.count(1) == len(submit)
  assert isinstance(cut.error, client_lib.ServerUnavailableError) and cut.episode is None
  assert cut.error.kind == "server" and "DEADLINE_EXCEEDED" in str(cut.error)


def _run_group(address, tok, episode_cfg, task):
  """One group of one episode through the scheduler (on_failure rerun: a retryable failure would
  be run again) -> the scheduler's stats and records."""
  cfg = rollout.RolloutConfig(
    group_size=1,
    prompts_per_batch=1,
    async_steps=0,
    max_groups_ahead=0,
    on_failure="rerun",
    group_retries=2,
  )
  wcfg = worker.WorkerConfig(max_parallel_episodes=1, **FLOORS)

  async def go():
    async with client_lib.RolloutClient(address) as client:
      w = worker.EpisodeWorker.served(client, tok, episode_cfg, RUNNER, wcfg)
      sched = rollout.GroupScheduler(iter([task]), w, cfg)
      try:
        with pytest.raises(rollout.TasksExhausted):
          await sched.next_batch(trainer_version=0)
      finally:
        await sched.close()
        await w.aclose()
    return sched

  return go()


def test_an_over_long_prompt_is_dropped_never_scored_nor_rerun(tok):
  """The first prompt over episode.max_prompt_tokens (refused before any request), and one over
  the server's max_prefill_length (the server refuses it: OUT_OF_RANGE -> ContextTooLongError):
  both end the episode as prompt_too_long, a failure that drops its group without a rerun."""
  require_base_rootfs()
  task = registry.build_task("write_word", 0, 0)
  capped_episode = EpisodeConfig(family="qwen3", max_prompt_tokens=64)

  async def go():
    slow = SlowServicer([tok.convert_tokens_to_ids(tok.eos_token)], 0.0)
    capped = _capped_servicer(64)
    (s1, a1), (s2, a2) = await _serve(slow), await _serve(capped)
    try:
      by_episode, by_server = await asyncio.gather(
        _run_group(a1, tok, capped_episode, task), _run_group(a2, tok, EPISODE, task)
      )
    finally:
      await s1.stop(None)
      await s2.stop(None)
    return slow.requests, by_episode, by_server

  requests, by_episode, by_server = asyncio.run(go())
  assert requests == []  # refused before the model was asked
  for sched, says in ((by_episode, "max_prompt_tokens=64"), (by_server, "max_prefill_length=64")):
    stats = dict(sched.stats)
    assert stats["episodes_dropped_prompt_too_long"] == 1, stats
    assert stats["groups_dropped_prompt_too_long"] == 1, stats
    assert not any(k.startswith("groups_retried") for k in stats), stats
    (record,) = sched.records
    assert record["fate"] == "dropped_prompt_too_long" and record["episodes"] == []
    (failure,) = record["failures"]
    assert failure["kind"] == "prompt_too_long" and not failure["retryable"]
    assert says in failure["message"], failure
