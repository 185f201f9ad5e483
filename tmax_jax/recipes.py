"""The recipe's runs (recipe.md) as typed configs; `configs/*.py` select one and override fields.

RL (paper Table 13, exactly): DPPO binary TV delta 0.1, fp32 LM head, bf16 compute with fp32 master
weights, remat; 8 prompts x 32 samples, async 4, active sampling + zero-std filter, temperature
1.0, AdamW lr 1e-6 constant, grad norm 1.0, 500 steps, KL beta 0, one optimizer step per batch;
prompt <= 2048, per turn <= 16384, response <= 65536 tokens (32768 for Qwen3-8B), <= 64 tool calls,
120 s per command, tests under max(task, 600 s), 4 GB sandboxes. Episodes in flight fill the
server's slots; a model request may take as long as the longest legal turn (WorkerConfig).
SFT: TMAX's (Qwen3-8B: lr 2e-5 linear, warmup 3%, wd 0, 2 epochs, global batch 128, 64k tokens)
and TerminalHorizon's (Qwen3.5-27B: AdamW lr 1e-5, wd 0.1, cosine, 5% warmup).

A run is a recipe laid out on a topology (`sized`): the trainer mesh, packed micro-batches and the
serving placement change memory only, never the optimizer step (BENCHMARKS "Memory plan of the
recipe configs"; check a layout with `python3 -m tmax_jax.plan --config=configs/X.py`).
"""

from __future__ import annotations

import dataclasses

from tmax_jax.agents.episode import EpisodeConfig
from tmax_jax.agents.rollout import RolloutConfig
from tmax_jax.agents.worker import WorkerConfig
from tmax_jax.inference.engine import EngineConfig
from tmax_jax.loop.config import (
  MeshConfig,
  ModelSpec,
  RLConfig,
  ServingConfig,
  SFTConfig,
  TopologyConfig,
)
from tmax_jax.models.config import CONTEXT_PARALLEL_RULES
from tmax_jax.rl.losses import DPPOHyper
from tmax_jax.tasks.runner import RunnerConfig
from tmax_jax.train.config import (
  LossConfig,
  OptimizerConfig,
  PackingConfig,
  TrainConfig,
)

MAX_PROMPT = 2048
# Training attention: splash on TPU, cuDNN on GPU, blockwise (flash-style, O(T) memory) elsewhere.
MODEL_OVERRIDES = {"remat_policy": "full", "attention_impl": "auto"}

H200_X8 = TopologyConfig(name="8 x H200 (141 GB), one host", devices=8, device_memory_gb=141.0)
H100_X8 = TopologyConfig(name="8 x H100 (80 GB), one host", devices=8, device_memory_gb=80.0)
# A TPU slice as Cloud TPU names it: v5p-32 = 32 TensorCores = 16 chips on 4 hosts of 4.
V5P_32 = TopologyConfig(
  name="v5p-32 (16 chips, 95 GB), four hosts of 4", devices=16, device_memory_gb=95.0, processes=4
)
V5P_8 = TopologyConfig(name="v5p-8 (4 chips, 95 GB), one host", devices=4, device_memory_gb=95.0)
V5P_64 = TopologyConfig(
  name="v5p-64 (32 chips, 95 GB), eight hosts of 4", devices=32, device_memory_gb=95.0, processes=8
)
# v6e (Trillium) slices count chips; libtpu describes them as hosts of 4 chips (2x2).
V6E_16 = TopologyConfig(
  name="v6e-16 (16 chips, 32 GB), four hosts of 4", devices=16, device_memory_gb=32.0, processes=4
)
V6E_64 = TopologyConfig(
  name="v6e-64 (64 chips, 32 GB), sixteen hosts of 4",
  devices=64,
  device_memory_gb=32.0,
  processes=16,
)
H200_X32 = TopologyConfig(
  name="32 x H200 (141 GB), four hosts of 8", devices=32, device_memory_gb=141.0, processes=4
)
# The tiny serve configs' (smoke tests, CPU benches): one CPU device of a small machine's memory
CPU_1 = TopologyConfig(name="1 CPU device (8 GB)", devices=1, device_memory_gb=8.0)


