"""TerminalHorizon SFT (Qwen3.5-27B, recipe.md): AdamW lr 1e-5, wd 0.1, cosine, 5% warmup, on the
long trajectories collected from the horizon tasks and chains:

python3 -m tmax_jax.tasks.horizon.build --out runs/horizon ...        # stage 1 + stage 2
python3 -m tmax_jax.tasks.horizon.collect --build runs/horizon --family qwen3_5 \
    --teacher endpoint --base-url URL --model M --out runs/horizon/sft.jsonl
python3 launch/train_sft.py --config=configs/sft_terminal_horizon.py \
    --config.model.checkpoint=/ckpt/Qwen3.5-27B --config.trajectories=runs/horizon/sft.jsonl
Evaluation: configs/eval_terminal_horizon.py (3 runs per task, mean pass@1).
"""

from tmax_jax.agents.episode import EpisodeConfig
from tmax_jax.config_dict import to_config_dict
from tmax_jax.loop.config import ModelSpec, SFTConfig
from tmax_jax.train import config as train_config


def get_config():
  return to_config_dict(SFTConfig(
      model=ModelSpec(preset="qwen3.5-27b", param_dtype="float32", compute_dtype="bfloat16",
                      head_dtype="float32", overrides={"remat_policy": "full"}),
      tokenizer="qwen3_5",
      episode=EpisodeConfig(family="qwen3_5"),
      train=train_config.sft_terminal_horizon(global_batch=128, micro_batches=128),
      seq_len=65536,
      output_dir="runs/sft_terminal_horizon",
      export_dir="runs/sft_terminal_horizon/hf",
  ))
