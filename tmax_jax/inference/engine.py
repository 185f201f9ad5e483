"""The serving engine: data-parallel replicas of one model, each tensor parallel over its devices,
each with its own slots, paged KV pool and prefix cache; and JetStream's Engine API (0.2.2) per
replica.

Mesh: `TmaxEngine` takes a `jax.sharding.Mesh` with axes ("replica", "tensor") (`serving_mesh`);
replica r runs on the devices `mesh.devices[r]` as a 1-D ("tensor",) mesh. Params are sharded by
the model's logical-axis rules restricted to "tensor" (decode.serving_rules): heads, kv heads, MLP
and vocabulary split across a replica's devices, replicated across replicas.

Layers (see docs/design/inference.md):
  decode.PagedCore      jitted device programs of one replica (paged pool, prefill, decode)
  scheduler.Scheduler   admission, batched/chunked prefill, decode loop, prefix cache (host)
  ReplicaEngine         an `engine_api.Engine` over one replica (prefill / insert / generate keep
                        working for JetStream's stock Driver); the RL driver runs its scheduler
  TmaxEngine            the replicas, the served weights (`param_shardings`, `swap`), routing
Weights live in one `ParamsBox` per replica: every program reads it once per call, so a swap lands
between two decode steps and each token carries the version of the weights that produced it.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding

from tmax_jax.inference import compat

compat.apply()

from jetstream.engine import engine_api, tokenizer_api, tokenizer_pb2

from tmax_jax.inference import decode, paged, sampling, scheduler, updates
from tmax_jax.models import ModelConfig

MESH_AXES = ("replica", decode.TENSOR)
ParamsBox = decode.ParamsBox


@dataclasses.dataclass(frozen=True)
class EngineConfig:
  """Serving shape and defaults, per replica. max_len = prompt + generated tokens per slot.

  num_pages 0 = enough pages for every slot at max_len (the dense footprint); fewer pages serve
  the same slots when sequences are shorter on average (requests wait for pages, never fail).
  # recurrent-state snapshots the prefix cache holds (-1 = slots)
  prefix_state_blocks: recurrent-state snapshots the prefix cache may hold (stateful families
  only); -1 = max_concurrent_decodes. max_topk: the most top-K logprobs a request may ask for.
  """

  max_concurrent_decodes: int = 8  # slots: sequences decoded at once per replica
  max_len: int = 1024  # prompt + generated tokens per slot
  max_prefill_length: int = 512  # longest prompt one prefill takes
  page_size: int = 16  # tokens per KV page
  num_pages: int = 0  # KV pages per replica (0 = every slot at max_len)
  prefill_chunk: int = 256  # tokens per prefill chunk
  prefill_batch: int = 8  # prompts prefilled together
  prefix_cache: bool = True  # reuse the KV of shared prompt prefixes
  batch_invariant: bool = False  # SchedulerConfig.batch_invariant
  prefix_state_blocks: int = -1  # recurrent-state snapshots the prefix cache holds (-1 = slots)
  max_topk: int = 0  # the most top-K logprobs a request may ask for
  unrolled_layers: bool = False  # decode.CoreShape.unrolled: unscanned, one pool per layer
  decode_steps: int = 4  # SchedulerConfig.decode_steps: decode steps per dispatched program
  # decode steps' attention over pages on a TPU mesh: "jax" (models/paged_attention) or "pallas"
  # (jax's Pallas paged attention kernel, models/pallas_paged: head_dim % 128, bf16 compute)
  paged_kernel: str = "jax"
  max_stop_ids: int = 8  # decode.CoreShape.max_stop: stop ids per request (with the engine's)
  stop_token_ids: tuple[int, ...] = ()  # ids that end a generation (the job fills the family's)
  default_sampling: sampling.SamplingParams = sampling.SamplingParams(temperature=0.0)
  tokenizer_path: str = ""  # HF tokenizer dir for JetStream text requests; "" = token ids only

  def __post_init__(self):
    def need(ok, what):
      if not ok:
        raise ValueError(f"EngineConfig.{what}")

    need(self.max_concurrent_decodes >= 1, "max_concurrent_decodes must be >= 1")
    need(
      self.max_prefill_length <= self.max_len,
      f"max_prefill_length={self.max_prefill_length} must be <= max_len={self.max_len}",
    )
    need(self.page_size >= 1, f"page_size={self.page_size} must be >= 1")
    need(
      self.num_pages == 0 or self.num_pages >= self.max_pages,
      f"num_pages={self.num_pages} must be 0 or >= {self.max_pages} (one max_len sequence)",
    )
    need(
      self.prefill_chunk >= 1 and self.prefill_batch >= 1,
      "prefill_chunk and prefill_batch must be >= 1",
    )
    need(self.max_topk >= 0, f"max_topk={self.max_topk} must be >= 0")
    need(self.decode_steps >= 1, f"decode_steps={self.decode_steps} must be >= 1")
    need(
      len(self.stop_token_ids) <= self.max_stop_ids,
      f"stop_token_ids has {len(self.stop_token_ids)} ids, more than "
      f"max_stop_ids={self.max_stop_ids}",
    )

  @property
  def max_pages(self) -> int:
    return paged.pages_for(self.max_len, self.page_size)

  def core_shape(self, stateful: bool) -> decode.CoreShape:
    blocks = (
      self.max_concurrent_decodes if self.prefix_state_blocks < 0 else (self.prefix_state_blocks)
    )
    return decode.CoreShape(
      slots=self.max_concurrent_decodes,
      max_len=self.max_len,
      page_size=self.page_size,
      num_pages=self.num_pages or self.max_concurrent_decodes * self.max_pages,
      state_blocks=blocks if stateful else 0,
      max_topk=self.max_topk,
      unrolled=self.unrolled_layers,
      max_stop=self.max_stop_ids,
      paged_kernel=self.paged_kernel,
    )

  def scheduler_config(self) -> scheduler.SchedulerConfig:
    return scheduler.SchedulerConfig(
      prefill_chunk=self.prefill_chunk,
      prefill_batch=self.prefill_batch,
      prefix_cache=self.prefix_cache,
      batch_invariant=self.batch_invariant,
      decode_steps=self.decode_steps,
    )


@dataclasses.dataclass(frozen=True)
class PrefillInput:
  """What a driver may hand to `prefill` as `padded_tokens`: tokens [P] plus request settings."""

  tokens: np.ndarray
  params: sampling.SamplingParams


def serving_mesh(replicas: int = 1, tensor: int = 1, devices=None) -> Mesh:
  """A ("replica", "tensor") mesh over the first replicas x tensor devices."""
  devices = list(jax.devices() if devices is None else devices)
  if replicas * tensor > len(devices):
    raise ValueError(
      f"serving mesh replica={replicas} x tensor={tensor} needs "
      f"{replicas * tensor} devices, have {len(devices)}"
    )
  return Mesh(np.asarray(devices[: replicas * tensor]).reshape(replicas, tensor), MESH_AXES)


class TokenizerAdapter(tokenizer_api.Tokenizer):
  """JetStream's Tokenizer API over an HF tokenizer (or none: token-id requests only)."""

  def __init__(self, hf_tokenizer, stop_ids: tuple[int, ...], pad_id: int):
    self._tok, self._stop, self._pad = hf_tokenizer, set(stop_ids), pad_id

  def encode(self, s: str, **kwargs):
    if self._tok is None:
      raise ValueError(
        "this server has no tokenizer (EngineConfig.tokenizer_path is empty): send token ids"
      )
    ids = np.asarray(self._tok.encode(s, add_special_tokens=False), np.int32)
    return ids, len(ids)

  def decode(self, token_ids: list[int], **kwargs) -> str:
    return "" if self._tok is None else self._tok.decode(token_ids)

  @property
  def pad_id(self) -> int:
    return self._pad

  @property
  def eos_id(self) -> int:
    return min(self._stop) if self._stop else -1

  @property
  def bos_id(self) -> int:
    return -1  # Qwen models have no BOS token

  @property
  def stop_tokens(self) -> set[int]:
    return set(self._stop)