def serving(replicas: int, tensor: int, slots: int, num_pages: int, param_dtype: str = ""):
  """A colocated server of `replicas` x tensor `tensor` per host, `slots` episodes per replica
  over `num_pages` KV pages of 64 tokens (bench/serving_memory.py sizes them), as a `sized` arg."""
  return dict(
    replicas=replicas,
    tensor=tensor,
    param_dtype=param_dtype,
    engine=dict(max_concurrent_decodes=slots, page_size=64, num_pages=num_pages),
  )


# 2 replicas x tensor 4 x 128 slots = the 256 concurrent episodes; 50,000 pages of 64 tokens per
# replica: the pages 128 episodes hold at a 16k mean in-flight context; bf16 params, fp32 head.
SERVING_9B = serving(2, 4, 128, 50000, "bfloat16")


def packing(seq_len: int, longest_rows: int = 8) -> PackingConfig:
  """Episodes are uneven (a few long, most short): packed micro-batches of `longest_rows` x seq_len
  token slots with rows of seq_len / 8 .. seq_len, instead of one row per trajectory padded to
  seq_len. `longest_rows` = the data x fsdp shards (one longest row each; each row split over the
  mesh's sequence axis): tokens per device = longest_rows x seq_len / (data x fsdp x sequence)."""
  return PackingConfig(
    tokens_per_micro_batch=longest_rows * seq_len,
    row_lengths=tuple(seq_len // d for d in (8, 4, 2, 1)),
  )


def sized(cfg, topology: TopologyConfig, mesh: MeshConfig, serve: dict | None, longest_rows: int):
  """`cfg` (an RLConfig or SFTConfig) laid out on `topology`: the trainer `mesh` (sequence > 1
  takes the context-parallel rules), packed micro-batches of `longest_rows` longest rows, the
  `serve` placement (RL; a `serving(...)` dict). Memory only: every recipe hyperparameter stays."""
  overrides = dict(cfg.model.overrides)
  if mesh.sequence > 1:
    overrides["logical_axis_rules"] = CONTEXT_PARALLEL_RULES
  changes = dict(
    model=dataclasses.replace(cfg.model, overrides=overrides),
    train=dataclasses.replace(cfg.train, packing=packing(cfg.seq_len, longest_rows)),
    mesh=mesh,
    topology=topology,
  )
  if serve:
    engine = dataclasses.replace(cfg.serving.engine, **serve.get("engine", {}))
    rest = {k: v for k, v in serve.items() if k != "engine"}
    changes["serving"] = dataclasses.replace(cfg.serving, engine=engine, **rest)
  return dataclasses.replace(cfg, **changes)


def rl(preset: str, max_response: int = 65536) -> RLConfig:
  """The Table 13 run for `preset` (one device, unsized); the tokenizer, tool-call syntax and stop
  tokens follow the preset's model_type."""
  rollout = RolloutConfig(
    group_size=32,
    prompts_per_batch=8,
    async_steps=4,
    zero_std_filter=True,
    active_sampling=True,
    max_groups_ahead=32,
  )
  seq_len = MAX_PROMPT + max_response
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
      max_prompt_tokens=MAX_PROMPT,
      max_tool_calls=64,
      turn_max_tokens=16384,
      max_response_tokens=max_response,
      command_timeout_s=120.0,
    ),
    # Derived (RLConfig.rollout_worker): episodes in flight = the server's slots, at most the
    # batch x (1 + async) = 1,280 (256 on each shipped layout: 2 x 128 slots, the 27B's 2 x 32
    # on each of 4 hosts); each model request gets the time of a 16,384-token turn at the
    # worker's floors (8 tok/s decode, 1,000 tok/s prefill of the 67,584-token conversation, 120 s
    # of waiting): 2,236 s (the 8B: 2,203 s). A command's 120 s is never inside a request.
    worker=WorkerConfig(max_parallel_episodes=0, request_timeout_s=0.0, temperature=1.0),
    train=TrainConfig(
      optimizer=OptimizerConfig(
        learning_rate=1e-6, schedule="constant", max_grad_norm=1.0, weight_decay=0.0
      ),
      loss=LossConfig(
        policy_loss="dppo",
        hypers={"dppo": DPPOHyper(divergence="tv", delta=0.1)},
        kl_beta=0.0,
        aggregation="token",
        advantage="auto",  # DPPO's centred A; the GRPO arm (with_policy_loss) std-normalises
      ),
      global_batch=rollout.prompts_per_batch * rollout.group_size,
      epochs=1,
      micro_batches=256,
      temperature=1.0,
      packing=packing(seq_len),
    ),
    serving=ServingConfig(
      engine=EngineConfig(max_concurrent_decodes=256, max_len=seq_len, max_prefill_length=seq_len)
    ),
    runner=RunnerConfig(memory_mb=4096, min_verifier_timeout_s=600.0),
    steps=500,
    seq_len=seq_len,
    output_dir=f"runs/tmax_{preset}",
  )


