"""TMAX SFT for Qwen3-8B (recipe.md): lr 2e-5 linear, 3% warmup, wd 0, 2 epochs, global batch 128,
max sequence 65536; unsuccessful trajectories are not filtered. Layout (tmax_jax/recipes.py): one
host of 8 x H100 (80 GB), fsdp 2 x sequence 4, packed 16k / 32k / 64k rows.

python3 launch/train_sft.py --config=configs/sft_tmax_qwen3_8b.py \
    --config.model.checkpoint=/ckpt/Qwen3-8B --config.trajectories=/data/sft.jsonl
"""

from tmax_jax import recipes
from tmax_jax.config_dict import to_config_dict


def get_config():
  return to_config_dict(recipes.sft_tmax_qwen3_8b())
