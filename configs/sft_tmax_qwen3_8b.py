"""TMAX SFT for Qwen3-8B (recipe.md): lr 2e-5 linear, 3% warmup, wd 0, 2 epochs, global batch 128,
max sequence 65536; unsuccessful trajectories are not filtered.

Topology (`topology`, read by python3 -m tmax_jax.plan --config=configs/sft_tmax_qwen3_8b.py): one
host of 8 x H100 (80 GB), trainer only (BENCHMARKS "Memory plan of the recipe configs"): fsdp 2 x
sequence 4 (context parallel; params and Adam state split over all 8 by the
CONTEXT_PARALLEL_RULES), packed micro-batches of 2 longest rows (16,384 tokens per device).

python3 launch/train_sft.py --config=configs/sft_tmax_qwen3_8b.py \
    --config.model.checkpoint=/ckpt/Qwen3-8B --config.trajectories=/data/sft.jsonl
"""

from tmax_jax.config_dict import to_config_dict
from tmax_jax.loop.config import MeshConfig, ModelSpec, SFTConfig, TopologyConfig
from tmax_jax.models.config import CONTEXT_PARALLEL_RULES
from tmax_jax.train import config as train_config

# 64k-token trajectories of uneven length: packed micro-batches (as configs/sft_terminal_horizon.py)
# of 2 x 64k token slots (one 64k row per fsdp shard, split over 4 sequence devices) with
# 16k / 32k / 64k rows.
PACKING = train_config.PackingConfig(
  tokens_per_micro_batch=2 * 65536, row_lengths=(16384, 32768, 65536)
)
H100_X8 = TopologyConfig(name="8 x H100 (80 GB), one host", devices=8, device_memory_gb=80.0)


def get_config():
  return to_config_dict(
    SFTConfig(
      model=ModelSpec(
        preset="qwen3-8b",
        param_dtype="float32",
        compute_dtype="bfloat16",
        head_dtype="float32",
        overrides={
          "remat_policy": "full",
          "attention_impl": "auto",
          "logical_axis_rules": CONTEXT_PARALLEL_RULES,
        },
      ),
      train=train_config.sft_tmax_qwen3_8b(micro_batches=128, packing=PACKING),
      mesh=MeshConfig(fsdp=2, sequence=4),
      topology=H100_X8,
      seq_len=65536,
      output_dir="runs/sft_qwen3_8b",
      export_dir="runs/sft_qwen3_8b/hf",
    )
  )
