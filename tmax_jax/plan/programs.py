"""A job's programs compiled for a target topology, each with the compiler's memory and cost.

The target's devices are a real accelerator topology's compile-only devices (a TPU slice from
libtpu, GPU nodes from the CUDA plugin: aot/targets.py) or any devices JAX has (the fake CPU
devices). Each program is the job's own jitted function lowered with abstract arguments placed as
the job places them, then compiled by the target's compiler:
  trainer   packed: the micro-step at every bucket of train.packing and the final update; fixed
            rows: the whole step. The fp32-head logprob chunk (forward and backward of
            models/logprobs.token_logprobs at the trainer's micro-batch) on its own.
  server    the engine's prefill (prefill_batch x prefill_chunk over every page of a slot) and
            decode (decode_steps steps of every slot) on one replica's tensor mesh: host 0's
            first chips, or on a TPU slice whose host holds chip ids past its chip count (v6e
            wider than 2 chips) the same chips of a one-host slice (aot/targets.one_host_chips).
  sync      the weight sync's cast-and-reshard from the trainer's shardings to the server's: its
            programs (one per group of leaves, run one after another) reported as one.
Memory per device comes from `compiled.memory_analysis()`. FLOPs and bytes come from the project's
HLO counter (hlo_cost: matmul FLOPs, loops times their trip count; XLA:TPU's own cost analysis
counts a scanned layer stack once), plus, for a Mosaic attention kernel (one opaque custom call),
its FLOPs counted analytically (`mosaic_attention_flops`). A GPU target compiled without a GPU
takes blockwise attention where a GPU run takes cuDNN's (`compilable_here`; the verdict says so).
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from tmax_jax import hlo_cost, sharding
from tmax_jax.aot import targets
from tmax_jax.aot.chips import Chip
from tmax_jax.inference import decode
from tmax_jax.loop import WeightSync, policy, served_target
from tmax_jax.models import ModelConfig, attention, decoder, registry
from tmax_jax.models import logprobs as logprobs_lib
from tmax_jax.plan import memory
from tmax_jax.train import step as step_lib

MOSAIC = "tpu_custom_call"
_COMPILED: dict[str, Program] = {}  # sha256 of a lowered module -> its compiled Program
GB = memory.GB


@dataclasses.dataclass
class Program:
  """One compiled program, per device: memory (argument, output, alias, temp, total bytes), FLOPs
  and bytes accessed of one execution, and how long the compile took."""

  name: str
  side: str  # "trainer" | "server" | "sync"
  memory: dict[str, float]
  flops: float
  bytes_accessed: float
  compile_s: float
  devices: int = 1  # devices the program spans
  mosaic_calls: int = 0
  tokens: int = 0  # tokens one execution processes (whole program, all devices)
  live_bytes: float = 0.0  # held on the device beside the program's arguments (optimizer state)

  @property
  def peak(self) -> float:
    return self.memory["total"] + self.live_bytes

  def roofline(self, chip: Chip) -> dict[str, float]:
    """The roofline time of one execution on `chip` and the MFU bound it implies."""
    return {
      "seconds": chip.roofline_s(self.flops, self.bytes_accessed),
      "mfu_bound": chip.mfu_bound(self.flops, self.bytes_accessed),
    }

  def to_json(self, chip: Chip | None = None) -> dict:
    out = dataclasses.asdict(self)
    if chip is not None:
      out.update(self.roofline(chip))
    return out


def mosaic_attention_flops(cfg: ModelConfig, rows: int, row_len: int, backward: bool) -> float:
  """Matmul FLOPs of causal self-attention over [rows, row_len] in every attention layer (QK^T
  and PV: 4 T^2 N H per row, half of it under the causal mask), forward only or forward +
  backward (2.5x the forward: dQ, dK, dV, dP and the recomputed scores) + the remat's second
  forward. What the splash kernel does inside its custom call, which the compiler's cost
  analysis cannot see."""
  fwd = 2.0 * rows * row_len * row_len * cfg.num_attention_heads * cfg.head_dim
  per_layer = fwd * ((2.0 + 2.5) if cfg.remat_policy != "none" else 3.5) if backward else fwd
  return _attention_layers(cfg) * per_layer


def mosaic_paged_decode_flops(cfg: ModelConfig, slots: int, table_tokens: int, steps: int) -> float:
  """Matmul FLOPs of `steps` decode steps of `slots` rows through the Pallas paged attention
  kernel (EngineConfig.paged_kernel = "pallas", models/pallas_paged.py) in every attention layer:
  QK^T and PV of one query over every key of the table (4 S N H per row; a slot at max_len, the
  roofline's worst case: the kernel stops at each row's length). Its bytes need no count: the
  kernel's operands are the gathered pages, which the HLO counter counts as the custom call's
  operands."""
  per_step = 4.0 * slots * table_tokens * cfg.num_attention_heads * cfg.head_dim
  return _attention_layers(cfg) * steps * per_step


def _attention_layers(cfg: ModelConfig) -> int:
  """The model's full-attention layers (the family's own layer pattern)."""
  kinds = registry.build_model(cfg).stack.layer_types(cfg)
  return sum(1 for kind in kinds if kind == decoder.FULL_ATTENTION)


def compilable_here(cfg: ModelConfig, platform: str) -> ModelConfig:
  """`cfg` with an attention kernel this process can compile for `platform`: blockwise where a
  GPU run would take cuDNN's and no GPU is attached here (JAX's cuDNN attention asks the local GPU
  for its compute capability when traced, and XLA builds the cuDNN graph on the GPU)."""
  impl = attention.resolve(cfg.attention_impl, cfg.dtypes.compute, platform)
  if impl == "cudnn" and jax.default_backend() != "gpu":
    return cfg.replace(attention_impl="blockwise")
  return cfg


def compile_program(
  name: str, side: str, lowered, devices: int, mosaic_flops: float = 0.0, tokens: int = 0
) -> Program:
  """Compiles `lowered`; `mosaic_flops` (whole program) are added per device, split over
  `devices`, when its HLO holds Mosaic kernels. A module compiled before in this process (the
  same program of another config) is not compiled again."""
  key = hashlib.sha256(lowered.as_text().encode()).hexdigest()
  if key in _COMPILED:
    return dataclasses.replace(_COMPILED[key], name=name, compile_s=0.0)
  start = time.perf_counter()
  compiled = lowered.compile()
  seconds = time.perf_counter() - start
  text = compiled.as_text()
  cost = hlo_cost.hlo_text_cost(text)
  calls = text.count(f'custom_call_target="{MOSAIC}"')
  extra = mosaic_flops / devices if calls else 0.0
  _COMPILED[key] = Program(
    name,
    side,
    memory._memory(compiled.memory_analysis()),
    cost.matmul_flops + extra,
    cost.bytes_accessed,
    seconds,
    devices,
    calls,
    tokens,
  )
  return dataclasses.replace(_COMPILED[key])  # a copy: callers set live_bytes


def trainer_programs(job, model_cfg: ModelConfig, mesh: Mesh, report) -> list[Program]:
  """The trainer's step as the job runs it and the fp32-head logprob chunk (module docstring)."""
  train, n = job.train, mesh.devices.size
  shards = mesh.shape["data"] * mesh.shape["fsdp"]
  out = []
  if train.packing.enabled:
    buckets = train.packing.buckets(job.seq_len, shards)
    state, _ = memory.abstract_state(model_cfg, train, mesh)
    for rows, row_len in buckets:
      lowered = memory.lowered_micro(model_cfg, train, mesh, rows, row_len)
      flops = mosaic_attention_flops(model_cfg, rows, row_len, backward=True)
      name = f"train micro-step [{rows}, {row_len}]"
      program = compile_program(name, "trainer", lowered, n, flops, rows * row_len)
      program.live_bytes = memory._bytes_per_device(state.opt_state)  # not an argument of it
      out.append(report(program))
    rows, row_len = buckets[-1]
    lowered = memory.lowered_update(model_cfg, train, mesh, rows, row_len)
    out.append(report(compile_program("train update", "trainer", lowered, n)))
  else:
    rl = getattr(job, "rollout", None)
    rows = rl.prompts_per_batch * rl.group_size if rl is not None else train.global_batch
    row_len = job.seq_len
    lowered = memory.lowered_step(model_cfg, train, mesh, rows, row_len)
    flops = mosaic_attention_flops(model_cfg, rows, row_len, backward=True)
    name = f"train step [{rows}, {row_len}] x {train.micro_batches} micro-batches"
    out.append(report(compile_program(name, "trainer", lowered, n, flops, rows * row_len)))
    rows //= train.micro_batches
  out.append(report(_logprob_chunk(model_cfg, train, mesh, rows, row_len)))
  return out


