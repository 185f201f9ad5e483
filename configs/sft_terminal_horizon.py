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

# Long, uneven trajectories (the paper's average is 52.8 turns): packed micro-batches instead of
# one [128, 65536] batch. Three row buckets so short trajectories share rows; a micro-batch has
# 8 x 64k token slots, i.e. one 64k row per batch shard for up to 8 data x fsdp shards (raise it
# with the mesh: rows per micro-batch are rounded down to a multiple of the shards).
PACKING = train_config.PackingConfig(
  tokens_per_micro_batch=8 * 65536, row_lengths=(16384, 32768, 65536)
)


def get_config():
  return to_config_dict(
    SFTConfig(
      model=ModelSpec(
        preset="qwen3.5-27b",
        param_dtype="float32",
        compute_dtype="bfloat16",
        head_dtype="float32",
        overrides={"remat_policy": "full", "attention_impl": "auto"},
      ),
      episode=EpisodeConfig(family="qwen3_5"),
      train=train_config.sft_terminal_horizon(global_batch=128, packing=PACKING),
      seq_len=65536,
      output_dir="runs/sft_terminal_horizon",
      export_dir="runs/sft_terminal_horizon/hf",
    )
  )
