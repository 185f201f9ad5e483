"""Harbor's terminus-2 against our server, trials in our bubblewrap sandboxes.

python3 launch/harbor_eval.py --serve=configs/serve_tiny.py --serve.model.checkpoint=DIR \
    --config=configs/harbor_eval.py --config.tasks=TASKS
Harbor's own podman environment instead: --config.environment=podman --config.environment_kwargs=()
(tasks prepared by `python3 -m tmax_jax.harbor.tasks TASKS --out DIR --podman`).
"""

from tmax_jax.config_dict import to_config_dict
from tmax_jax.harbor.run import HarborEvalConfig


def get_config():
  return to_config_dict(HarborEvalConfig(tasks="TASKS", agent="terminus-2", jobs_dir="runs/harbor"))