def _logprob_chunk(model_cfg: ModelConfig, train, mesh: Mesh, rows: int, row_len: int) -> Program:
  """Forward + backward of the fp32-head token logprobs over one micro-batch's final hidden
  states, chunked by train.logprob_chunk_size as the loss runs it."""
  rows_spec = NamedSharding(mesh, P(step_lib.BATCH_AXES))
  hidden = jax.ShapeDtypeStruct(
    (rows, row_len, model_cfg.hidden_size), model_cfg.dtypes.compute, sharding=rows_spec
  )
  targets = jax.ShapeDtypeStruct((rows, row_len), jnp.int32, sharding=rows_spec)
  head = jax.ShapeDtypeStruct(
    (model_cfg.hidden_size, model_cfg.vocab_size),
    model_cfg.dtypes.param_dtype,
    sharding=NamedSharding(mesh, P()),
  )
  save = logprobs_lib.saves_logits(model_cfg.remat_policy, rows * row_len, model_cfg.vocab_size)

  def loss(h, w, t):
    logp, ent = logprobs_lib.token_logprobs(
      h, w, t, chunk_size=train.logprob_chunk_size, head_dtype=model_cfg.dtypes.head,
      save_logits=save,
    )  # fmt: skip
    return jnp.sum(logp) + jnp.sum(ent)

  with sharding.use_mesh(mesh, model_cfg.logical_axis_rules):
    lowered = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(hidden, head, targets)
  name = f"logprob chunk [{rows}, {row_len}] x {train.logprob_chunk_size}, fp32 head"
  return compile_program(name, "trainer", lowered, mesh.devices.size, tokens=rows * row_len)


