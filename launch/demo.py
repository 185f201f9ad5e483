"""The CPU demo: SFT on oracle trajectories, then DPPO RL in real sandboxes through JetStream.

python3 launch/demo.py --config=configs/demo_cpu.py
"""

import json

from absl import app, flags, logging
from ml_collections import config_flags

from tmax_jax import host_memory
from tmax_jax.config_dict import from_config_dict
from tmax_jax.loop.config import DemoConfig
from tmax_jax.loop.demo import run_demo

_CONFIG = config_flags.DEFINE_config_file(
  "config", None, "demo config (configs/demo_cpu.py)", lock_config=True
)
flags.mark_flags_as_required(["config"])


def main(argv):
  del argv
  host_memory.reuse_freed_memory()  # before the first XLA:CPU allocation
  logging.set_verbosity(logging.WARNING)
  results = run_demo(from_config_dict(DemoConfig, _CONFIG.value))
  print(json.dumps(results["summary"], indent=2))


if __name__ == "__main__":
  app.run(main)
