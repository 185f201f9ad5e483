"""A model served by tmax_jax.inference: a running server (`address`, default launch/serve.py's
127.0.0.1:9000) or, with address '', a checkpoint served here for the run.

python3 launch/eval.py --config=configs/eval_server.py --config.tasks_dir=/tasks \
    --config.output_dir=runs/eval
python3 launch/eval.py --config=configs/eval_server.py --config.address='' \
    --config.model.checkpoint=/ckpt/hf --config.tasks_dir=/tasks --config.output_dir=runs/eval
Recipe evaluation settings: k = 4 runs per task, temperature 1.0, the RL episode limits.
"""

from tmax_jax.agents.episode import EpisodeConfig
from tmax_jax.config_dict import to_config_dict
from tmax_jax.loop.config import ModelSpec, ServingConfig
from tmax_jax.loop.evaluate import EvalConfig
from tmax_jax.tasks.runner import RunnerConfig


def get_config():
  return to_config_dict(
    EvalConfig(
      tasks_dir="",
      output_dir="runs/eval",
      policy="server",
      address="127.0.0.1:9000",
      harness="bash_tool",
      runs_per_task=4,
      parallelism=8,
      temperature=1.0,
      model=ModelSpec(checkpoint="", preset=""),
      serving=ServingConfig(max_concurrent_decodes=8, max_len=65536, max_prefill_length=32768),
      episode=EpisodeConfig(family="qwen3"),
      runner=RunnerConfig(backend="", image="", memory_mb=4096),
    )
  )
