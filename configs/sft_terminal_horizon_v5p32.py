"""TerminalHorizon SFT of Qwen3.5-27B (configs/sft_terminal_horizon.py's recipe) on a TPU v5p-32
slice: 16 chips on 4 hosts, fsdp 2 x sequence 8, packed 16k / 32k / 64k rows
(tmax_jax/recipes.py). Checked by XLA:TPU at full size on a CPU machine:
`python3 -m tmax_jax.plan --config=configs/sft_terminal_horizon_v5p32.py --tpu=v5p-32`.

python3 launch/train_sft.py --config=configs/sft_terminal_horizon_v5p32.py \\
    --config.model.checkpoint=/ckpt/Qwen3.5-27B --config.trajectories=runs/horizon/sft.jsonl
(one process per host, as every multi-host run: docs/design/scale-out.md)
"""

from tmax_jax import recipes
from tmax_jax.config_dict import to_config_dict


def get_config():
  return to_config_dict(recipes.sft_terminal_horizon_v5p32())