def with_policy_loss(cfg: RLConfig, name: str) -> RLConfig:
  """`cfg` with policy loss `name` and its registered recipe defaults (e.g. "grpo": the PPO clip
  0.2 / 0.272 baseline the recipe compares DPPO against, with GRPO's std-normalised advantages
  through advantage="auto"); every other setting unchanged."""
  loss = dataclasses.replace(cfg.train.loss, policy_loss=name)
  out = f"{cfg.output_dir}_{name}"
  return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, loss=loss), output_dir=out)


def tmax_qwen3_5_9b() -> RLConfig:
  """TMAX-9B: Qwen3.5-9B on one host of 8 x H200, colocated. Trainer: context parallel over all 8
  (sequence 8; params and Adam state split over the same 8 by the context-parallel rules), packed
  micro-batches of one 67,584-token row (8,448 tokens per device); server: SERVING_9B."""
  return sized(rl("qwen3.5-9b"), H200_X8, MeshConfig(fsdp=1, sequence=8), SERVING_9B, 1)


def tmax_qwen3_8b() -> RLConfig:
  """TMAX RL on Qwen3-8B (after SFT): Hermes JSON tool calls, 32768-token responses. Trainer: FSDP
  over all 8 (a 34,816-token row fits one device), 8 longest rows per micro-batch, 1024-token
  attention query blocks; fp32 params; server 2 x tensor 4, 128 slots over 20,480 pages each."""
  cfg = rl("qwen3-8b", max_response=32768)
  model = dataclasses.replace(
    cfg.model, overrides={**cfg.model.overrides, "attention_q_chunk": 1024}
  )
  cfg = dataclasses.replace(cfg, model=model)
  return sized(cfg, H200_X8, MeshConfig(fsdp=8), serving(2, 4, 128, 20480), 8)


def tmax_qwen3_5_9b_h100() -> RLConfig:
  """tmax_qwen3_5_9b on one host of 8 x H100 (80 GB), colocated: the H200 layout (sequence 8,
  packed one-row micro-batches; server 2 x tensor 4, 128 slots, bf16 params, fp32 head) with
  32,768 KV pages per replica (128 slots at a 16k mean context; requests wait for pages) instead
  of 50,000. XLA:GPU at full size (BENCHMARKS "Accelerator compiles"): 42.4 GB trainer + 31.6
  GB server = 73.9 of 80 GB per GPU (the H200 layout: 86.3)."""
  serve = serving(2, 4, 128, 32768, "bfloat16")
  return sized(tmax_qwen3_5_9b(), H100_X8, MeshConfig(fsdp=1, sequence=8), serve, 1)


def tmax_qwen3_8b_h100() -> RLConfig:
  """tmax_qwen3_8b on one host of 8 x H100 (80 GB), colocated: the H200 layout (fsdp 8, 8
  longest rows per micro-batch; server 2 x tensor 4, 128 slots) with bf16 served params (fp32
  head) and 12,288 KV pages per replica (128 slots at a 6k mean context; requests wait for pages)
  instead of 20,480. XLA:GPU at full size (BENCHMARKS "Accelerator compiles"): 41.1 GB trainer +
  34.3 GB server = 75.4 of 80 GB per GPU (14,336 pages: 80.4; the H200 layout: 99.1)."""
  return sized(
    tmax_qwen3_8b(), H100_X8, MeshConfig(fsdp=8), serving(2, 4, 128, 12288, "bfloat16"), 8
  )