def _replicated(mesh: Mesh, x: Any) -> jax.ShapeDtypeStruct:
  x = np.asarray(x)
  return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(mesh, P()))


def server_programs(served_cfg: ModelConfig, serving, replica: Mesh, report) -> list[Program]:
  """The engine's prefill and decode programs on one replica (1-D "tensor" mesh) at the config's
  slots, pages and split."""
  engine = serving.engine
  core = decode.PagedCore(served_cfg, engine.core_shape(decode.is_stateful(served_cfg)), replica)
  params = memory._with(
    registry.abstract_params(served_cfg), decode.param_shardings(served_cfg, replica)
  )
  prepare = core.prepare.lower(params).compile()
  served = jax.tree.map(
    lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
    core.prepare.eval_shape(params),
    prepare.output_shardings,
  )
  state = memory._with(core._abstract_state(), core.state_shardings)
  shape, n = core.shape, replica.devices.size
  r, c = engine.prefill_batch, engine.prefill_chunk
  ids = lambda *s: _replicated(replica, np.zeros(s, np.int32))  # noqa: E731
  lowered = core.prefill.lower(
    served["params"], state, ids(r, c), ids(r, c), ids(r, c), ids(r), ids(r, shape.max_pages),
    ids(r),
  )  # fmt: skip
  flops = mosaic_attention_flops(served_cfg, r, c, backward=False)
  out = [report(compile_program(f"prefill [{r}, {c}]", "server", lowered, n, flops, tokens=r * c))]
  steps = engine.decode_steps
  program = core.decode_program(steps)
  lowered = program.lower(served, state, ids(shape.slots, shape.max_pages), ids())
  name = f"decode {steps} step(s) x {shape.slots} slots, {shape.max_len} tokens"
  pallas = shape.paged_kernel == "pallas"  # its Mosaic calls are the paged kernel's
  table_tokens = shape.max_pages * shape.page_size
  flops = mosaic_paged_decode_flops(served_cfg, shape.slots, table_tokens, steps) if pallas else 0.0
  out.append(report(compile_program(name, "server", lowered, n, flops, steps * shape.slots)))
  return out


