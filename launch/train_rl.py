"""RL training (DPPO by default) on sandboxed terminal tasks through the JetStream server.

python3 launch/train_rl.py --config=configs/tmax_qwen3_5_9b.py --config.model.checkpoint=/ckpt
"""

from absl import flags, logging
from ml_collections import config_flags

from tmax_jax import cli

_CONFIG = config_flags.DEFINE_config_file(
  "config", None, cli.config_help("RL config (configs/*.py)", "rl"), lock_config=True
)
flags.mark_flags_as_required(["config"])


def main(argv):
  del argv
  # Imported here, not at the top: --help and flag errors answer without loading JAX.
  from tmax_jax import jobs
  from tmax_jax.loop import run_rl
  from tmax_jax.train.distributed import initialize

  cfg = jobs.resolve(_CONFIG.value, "rl")
  initialize()  # multi-host from JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID
  result = run_rl(cfg)
  print(f"RL done: {result.steps_done} steps; HF export at {result.export_dir}")


if __name__ == "__main__":
  cli.run_absl(main, verbosity=logging.INFO)
