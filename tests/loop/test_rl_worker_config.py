"""RL concurrency and request timeouts (issue 45 point 4): the shipped RL configs keep their
server full (episodes in flight = its slots, as many as the batch x (1 + async) allows) and give
each model request the time of the longest legal turn; explicit values are kept."""

import dataclasses
import pathlib

import pytest

from tmax_jax.agents.episode import EpisodeConfig
from tmax_jax.agents.worker import EpisodeWorker, WorkerConfig, request_timeout_s
from tmax_jax.config_dict import from_config_dict, load_config_file
from tmax_jax.loop.config import RLConfig
from tmax_jax.tasks.runner import RunnerConfig

CONFIGS = pathlib.Path(__file__).parents[2] / "configs"
RL_CONFIGS = ("tmax_qwen3_5_9b", "tmax_qwen3_5_9b_grpo", "tmax_qwen3_8b", "tmax_qwen3_6_27b")
DECODE_FLOOR_TOK_S = 8.0  # the floor the shipped timeouts assume (WorkerConfig.decode_floor_tok_s)


@pytest.mark.parametrize("name", RL_CONFIGS)
def test_shipped_rl_configs_fill_the_server_and_time_a_legal_turn(name):
  cfg = from_config_dict(RLConfig, load_config_file(CONFIGS / f"{name}.py"))
  hosts = cfg.topology.processes
  w = cfg.rollout_worker(hosts)
  r, ep = cfg.rollout, cfg.episode
  slots = cfg.serving.replicas * cfg.serving.engine.max_concurrent_decodes  # per process
  batch = r.prompts_per_batch // hosts * r.group_size
  assert w.max_parallel_episodes == min(slots, batch * (1 + r.async_steps)) == slots
  assert w.max_parallel_episodes * hosts == r.prompts_per_batch * r.group_size == 256
  # the scheduler holds enough groups to keep them busy
  assert (r.prompts_per_batch // hosts + r.max_groups_ahead) * r.group_size >= slots
  # a request covers the turn's generation (at the floor) and the conversation's prefill, not a
  # command: the turn alone takes 16384 / 8 = 2048 s, over three times the old fixed 600 s
  legal_turn_s = ep.turn_max_tokens / DECODE_FLOOR_TOK_S
  assert w.decode_floor_tok_s == DECODE_FLOOR_TOK_S and ep.turn_max_tokens == 16384
  assert w.request_timeout_s >= legal_turn_s + (ep.max_prompt_tokens + ep.max_response_tokens) / (
    w.prefill_floor_tok_s
  )
  assert w.request_timeout_s < ep.wall_time_s  # a request never outlives the episode's budget
  assert (cfg.worker.max_parallel_episodes, cfg.worker.request_timeout_s) == (0, 0.0)  # derived


def test_explicit_values_are_kept_and_the_rule_is_stated():
  cfg = RLConfig(worker=WorkerConfig(max_parallel_episodes=3, request_timeout_s=42.0))
  w = cfg.rollout_worker()
  assert (w.max_parallel_episodes, w.request_timeout_s) == (3, 42.0)
  small = dataclasses.replace(cfg, worker=WorkerConfig(max_parallel_episodes=0))
  # default RLConfig: 1 replica x 8 slots, but only 1 x 2 x (1 + 1) episodes may be held
  rollout = dataclasses.replace(small.rollout, prompts_per_batch=1, group_size=2, async_steps=1)
  assert dataclasses.replace(small, rollout=rollout).rollout_worker().max_parallel_episodes == 4
  # more episodes than slots (explicit): a request may queue behind two turns of others
  busy = dataclasses.replace(cfg, worker=WorkerConfig(max_parallel_episodes=17))
  alone = request_timeout_s(busy.worker, busy.episode)
  assert busy.rollout_worker().request_timeout_s == 3 * alone  # 17 episodes over 8 slots
  ep = EpisodeConfig(turn_max_tokens=800, max_prompt_tokens=1000, max_response_tokens=9000)
  floors = WorkerConfig(decode_floor_tok_s=10.0, prefill_floor_tok_s=1000.0, request_wait_s=5.5)
  assert request_timeout_s(floors, ep) == 80 + 10 + 5.5 + 0.5  # rounded up to whole seconds


def test_derived_fields_are_refused_where_nothing_derives_them():
  with pytest.raises(ValueError, match="max_parallel_episodes=0 is derived by the RL job"):
    EpisodeWorker(None, _Tok(), EpisodeConfig(family="qwen3"), RunnerConfig(), WorkerConfig(0))
  with pytest.raises(ValueError, match="decode_floor_tok_s=0"):
    WorkerConfig(decode_floor_tok_s=0)


class _Tok:
  eos_token = "<|im_end|>"

  def convert_tokens_to_ids(self, token):
    return 151645