def sync_program(model_cfg: ModelConfig, served_cfg: ModelConfig, trainer: Mesh, server: Mesh):
  """The weight sync's cast and reshard (loop/weight_sync.WeightSync's jitted half) from the
  trainer's param shardings to the server's: each of its programs (one per group of leaves)
  compiled, reported as one (`merged_sync`)."""
  params = memory._with(
    registry.abstract_params(model_cfg), registry.param_shardings(model_cfg, trainer)
  )
  start = time.perf_counter()
  sync = WeightSync(trainer, served_target(served_cfg, server))
  n = trainer.devices.size
  parts = [compile_program("weight sync", "sync", lowered, n) for lowered in sync.lower(params)]
  # the sync compiles each group's candidates itself (weight_sync.GroupedCast): time them all
  return dataclasses.replace(merged_sync(parts), compile_s=time.perf_counter() - start)


def merged_sync(parts: list[Program]) -> Program:
  """The sync's programs, run one after another, as one Program: the outputs (the staging copy
  or the served params) accumulate and stay; only one program's temp is live at a time, so the
  temp is the largest; arguments (disjoint groups of the trainer's params), FLOPs, bytes and
  compile time add up."""
  total = {k: sum(p.memory[k] for p in parts) for k in ("argument", "output", "alias")}
  total["temp"] = max(p.memory["temp"] for p in parts)
  total["total"] = total["argument"] + total["temp"] + total["output"] - total["alias"]
  name = "weight sync (cast + reshard)"
  if len(parts) > 1:
    name = f"weight sync (cast + reshard, {len(parts)} programs)"
  return Program(
    name,
    "sync",
    total,
    sum(p.flops for p in parts),
    sum(p.bytes_accessed for p in parts),
    sum(p.compile_s for p in parts),
    parts[0].devices,
  )


def job_programs(job, devices: list, processes: int, report=lambda p: p) -> list[Program]:
  """Every program of `job` (RL, SFT, eval with a served policy, serve) on `devices`; `report`
  is called with each as it compiles (progress)."""
  model_cfg = compilable_here(policy.model_config(job.model), devices[0].platform)
  if hasattr(job, "train"):
    job = dataclasses.replace(job, train=job.train.for_run(job.steps or 1))
  trainer, server = memory._meshes(job, devices, processes)  # the server on host 0
  out = trainer_programs(job, model_cfg, trainer, report) if trainer is not None else []
  if server is not None:
    served_cfg = policy.served_config(model_cfg, job.serving)
    chips = list(np.asarray(server.devices)[0])
    if chips[0].platform == "tpu":  # XLA:TPU refuses a v6e host's own ids (targets.py)
      chips = targets.one_host_chips(chips)
    replica = Mesh(np.asarray(chips), (decode.TENSOR,))
    out += server_programs(served_cfg, job.serving, replica, report)
    if trainer is not None and job.serving.placement != "nodes":  # nodes: pushed over the network
      out.append(report(sync_program(model_cfg, served_cfg, trainer, server)))
  return out


def verdict(job, progs: list[Program], chip: Chip) -> dict:
  """Per-chip peaks of each side and whether the job fits the chip's HBM: the trainer's largest
  program (with what lives beside it), the server's, both on one chip when colocated; `notes`:
  where the compile differs from a run on the chip (`compilable_here`)."""
  side = {
    k: max((p.peak for p in progs if p.side == k), default=0.0) for k in ("trainer", "server")
  }
  serving = getattr(job, "serving", None)
  colocated = hasattr(job, "train") and serving is not None and serving.placement == "colocated"
  peak = side["trainer"] + side["server"] if colocated else max(side.values())
  sync = sync_peak(progs, colocated)
  peak = max(peak, sync)
  model_cfg = policy.model_config(job.model)
  kernel = compilable_here(model_cfg, chip.platform).attention_impl
  notes = [] if kernel == model_cfg.attention_impl else [
    f"attention compiled as {kernel}: on {chip.name.upper()} GPUs a run takes cuDNN's, which "
    "compiles only with a GPU attached"
  ]  # fmt: skip
  return {
    "trainer_peak": side["trainer"],
    "server_peak": side["server"],
    "sync_peak": sync,
    "placement": _placement(job, colocated),
    "peak": peak,
    "hbm": chip.hbm_bytes,
    "fits": peak <= chip.hbm_bytes,
    "notes": notes,
  }


