"""TerminalHorizon evaluation protocol (the paper's): 3 runs per task, mean pass@1, temperature 1.0,
3 hours per task (for the agent, whatever the task's own timeout; the tests run under the task's
[verifier] timeout_sec), a served Qwen3.5 model (e.g. the SFT export of
configs/sft_terminal_horizon.py) on a TB1/TB2 set. Long-horizon episodes (the paper's trajectories
average 52.8 turns) get caps they do not hit: 512 turns / tool calls and a 256k-token sequence,
which the server holds and prefills (every turn's request carries the whole context so far).

Served here (address ''): sized for the paper's Qwen3.5-27B (model.preset; a run's
model.checkpoint takes its place, and without one the preset is served at random weights) on one
host of 8 x H200: 2 replicas x tensor 4 (its 4 KV heads split no further), 4 episodes each = the 8
in parallel, bf16 params and K/V, fp32 head; per replica a page pool of 4 x 262,144 tokens (only
the 16 full-attention layers hold pages; the 48 Gated DeltaNet layers hold state blocks).
python3 -m tmax_jax.plan --config=configs/eval_terminal_horizon.py: ~33 GB per GPU of 141.

python3 launch/eval.py --config=configs/eval_terminal_horizon.py --config.tasks_dir=/tb2 \
    --config.address='' --config.model.checkpoint=runs/sft_terminal_horizon/hf \
    --config.output_dir=runs/eval_terminal_horizon
"""

from tmax_jax.agents import EpisodeConfig
from tmax_jax.agents.worker import WorkerConfig
from tmax_jax.config_dict import to_config_dict
from tmax_jax.inference.engine import EngineConfig
from tmax_jax.loop import ModelSpec, ServingConfig
from tmax_jax.loop.evaluate import EvalConfig
from tmax_jax.recipes import H200_X8
from tmax_jax.tasks.runner import RunnerConfig

HOURS_PER_TASK = 3
MAX_SEQUENCE = 262144  # Qwen3.5's context
EPISODES = 8  # in parallel: the server's slots over its replicas
REPLICAS, TENSOR = 2, 4
PAGE_SIZE = 64


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
        max_parallel_episodes=EPISODES, temperature=1.0, request_timeout_s=3600.0 * HOURS_PER_TASK
      ),
      model=ModelSpec(
        checkpoint="",
        preset="qwen3.5-27b",
        param_dtype="bfloat16",
        compute_dtype="bfloat16",
        head_dtype="float32",
      ),
      serving=ServingConfig(
        replicas=REPLICAS,
        tensor=TENSOR,
        engine=EngineConfig(
          max_concurrent_decodes=EPISODES // REPLICAS,
          max_len=MAX_SEQUENCE,
          max_prefill_length=MAX_SEQUENCE,
          page_size=PAGE_SIZE,
          num_pages=EPISODES // REPLICAS * MAX_SEQUENCE // PAGE_SIZE,
        ),
      ),
      topology=H200_X8,
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