class ReplicaEngine(engine_api.Engine):
  """JetStream's Engine API over one replica. The decode state is the replica's Scheduler."""

  def __init__(self, parent: TmaxEngine, index: int, mesh: Mesh):
    self.parent, self.index, self._mesh = parent, index, mesh
    self.cfg, self.model_cfg = parent.cfg, parent.model_cfg
    shape = parent.cfg.core_shape(decode.is_stateful(parent.model_cfg))
    self.core = decode.PagedCore.shared(parent.model_cfg, shape, mesh)
    self.param_shardings = decode.param_shardings(parent.model_cfg, mesh)
    self.scheduler: scheduler.Scheduler | None = None

  def start(self, emit: Callable[[list[scheduler.Event]], None]) -> scheduler.Scheduler:
    """Creates this replica's scheduler (device state included); events go to `emit`."""
    self.scheduler = scheduler.Scheduler(
      self.core, self.load_params(), self.cfg.scheduler_config(), emit
    )
    return self.scheduler

  @property
  def live_scheduler(self) -> scheduler.Scheduler:
    """The scheduler `start` made: requests are routed and submitted only after it."""
    if self.scheduler is None:
      raise RuntimeError(f"replica {self.index}: no scheduler yet (start() it first)")
    return self.scheduler

  # ---- Engine API ----------------------------------------------------------------------------

  def load_params(self, *args, **kwargs) -> ParamsBox:
    return self.parent.load_params()[self.index]

  def init_decode_state(self, *args, **kwargs) -> scheduler.Scheduler:
    return self.scheduler or self.start(lambda events: None)

  def prefill(
    self, *, params: ParamsBox, existing_prefix=None, padded_tokens, true_length: int
  ) -> scheduler.Sequence:
    """Lazy: the prompt is written into pages by `insert` (there the pool is known)."""
    del params
    if existing_prefix is not None:
      raise NotImplementedError(
        "existing_prefix: the prefix cache finds shared prefixes by "
        "their tokens; send the whole conversation"
      )
    if isinstance(padded_tokens, PrefillInput):
      tokens, sp = padded_tokens.tokens, padded_tokens.params
    else:
      tokens, sp = padded_tokens, self.cfg.default_sampling
    if not 1 <= true_length <= self.cfg.max_len - 1:
      raise ValueError(
        f"prompt length {true_length} must be in [1, max_len - 1 = {self.cfg.max_len - 1}]"
      )
    prompt = [int(t) for t in np.asarray(tokens)[:true_length]]
    return scheduler.Sequence(None, prompt, self.cfg.max_len - true_length, sp)

  def insert(
    self, prefix: scheduler.Sequence, decode_state: scheduler.Scheduler, slot: int
  ) -> scheduler.Scheduler:
    decode_state.insert_at(prefix, slot)
    return decode_state

  def generate(self, params: ParamsBox, decode_state: scheduler.Scheduler):
    del params  # the scheduler reads its replica's box
    data = decode_state.generate_now()
    return decode_state, engine_api.ResultTokens(
      data=data,
      tokens_idx=(decode.TOKEN, decode.TOKEN + 1),
      valid_idx=(decode.VALID, decode.VALID + 1),
      length_idx=(decode.LENGTH, decode.LENGTH + 1),
      samples_per_slot=1,
    )

  def get_prefix_destination_sharding(self) -> Any:
    return NamedSharding(self._mesh, jax.sharding.PartitionSpec())

  def get_tokenizer(self) -> tokenizer_pb2.TokenizerParameters:
    return tokenizer_pb2.TokenizerParameters(path=self.cfg.tokenizer_path)

  def build_tokenizer(self, metadata: tokenizer_pb2.TokenizerParameters) -> TokenizerAdapter:
    tok = None
    if metadata.path:
      from transformers import AutoTokenizer  # noqa: PLC0415  (transformers: slow import)

      tok = AutoTokenizer.from_pretrained(metadata.path)
    pad = self.model_cfg.pad_token_id
    return TokenizerAdapter(tok, self.cfg.stop_token_ids, 0 if pad is None else pad)

  @property
  def max_concurrent_decodes(self) -> int:
    return self.cfg.max_concurrent_decodes

  @property
  def samples_per_slot(self) -> int:
    return 1

  @property
  def max_prefill_length(self) -> int:
    return self.cfg.max_prefill_length

  @property
  def mesh(self) -> Mesh:
    return self._mesh

  @property
  def colocated_cpus(self) -> None:
    return None


