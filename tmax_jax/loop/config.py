"""Typed configs of the top-level jobs (RL, SFT, demo); each default is defined once, here or in the
component config it nests. `configs/*.py` files start from these and override fields."""

from __future__ import annotations

import dataclasses

from tmax_jax.agents.batching import rollout_inputs
from tmax_jax.agents.episode import EpisodeConfig
from tmax_jax.agents.rollout import RolloutConfig
from tmax_jax.agents.worker import WorkerConfig
from tmax_jax.config_dict import from_config_dict
from tmax_jax.models import registry
from tmax_jax.train.config import BatchInputs, LossConfig, TrainConfig

SFT_INPUTS = BatchInputs(source="SFT data (tokens and loss masks only)")
SFT_TRAIN = TrainConfig(loss=LossConfig(policy_loss="sft"))


def check_family(model_type: str, family: str, where: str = "") -> None:
  """The episode's family (tokenizer, tool-call syntax, stop tokens) must be the model's."""
  expected = registry.tokenizer_for(model_type).family
  if family != expected:
    raise ValueError(
      f"{where}episode.family={family!r}, but the model (model_type "
      f"{model_type!r}) uses the {expected!r} tokenizer family; set "
      f"{where}episode.family={expected!r}"
    )


def preset_family(preset: str) -> str:
  """The tokenizer family (EpisodeConfig.family) of a model preset, from its model_type."""
  return registry.tokenizer_for(registry.preset(preset).model_type).family


def check_model_family(model: ModelSpec, episode: EpisodeConfig, where: str = "") -> None:
  """Config time: a preset's model_type names its family (a checkpoint's is checked on load)."""
  if model.preset and not model.checkpoint:
    check_family(registry.preset(model.preset, **model.overrides).model_type, episode.family, where)


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


PLACEMENTS = ("colocated", "disaggregated")


@dataclasses.dataclass(frozen=True)
class TopologyConfig:
  """The hardware a job config is sized for, e.g. "8 x H200": the memory plan's defaults for
  --devices / --device_memory_gb / --processes (python3 -m tmax_jax.plan). devices 0 = not named."""

  name: str = ""
  devices: int = 0
  device_memory_gb: float = 0.0
  processes: int = 1

  def __post_init__(self):
    if self.devices < 0 or self.device_memory_gb < 0 or self.processes < 1:
      raise ValueError(
        f"topology devices={self.devices}, device_memory_gb={self.device_memory_gb}, "
        f"processes={self.processes}; expected devices, memory >= 0 and processes >= 1"
      )
    if self.devices and self.devices % self.processes:
      raise ValueError(
        f"topology.devices={self.devices} does not split into topology.processes="
        f"{self.processes} hosts"
      )


@dataclasses.dataclass(frozen=True)
class MeshConfig:
  """Axis sizes of a device mesh (sharding.MESH_AXES); one size may be -1 (= the devices left).

  The product must equal the devices the placement gives this mesh (loop/placement.py checks it
  and names these fields). `num_devices` > 0 uses only the first N of those devices (the rest
  stay idle: tests, or a deliberate smaller run)."""

  data: int = 1
  fsdp: int = -1
  sequence: int = 1
  tensor: int = 1
  num_devices: int = 0

  def __post_init__(self):
    sizes = self.sizes()
    if any(n == 0 or n < -1 for n in sizes.values()) or list(sizes.values()).count(-1) > 1:
      raise ValueError(f"mesh sizes {sizes}: each must be >= 1, or -1 for one of them")
    if self.num_devices < 0:
      raise ValueError(f"mesh.num_devices={self.num_devices}; expected >= 0 (0 = all)")

  def sizes(self) -> dict[str, int]:
    return {"data": self.data, "fsdp": self.fsdp, "sequence": self.sequence, "tensor": self.tensor}


