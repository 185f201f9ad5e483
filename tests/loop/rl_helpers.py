"""The tiny RL job the loop tests share (real tokenizer, procedural tasks, sandboxes, server) and
the parity check of a run against a replay of its batches on another mesh."""

import dataclasses

import jax
import numpy as np

from tmax_jax.agents.episode import EpisodeConfig
from tmax_jax.agents.rollout import RolloutConfig
from tmax_jax.agents.worker import WorkerConfig
from tmax_jax.inference.engine import EngineConfig
from tmax_jax.loop.config import MeshConfig, ModelSpec, RLConfig, ServingConfig
from tmax_jax.tasks.sources import TaskSource
from tmax_jax.train.config import CheckpointConfig, LossConfig, OptimizerConfig, TrainConfig

TINY = dict(
  hidden_size=32,
  intermediate_size=64,
  num_hidden_layers=2,
  num_attention_heads=2,
  num_key_value_heads=2,
  head_dim=16,
  tie_word_embeddings=True,
)
# Adam normalises each element's step to ~lr whatever the gradient's size, so the fp32
# reduction-order noise of a sharded sum reaches the params as ~lr x that noise for elements with
# |g| near eps (and as a flipped full step at eps 1e-8 for |g| ~ 1e-8). A small lr and eps 1e-5
# keep every update a smooth function of the gradient, so params compare at 1e-5.
PARITY_ADAM = OptimizerConfig(learning_rate=1e-4, eps=1e-5, total_steps=8)


def tiny_rl_config(out, steps: int, **changes) -> RLConfig:
  rollout = RolloutConfig(
    group_size=2, prompts_per_batch=2, async_steps=1, max_groups_ahead=2, zero_std_filter=False
  )
  cfg = RLConfig(
    model=ModelSpec(preset="qwen3-0.6b", overrides=TINY, seed=3),
    tasks=TaskSource(families=("write_word",), num_train=4, num_eval=1),
    rollout=rollout,
    episode=EpisodeConfig(
      max_tool_calls=2,
      max_turns=2,
      turn_max_tokens=16,
      max_response_tokens=96,
      command_timeout_s=5.0,
      enable_thinking=False,
    ),
    worker=WorkerConfig(max_parallel_episodes=4),
    # a random tiny model scores 0 on every episode, so DPPO's advantages and gradients are all
    # zero; the SFT loss on the sampled tokens gives every step a gradient for the parity checks
    train=TrainConfig(
      optimizer=PARITY_ADAM,
      loss=LossConfig(policy_loss="sft"),
      checkpoint=CheckpointConfig(save_every=1, keep_last=2, async_save=False),
      global_batch=4,
      logprob_chunk_size=128,
    ),
    serving=ServingConfig(
      engine=EngineConfig(max_concurrent_decodes=4, max_len=384, max_prefill_length=384)
    ),
    mesh=MeshConfig(num_devices=1),
    steps=steps,
    seq_len=384,
    output_dir=str(out),
  )
  return dataclasses.replace(cfg, **changes)


def assert_same_training(metrics_a, params_a, metrics_b, params_b, rtol=1e-5) -> None:
  """Equal losses per step and equal params (fp32, `rtol`; atol 1e-6) of steps that trained."""
  assert [m["step"] for m in metrics_a] == [m["step"] for m in metrics_b]
  assert all(m["loss"] > 0 and m["grad_norm"] > 0 for m in metrics_a), metrics_a
  for a, b in zip(metrics_a, metrics_b, strict=True):
    np.testing.assert_allclose(b["loss"], a["loss"], rtol=rtol, err_msg=f"step {a['step']}")
  flat = jax.tree_util.tree_leaves_with_path(jax.device_get(params_a))
  for (path, a), b in zip(flat, jax.tree.leaves(jax.device_get(params_b)), strict=True):
    np.testing.assert_allclose(b, a, rtol=rtol, atol=1e-6, err_msg=jax.tree_util.keystr(path))
