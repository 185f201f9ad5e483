"""Typed configs of the top-level jobs (RL, SFT, demo); each default is defined once, here or in the
component config it nests. `configs/*.py` files start from these and override fields."""

from __future__ import annotations

import dataclasses

from tmax_jax.agents.batching import rollout_inputs
from tmax_jax.agents.episode import EpisodeConfig
from tmax_jax.agents.rollout import RolloutConfig
from tmax_jax.agents.worker import WorkerConfig
from tmax_jax.models import registry
from tmax_jax.train.config import BatchInputs, LossConfig, TrainConfig

SFT_INPUTS = BatchInputs(source="SFT data (tokens and loss masks only)")
SFT_TRAIN = TrainConfig(loss=LossConfig(policy_loss="sft"))


def check_family(model_type: str, family: str, where: str = "") -> None:
  """The episode's family (tokenizer, tool-call syntax, stop tokens) must be the model's."""
  expected = registry.tokenizer_for(model_type).family
  if family != expected:
    raise ValueError(f"{where}episode.family={family!r}, but the model (model_type "
                     f"{model_type!r}) uses the {expected!r} tokenizer family; set "
                     f"{where}episode.family={expected!r}")


def preset_family(preset: str) -> str:
  """The tokenizer family (EpisodeConfig.family) of a model preset, from its model_type."""
  return registry.tokenizer_for(registry.preset(preset).model_type).family


def check_model_family(model: ModelSpec, episode: EpisodeConfig, where: str = "") -> None:
  """Config time: a preset's model_type names its family (a checkpoint's is checked on load)."""
  if model.preset and not model.checkpoint:
    check_family(registry.preset(model.preset, **model.overrides).model_type, episode.family,
                 where)


@dataclasses.dataclass(frozen=True)
class ModelSpec:
  """Where the policy comes from: an HF checkpoint dir, or a preset (+ overrides) at random init."""

  checkpoint: str = ""
  preset: str = "qwen3-0.6b"
  overrides: dict = dataclasses.field(default_factory=dict)
  param_dtype: str = "float32"
  compute_dtype: str = "float32"
  head_dtype: str = "float32"
  seed: int = 0


@dataclasses.dataclass(frozen=True)
class TaskSource:
  """Training / held-out tasks: a directory of TB1/TB2 tasks, or procedural families.

  Procedural tasks: `num_train` seeds from `seed` and `num_eval` held-out seeds after them, round
  robin over `families` (all families when empty) at `difficulty`.
  """

  directory: str = ""
  families: tuple[str, ...] = ()
  difficulty: int = 0
  num_train: int = 64
  num_eval: int = 16
  seed: int = 0


@dataclasses.dataclass(frozen=True)
class ServingConfig:
  """The JetStream server the rollouts talk to over gRPC: in-process (loopback), or a separately
  launched one (`address`, e.g. launch/serve.py) that the loop pushes its weights to."""

  max_concurrent_decodes: int = 8
  max_len: int = 2048
  max_prefill_length: int = 1024
  port: int = 0  # 0 = a free port
  address: str = ""  # "host:port" of an external server ("" = start one in-process)
  # Retries per request (<= 2 s apart, within worker.request_timeout_s): a restarting external
  # server is waited for; requests it cut are lost and their groups dropped (rollout/*_server).
  max_attempts: int = 1000


@dataclasses.dataclass(frozen=True)
class RLConfig:
  """The RL run: recipe defaults come from the nested configs (recipe.md Table 13)."""

  model: ModelSpec = ModelSpec()
  tasks: TaskSource = TaskSource()
  rollout: RolloutConfig = RolloutConfig()
  episode: EpisodeConfig = EpisodeConfig()
  worker: WorkerConfig = WorkerConfig()
  train: TrainConfig = TrainConfig()
  serving: ServingConfig = ServingConfig()
  advantage: str = "centered"
  steps: int = 500
  seq_len: int = 8192
  sandbox_backend: str = ""  # "" = auto
  sandbox_memory_mb: int = 4096
  output_dir: str = "runs/rl"
  export_dir: str = ""  # HF export at the end ("" = <output_dir>/hf)

  def __post_init__(self):
    self.train.check_data(rollout_inputs(self.worker.top_logprobs), self.seq_len)
    check_model_family(self.model, self.episode)


@dataclasses.dataclass(frozen=True)
class SFTConfig:
  """SFT on trajectories: a JSONL of token trajectories, or oracle trajectories of tasks."""

  model: ModelSpec = ModelSpec()
  tasks: TaskSource = TaskSource()
  trajectories: str = ""  # JSONL of {"tokens": [...], "loss_mask": [...]}; "" = oracle runs
  episode: EpisodeConfig = EpisodeConfig()
  train: TrainConfig = SFT_TRAIN
  steps: int = 0  # 0 = epochs x batches
  seq_len: int = 8192
  sandbox_backend: str = ""
  output_dir: str = "runs/sft"
  export_dir: str = ""

  def __post_init__(self):
    self.train.check_data(SFT_INPUTS, self.seq_len)
    check_model_family(self.model, self.episode)


@dataclasses.dataclass(frozen=True)
class DemoConfig:
  """The CPU demo: random tiny model -> SFT on oracle trajectories -> DPPO RL -> held-out evals.

  One model/tokenizer/task source/harness for every phase; the phases' own settings nest here and
  are assembled into an SFTConfig and an RLConfig per seed.
  """

  model: ModelSpec = ModelSpec()
  tasks: TaskSource = TaskSource()
  episode: EpisodeConfig = EpisodeConfig()
  sft_train: TrainConfig = SFT_TRAIN
  sft_steps: int = 100
  rl_train: TrainConfig = TrainConfig()
  rl_steps: int = 20
  rollout: RolloutConfig = RolloutConfig()
  worker: WorkerConfig = WorkerConfig()
  serving: ServingConfig = ServingConfig()
  seq_len: int = 1024
  eval_samples: int = 4  # sampled episodes per held-out task (temperature = worker.temperature)
  seeds: tuple[int, ...] = (0,)
  sandbox_backend: str = ""
  output_dir: str = "runs/demo"

  def __post_init__(self):
    self.sft_train.check_data(SFT_INPUTS, self.seq_len, "sft_train")
    self.rl_train.check_data(rollout_inputs(self.worker.top_logprobs), self.seq_len, "rl_train")
    check_model_family(self.model, self.episode)