def tmax_qwen3_8b_v5p32() -> RLConfig:
  """tmax_qwen3_8b laid out on a v5p-32 slice (16 chips of 95 GB, 4 hosts of 4), colocated.
  Trainer: FSDP over all 16; multi-process RL takes fixed rows (loop/rl.py refuses packing there):
  16 micro-batches of 16 rows. Server per host: 1 x tensor 4 (a v5p host holds 4 chips), 64 slots
  over 10,240 pages (4 replicas x 64 = the 256 episodes). XLA:TPU at full size (BENCHMARKS
  "Accelerator compiles"): 39.5 GB trainer + 36.8 GB server = 76.4 of 95 GB per chip."""
  cfg = sized(tmax_qwen3_8b(), V5P_32, MeshConfig(fsdp=16), serving(1, 4, 64, 10240), 16)
  train = dataclasses.replace(cfg.train, packing=PackingConfig(), micro_batches=16)
  return dataclasses.replace(cfg, train=train)


def tmax_qwen3_5_9b_v5p32() -> RLConfig:
  """tmax_qwen3_5_9b laid out on a v5p-32 slice (16 chips of 95 GB, 4 hosts of 4), colocated.
  Trainer: fsdp 2 x sequence 8; multi-process RL takes fixed rows: 128 micro-batches of 2 rows of
  67,584 tokens (8,448 tokens per chip). Server per host: 1 x tensor 4, 64 slots over 25,000
  pages, bf16 params with the fp32 head (4 replicas x 64 = the 256 episodes). XLA:TPU at full
  size (BENCHMARKS "Accelerator compiles"): 34.5 GB trainer + 39.8 GB server = 74.3 of 95 GB per
  chip. v5p-16 does not fit: 124.7 GB (a host's 128 slots: 39.9 GB of decode temp per chip)."""
  serve = serving(1, 4, 64, 25000, "bfloat16")
  cfg = sized(tmax_qwen3_5_9b(), V5P_32, MeshConfig(fsdp=2, sequence=8), serve, 2)
  train = dataclasses.replace(cfg.train, packing=PackingConfig(), micro_batches=128)
  return dataclasses.replace(cfg, train=train)


def tmax_qwen3_5_9b_v6e64() -> RLConfig:
  """tmax_qwen3_5_9b laid out on a v6e-64 slice (64 chips of 32 GB, 16 hosts of 4), colocated.
  Trainer: fsdp 4 x sequence 16; multi-process RL takes fixed rows: 64 micro-batches of 4 rows
  of 67,584 tokens (4,224 tokens per chip). Server per host: 1 x tensor 4, 16 slots over 6,250
  pages (the v5p-32 layout's pages per slot), bf16 params with the fp32 head (16 replicas x 16 =
  the 256 episodes). XLA:TPU at full size (BENCHMARKS "Accelerator compiles"; the server's
  programs on a one-host v6e:2x2, aot/targets.one_host_chips): 14.5 GB trainer + 13.9 GB server
  = 28.5 of 32 GB per chip, 22.4 at a weight push."""
  serve = serving(1, 4, 16, 6250, "bfloat16")
  cfg = sized(tmax_qwen3_5_9b(), V6E_64, MeshConfig(fsdp=4, sequence=16), serve, 4)
  train = dataclasses.replace(cfg.train, packing=PackingConfig(), micro_batches=64)
  return dataclasses.replace(cfg, train=train)


def tmax_qwen3_6_27b() -> RLConfig:
  """TMAX RL on Qwen3.6-27B (Qwen3.5 architecture, 248k vocabulary) over four hosts of 8 x H200.
  Trainer: fsdp 4 (one per host) x sequence 8; multi-process RL takes fixed rows (loop/rl.py
  refuses packing there): 64 micro-batches of 4 rows. Server per host: 2 x tensor 4, 32 slots over
  12,500 pages each (8 replicas x 32 = the 256 episodes), bf16 params with the fp32 head."""
  cfg = sized(
    rl("qwen3.5-27b"),
    H200_X32,
    MeshConfig(fsdp=4, sequence=8),
    serving(2, 4, 32, 12500, "bfloat16"),
    4,
  )
  train = dataclasses.replace(cfg.train, packing=PackingConfig(), micro_batches=64)
  return dataclasses.replace(cfg, train=train)


