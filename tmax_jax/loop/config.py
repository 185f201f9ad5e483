"""Typed configs of the top-level jobs (RL, SFT, demo, serve); each default is defined once, here or
in the component config it nests. tmax_jax/recipes.py builds the recipe's runs from them and
`configs/*.py` files select one and override fields."""

from __future__ import annotations

import dataclasses
import math

from tmax_jax.agents import EpisodeConfig, RolloutConfig, stop_token_ids
from tmax_jax.agents.worker import WorkerConfig, episodes_in_flight, request_timeout_s
from tmax_jax.inference.engine import EngineConfig
from tmax_jax.inference.openai_api import OpenAIConfig
from tmax_jax.loop.rollout_batch import rollout_inputs
from tmax_jax.models import check_dtype, load_hf_dict, registry
from tmax_jax.tasks.runner import RunnerConfig
from tmax_jax.tasks.sources import TaskSource
from tmax_jax.train import BatchInputs, LossConfig, TrainConfig

SFT_INPUTS = BatchInputs(source="SFT data (tokens and loss masks only)")
SFT_TRAIN = TrainConfig(loss=LossConfig(policy_loss="sft"))


def check_family(model_type: str, family: str, where: str = "") -> None:
  """The episode's family (tokenizer, tool-call syntax, stop tokens) must be the model's."""
  expected = registry.tokenizer_for(model_type).family
  if family != expected:
    raise ValueError(
      f"{where}episode.family={family!r}, but the model (model_type "
      f"{model_type!r}) uses the {expected!r} tokenizer family; set "
      f"{where}episode.family={expected!r} (or leave it empty: it follows the model)"
    )


def with_family(episode: EpisodeConfig, model_type: str | None, where: str = "") -> EpisodeConfig:
  """`episode` with its family (tokenizer, tool-call syntax, stop tokens) derived from the model's
  `model_type` when empty, checked against it when set; unchanged when the model is not known."""
  if model_type is None:
    return episode
  if not episode.family:
    return dataclasses.replace(episode, family=registry.tokenizer_for(model_type).family)
  check_family(model_type, episode.family, where)
  return episode


def spec_model_type(model: ModelSpec) -> str | None:
  """The model_type a ModelSpec names, when known without loading weights: a preset's, or the
  config.json of a checkpoint directory that exists here; None otherwise (derived at load)."""
  if model.checkpoint:
    try:
      return load_hf_dict(model.checkpoint).get("model_type")
    except (OSError, ValueError):
      return None
  if model.preset:
    return registry.preset(model.preset, **model.overrides).model_type
  return None


def _derive_family(cfg, where: str = "") -> None:
  """Config time: a frozen job config's `episode.family` follows its `model` (with_family)."""
  episode = with_family(cfg.episode, spec_model_type(cfg.model), where)
  object.__setattr__(cfg, "episode", episode)


def check_temperature(train: TrainConfig, worker: WorkerConfig, where: str = "") -> None:
  """DPPO's ratio compares the trainer's logprobs with the sampler's: both must be of the same
  distribution, so the trainer's temperature is the sampler's."""
  if train.temperature != worker.temperature:
    raise ValueError(
      f"{where}train.temperature={train.temperature} != {where}worker.temperature="
      f"{worker.temperature}: the trainer's logprobs must be of the distribution the server "
      "samples from; set both to the same value"
    )


