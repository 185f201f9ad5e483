"""TMAX SFT for Qwen3-8B (configs/sft_tmax_qwen3_8b.py's recipe) on a TPU v6e-16 slice: 16
chips on four hosts of 4, fsdp 2 x sequence 8, packed 16k / 32k / 64k rows
(tmax_jax/recipes.py). Checked by XLA:TPU at full size on a CPU machine:
`python3 -m tmax_jax.plan --config=configs/sft_tmax_qwen3_8b_v6e16.py --tpu=v6e-16`.

python3 launch/train_sft.py --config=configs/sft_tmax_qwen3_8b_v6e16.py \\
    --config.model.checkpoint=/ckpt/Qwen3-8B --config.trajectories=/data/sft.jsonl
"""

from tmax_jax import recipes
from tmax_jax.config_dict import to_config_dict


def get_config():
  return to_config_dict(recipes.sft_tmax_qwen3_8b_v6e16())
