"""The CPU demo: SFT on oracle trajectories, then DPPO RL in real sandboxes through JetStream.

python3 launch/demo.py --config=configs/demo_cpu.py
"""

import json

from absl import flags
from ml_collections import config_flags

from tmax_jax import cli

_CONFIG = config_flags.DEFINE_config_file(
  "config", None, cli.config_help("demo config (configs/demo_cpu.py)", "demo"), lock_config=True
)
flags.mark_flags_as_required(["config"])


def main(argv):
  del argv
  # Imported here, not at the top: --help and flag errors answer without loading JAX.
  from tmax_jax import jobs
  from tmax_jax.loop import run_demo

  cfg = jobs.resolve(_CONFIG.value, "demo")
  results = run_demo(cfg)
  print(json.dumps(results["summary"], indent=2))


if __name__ == "__main__":
  cli.run_absl(main)
