"""What to evaluate and how (launch/eval.py reads this from configs/eval_*.py)."""

from __future__ import annotations

import dataclasses

from tmax_jax.agents import harnesses
from tmax_jax.agents.episode import EpisodeConfig
from tmax_jax.agents.worker import WorkerConfig
from tmax_jax.loop.config import ModelSpec, ServingConfig, spec_model_type, with_family
from tmax_jax.tasks import runner as runner_lib

POLICIES = ("oracle", "noop", "server")
# The tokenizer of scripted policies' trajectories when neither the episode nor a model names one.
SCRIPTED_FAMILY = "qwen3"


@dataclasses.dataclass(frozen=True)
class EvalConfig:
  """What to evaluate and how. `episode` holds the harness, the limits and the model family
  (tokenizer, tool-call syntax, stop tokens; "" = the served model's); `worker` the episode
  threads (`worker.max_parallel_episodes` trials at a time) and the sampling settings."""

  tasks_dir: str = ""  # a task source (tasks/sources.py): directory, published set or parquet
  output_dir: str = ""  # trials.jsonl, results.json, the table and the plot go here
  policy: str = "oracle"  # oracle | noop | server
  address: str = ""  # policy=server: host:port of a running server ("" = serve `model` here)
  runs_per_task: int = 1  # k
  pass_ks: tuple[int, ...] = (1, 2, 4, 8, 16)  # the k of the unbiased pass@k reported
  pass_threshold: float = 1.0  # a trial passes at reward >= this
  max_tasks: int = 0  # 0 = every task found
  episode: EpisodeConfig = EpisodeConfig()
  worker: WorkerConfig = WorkerConfig(max_parallel_episodes=2)
  runner: runner_lib.RunnerConfig = runner_lib.RunnerConfig()
  terminus_wait_s: float = 0.5  # scripted policies in the Terminus harness: seconds per wait
  model: ModelSpec = ModelSpec(checkpoint="", preset="")
  serving: ServingConfig = ServingConfig()
  plot: bool = True  # write pass_at_1.png

  def __post_init__(self):
    if self.policy not in POLICIES:
      raise ValueError(f"policy={self.policy!r}; expected one of {list(POLICIES)}")
    if self.episode.harness not in harnesses.names():
      raise ValueError(
        f"episode.harness={self.episode.harness!r}; expected one of {harnesses.names()}"
      )
    if self.runs_per_task < 1:
      raise ValueError(f"runs_per_task={self.runs_per_task}; expected >= 1")
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
