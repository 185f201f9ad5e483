"""The CPU demo (README's main command): tiny Qwen3-shaped model with the real Qwen3 tokenizer,
SFT on oracle trajectories of procedural `line_tool` tasks, then DPPO RL in bubblewrap sandboxes
through the in-process JetStream server, with held-out evaluations after each phase.

python3 launch/demo.py --config=configs/demo_cpu.py [--config.seeds='(0,1,2)']
"""

from tmax_jax.agents import EpisodeConfig, RolloutConfig
from tmax_jax.agents.worker import WorkerConfig
from tmax_jax.config_dict import to_config_dict
from tmax_jax.inference.engine import EngineConfig
from tmax_jax.loop import DemoConfig, ModelSpec, ServingConfig
from tmax_jax.tasks.sources import TaskSource
from tmax_jax.train import LossConfig, OptimizerConfig, TrainConfig

TINY = dict(
  hidden_size=64,
  intermediate_size=192,
  num_hidden_layers=2,
  num_attention_heads=4,
  num_key_value_heads=2,
  head_dim=16,
  tie_word_embeddings=True,
)
# SFT is budgeted to teach the harness format and most of the task (held-out pass ~0.72-0.81 at
# T = 1 over seeds 0-2, BENCHMARKS.md); RL then has to make the policy reliable under sampling.
SFT_STEPS, RL_STEPS = 70, 20
# Sampling temperature of rollouts, evaluations AND the trainer's logprobs (they must agree for
# DPPO's ratio): the recipe's 1.0.
TEMPERATURE = 1.0
SFT_LOSS_TOKENS = 64  # the oracle trajectories' assistant tokens (two turns), one per packed row
LOSS_TOKENS = 2 * 40  # max_turns x turn_max_tokens: every generated token of a trajectory fits


def get_config():
  rollout = RolloutConfig(
    group_size=8, prompts_per_batch=4, async_steps=1, max_groups_ahead=2, max_attempts_per_batch=12
  )
  cfg = DemoConfig(
    model=ModelSpec(preset="qwen3-0.6b", overrides=TINY),
    tasks=TaskSource(families=("line_tool",), difficulty=0, num_train=64, num_eval=16),
    episode=EpisodeConfig(
      max_tool_calls=2,
      max_turns=2,
      turn_max_tokens=40,
      max_response_tokens=192,
      command_timeout_s=10.0,
      enable_thinking=False,
    ),
    sft_train=TrainConfig(
      optimizer=OptimizerConfig(
        learning_rate=1e-2,
        schedule="constant",
        warmup_steps=10,
        total_steps=SFT_STEPS,
        weight_decay=0.0,
      ),
      loss=LossConfig(policy_loss="sft"),
      global_batch=8,
      logprob_chunk_size=128,
      loss_tokens_per_row=SFT_LOSS_TOKENS,
    ),
    sft_steps=SFT_STEPS,
    rl_train=TrainConfig(
      # eps 1e-5, not 1e-8: with tied embeddings every one of the 152k vocabulary rows gets a
      # tiny gradient through the softmax, and Adam at eps 1e-8 turns those into full-size
      # steps; negative-advantage tokens then lift the whole vocabulary and entropy blows up
      # (seen at lr 2e-3: held-out pass 0.75 -> 0.22 in 16 steps).
      optimizer=OptimizerConfig(learning_rate=1e-3, eps=1e-5, total_steps=RL_STEPS),
      global_batch=rollout.prompts_per_batch * rollout.group_size,
      logprob_chunk_size=128,
      loss_tokens_per_row=LOSS_TOKENS,
      temperature=TEMPERATURE,
    ),
    rl_steps=RL_STEPS,
    rollout=rollout,
    worker=WorkerConfig(max_parallel_episodes=8, temperature=TEMPERATURE),
    serving=ServingConfig(
      engine=EngineConfig(max_concurrent_decodes=16, max_len=512, max_prefill_length=512)
    ),
    seq_len=512,
    eval_samples=4,
    seeds=(0,),
    output_dir="runs/demo_cpu",
  )
  return to_config_dict(cfg)
