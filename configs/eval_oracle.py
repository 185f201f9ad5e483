"""Reference evaluation: each task's own solution scripted through the harness (expect pass@1 = 1).

python3 launch/eval.py --config=configs/eval_oracle.py --config.tasks_dir=/tasks \
    --config.output_dir=runs/eval_oracle [--config.episode.harness=terminus]
A do-nothing baseline (expect 0): --config.policy=noop
Each task's own agent and verifier timeouts (Terminal-Bench 2.0's protocol).
"""

from tmax_jax.agents import EpisodeConfig
from tmax_jax.agents.worker import WorkerConfig
from tmax_jax.config_dict import to_config_dict
from tmax_jax.loop.evaluate import EvalConfig
from tmax_jax.tasks.runner import RunnerConfig


def get_config():
  return to_config_dict(
    EvalConfig(
      tasks_dir="",
      output_dir="runs/eval_oracle",
      policy="oracle",
      episode=EpisodeConfig(harness="bash_tool", family="qwen3", wall_time_s=0.0),
      runs_per_task=1,
      worker=WorkerConfig(max_parallel_episodes=2),
      runner=RunnerConfig(backend="", image="", memory_mb=4096, min_verifier_timeout_s=0.0),
    )
  )
