"""TMAX SFT for Qwen3-8B (recipe.md): lr 2e-5 linear, 3% warmup, wd 0, 2 epochs, global batch 128,
max sequence 65536; unsuccessful trajectories are not filtered.

python3 launch/train_sft.py --config=configs/sft_tmax_qwen3_8b.py \
    --config.model.checkpoint=/ckpt/Qwen3-8B --config.trajectories=/data/sft.jsonl
"""

from tmax_jax.config_dict import to_config_dict
from tmax_jax.loop.config import ModelSpec, SFTConfig
from tmax_jax.train import config as train_config

# 64k-token trajectories of uneven length: packed micro-batches (as configs/sft_terminal_horizon.py)
# of 8 x 64k token slots with 16k / 32k / 64k rows; raise the slots with the data x fsdp shards.
PACKING = train_config.PackingConfig(
  tokens_per_micro_batch=8 * 65536, row_lengths=(16384, 32768, 65536)
)


def get_config():
  return to_config_dict(
    SFTConfig(
      model=ModelSpec(
        preset="qwen3-8b",
        param_dtype="float32",
        compute_dtype="bfloat16",
        head_dtype="float32",
        overrides={"remat_policy": "full", "attention_impl": "auto"},
      ),
      train=train_config.sft_tmax_qwen3_8b(micro_batches=128, packing=PACKING),
      seq_len=65536,
      output_dir="runs/sft_qwen3_8b",
      export_dir="runs/sft_qwen3_8b/hf",
    )
  )
