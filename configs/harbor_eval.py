"""Harbor's terminus-2 against our server, trials in our bubblewrap sandboxes.

python3 launch/harbor_eval.py --serve=configs/serve_random.py --serve.model.checkpoint=DIR \\
    --config=configs/harbor_eval.py --config.tasks=TASKS
Without the checkpoint: serve_random's random weights, whose replies end (in ~1 min for a task;
--config.agent_kwargs="('max_turns=2',)" keeps terminus-2 from taking turns until the task's time
limit). The server takes free loopback ports of its own, whatever the serve config names.
Harbor's own podman environment instead: --config.environment=podman --config.environment_kwargs=()
(the tasks' images are pulled into podman and Harbor views written under jobs_dir).
"""

from tmax_jax.config_dict import to_config_dict
from tmax_jax.harbor import HarborEvalConfig


def get_config():
  return to_config_dict(HarborEvalConfig(tasks="TASKS", agent="terminus-2", jobs_dir="runs/harbor"))
