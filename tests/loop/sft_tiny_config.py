"""A tiny SFT job on a JSONL of token trajectories, for the tests that run launch/train_sft.py as a
real process (SIGKILL and resume).

python3 launch/train_sft.py --config=tests/loop/sft_tiny_config.py --config.trajectories=F.jsonl
"""

from tests.loop.rl_helpers import PARITY_ADAM, TINY
from tmax_jax.config_dict import to_config_dict
from tmax_jax.loop.config import MeshConfig, ModelSpec, SFTConfig
from tmax_jax.train.config import CheckpointConfig, LossConfig, TrainConfig


def get_config():
  return to_config_dict(
    SFTConfig(
      model=ModelSpec(preset="qwen3-0.6b", overrides=TINY, seed=1),
      trajectories="",
      train=TrainConfig(
        optimizer=PARITY_ADAM,
        loss=LossConfig(policy_loss="sft"),
        checkpoint=CheckpointConfig(save_every=1, keep_last=2, async_save=False),
        global_batch=4,
        epochs=2,
        logprob_chunk_size=64,
      ),
      mesh=MeshConfig(num_devices=1),
      seq_len=128,
      output_dir="runs/sft_tiny",
    )
  )