def tmax_qwen3_6_27b_v5p64() -> RLConfig:
  """tmax_qwen3_6_27b laid out on a v5p-64 slice (32 chips of 95 GB, 8 hosts of 4), colocated.
  Trainer: fsdp 2 x sequence 16, fixed rows: 128 micro-batches of 2 rows (4,224 tokens per
  chip). Server per host: 1 x tensor 4, 32 slots over 12,500 pages, bf16 params with the fp32
  head (8 replicas x 32 = the 256 episodes). XLA:TPU at full size (BENCHMARKS "Accelerator
  compiles"): 40.6 + 50.2 = 90.8 of 95 GB per chip."""
  serve = serving(1, 4, 32, 12500, "bfloat16")
  cfg = sized(tmax_qwen3_6_27b(), V5P_64, MeshConfig(fsdp=2, sequence=16), serve, 2)
  train = dataclasses.replace(cfg.train, packing=PackingConfig(), micro_batches=128)
  return dataclasses.replace(cfg, train=train)


def sft_train_tmax() -> TrainConfig:
  """TMAX SFT (Qwen3-8B): lr 2e-5 linear, warmup 3%, wd 0, 2 epochs, global batch 128."""
  opt = OptimizerConfig(learning_rate=2e-5, schedule="linear", warmup_ratio=0.03, weight_decay=0.0)
  return TrainConfig(optimizer=opt, loss=LossConfig(policy_loss="sft"), global_batch=128, epochs=2)


def sft_train_terminal_horizon() -> TrainConfig:
  """TerminalHorizon SFT (Qwen3.5-27B): AdamW lr 1e-5, wd 0.1, cosine, 5% warmup (the paper does
  not give epochs or batch: one epoch of global batch 128)."""
  opt = OptimizerConfig(learning_rate=1e-5, schedule="cosine", warmup_ratio=0.05, weight_decay=0.1)
  return TrainConfig(optimizer=opt, loss=LossConfig(policy_loss="sft"), global_batch=128)


def _sft_model(preset: str) -> ModelSpec:
  return ModelSpec(
    preset=preset,
    param_dtype="float32",
    compute_dtype="bfloat16",
    head_dtype="float32",
    overrides=dict(MODEL_OVERRIDES),
  )


def sft_tmax_qwen3_8b() -> SFTConfig:
  """TMAX SFT for Qwen3-8B on one host of 8 x H100 (80 GB): fsdp 2 x sequence 4, packed
  micro-batches of 2 x 64k token slots with 16k / 32k / 64k rows (16,384 tokens per device)."""
  cfg = SFTConfig(
    model=_sft_model("qwen3-8b"),
    train=dataclasses.replace(sft_train_tmax(), micro_batches=128),
    seq_len=65536,
    output_dir="runs/sft_qwen3_8b",
  )
  cfg = sized(cfg, H100_X8, MeshConfig(fsdp=2, sequence=4), None, 2)
  return dataclasses.replace(cfg, train=_three_buckets(cfg.train, 2))


def sft_terminal_horizon() -> SFTConfig:
  """TerminalHorizon SFT (Qwen3.5-27B) on one host of 8 x H200: sequence 8, packed micro-batches
  of one 64k row over the 8 sequence devices (8,192 tokens per device), 16k / 32k / 64k rows."""
  cfg = SFTConfig(
    model=_sft_model("qwen3.5-27b"),
    train=sft_train_terminal_horizon(),
    seq_len=65536,
    output_dir="runs/sft_terminal_horizon",
  )
  cfg = sized(cfg, H200_X8, MeshConfig(fsdp=1, sequence=8), None, 1)
  return dataclasses.replace(cfg, train=_three_buckets(cfg.train, 1))


def sft_tmax_qwen3_8b_v5p8() -> SFTConfig:
  """sft_tmax_qwen3_8b on a v5p-8 slice (4 chips of 95 GB, one host): sequence 4, packed
  micro-batches of one 64k row (16,384 tokens per chip, as on 8 x H100), 16k / 32k / 64k rows.
  XLA:TPU at full size (BENCHMARKS "Accelerator compiles"): 61.1 of 95 GB per chip (the fp32
  params, Adam state and gradient accumulator: 32.8 GB of it)."""
  cfg = sized(sft_tmax_qwen3_8b(), V5P_8, MeshConfig(fsdp=1, sequence=4), None, 1)
  return dataclasses.replace(cfg, train=_three_buckets(cfg.train, 1))


