"""TMAX-9B RL (configs/tmax_qwen3_5_9b.py's recipe) laid out on a TPU v6e-64 slice: 64 chips on 16
hosts, fsdp 4 x sequence 16, fixed rows, a colocated server of 1 x tensor 4 per host
(tmax_jax/recipes.py). Checked by XLA:TPU at full size on a CPU machine:
`python3 -m tmax_jax.plan --config=configs/tmax_qwen3_5_9b_v6e64.py --tpu=v6e-64`.

python3 launch/train_rl.py --config=configs/tmax_qwen3_5_9b_v6e64.py \\
    --config.model.checkpoint=/ckpt/Qwen3.5-9B --config.tasks.source=/data/tmax15k
(one process per host, as every multi-host run: docs/design/scale-out.md)
"""

from tmax_jax import recipes
from tmax_jax.config_dict import to_config_dict


def get_config():
  return to_config_dict(recipes.tmax_qwen3_5_9b_v6e64())
