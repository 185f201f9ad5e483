"""TerminalHorizon SFT (Qwen3.5-27B, recipe.md): AdamW lr 1e-5, wd 0.1, cosine, 5% warmup, on the
long trajectories collected from the horizon tasks and chains:

python3 -m tmax_jax.tasks.horizon.build --out runs/horizon ...        # stage 1 + stage 2
python3 -m tmax_jax.tasks.horizon.collect --build runs/horizon --family qwen3_5 \
    --teacher endpoint --base-url URL --model M --out runs/horizon/sft.jsonl
python3 launch/train_sft.py --config=configs/sft_terminal_horizon.py \
    --config.model.checkpoint=/ckpt/Qwen3.5-27B --config.trajectories=runs/horizon/sft.jsonl
Evaluation: configs/eval_terminal_horizon.py (3 runs per task, mean pass@1).

Topology (`topology`, read by python3 -m tmax_jax.plan --config=configs/sft_terminal_horizon.py):
one host of 8 x H200 (141 GB), trainer only (BENCHMARKS "Memory plan of the recipe configs"):
sequence 8 (context parallel; params and Adam state split over all 8 by the
CONTEXT_PARALLEL_RULES), packed micro-batches of one 64k row (8,192 tokens per device).
"""

from tmax_jax.agents.episode import EpisodeConfig
from tmax_jax.config_dict import to_config_dict
from tmax_jax.loop.config import MeshConfig, ModelSpec, SFTConfig, TopologyConfig
from tmax_jax.models.config import CONTEXT_PARALLEL_RULES
from tmax_jax.train import config as train_config

# Long, uneven trajectories (the paper's average is 52.8 turns): packed micro-batches instead of
# one [128, 65536] batch. Three row buckets so short trajectories share rows; a micro-batch has
# 64k token slots, one 64k row split over the 8 sequence devices (rows per micro-batch are
# rounded down to a multiple of the data x fsdp shards).
PACKING = train_config.PackingConfig(
  tokens_per_micro_batch=65536, row_lengths=(16384, 32768, 65536)
)
H200_X8 = TopologyConfig(name="8 x H200 (141 GB), one host", devices=8, device_memory_gb=141.0)


def get_config():
  return to_config_dict(
    SFTConfig(
      model=ModelSpec(
        preset="qwen3.5-27b",
        param_dtype="float32",
        compute_dtype="bfloat16",
        head_dtype="float32",
        overrides={
          "remat_policy": "full",
          "attention_impl": "auto",
          "logical_axis_rules": CONTEXT_PARALLEL_RULES,
        },
      ),
      episode=EpisodeConfig(family="qwen3_5"),
      train=train_config.sft_terminal_horizon(global_batch=128, packing=PACKING),
      mesh=MeshConfig(fsdp=1, sequence=8),
      topology=H200_X8,
      seq_len=65536,
      output_dir="runs/sft_terminal_horizon",
      export_dir="runs/sft_terminal_horizon/hf",
    )
  )
