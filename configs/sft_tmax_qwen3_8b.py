"""TMAX SFT for Qwen3-8B (recipe.md): lr 2e-5 linear, 3% warmup, wd 0, 2 epochs, global batch 128,
max sequence 65536; unsuccessful trajectories are not filtered.

python3 launch/train_sft.py --config=configs/sft_tmax_qwen3_8b.py \
    --config.model.checkpoint=/ckpt/Qwen3-8B --config.trajectories=/data/sft.jsonl
"""

from tmax_jax.config_dict import to_config_dict
from tmax_jax.loop.config import ModelSpec, SFTConfig
from tmax_jax.train import config as train_config


def get_config():
  return to_config_dict(SFTConfig(
      model=ModelSpec(preset="qwen3-8b", param_dtype="float32", compute_dtype="bfloat16",
                      head_dtype="float32", overrides={"remat_policy": "full"}),
      train=train_config.sft_tmax_qwen3_8b(micro_batches=128),
      seq_len=65536,
      output_dir="runs/sft_qwen3_8b",
      export_dir="runs/sft_qwen3_8b/hf",
  ))
