"""TMAX RL on Qwen3.6-27B (configs/tmax_qwen3_6_27b.py's recipe) laid out on a TPU v5p-64 slice:
32 chips on 8 hosts, fsdp 2 x sequence 16, fixed rows, a colocated server of 1 x tensor 4 per host
(tmax_jax/recipes.py). Checked by XLA:TPU at full size on a CPU machine:
`python3 -m tmax_jax.plan --config=configs/tmax_qwen3_6_27b_v5p64.py --tpu=v5p-64`.
"""

from tmax_jax import recipes
from tmax_jax.config_dict import to_config_dict


def get_config():
  return to_config_dict(recipes.tmax_qwen3_6_27b_v5p64())
