"""Our model under Harbor's harness: serve a checkpoint with the OpenAI-compatible API and run
`harbor run` (terminus-2 by default) against it, in one command (tmax_jax/harbor/run.py).

python3 launch/harbor_eval.py --serve=configs/serve_tiny.py --serve.model.checkpoint=DIR \
    --config=configs/harbor_eval.py --config.tasks=TASKS [--config.environment=podman]
"""

from absl import flags
from ml_collections import config_flags

from tmax_jax import cli

_CONFIG = config_flags.DEFINE_config_file(
  "config", None, "Harbor job config (configs/harbor_eval.py)", lock_config=True
)
_SERVE = config_flags.DEFINE_config_file(
  "serve", None, "serving config of the model (configs/serve_*.py)", lock_config=True
)
flags.mark_flags_as_required(["config", "serve"])


def main(argv):
  del argv
  # Imported here, not at the top: --help and flag errors answer without loading JAX.
  from tmax_jax.config_dict import from_config_dict
  from tmax_jax.harbor.run import HarborEvalConfig, run_harbor_eval
  from tmax_jax.loop.config import ServeConfig
  from tmax_jax.loop.preflight import check_inputs

  serve = from_config_dict(ServeConfig, _SERVE.value, "serve")
  check_inputs(serve, "serve")
  run_harbor_eval(from_config_dict(HarborEvalConfig, _CONFIG.value), serve)


if __name__ == "__main__":
  cli.run_absl(main)
