"""Serve a model through JetStream + the tmax_rl.Rollout service (loopback by default).

python3 launch/serve.py --config=configs/serve_tiny.py --config.model.checkpoint=/ckpt
"""

from ml_collections import config_flags

from tmax_jax import cli

_CONFIG = config_flags.DEFINE_config_file(
  "config", None, "serving config (configs/serve_*.py)", lock_config=True
)


def main(argv):
  del argv
  # Imported here, not at the top: --help and flag errors answer without loading JAX.
  from tmax_jax.inference import launch_lib
  from tmax_jax.loop.preflight import check_inputs

  check_inputs(_CONFIG.value)
  launch_lib.serve_forever(_CONFIG.value)


if __name__ == "__main__":
  cli.run_absl(main)
