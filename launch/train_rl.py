"""RL training (DPPO by default) on sandboxed terminal tasks through the JetStream server.

python3 launch/train_rl.py --config=configs/tmax_qwen3_5_9b.py --config.model.checkpoint=/ckpt
"""

from absl import app, flags, logging
from ml_collections import config_flags

from tmax_jax import host_memory
from tmax_jax.config_dict import from_config_dict
from tmax_jax.loop.config import RLConfig
from tmax_jax.loop.rl import run_rl
from tmax_jax.train.distributed import initialize

_CONFIG = config_flags.DEFINE_config_file(
  "config", None, "RL config (configs/*.py)", lock_config=True
)
flags.mark_flags_as_required(["config"])


def main(argv):
  del argv
  host_memory.reuse_freed_memory()  # before the first XLA:CPU allocation
  logging.set_verbosity(logging.INFO)
  initialize()  # multi-host from JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID
  result = run_rl(from_config_dict(RLConfig, _CONFIG.value))
  print(f"RL done: {result.steps_done} steps; HF export at {result.export_dir}")


if __name__ == "__main__":
  app.run(main)
