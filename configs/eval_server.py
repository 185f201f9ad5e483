"""A model served by tmax_jax.inference: a running server (`address`, default launch/serve.py's
127.0.0.1:9000, e.g. `launch/serve.py --config=configs/serve_random.py`, whose caps fit this
config's requests) or, with address '', a checkpoint served here for the run.

python3 launch/eval.py --config=configs/eval_server.py --config.tasks_dir=/tasks \
    --config.output_dir=runs/eval
python3 launch/eval.py --config=configs/eval_server.py --config.address='' \
    --config.model.checkpoint=/ckpt/hf --config.tasks_dir=/tasks --config.output_dir=runs/eval
Recipe evaluation settings: k = 4 runs per task, temperature 1.0, the RL episode's token and
tool-call limits. Terminal-Bench 2.0's time limits: each task's own [agent] and [verifier]
timeout_sec (scaled by --config.runner.timeout_multiplier, Harbor's --timeout-multiplier; the
recipe's RL rule for tests: --config.runner.min_verifier_timeout_s=600). With a running server set
episode.family to its tokenizer family. A server started here holds and prefills the longest context
an episode sends (prompt cap + response cap: every turn's request carries the whole context so far).
"""

from tmax_jax.agents import EpisodeConfig
from tmax_jax.agents.worker import WorkerConfig
from tmax_jax.config_dict import to_config_dict
from tmax_jax.inference.engine import EngineConfig
from tmax_jax.loop import ModelSpec, ServingConfig
from tmax_jax.loop.evaluate import EvalConfig
from tmax_jax.recipes import MAX_PROMPT
from tmax_jax.tasks.runner import RunnerConfig

MAX_RESPONSE = EpisodeConfig().max_response_tokens  # the recipe's 65536
MAX_SEQUENCE = MAX_PROMPT + MAX_RESPONSE


def get_config():
  return to_config_dict(
    EvalConfig(
      tasks_dir="",
      output_dir="runs/eval",
      policy="server",
      address="127.0.0.1:9000",
      runs_per_task=4,
      worker=WorkerConfig(max_parallel_episodes=8, temperature=1.0),
      model=ModelSpec(checkpoint="", preset=""),
      serving=ServingConfig(
        engine=EngineConfig(
          max_concurrent_decodes=8, max_len=MAX_SEQUENCE, max_prefill_length=MAX_SEQUENCE
        )
      ),
      episode=EpisodeConfig(
        harness="bash_tool", family="qwen3", max_prompt_tokens=MAX_PROMPT, wall_time_s=0.0
      ),
      runner=RunnerConfig(backend="", image="", memory_mb=4096, min_verifier_timeout_s=0.0),
    )
  )
