"""What to evaluate and how (launch/eval.py reads this from configs/eval_*.py)."""

from __future__ import annotations

import dataclasses

from tmax_jax.agents import EpisodeConfig, harnesses
from tmax_jax.agents.worker import WorkerConfig
from tmax_jax.loop.config import (
  ModelSpec,
  ServingConfig,
  TopologyConfig,
  spec_model_type,
  with_family,
)
from tmax_jax.tasks import runner as runner_lib
from tmax_jax.tasks.generator.llm import MAX_TOKENS_PARAMS

POLICIES = ("oracle", "noop", "server", "endpoint")
# The tokenizer of scripted policies' trajectories when neither the episode nor a model names one.
SCRIPTED_FAMILY = "qwen3"


@dataclasses.dataclass(frozen=True)
class EndpointConfig:
  """policy=endpoint: any OpenAI-compatible chat endpoint (vLLM, SGLang, a hosted API, ours) plays
  the harness through horizon/teacher.ChatTeacher, with native tool calls for the bash-tool
  harness. Requests go through tasks/generator/llm.ChatClient (the pipeline's client): 408, 409,
  429, 5xx, timeouts and connection errors are retried `max_retries` times with the openai
  package's exponential backoff (0.5 s doubling to 8 s, with jitter) or the server's Retry-After;
  a reply still failing errors its trial (never scored). Per trial the endpoint's `usage` token
  counts are recorded, and its cost when a price is set. The harness renders and re-tokenises the
  conversation with episode.family's chat template (qwen3 unless set); worker.temperature,
  worker.request_timeout_s and per-episode seeds are sent (top_p / top_k are not)."""

  # both required by policy=endpoint (checked when the run starts, as tasks_dir)
  base_url: str = ""  # e.g. https://api.openai.com/v1, http://127.0.0.1:8000/v1
  model: str = ""  # the model name the endpoint serves
  api_key_env: str = ""  # environment variable holding the API key ("" = none: local servers)
  max_retries: int = 5  # per request, with backoff
  price_per_mtok_in: float = 0.0  # USD per million prompt tokens (0 = no cost recorded)
  price_per_mtok_out: float = 0.0  # USD per million completion tokens (0 = no cost recorded)
  # bash_tool harness: the bash tool sent as OpenAI `tools` and the reply's `tool_calls` written
  # back in the family's syntax; False: the conversation as text (the pipeline's calibration)
  native_tools: bool = True
  # the request field capping a reply: "max_completion_tokens" for OpenAI's reasoning models
  max_tokens_param: str = "max_tokens"

  def __post_init__(self):
    if self.max_retries < 0:
      raise ValueError(f"endpoint.max_retries={self.max_retries}; expected >= 0")
    if self.price_per_mtok_in < 0 or self.price_per_mtok_out < 0:
      raise ValueError(
        f"endpoint.price_per_mtok_in={self.price_per_mtok_in}, price_per_mtok_out="
        f"{self.price_per_mtok_out}; expected >= 0"
      )
    if self.max_tokens_param not in MAX_TOKENS_PARAMS:
      raise ValueError(
        f"endpoint.max_tokens_param={self.max_tokens_param!r}; expected one of "
        f"{list(MAX_TOKENS_PARAMS)}"
      )


@dataclasses.dataclass(frozen=True)
class EvalConfig:
  """What to evaluate and how. `episode` holds the harness, the limits and the model family
  (tokenizer, tool-call syntax, stop tokens; "" = the served model's); `worker` the episode
  threads (`worker.max_parallel_episodes` trials at a time) and the sampling settings.

  Time limits follow Terminal-Bench 2.0's protocol (Harbor's) by default: the agent gets each
  task's [agent] timeout_sec (episode.wall_time_s 0; > 0 gives every task that budget instead) and
  the tests its [verifier] timeout_sec (runner.min_verifier_timeout_s 0; the recipe's RL rule is
  600), both x runner.timeout_multiplier (Harbor's --timeout-multiplier)."""

  tasks_dir: str = ""  # a task source (tasks/sources.py): directory, published set or parquet
  # trials.jsonl, results.json, the table and the plot go here; when it already holds an earlier
  # run's results, into the first free <output_dir>-2, -3, ... instead (unless `overwrite`)
  output_dir: str = ""
  overwrite: bool = False  # replace the results an earlier run left in output_dir
  policy: str = "oracle"  # oracle | noop | server | endpoint
  address: str = ""  # policy=server: host:port of a running server ("" = serve `model` here)
  endpoint: EndpointConfig = EndpointConfig()  # policy=endpoint: the chat endpoint
  runs_per_task: int = 1  # k
  pass_ks: tuple[int, ...] = (1, 2, 4, 8, 16)  # the k of the unbiased pass@k reported
  pass_threshold: float = 1.0  # a trial passes at reward >= this
  max_tasks: int = 0  # 0 = every task found
  episode: EpisodeConfig = EpisodeConfig(wall_time_s=0.0)  # the tasks' own agent timeouts
  worker: WorkerConfig = WorkerConfig(max_parallel_episodes=2)
  # the tasks' own verifier timeouts; the tests' installs resolved against packages of each task's
  # benchmark's release (tasks/runner.py RELEASE), not the day's newest
  runner: runner_lib.RunnerConfig = runner_lib.RunnerConfig(
    min_verifier_timeout_s=0.0, packages_before=runner_lib.RELEASE
  )
  terminus_wait_s: float = 0.5  # scripted policies in the Terminus harness: seconds per wait
  model: ModelSpec = ModelSpec(checkpoint="", preset="")
  serving: ServingConfig = ServingConfig()
  # policy=server: what the server it starts is sized for (the memory plan)
  topology: TopologyConfig = TopologyConfig()
  plot: bool = True  # write pass_at_1.png
  # A trial that errored (the infrastructure or the setup failed: no sandbox, a lost server, a
  # prompt the server refuses) is never scored; pass@1 is over the scored trials. launch/eval.py
  # exits with an error when no trial was scored or more than this share of them errored (the
  # scored ones may then be a biased subset); 1.0 = only when none was scored.
  max_error_share: float = 0.1

  def __post_init__(self):
    if self.policy not in POLICIES:
      raise ValueError(f"policy={self.policy!r}; expected one of {list(POLICIES)}")
    if self.episode.harness not in harnesses.names():
      raise ValueError(
        f"episode.harness={self.episode.harness!r}; expected one of {harnesses.names()}"
      )
    if self.runs_per_task < 1:
      raise ValueError(f"runs_per_task={self.runs_per_task}; expected >= 1")
    if not 0.0 <= self.max_error_share <= 1.0:
      raise ValueError(f"max_error_share={self.max_error_share}; expected in [0, 1]")
    serves_model = self.policy == "server" and not self.address
    if serves_model and not (self.model.checkpoint or self.model.preset):
      raise ValueError(
        "policy=server needs `address` (a running server) or `model.checkpoint` / "
        "`model.preset` to serve"
      )
    episode = self.episode
    if serves_model:
      episode = with_family(episode, spec_model_type(self.model))
    elif not episode.family and self.policy != "server":
      episode = dataclasses.replace(episode, family=SCRIPTED_FAMILY)
    if self.policy == "server" and self.address and not episode.family:
      raise ValueError(
        f"policy=server at address={self.address!r}: set episode.family to the served model's "
        "tokenizer family (e.g. qwen3, qwen3_5)"
      )
    object.__setattr__(self, "episode", episode)