def sync_peak(progs: list[Program], colocated: bool) -> float:
  """Per chip at a weight push: the sync's temp and new served params beside what the trainer
  holds between its programs (its largest program's arguments and the optimizer state beside
  it) and, when colocated, what the server holds (its programs' arguments: served params,
  pages); 0 without a sync program. The old served params stay counted: a push writes the
  new copy before the old one is dropped. Disaggregated, the sync's output is a staging copy on
  the trainer's devices (loop/weight_sync.py); the server devices' own copy-in is not counted."""
  syncs = [p for p in progs if p.side == "sync"]
  if not syncs:
    return 0.0

  def held(side: str) -> float:
    return max((p.memory["argument"] + p.live_bytes for p in progs if p.side == side), default=0.0)

  run = max(p.memory["temp"] + p.memory["output"] - p.memory["alias"] for p in syncs)
  return held("trainer") + (held("server") if colocated else 0.0) + run


def _placement(job, colocated: bool) -> str:
  if colocated:
    return "colocated"
  if not hasattr(job, "train"):
    return "server only"
  serving = getattr(job, "serving", None)
  return serving.placement if serving is not None else "trainer only"


def decode_tokens_per_chip(p: Program, chip: Chip) -> float:
  """Tokens per second per chip a decode program's roofline allows."""
  return p.tokens / p.roofline(chip)["seconds"] / p.devices


def table(progs: list[Program], target, verdict: dict, hosts: int) -> str:
  """The per-chip table of a TPU slice's or GPU nodes' (aot/chips.py) compiled programs."""
  chip = target.chip
  head = (
    f"{target.name} ({target.topology}: {target.chips} chips, {hosts} host(s)); "
    f"{chip.name}: {chip.peak_flops / 1e12:.0f} TFLOP/s bf16, {chip.hbm_bytes / GB:.0f} GB HBM at "
    f"{chip.hbm_bandwidth / GB:.0f} GB/s (published)"
  )
  cols = f"{'program (per chip)':<52}{'arg':>7}{'temp':>7}{'peak':>7} GB{'TFLOP':>9}"
  cols += f"{'GB moved':>10}{'roofline':>11}{'MFU bound':>10}{'compile':>9}"
  rows = [head, cols]
  for p in progs:
    r, m = p.roofline(chip), p.memory
    rows.append(
      f"{p.name[:51]:<52}{m['argument'] / GB:>7.2f}{m['temp'] / GB:>7.2f}{p.peak / GB:>7.2f}   "
      f"{p.flops / 1e12:>9.3f}{p.bytes_accessed / GB:>10.2f}{r['seconds'] * 1e3:>9.2f}ms"
      f"{r['mfu_bound']:>10.0%}{p.compile_s:>8.1f}s"
    )
  v = verdict
  at_push = f", at a weight push {v['sync_peak'] / GB:.2f} GB" if v.get("sync_peak") else ""
  rows.append(
    f"peak per chip: trainer {v['trainer_peak'] / GB:.2f} GB, server {v['server_peak'] / GB:.2f} "
    f"GB ({v['placement']}){at_push}: {v['peak'] / GB:.2f} GB of {v['hbm'] / GB:.0f}: "
    f"{'FITS' if v['fits'] else 'DOES NOT FIT'}"
  )
  rows += [
    f"decode roofline: {decode_tokens_per_chip(p, chip):,.0f} tokens/s per chip ({p.name})"
    for p in progs
    if p.side == "server" and p.name.startswith("decode")
  ]
  return "\n".join(rows + v.get("notes", []))