@dataclasses.dataclass(frozen=True)
class ServingConfig:
  """The JetStream server the rollouts talk to over gRPC: in-process (loopback), or a separately
  launched one (`address`, e.g. launch/serve.py) that the loop pushes its weights to.

  Where an in-process server runs: placement "colocated" shares the trainer's devices (each
  process serves on its own local devices, the first replicas x tensor of them; its params are a
  resharded copy of the trainer's); "disaggregated" gives the last `devices` local devices of every
  process to the server (replicas x tensor of them), the others train. The serving mesh is
  ("replica", "tensor"): data-parallel replicas, each tensor parallel over `tensor` devices.
  `param_dtype` "" = the policy's."""

  max_concurrent_decodes: int = 8
  max_len: int = 2048
  max_prefill_length: int = 1024
  page_size: int = 16  # KV page size of the engine's paged pool (EngineConfig.page_size)
  num_pages: int = 0  # pages per replica (0 = every slot at max_len: the dense footprint)
  prefix_cache: bool = True  # off in RLConfig.deterministic runs (see loop/rl.py)
  batch_invariant: bool = False  # on in deterministic runs (inference.scheduler.SchedulerConfig)
  decode_steps: int = 4  # decode steps per dispatched program (EngineConfig.decode_steps)
  port: int = 0  # 0 = a free port
  address: str = ""  # "host:port" of an external server ("" = start one in-process)
  # Retries per request (<= 2 s apart, within worker.request_timeout_s): a restarting external
  # server is waited for; requests it cut are lost and their groups dropped (rollout/*_server).
  max_attempts: int = 1000
  placement: str = "colocated"
  devices: int = 0  # disaggregated: serving devices per process
  replicas: int = 1
  tensor: int = 1
  param_dtype: str = ""

  def __post_init__(self):
    if self.placement not in PLACEMENTS:
      raise ValueError(f"serving.placement={self.placement!r}; expected one of {list(PLACEMENTS)}")
    if self.placement == "disaggregated" and self.devices < 1:
      raise ValueError(
        f"serving.devices={self.devices}: placement 'disaggregated' needs the "
        "number of serving devices per process (>= 1)"
      )
    if self.placement == "colocated" and self.devices:
      raise ValueError(
        f"serving.devices={self.devices} is only for placement 'disaggregated' "
        "(colocated serves on the trainer's devices)"
      )
    if self.replicas < 1 or self.tensor < 1:
      raise ValueError(
        f"serving.replicas={self.replicas}, serving.tensor={self.tensor}; expected both >= 1"
      )


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
  mesh: MeshConfig = MeshConfig()  # the trainer's mesh (over the devices the placement leaves it)
  topology: TopologyConfig = TopologyConfig()  # what the config is sized for (the memory plan)
  advantage: str = "centered"
  steps: int = 500
  seq_len: int = 8192
  sandbox_backend: str = ""  # "" = auto
  sandbox_memory_mb: int = 4096
  output_dir: str = "runs/rl"
  export_dir: str = ""  # HF export at the end ("" = <output_dir>/hf)
  # Deterministic mode (needs rollout.async_steps = 0): batches take groups in prompt order and
  # nothing is generated while the trainer steps, so a resumed run repeats the uninterrupted one.
  deterministic: bool = False
  record_dir: str = ""  # write every step's rollout batch here (loop/replay.py)
  replay_dir: str = ""  # train on the batches recorded there instead of running rollouts

  def __post_init__(self):
    if self.deterministic and self.rollout.async_steps != 0:
      raise ValueError(
        f"deterministic=True needs rollout.async_steps=0, got "
        f"{self.rollout.async_steps} (async rollouts depend on timing)"
      )
    if self.record_dir and self.replay_dir:
      raise ValueError("record_dir and replay_dir are both set; a replay records nothing")
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
  mesh: MeshConfig = MeshConfig()
  topology: TopologyConfig = TopologyConfig()  # what the config is sized for (the memory plan)
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


def job_config(config_dict):
  """A job's ConfigDict (configs/*.py) -> its RLConfig (it has `rollout`) or SFTConfig."""
  return from_config_dict(RLConfig if "rollout" in config_dict else SFTConfig, config_dict)
