"""TMAX-9B RL (recipe.md, paper Table 13, exactly): Qwen3.5-9B, DPPO binary TV delta 0.1, fp32 LM
head on the trainer and the bf16 server, fp32 master weights, remat; 8 prompts x 32 samples, async
4, active sampling + zero-std filter, T 1.0, AdamW lr 1e-6 constant, 500 steps (tmax_jax/recipes.py
has every setting and the layout on one host of 8 x H200: context parallel over all 8, colocated
server 2 x tensor 4).

python3 launch/train_rl.py --config=configs/tmax_qwen3_5_9b.py \
    --config.model.checkpoint=/ckpt/Qwen3.5-9B --config.tasks.source=/data/tmax15k
"""

from tmax_jax import recipes
from tmax_jax.config_dict import to_config_dict


def get_config():
  return to_config_dict(recipes.tmax_qwen3_5_9b())
