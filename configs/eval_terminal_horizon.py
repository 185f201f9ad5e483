"""TerminalHorizon evaluation protocol (the paper's): 3 runs per task, mean pass@1, temperature 1.0,
a served Qwen3.5 model (e.g. the SFT export of configs/sft_terminal_horizon.py) on a TB1/TB2 set.

python3 launch/eval.py --config=configs/eval_terminal_horizon.py --config.tasks_dir=/tb2 \
    --config.address='' --config.model.checkpoint=runs/sft_terminal_horizon/hf \
    --config.output_dir=runs/eval_terminal_horizon
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
      output_dir="runs/eval_terminal_horizon",
      policy="server",
      address="127.0.0.1:9000",
      harness="bash_tool",
      runs_per_task=3,
      pass_ks=(1,),
      parallelism=8,
      temperature=1.0,
      model=ModelSpec(checkpoint="", preset=""),
      serving=ServingConfig(max_concurrent_decodes=8, max_len=65536, max_prefill_length=32768),
      episode=EpisodeConfig(family="qwen3_5"),
      runner=RunnerConfig(backend="", image="", memory_mb=4096),
    )
  )
