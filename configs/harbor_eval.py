"""Harbor's terminus-2 against our server, trials in our bubblewrap sandboxes.

python3 launch/harbor_eval.py --serve=configs/serve_tiny.py --serve.model.checkpoint=DIR \
    --config=configs/harbor_eval.py --config.tasks=TASKS
Harbor's own podman environment instead: --config.environment=podman --config.environment_kwargs=()
(the tasks' images are pulled into podman and Harbor views written under jobs_dir).
"""

from tmax_jax.config_dict import to_config_dict
from tmax_jax.harbor.run import HarborEvalConfig


def get_config():
  return to_config_dict(HarborEvalConfig(tasks="TASKS", agent="terminus-2", jobs_dir="runs/harbor"))