def sft_terminal_horizon_v5p32() -> SFTConfig:
  """sft_terminal_horizon on a v5p-32 slice (16 chips of 95 GB, 4 hosts of 4): fsdp 2 x
  sequence 8, packed micro-batches of two 64k rows (8,192 tokens per chip, as on 8 x H200),
  16k / 32k / 64k rows. XLA:TPU at full size (BENCHMARKS "Accelerator compiles"): 76.3 of 95 GB
  per chip. v5p-16 is not tried: the same 8,192 tokens per chip over 8 GPUs compile to 107.6 GB
  (8 x H200), of it 53.8 GB of fp32 params, Adam state and gradient accumulator."""
  cfg = sized(sft_terminal_horizon(), V5P_32, MeshConfig(fsdp=2, sequence=8), None, 2)
  return dataclasses.replace(cfg, train=_three_buckets(cfg.train, 2))


def _three_buckets(train: TrainConfig, longest_rows: int) -> TrainConfig:
  """Long, uneven SFT trajectories (the TerminalHorizon average is 52.8 turns): 16k / 32k / 64k
  row buckets so short trajectories share rows."""
  packed = PackingConfig(
    tokens_per_micro_batch=longest_rows * 65536, row_lengths=(16384, 32768, 65536)
  )
  return dataclasses.replace(train, packing=packed)


# The paper's cluster: TMAX-9B trained on 2 nodes and served on 6, each 8 x H100 (Ray roles)
H100_2X8 = TopologyConfig(
  name="2 x 8 H100 (80 GB): the training nodes; 6 more serve", devices=16,
  device_memory_gb=80.0, processes=2,
)  # fmt: skip


def tmax_qwen3_5_9b_2x6_h100() -> RLConfig:
  """TMAX-9B as the paper ran it: 2 training nodes + 6 inference nodes of 8 x H100, placed by Ray
  (launch/cluster.py --rl_config=...; serving.placement 'nodes'). Trainer: fsdp 2 x sequence 8 over
  the 16 GPUs of the two training nodes (one jax.distributed process per node); multi-process RL
  takes fixed rows: 128 micro-batches of 2 rows of 67,584 tokens (8,448 per GPU, as on 8 x H200).
  Each inference node: one server of 2 replicas x tensor 4, 32 slots over 12,500 pages each (the
  H200 layout's pages per slot): 6 x 2 x 32 = 384 episodes in flight behind the router. Sandboxes
  on the cluster's sandbox hosts (runner.sandbox_hosts 'ray': the paper's podman hosts, leased
  least-loaded, a failed host cooled down 300 s), not beside the trainer."""
  cfg = sized(
    rl("qwen3.5-9b"),
    H100_2X8,
    MeshConfig(fsdp=2, sequence=8),
    dict(serving(2, 4, 32, 12500, "bfloat16"), placement="nodes", nodes=6),
    2,
  )
  train = dataclasses.replace(cfg.train, packing=PackingConfig(), micro_batches=128)
  runner = dataclasses.replace(cfg.runner, sandbox_hosts="ray")
  return dataclasses.replace(cfg, train=train, runner=runner)


def sft_tmax_qwen3_8b_v6e16() -> SFTConfig:
  """sft_tmax_qwen3_8b on a v6e-16 slice (16 chips of 32 GB, four hosts of 4): fsdp 2 x sequence
  8, packed micro-batches of two 64k rows (8,192 tokens per chip), 16k / 32k / 64k rows.
  XLA:TPU at full size (BENCHMARKS "Accelerator compiles"): 20.5 of 32 GB per chip. v6e-8
  (sequence 8, one 64k row) does not fit: 33.2 GB (8.2 of fp32 params and gradient accumulator,
  8.2 of Adam state, 16.9 of micro-step temp)."""
  cfg = sized(sft_tmax_qwen3_8b(), V6E_16, MeshConfig(fsdp=2, sequence=8), None, 2)
  return dataclasses.replace(cfg, train=_three_buckets(cfg.train, 2))
