"""TMAX RL on Qwen3.6-27B (the Qwen3.5 hybrid architecture and 248k vocabulary at 27B): the Table 13
recipe with XML tool calls over four hosts of 8 x H200 (tmax_jax/recipes.py: fsdp 4 x sequence 8,
fixed rows, colocated bf16 server with the fp32 head).

launch/slurm/train_rl.sbatch configs/tmax_qwen3_6_27b.py --config.model.checkpoint=/ckpt/27B ...
"""

from tmax_jax import recipes
from tmax_jax.config_dict import to_config_dict


def get_config():
  return to_config_dict(recipes.tmax_qwen3_6_27b())
