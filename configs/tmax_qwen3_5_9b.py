"""TMAX-9B RL (recipe.md, paper Table 13, exactly): Qwen3.5-9B, DPPO binary TV delta 0.1, fp32 LM
head, bf16 compute with fp32 master weights, remat; 8 prompts x 32 samples, async 4, active
sampling + zero-std filter, temperature 1.0, AdamW lr 1e-6 constant, grad norm 1.0, 500 steps,
KL beta 0, one optimizer step per batch; prompt <= 2048, per turn <= 16384, response <= 65536
tokens, <= 64 tool calls, 120 s per command, 4 GB sandboxes.

Topology (`topology`, read by python3 -m tmax_jax.plan --config=configs/tmax_qwen3_5_9b.py): one
host of 8 x H200 (141 GB), colocated (BENCHMARKS "Memory plan of the recipe configs"). Trainer:
context parallel over all 8 (mesh sequence=8; params and Adam state split over the same 8 by the
CONTEXT_PARALLEL_RULES), packed micro-batches of one 67,584-token row (8,448 tokens per device).
Server on the same devices: 2 replicas x tensor 4 (bench/serving_memory.py: the 9B's 256 episodes'
pages need tensor 4), bf16 params with the fp32 head, 128 slots each over 50,000 pages of 64.

python3 launch/train_rl.py --config=configs/tmax_qwen3_5_9b.py
--config.model.checkpoint=/ckpt/Qwen3.5-9B \
    --config.tasks.directory=/data/tmax15k
"""

import dataclasses

from tmax_jax.agents.episode import EpisodeConfig
from tmax_jax.agents.rollout import RolloutConfig
from tmax_jax.agents.worker import WorkerConfig
from tmax_jax.config_dict import to_config_dict
from tmax_jax.loop.config import (
  MeshConfig,
  ModelSpec,
  RLConfig,
  ServingConfig,
  TopologyConfig,
  preset_family,
)
from tmax_jax.models.config import CONTEXT_PARALLEL_RULES
from tmax_jax.rl.losses import DPPOHyper
from tmax_jax.train.config import LossConfig, OptimizerConfig, PackingConfig, TrainConfig

PRESET = "qwen3.5-9b"
MAX_PROMPT, MAX_RESPONSE = 2048, 65536
# Training attention: splash on TPU, cuDNN on GPU, blockwise (flash-style, O(T) memory) elsewhere.
MODEL_OVERRIDES = {"remat_policy": "full", "attention_impl": "auto"}


def packing(seq_len: int, longest_rows: int = 8) -> PackingConfig:
  """Episodes are uneven (a few long, most short): packed micro-batches of `longest_rows` x seq_len
  token slots with rows of seq_len / 8 .. seq_len, instead of one row per trajectory padded to
  seq_len. `longest_rows` = the data x fsdp shards (one longest row each; each row split over the
  mesh's sequence axis): tokens per device = longest_rows x seq_len / (data x fsdp x sequence)."""
  return PackingConfig(
    tokens_per_micro_batch=longest_rows * seq_len,
    row_lengths=tuple(seq_len // d for d in (8, 4, 2, 1)),
  )


def sized(
  cfg: RLConfig, topology: TopologyConfig, mesh: MeshConfig, serving: dict, longest_rows: int
) -> RLConfig:
  """`cfg` laid out on `topology`: the trainer `mesh` (sequence > 1 takes the context-parallel
  rules), packed micro-batches of `longest_rows` longest rows, the `serving` placement fields.
  Memory only: the optimizer step and every recipe hyperparameter stay as they are."""
  overrides = dict(cfg.model.overrides)
  if mesh.sequence > 1:
    overrides["logical_axis_rules"] = CONTEXT_PARALLEL_RULES
  train = dataclasses.replace(cfg.train, packing=packing(cfg.seq_len, longest_rows))
  return dataclasses.replace(
    cfg,
    model=dataclasses.replace(cfg.model, overrides=overrides),
    train=train,
    serving=dataclasses.replace(cfg.serving, **serving),
    mesh=mesh,
    topology=topology,
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


H200_X8 = TopologyConfig(name="8 x H200 (141 GB), one host", devices=8, device_memory_gb=141.0)
# 2 replicas x tensor 4 x 128 slots = the 256 concurrent episodes; 50,000 pages of 64 tokens per
# replica: the pages 128 episodes hold at a 16k mean in-flight context (bench/serving_memory.py)
SERVING_9B = dict(
  replicas=2,
  tensor=4,
  max_concurrent_decodes=128,
  page_size=64,
  num_pages=50000,
  param_dtype="bfloat16",
)


def get_config():
  return to_config_dict(sized(recipe(), H200_X8, MeshConfig(fsdp=1, sequence=8), SERVING_9B, 1))
