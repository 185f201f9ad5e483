"""TMAX-9B RL (recipe.md, paper Table 13, exactly): Qwen3.5-9B, DPPO binary TV delta 0.1, fp32 LM
head, bf16 compute with fp32 master weights, remat; 8 prompts x 32 samples, async 4, active
sampling + zero-std filter, temperature 1.0, AdamW lr 1e-6 constant, grad norm 1.0, 500 steps,
KL beta 0, one optimizer step per batch; prompt <= 2048, per turn <= 16384, response <= 65536
tokens, <= 64 tool calls, 120 s per command, 4 GB sandboxes.

python3 launch/train_rl.py --config=configs/tmax_qwen3_5_9b.py
--config.model.checkpoint=/ckpt/Qwen3.5-9B \
    --config.tasks.directory=/data/tmax15k
"""

from tmax_jax.agents.episode import EpisodeConfig
from tmax_jax.agents.rollout import RolloutConfig
from tmax_jax.agents.worker import WorkerConfig
from tmax_jax.config_dict import to_config_dict
from tmax_jax.loop.config import ModelSpec, RLConfig, ServingConfig, preset_family
from tmax_jax.rl.losses import DPPOHyper
from tmax_jax.train.config import LossConfig, OptimizerConfig, PackingConfig, TrainConfig

PRESET = "qwen3.5-9b"
MAX_PROMPT, MAX_RESPONSE = 2048, 65536
# Training attention: splash on TPU, cuDNN on GPU, blockwise (flash-style, O(T) memory) elsewhere.
MODEL_OVERRIDES = {"remat_policy": "full", "attention_impl": "auto"}


def packing(seq_len: int) -> PackingConfig:
  """Episodes are uneven (a few long, most short): packed micro-batches of 8 x seq_len token slots
  with rows of seq_len / 8 .. seq_len, instead of one row per trajectory padded to seq_len. 8 =
  one longest row per batch shard for up to 8 data x fsdp shards (raise it with the mesh)."""
  return PackingConfig(
    tokens_per_micro_batch=8 * seq_len, row_lengths=tuple(seq_len // d for d in (8, 4, 2, 1))
  )


def recipe(preset: str = PRESET, max_response: int = MAX_RESPONSE) -> RLConfig:
  """The Table 13 run for `preset` (shared by the Qwen3 / Qwen3.6 variants); the tokenizer,
  tool-call syntax and stop tokens follow the preset's model_type."""
  rollout = RolloutConfig(
    group_size=32,
    prompts_per_batch=8,
    async_steps=4,
    zero_std_filter=True,
    active_sampling=True,
    max_groups_ahead=32,
  )
  return RLConfig(
    model=ModelSpec(
      preset=preset,
      param_dtype="float32",
      compute_dtype="bfloat16",
      head_dtype="float32",
      overrides=MODEL_OVERRIDES,
    ),
    rollout=rollout,
    episode=EpisodeConfig(
      harness="bash_tool",
      family=preset_family(preset),
      max_tool_calls=64,
      turn_max_tokens=16384,
      max_response_tokens=max_response,
      command_timeout_s=120.0,
    ),
    worker=WorkerConfig(max_parallel_episodes=64, temperature=1.0),
    train=TrainConfig(
      optimizer=OptimizerConfig(
        learning_rate=1e-6,
        schedule="constant",
        total_steps=500,
        max_grad_norm=1.0,
        weight_decay=0.0,
      ),
      loss=LossConfig(
        policy_loss="dppo",
        hyper=DPPOHyper(divergence="tv", delta=0.1),
        kl_beta=0.0,
        aggregation="token",
      ),
      global_batch=rollout.prompts_per_batch * rollout.group_size,
      epochs=1,
      micro_batches=256,
      temperature=1.0,
      packing=packing(MAX_PROMPT + max_response),
    ),
    serving=ServingConfig(
      max_concurrent_decodes=256,
      max_len=MAX_PROMPT + max_response,
      max_prefill_length=MAX_PROMPT + max_response,
    ),
    advantage="centered",
    steps=500,
    seq_len=MAX_PROMPT + max_response,
    sandbox_memory_mb=4096,
    output_dir=f"runs/tmax_{preset}",
  )


def get_config():
  return to_config_dict(recipe())
