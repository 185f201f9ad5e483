"""TMAX RL on Qwen3-8B (configs/tmax_qwen3_8b.py's recipe) on one host of 8 x H100 (80 GB), the
paper's hardware: the H200 layout with bf16 served params and fewer KV pages per server replica
(tmax_jax/recipes.py). Checked by XLA:GPU at full size on a CPU machine:
`python3 -m tmax_jax.plan --config=configs/tmax_qwen3_8b_h100.py --gpu=h100`.

python3 launch/train_rl.py --config=configs/tmax_qwen3_8b_h100.py \\
    --config.model.checkpoint=runs/sft_qwen3_8b/hf --config.tasks.source=/data/tmax15k
"""

from tmax_jax import recipes
from tmax_jax.config_dict import to_config_dict


def get_config():
  return to_config_dict(recipes.tmax_qwen3_8b_h100())
