"""What to evaluate and how (launch/eval.py reads this from configs/eval_*.py)."""

from __future__ import annotations

import dataclasses

from tmax_jax.agents import harnesses
from tmax_jax.agents.episode import EpisodeConfig
from tmax_jax.agents.worker import WorkerConfig
from tmax_jax.loop.config import ModelSpec, ServingConfig
from tmax_jax.tasks import runner as runner_lib

POLICIES = ("oracle", "noop", "server")


@dataclasses.dataclass(frozen=True)
class EvalConfig:
  """What to evaluate and how. `episode` holds the limits of every harness and the model family
  (tokenizer, tool-call syntax, stop tokens); `harness` picks the harness and is copied into
  `episode.harness`, so the results' config shows the harness that ran. The sampling fields
  (temperature ... request_timeout_s) and `parallelism` are the worker's (`worker_config()`)."""

  tasks_dir: str = ""  # a task source (tasks/sources.py): directory, published set or parquet
  output_dir: str = ""
  policy: str = "oracle"
  address: str = ""  # policy=server: host:port of a running server ("" = serve `model` here)
  harness: str = "bash_tool"
  runs_per_task: int = 1  # k
  parallelism: int = 2
  pass_ks: tuple[int, ...] = (1, 2, 4, 8, 16)
  pass_threshold: float = 1.0
  max_tasks: int = 0  # 0 = every task found
  episode: EpisodeConfig = EpisodeConfig()
  runner: runner_lib.RunnerConfig = runner_lib.RunnerConfig()
  terminus_wait_s: float = 0.5  # scripted policies in the Terminus harness: seconds per wait
  temperature: float = 1.0
  top_p: float = 1.0
  top_k: int = 0
  seed: int = 0
  request_timeout_s: float = 600.0
  model: ModelSpec = ModelSpec(checkpoint="", preset="")
  serving: ServingConfig = ServingConfig()
  plot: bool = True

  def __post_init__(self):
    if self.policy not in POLICIES:
      raise ValueError(f"EvalConfig.policy={self.policy!r}; expected one of {POLICIES}")
    if self.harness not in harnesses.names():
      raise ValueError(f"EvalConfig.harness={self.harness!r}; expected one of {harnesses.names()}")
    if self.runs_per_task < 1 or self.parallelism < 1:
      raise ValueError(
        f"EvalConfig.runs_per_task={self.runs_per_task} and parallelism="
        f"{self.parallelism} must both be >= 1"
      )
    if (
      self.policy == "server"
      and not self.address
      and not (self.model.checkpoint or self.model.preset)
    ):
      raise ValueError(
        "EvalConfig: policy=server needs `address` (a running server) or "
        "`model.checkpoint` / `model.preset` to serve"
      )
    object.__setattr__(self, "episode", dataclasses.replace(self.episode, harness=self.harness))

  def worker_config(self) -> WorkerConfig:
    """The episode worker's settings: `parallelism` episode threads, the sampling fields."""
    return WorkerConfig(
      max_parallel_episodes=self.parallelism,
      temperature=self.temperature,
      top_p=self.top_p,
      top_k=self.top_k,
      seed=self.seed,
      request_timeout_s=self.request_timeout_s,
    )
