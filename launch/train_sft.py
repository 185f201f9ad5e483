"""SFT on trajectories (a JSONL, or oracle trajectories of a task set run through the harness).

python3 launch/train_sft.py --config=configs/sft_tmax_qwen3_8b.py --config.trajectories=data.jsonl
"""

from absl import flags, logging
from ml_collections import config_flags

from tmax_jax import cli

_CONFIG = config_flags.DEFINE_config_file(
  "config", None, cli.config_help("SFT config (configs/sft_*.py)", "sft"), lock_config=True
)
flags.mark_flags_as_required(["config"])


def main(argv):
  del argv
  # Imported here, not at the top: --help and flag errors answer without loading JAX.
  from tmax_jax import jobs
  from tmax_jax.loop import run_sft
  from tmax_jax.train.distributed import initialize

  cfg = jobs.resolve(_CONFIG.value, "sft")
  initialize()  # multi-host from JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID
  result = run_sft(cfg)
  loss = f", final loss {result.metrics[-1]['loss']:.4f}" if result.metrics else ""
  print(f"SFT done: {len(result.metrics)} steps run{loss}; HF export at {result.export_dir}")


if __name__ == "__main__":
  cli.run_absl(main, verbosity=logging.INFO)
