"""Any OpenAI-compatible chat endpoint as the policy (a baseline row: a hosted model, a vLLM or
SGLang server, or ours at launch/serve.py's --config.openai.port), scored like our own model.

python3 launch/eval.py --config=configs/eval_endpoint.py --config.endpoint.base_url=URL \
    --config.endpoint.model=NAME --config.tasks_dir=/tasks --config.output_dir=runs/eval_NAME
The API key is read from $OPENAI_API_KEY (--config.endpoint.api_key_env=OTHER_VAR, or '' for an
endpoint without one); --config.endpoint.price_per_mtok_in/out (USD per million tokens) adds each
trial's cost to its token usage. The same harness, limits and time rules as eval_server.py: the
bash tool (sent as a native OpenAI tool), k = 4 runs per task at temperature 1.0, the recipe's
prompt and token limits counted in the Qwen3 tokenizer the conversation is rendered with.
"""

from tmax_jax.agents import EpisodeConfig
from tmax_jax.agents.worker import WorkerConfig
from tmax_jax.config_dict import to_config_dict
from tmax_jax.loop.evaluate import EndpointConfig, EvalConfig
from tmax_jax.recipes import MAX_PROMPT
from tmax_jax.tasks.runner import RunnerConfig


def get_config():
  return to_config_dict(
    EvalConfig(
      tasks_dir="",
      output_dir="runs/eval_endpoint",
      policy="endpoint",
      endpoint=EndpointConfig(
        base_url="http://127.0.0.1:8000/v1", model="", api_key_env="OPENAI_API_KEY"
      ),
      runs_per_task=4,
      worker=WorkerConfig(max_parallel_episodes=8, temperature=1.0),
      episode=EpisodeConfig(
        harness="bash_tool", family="qwen3", max_prompt_tokens=MAX_PROMPT, wall_time_s=0.0
      ),
      runner=RunnerConfig(backend="", image="", memory_mb=4096, min_verifier_timeout_s=0.0),
    )
  )