@dataclasses.dataclass(frozen=True)
class ModelSpec:
  """Where the policy comes from: an HF checkpoint dir, or a preset (+ overrides) at random init.

  Random weights (a preset without a checkpoint, or `random` with one) serve with the vocabulary
  of the preset or config.json (151936 for Qwen3: every id of its tokenizer); a `vocab_size`
  override smaller than the tokenizer's leaves the OpenAI API unable to serve them."""

  checkpoint: str = ""  # an HF checkpoint directory ('' = the preset at random init)
  preset: str = "qwen3-0.6b"  # model preset (registry.preset), e.g. qwen3-8b, qwen3.5-9b
  # ModelConfig fields replaced (remat, attention kernel, rules; shapes on a preset)
  overrides: dict = dataclasses.field(default_factory=dict)
  param_dtype: str = "float32"  # dtype the params are stored in (fp32 masters)
  compute_dtype: str = "float32"  # dtype of the activations and matmuls
  head_dtype: str = "float32"  # dtype of the LM head matmul and logits (the recipe's fp32 head)
  seed: int = 0  # init seed of random weights
  # Random weights with a checkpoint too: its config.json's architecture, no weights read (vLLM's
  # --load-format dummy); a preset without a checkpoint is random anyway
  random: bool = False
  # Random weights only: replies sampled at temperature 1 end after about this many tokens
  # (models/dummy_weights.py: same cost per token, layers zeroed); 0 = a plain random init, whose
  # replies run to max_tokens. Ignored (logged) when the weights are a checkpoint's
  random_reply_tokens: int = 0

  def __post_init__(self):
    for name in ("param_dtype", "compute_dtype", "head_dtype"):
      check_dtype(name, getattr(self, name))  # before any weight is loaded
    if self.random_reply_tokens < 0 or self.random_reply_tokens == 1:
      raise ValueError(
        f"model.random_reply_tokens={self.random_reply_tokens}; expected 0 (off) or >= 2"
      )

  @property
  def random_weights(self) -> bool:
    """Whether the params are a random init (no checkpoint weights read)."""
    return self.random or not self.checkpoint


PLACEMENTS = ("colocated", "disaggregated", "nodes")


