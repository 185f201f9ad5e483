"""TerminalHorizon evaluation protocol (the paper's): 3 runs per task, mean pass@1, temperature 1.0,
3 hours per task (for the agent, whatever the task's own timeout; the tests run under the task's
[verifier] timeout_sec), a served Qwen3.5 model (e.g. the SFT export of
configs/sft_terminal_horizon.py) on a TB1/TB2 set. Long-horizon episodes (the paper's trajectories
average 52.8 turns) get caps they do not hit: 512 turns / tool calls and a 256k-token sequence,
which the server holds and prefills (every turn's request carries the whole context so far).

python3 launch/eval.py --config=configs/eval_terminal_horizon.py --config.tasks_dir=/tb2 \
    --config.address='' --config.model.checkpoint=runs/sft_terminal_horizon/hf \
    --config.output_dir=runs/eval_terminal_horizon
"""

from tmax_jax.agents.episode import EpisodeConfig
from tmax_jax.agents.worker import WorkerConfig
from tmax_jax.config_dict import to_config_dict
from tmax_jax.inference.engine import EngineConfig
from tmax_jax.loop.config import ModelSpec, ServingConfig
from tmax_jax.loop.evaluate import EvalConfig
from tmax_jax.tasks.runner import RunnerConfig

HOURS_PER_TASK = 3
MAX_SEQUENCE = 262144  # Qwen3.5's context


def get_config():
  return to_config_dict(
    EvalConfig(
      tasks_dir="",
      output_dir="runs/eval_terminal_horizon",
      policy="server",
      address="127.0.0.1:9000",
      runs_per_task=3,
      pass_ks=(1,),
      worker=WorkerConfig(
        max_parallel_episodes=8, temperature=1.0, request_timeout_s=3600.0 * HOURS_PER_TASK
      ),
      model=ModelSpec(checkpoint="", preset=""),
      serving=ServingConfig(
        engine=EngineConfig(
          max_concurrent_decodes=8, max_len=MAX_SEQUENCE, max_prefill_length=MAX_SEQUENCE
        )
      ),
      episode=EpisodeConfig(
        harness="bash_tool",
        family="qwen3_5",
        max_tool_calls=512,
        max_turns=512,
        turn_max_tokens=16384,
        max_response_tokens=MAX_SEQUENCE - 32768,
        wall_time_s=3600.0 * HOURS_PER_TASK,
      ),
      runner=RunnerConfig(backend="", image="", memory_mb=4096, min_verifier_timeout_s=0.0),
    )
  )
