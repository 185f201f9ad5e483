"""Our model under Harbor's harness: serve a checkpoint with the OpenAI-compatible API and run
`harbor run` (terminus-2 by default) against it, in one command (tmax_jax/harbor/run.py).

python3 launch/harbor_eval.py --serve=configs/serve_random.py --serve.model.checkpoint=DIR \\
    --config=configs/harbor_eval.py --config.tasks=TASKS [--config.environment=podman]
(without --serve.model.checkpoint: random weights, configs/serve_random.py)
"""

from absl import flags
from ml_collections import config_flags

from tmax_jax import cli

_CONFIG = config_flags.DEFINE_config_file(
  "config",
  None,
  cli.config_help("Harbor job config (configs/harbor_eval.py)", "harbor"),
  lock_config=True,
)
_SERVE = config_flags.DEFINE_config_file(
  "serve",
  None,
  cli.config_help("serving config of the model (configs/serve_*.py)", "serve", "serve"),
  lock_config=True,
)
flags.mark_flags_as_required(["config", "serve"])


def main(argv):
  del argv
  # Imported here, not at the top: --help and flag errors answer without loading JAX.
  from tmax_jax import jobs
  from tmax_jax.harbor import run_harbor_eval

  serve = jobs.resolve(_SERVE.value, "serve", "serve")
  run_harbor_eval(jobs.resolve(_CONFIG.value, "harbor"), serve)


if __name__ == "__main__":
  cli.run_absl(main)
