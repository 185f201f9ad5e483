"""The CPU demo (README's main command): tiny Qwen3-shaped model with the real Qwen3 tokenizer,
SFT on oracle trajectories of procedural `write_word` tasks, then DPPO RL in bubblewrap sandboxes
through the in-process JetStream server, with held-out evaluations after each phase.

python3 launch/demo.py --config=configs/demo_cpu.py [--config.seeds='(0,1,2)']
"""

from tmax_jax.agents.episode import EpisodeConfig
from tmax_jax.agents.rollout import RolloutConfig
from tmax_jax.agents.worker import WorkerConfig
from tmax_jax.config_dict import to_config_dict
from tmax_jax.loop.config import DemoConfig, ModelSpec, ServingConfig, TaskSource
from tmax_jax.train.config import LossConfig, OptimizerConfig, TrainConfig

TINY = dict(hidden_size=64, intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, tie_word_embeddings=True)
SFT_STEPS, RL_STEPS = 150, 10
# Sampling temperature of rollouts, evaluations AND the trainer's logprobs (they must agree for
# DPPO's ratio). Below 1 because a tiny model after a few minutes of SFT still spreads mass over
# the 152k-token vocabulary; at T = 1 nearly no episode succeeds and RL gets no signal.
TEMPERATURE = 0.5
LOSS_TOKENS = 3 * 40  # max_turns x turn_max_tokens: every generated token of a trajectory fits


def get_config():
  rollout = RolloutConfig(group_size=8, prompts_per_batch=2, async_steps=1, max_groups_ahead=2,
                          max_attempts_per_batch=12)
  cfg = DemoConfig(
      model=ModelSpec(preset="qwen3-0.6b", overrides=TINY),
      tokenizer="qwen3",
      tasks=TaskSource(families=("write_word",), difficulty=0, num_train=64, num_eval=16),
      episode=EpisodeConfig(family="qwen3", max_tool_calls=2, max_turns=3, turn_max_tokens=40,
                            max_response_tokens=192, command_timeout_s=10.0,
                            enable_thinking=False),
      sft_train=TrainConfig(
          optimizer=OptimizerConfig(learning_rate=5e-3, schedule="cosine", warmup_steps=10,
                                    total_steps=SFT_STEPS, weight_decay=0.0),
          loss=LossConfig(policy_loss="sft"), global_batch=8, logprob_chunk_size=128,
          loss_tokens_per_row=LOSS_TOKENS),
      sft_steps=SFT_STEPS,
      rl_train=TrainConfig(
          optimizer=OptimizerConfig(learning_rate=2e-3, total_steps=RL_STEPS),
          global_batch=rollout.prompts_per_batch * rollout.group_size, logprob_chunk_size=128,
          loss_tokens_per_row=LOSS_TOKENS, temperature=TEMPERATURE),
      rl_steps=RL_STEPS,
      rollout=rollout,
      worker=WorkerConfig(max_parallel_episodes=8, temperature=TEMPERATURE),
      serving=ServingConfig(max_concurrent_decodes=16, max_len=512, max_prefill_length=512),
      seq_len=512,
      eval_samples=4,
      seeds=(0,),
      output_dir="runs/demo_cpu",
  )
  return to_config_dict(cfg)
