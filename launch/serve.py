"""Serve a model through JetStream + the tmax_rl.Rollout service (loopback by default).

python3 launch/serve.py --config=configs/serve_tiny.py --config.model.checkpoint=/ckpt
"""

from absl import flags
from ml_collections import config_flags

from tmax_jax import cli

_CONFIG = config_flags.DEFINE_config_file(
  "config", None, "serving config (configs/serve_*.py)", lock_config=True
)
flags.mark_flags_as_required(["config"])


def main(argv):
  del argv
  # Imported here, not at the top: --help and flag errors answer without loading JAX.
  from tmax_jax.config_dict import from_config_dict
  from tmax_jax.loop.config import ServeConfig
  from tmax_jax.loop.preflight import check_inputs
  from tmax_jax.loop.serve import serve_forever

  cfg = from_config_dict(ServeConfig, _CONFIG.value)
  check_inputs(cfg)
  serve_forever(cfg)


if __name__ == "__main__":
  cli.run_absl(main)
