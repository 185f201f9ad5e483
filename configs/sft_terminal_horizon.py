"""TerminalHorizon SFT (Qwen3.5-27B, recipe.md): AdamW lr 1e-5, wd 0.1, cosine, 5% warmup, on the
long trajectories collected from the horizon tasks and chains. Layout (tmax_jax/recipes.py): one
host of 8 x H200, sequence 8, packed 16k / 32k / 64k rows.

python3 -m tmax_jax.horizon.build --out runs/horizon ...        # stage 1 + stage 2
python3 -m tmax_jax.horizon.collect --build runs/horizon --family qwen3_5 \
    --teacher endpoint --base-url URL --model M --out runs/horizon/sft.jsonl
python3 launch/train_sft.py --config=configs/sft_terminal_horizon.py \
    --config.model.checkpoint=/ckpt/Qwen3.5-27B --config.trajectories=runs/horizon/sft.jsonl
Evaluation: configs/eval_terminal_horizon.py (3 runs per task, mean pass@1).
collect caps every trajectory (a chain: all its generations) at this config's seq_len (its
--max_tokens, default 65,536); train_sft.py refuses a longer record, naming its line, before the
model loads.
"""

from tmax_jax import recipes
from tmax_jax.config_dict import to_config_dict


def get_config():
  return to_config_dict(recipes.sft_terminal_horizon())