class TmaxEngine:
  """`mesh` ("replica", "tensor"; default: one device) -> replicas of `model_cfg`.

  `params_fn()` returns the initial param tree (host or device arrays, any placement).
  """

  def __init__(
    self,
    model_cfg: ModelConfig,
    engine_cfg: EngineConfig,
    params_fn: Callable[[], Any],
    devices=None,
    mesh: Mesh | None = None,
  ):
    if mesh is None:
      mesh = serving_mesh(1, 1, devices=list(devices)[:1] if devices is not None else None)
    if tuple(mesh.axis_names) != MESH_AXES:
      raise ValueError(f"serving mesh axes must be {MESH_AXES}, got {mesh.axis_names}")
    self.model_cfg, self.cfg, self.mesh = model_cfg, engine_cfg, mesh
    self._params_fn = params_fn
    self._boxes: list[ParamsBox] | None = None
    self._swap_lock = threading.Lock()
    self._load_lock = threading.Lock()
    self.replicas = [
      ReplicaEngine(self, r, Mesh(mesh.devices[r], (decode.TENSOR,)))
      for r in range(mesh.shape["replica"])
    ]

  def load_params(self) -> list[ParamsBox]:
    """One ParamsBox per replica (version 0), built on the first call."""
    with self._load_lock:
      if self._boxes is None:
        params = self._params_fn()
        self._boxes = [
          ParamsBox(self._place(params, rep), 0, rep.core.prepare) for rep in self.replicas
        ]
      return self._boxes

  def param_shardings(self) -> Any:
    """Shardings of the served params on the engine mesh (tensor-split, replicated over
    "replica"): params pushed in these shardings are swapped in without a host round trip."""
    return decode.param_shardings(self.model_cfg, self.mesh)

  def _place(self, params: Any, rep: ReplicaEngine) -> Any:
    """params (any placement) -> arrays with `rep.param_shardings`: shards already on the
    replica's devices are reused as they are; the rest is copied device to device (or host)."""
    devices = set(rep.mesh.devices.flat)

    def place(x, target):
      if isinstance(x, jax.Array) and x.sharding.is_equivalent_to(target, x.ndim):
        return x
      if isinstance(x, jax.Array) and x.is_fully_addressable:
        index = target.devices_indices_map(x.shape)
        shards = {s.device: s for s in x.addressable_shards if s.device in devices}
        if len(shards) == len(devices) and all(
          _same_index(shards[d].index, index[d], x.shape) for d in devices
        ):
          return jax.make_array_from_single_device_arrays(
            x.shape, target, [shards[d].data for d in target.addressable_devices]
          )
      return jax.device_put(x, target)

    return jax.tree.map(place, params, rep.param_shardings)

  def swap(self, params: Any, version: int, *, replace: bool = False) -> None:
    """Serves `params` as `version` (>= the served one, unless `replace`: a restarted trainer's
    checkpoint replaces the newer weights its killed predecessor pushed) on every replica; lands
    between decode steps. Casting to the served dtypes and preparing the head run here, on device,
    before the pointer swaps. Any version change drops the prefix cache (scheduler.py)."""
    with self._swap_lock:
      boxes = self.load_params()
      # equal: a resync (e.g. of a restarted server) is idempotent
      if version < boxes[0].version and not replace:
        raise updates.WeightUpdateError(
          f"weight version {version} is older than the served version {boxes[0].version}"
        )
      served = [rep.core.prepare(self._place(params, rep)) for rep in self.replicas]
      for box, s in zip(boxes, served, strict=True):
        box.set(s, version)

  @property
  def version(self) -> int:
    return self.load_params()[0].version

  def served_params(self) -> Any:
    """What a push must match: replica 0's params as ShapeDtypeStructs (the scanned layout
    pushes arrive in, served dtypes, replica 0's shardings); the arrays it serves from are
    `load_params()[i].get()[0]["params"]` (unrolled: `model/layers_{i}`, decode.CoreShape)."""
    rep = self.replicas[0]
    return rep.core.abstract_served(rep.param_shardings)

  def route(self, prompt) -> ReplicaEngine:
    """The replica that has the longest cached prefix of `prompt` (multi-turn sessions stay on
    the replica holding their history); the least loaded one when none has much of it."""
    if len(self.replicas) == 1:
      return self.replicas[0]
    scored = [
      (rep.live_scheduler.cached_prefix(prompt), -rep.live_scheduler.load(), -i)
      for i, rep in enumerate(self.replicas)
    ]
    best = max(scored)
    if best[0] < self.cfg.page_size:
      best = max(scored, key=lambda s: (s[1], s[2]))
    return self.replicas[-best[2]]

  def status(self) -> dict[str, int]:
    """Sum over replicas of their schedulers' page/request counters."""
    total: dict[str, int] = {}
    for rep in self.replicas:
      if rep.scheduler is not None:
        for k, v in rep.scheduler.status().items():
          total[k] = total.get(k, 0) + v
    return total

  def memory_bytes(self) -> dict[str, int]:
    """Per replica: bytes of its page pool and its recurrent-state blocks."""
    return self.replicas[0].core.memory_bytes()


def _same_index(a, b, shape) -> bool:
  """Two shard indices (tuples of slices) cover the same region."""
  return all(sa.indices(n) == sb.indices(n) for sa, sb, n in zip(a, b, shape, strict=True))


decode_rows = decode.decode_rows
