"""TMAX RL on Qwen3-8B: the Table 13 recipe with Hermes JSON tool calls and a 32768-token response
cap (recipe.md); SFT first with configs/sft_tmax_qwen3_8b.py. Layout (tmax_jax/recipes.py): one
host of 8 x H200, FSDP over all 8, fp32 params, colocated server 2 x tensor 4.

python3 launch/train_rl.py --config=configs/tmax_qwen3_8b.py \
    --config.model.checkpoint=runs/sft_qwen3_8b/hf --config.tasks.source=/data/tmax15k
"""

from tmax_jax import recipes
from tmax_jax.config_dict import to_config_dict


def get_config():
  return to_config_dict(recipes.tmax_qwen3_8b())
