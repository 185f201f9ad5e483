"""Serve a model through JetStream + the tmax_rl.Rollout service (loopback by default).

python3 launch/serve.py --config=configs/serve_tiny.py --config.model.checkpoint=/ckpt
"""

from absl import flags
from ml_collections import config_flags

from tmax_jax import cli

_CONFIG = config_flags.DEFINE_config_file(
  "config", None, cli.config_help("serving config (configs/serve_*.py)", "serve"), lock_config=True
)
flags.mark_flags_as_required(["config"])


def main(argv):
  del argv
  # Imported here, not at the top: --help and flag errors answer without loading JAX.
  from tmax_jax import jobs
  from tmax_jax.loop.serve import serve_forever

  cfg = jobs.resolve(_CONFIG.value, "serve")
  serve_forever(cfg)


if __name__ == "__main__":
  cli.run_absl(main)