@dataclasses.dataclass(frozen=True)
class TopologyConfig:
  """The hardware a job config is sized for, e.g. "8 x H200": the memory plan's defaults for
  --devices / --device_memory_gb / --processes (python3 -m tmax_jax.plan). devices 0 = not named."""

  name: str = ""  # what the hardware is called in the plan's table
  devices: int = 0  # devices of the topology (0 = not named)
  device_memory_gb: float = 0.0  # memory of one device, GB
  processes: int = 1  # hosts the devices are split over

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

  data: int = 1  # data-parallel axis (replicated params)
  fsdp: int = -1  # fully sharded data-parallel axis
  sequence: int = 1  # context-parallel axis (activations split on time)
  tensor: int = 1  # tensor-parallel axis
  num_devices: int = 0  # use only the first N devices (0 = all)

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

  `engine` is each replica's serving shape (inference.engine.EngineConfig); a job fills in what it
  derives itself: the stop ids (the episode family's), `max_topk` (worker.top_logprobs), and for
  RLConfig.deterministic runs no prefix cache and batch-invariant steps.

  Where an in-process server runs: placement "colocated" shares the trainer's devices (each
  process serves on its own local devices, the first replicas x tensor of them; its params are a
  resharded copy of the trainer's); "disaggregated" gives the last `devices` local devices of every
  process to the server (replicas x tensor of them), the others train; "nodes" serves on `nodes`
  inference nodes apart from the trainer's, each one server of replicas x tensor devices behind a
  router (launch/cluster.py places them on Ray and sets `address` to the router), and the trainer
  trains on all its devices. The serving mesh is
  ("replica", "tensor"): data-parallel replicas, each tensor parallel over `tensor` devices.
  `param_dtype` "" = the policy's (the LM head is served in fp32 whatever it is)."""

  engine: EngineConfig = EngineConfig()
  port: int = 0  # 0 = a free port
  address: str = ""  # "host:port" of an external server ("" = start one in-process)
  # Retries per request (<= 2 s apart, within worker.request_timeout_s): a restarting external
  # server is waited for; requests it cut are lost and their groups dropped (rollout/*_server).
  max_attempts: int = 1000
  placement: str = "colocated"  # colocated | disaggregated (see above)
  devices: int = 0  # disaggregated: serving devices per process
  replicas: int = 1  # data-parallel server replicas per process
  tensor: int = 1  # tensor-parallel devices per replica
  param_dtype: str = ""  # the served params' dtype ('' = the policy's; the head stays fp32)
  nodes: int = 0  # placement 'nodes': inference nodes, one server (replicas x tensor) on each

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
    if (self.placement == "nodes") != (self.nodes >= 1):
      raise ValueError(
        f"serving.nodes={self.nodes} with placement {self.placement!r}: placement 'nodes' takes "
        "the number of inference nodes (>= 1), and only it does"
      )
    if self.param_dtype:
      check_dtype("serving.param_dtype", self.param_dtype)

  def engine_for(self, stop_token_ids=(), max_topk: int = 0, deterministic: bool = False):
    """The EngineConfig an in-process server runs with: `engine` plus what the job derives."""
    engine = dataclasses.replace(
      self.engine,
      stop_token_ids=tuple(stop_token_ids) or self.engine.stop_token_ids,
      max_topk=max(max_topk, self.engine.max_topk),
    )
    if deterministic:  # a prefix served from the cache differs from a recomputed one in the last
      # bit, a restarted server starts with an empty cache, and a request's numbers must not
      # depend on which others share its prefill and decode steps
      engine = dataclasses.replace(engine, prefix_cache=False, batch_invariant=True)
    return engine


@dataclasses.dataclass(frozen=True)
class ServeConfig:
  """A standalone server (launch/serve.py): the policy, its serving shape (`serving.engine`,
  `serving.replicas` x `serving.tensor` on this host's first devices, `serving.param_dtype`,
  `serving.port`), where gRPC listens, the OpenAI-compatible HTTP API and the default sampling of
  JetStream Decode calls. `serving.engine.stop_token_ids` () = the model family's."""

  model: ModelSpec = ModelSpec()
  serving: ServingConfig = ServingConfig(port=9000)
  host: str = "127.0.0.1"  # '[::]' / '0.0.0.0' opt into every interface
  threads: int = 0  # gRPC worker threads; 0 = max(64, slots)
  temperature: float = 0.0  # of JetStream Decode calls (Rollout requests set their own)
  openai: OpenAIConfig = OpenAIConfig()  # port -1 = no HTTP API
  ready_file: str = ""  # JSON {"address", "pid", ...} written atomically once serving
  topology: TopologyConfig = TopologyConfig()  # what the config is sized for (the memory plan)

  def __post_init__(self):
    if self.serving.address or self.serving.placement != "colocated":
      raise ValueError(
        "serve: serving.address and serving.placement are the RL job's (where its rollouts go); "
        "a standalone server serves on this host's first serving.replicas x serving.tensor devices"
      )


@dataclasses.dataclass(frozen=True)
class RLConfig:
  """The RL run: recipe defaults come from the nested configs (recipe.md Table 13; the recipe's
  runs are in tmax_jax/recipes.py). `episode.family` "" follows the model."""

  model: ModelSpec = ModelSpec()
  tasks: TaskSource = TaskSource()
  rollout: RolloutConfig = RolloutConfig()
  episode: EpisodeConfig = EpisodeConfig()
  worker: WorkerConfig = WorkerConfig()
  train: TrainConfig = TrainConfig()
  serving: ServingConfig = ServingConfig()
  runner: RunnerConfig = RunnerConfig()  # the episodes' sandboxes (backend, memory, verifier)
  mesh: MeshConfig = MeshConfig()  # the trainer's mesh (over the devices the placement leaves it)
  topology: TopologyConfig = TopologyConfig()  # what the config is sized for (the memory plan)
  steps: int = 500  # RL steps (optimizer steps; the schedule's horizon)
  seq_len: int = 8192  # longest trajectory in tokens (prompt + response)
  output_dir: str = "runs/rl"  # metrics, TensorBoard, checkpoints and the HF export go here
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
    if self.deterministic and self.rollout.on_failure != "rerun":
      raise ValueError(
        f"deterministic=True needs rollout.on_failure='rerun', got "
        f"{self.rollout.on_failure!r} (a dropped or masked group changes the batch)"
      )
    if self.record_dir and self.replay_dir:
      raise ValueError("record_dir and replay_dir are both set; a replay records nothing")
    self.train.check_data(rollout_inputs(self.worker.top_logprobs), self.seq_len)
    check_temperature(self.train, self.worker)
    _derive_family(self)

  def served_engine(self) -> EngineConfig:
    """`serving.engine` with what the job derives for its server (ServingConfig.engine_for): the
    episode family's stop ids ("" family: none added, the served model's own, as a serve job's),
    the worker's top-k logprobs, a deterministic run's cache and batching."""
    stops = stop_token_ids(self.episode) if self.episode.family else ()
    return self.serving.engine_for(stops, self.worker.top_logprobs, self.deterministic)

  def rollout_worker(self, processes: int = 1) -> WorkerConfig:
    """`worker` as one of `processes` processes runs it, its derived fields (0) filled in:
    max_parallel_episodes = this process's server slots (serving.replicas x
    engine.max_concurrent_decodes; an external server at `address` is taken to be that size, on
    inference nodes every node's, either shared by the processes: this process's share), at
    most its share of the episodes the scheduler may hold (prompts_per_batch / processes x
    group_size x (1 + async_steps)), so the server is full; request_timeout_s from the episode's
    caps (agents/worker.request_timeout_s), times the turns a request may queue behind when more
    episodes than slots run (an explicit max_parallel_episodes; never the derived one)."""
    w, r = self.worker, self.rollout
    slots = self.serving.replicas * self.serving.engine.max_concurrent_decodes
    if self.serving.placement == "nodes":  # every node's server, behind one router
      slots *= self.serving.nodes
    if self.serving.address or self.serving.placement == "nodes":  # shared by the processes
      slots = max(1, slots // processes)
    batch = max(1, r.prompts_per_batch // processes) * r.group_size
    episodes = w.max_parallel_episodes or episodes_in_flight(slots, batch, r.async_steps)
    timeout = request_timeout_s(w, self.episode)
    if not w.request_timeout_s:
      timeout *= math.ceil(episodes / slots)
    return dataclasses.replace(w, max_parallel_episodes=episodes, request_timeout_s=timeout)


@dataclasses.dataclass(frozen=True)
class SFTConfig:
  """SFT on trajectories: a JSONL of token trajectories, or oracle trajectories of tasks.
  `steps` 0 = train.epochs x ceil(trajectories / train.global_batch)."""

  model: ModelSpec = ModelSpec()
  tasks: TaskSource = TaskSource()
  trajectories: str = ""  # JSONL of {"tokens": [...], "loss_mask": [...]}; "" = oracle runs
  episode: EpisodeConfig = EpisodeConfig()
  train: TrainConfig = SFT_TRAIN
  runner: RunnerConfig = RunnerConfig()  # the oracle runs' sandboxes
  mesh: MeshConfig = MeshConfig()
  topology: TopologyConfig = TopologyConfig()  # what the config is sized for (the memory plan)
  steps: int = 0  # optimizer steps (0 = epochs x ceil(trajectories / global_batch))
  seq_len: int = 8192  # row length in tokens (trajectories are packed into rows)
  output_dir: str = "runs/sft"  # metrics, TensorBoard, checkpoints and the HF export go here
  export_dir: str = ""  # HF export at the end ("" = <output_dir>/hf)

  def __post_init__(self):
    self.train.check_data(SFT_INPUTS, self.seq_len)
    _derive_family(self)


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
  sft_steps: int = 100  # SFT steps per seed
  rl_train: TrainConfig = TrainConfig()
  rl_steps: int = 20  # RL steps per seed
  rollout: RolloutConfig = RolloutConfig()
  worker: WorkerConfig = WorkerConfig()
  serving: ServingConfig = ServingConfig()
  runner: RunnerConfig = RunnerConfig()
  seq_len: int = 1024  # longest trajectory in tokens
  eval_samples: int = 4  # sampled episodes per held-out task (temperature = worker.temperature)
  seeds: tuple[int, ...] = (0,)  # the seeds to run (results report mean +- stderr over them)
  output_dir: str = "runs/demo"  # results.json and every phase's outputs

  def __post_init__(self):
    self.sft_train.check_data(SFT_INPUTS, self.seq_len, "sft_train")
    self.rl_train.check_data(rollout_inputs(self.worker.top_logprobs), self.seq_len, "rl_train")
    check_temperature(self.rl_train, self.worker)
    _derive_family(self)


def node_server_config(rl: RLConfig) -> ServeConfig:
  """The server of one inference node of an RL job with placement 'nodes' (configs/serve_policy.py;
  launch/cluster.py starts one per node): the job's policy, the node's serving.replicas x
  serving.tensor devices, its engine with what the job derives (the episode family's stop ids, the
  worker's top-k logprobs, a deterministic run's cache and batching), sized for one host of the
  job's topology."""
  serving = dataclasses.replace(
    rl.serving, engine=rl.served_engine(), placement="colocated", nodes=0, address="", devices=0
  )
  topo = rl.topology
  node = dataclasses.replace(
    topo, name=f"one host of {topo.name}", devices=topo.devices // topo.processes, processes=1
  )
  return ServeConfig(model=rl.model, serving=serving, topology=node)
