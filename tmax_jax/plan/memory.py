"""Memory plan of a job on a device topology: per-device bytes and whether it fits. RL and SFT
jobs: the trainer (and the RL server); eval (policy=server) and serve jobs: their server alone.

python3 -m tmax_jax.plan --config=configs/tmax_qwen3_5_9b.py [--devices=8 --device_memory_gb=141]
    [--processes=1] [--bucket=-1] [--json]
(devices / memory / processes default to the config's `topology`, the hardware it is sized for)

Trainer, per device of its mesh (the job's MeshConfig over the devices its placement leaves it,
sequence axis included):
  params, optimizer state  exact: the abstract state placed with the trainer's shardings
  gradients                the fp32 param-shaped accumulator
  activations              XLA's compiled memory analysis of the real train step lowered on a
                           fake-device mesh of the same shape, with a few layers (two and three
                           periods of the layer pattern), extrapolated linearly in the layer count.
                           Fixed rows: the whole jitted step (train.micro_batches of the batch),
                           minus the gradients. Packed (train.packing): the packed step's
                           accumulation (train/step.make_micro_fn) at the bucket [rows, L] with the
                           most temp memory (rows per micro-batch as Trainer packs them for the
                           mesh's data x fsdp shards; each row split over `sequence`); the peak is
                           the larger of that and the final update's compiled figure.
                           The model config's attention_impl, remat and chunks act in the compile.
  batch                    the step's input rows on this device
Server, per serving device: its params (serving dtype, tensor split), the engine's prepared head
and its decode memory (`server_cache_bytes`: the paged engine's page pool and state blocks).
Colocated: a device holds both; disaggregated: each side must fit its own devices. An eval or
serve job's server takes the first serving.replicas x serving.tensor devices of the first host (as
loop/placement.serving_only does), its model as loop/policy.served_model holds it.

Caveat: the fake devices are CPU devices, so the activation figure is XLA:CPU's buffer assignment
(its fusion and bf16 handling differ from GPU/TPU); it is a compiled figure, not a hand
formula, and is checked against a fully compiled small config
(tests/test_plan.py: within 10%).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from tmax_jax import cli, sharding
from tmax_jax.inference import decode
from tmax_jax.loop import placement, policy, served_target
from tmax_jax.models import DEFAULT_LOGICAL_AXIS_RULES, ModelConfig, decoder, registry
from tmax_jax.train import TrainConfig
from tmax_jax.train import batch as batch_lib
from tmax_jax.train import optimizer as opt_lib
from tmax_jax.train import state as state_lib
from tmax_jax.train import step as step_lib

GB = 1e9


@dataclasses.dataclass
class Plan:
  """Per-device bytes of each part (trainer device / server device) and the verdict."""

  trainer: dict[str, float]
  server: dict[str, float]
  placement: str
  device_bytes: float
  notes: list[str] = dataclasses.field(default_factory=list)

  @property
  def peak(self) -> float:
    t, s = self.trainer.get("total", 0.0), self.server.get("total", 0.0)
    return t + s if self.placement == "colocated" else max(t, s)

  @property
  def fits(self) -> bool:
    return self.peak <= self.device_bytes

  def table(self) -> str:
    rows = [f"{'trainer ' + k:<28}{v / GB:>10.2f} GB" for k, v in self.trainer.items()]
    rows += [f"{'server ' + k:<28}{v / GB:>10.2f} GB" for k, v in self.server.items()]
    rows.append(
      f"{'peak per device':<28}{self.peak / GB:>10.2f} GB of "
      f"{self.device_bytes / GB:.1f} ({self.placement}): "
      f"{'FITS' if self.fits else 'DOES NOT FIT'}"
    )
    return "\n".join(rows + [f"note: {n}" for n in self.notes])


def _bytes_per_device(tree: Any) -> float:
  """Bytes one device holds of an abstract tree with shardings (the largest shard per leaf)."""
  total = 0.0
  for x in jax.tree.leaves(tree):
    shape = x.sharding.shard_shape(x.shape) if x.sharding is not None else x.shape
    total += float(np.prod(shape)) * jnp.dtype(x.dtype).itemsize
  return total


def _with(tree: Any, shardings: Any) -> Any:
  return jax.tree.map(
    lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), tree, shardings
  )


def with_layers(cfg: ModelConfig, n: int) -> ModelConfig:
  """`cfg` cut to its first `n` layers (a hybrid stack keeps its layer pattern)."""
  fam = cfg.family_config
  if fam is not None and getattr(fam, "layer_types", None):
    fam = dataclasses.replace(fam, layer_types=tuple(fam.layer_types[:n]))
  return cfg.replace(num_hidden_layers=n, family_config=fam)


def layer_period(cfg: ModelConfig) -> int:
  fam = cfg.family_config
  if fam is None or not getattr(fam, "layer_types", None):
    return 1
  return decoder.layer_period(tuple(fam.layer_types))


def abstract_state(model_cfg: ModelConfig, train_cfg: TrainConfig, mesh: Mesh):
  """The TrainState as ShapeDtypeStructs with the trainer's shardings (nothing allocated)."""
  param_shardings = registry.param_shardings(model_cfg, mesh)
  params = _with(registry.abstract_params(model_cfg), param_shardings)
  optimizer = opt_lib.make_optimizer(train_cfg.optimizer)
  replicated = NamedSharding(mesh, P())
  opt_state = _with(
    jax.eval_shape(optimizer.init, params),
    state_lib.opt_state_shardings(optimizer, params, replicated),
  )
  scalar = jax.ShapeDtypeStruct((), jnp.int32, sharding=replicated)
  rng = jax.ShapeDtypeStruct((2,), jnp.uint32, sharding=replicated)
  return state_lib.TrainState(params, opt_state, scalar, rng), optimizer


def abstract_batch(train_cfg: TrainConfig, mesh: Mesh, rows: int, seq_len: int):
  """The step's TrainBatch as ShapeDtypeStructs (fields as batch.pack makes them)."""
  k = train_cfg.loss.top_k
  one = batch_lib.pack(
    [
      batch_lib.Trajectory(
        tokens=np.ones(4, np.int32),
        loss_mask=np.ones(4, np.float32),
        behaviour_logp=np.zeros(4, np.float32),
        topk_ids=np.zeros((4, k), np.int32),
        topk_logp=np.zeros((4, k), np.float32),
        ref_logp=np.zeros(4, np.float32),
      )
    ],
    seq_len,
    num_rows=1,
    pack_rows=False,
    fields=train_cfg.loss.batch_fields(),
    top_k=k,
  )
  rows_sharding = NamedSharding(mesh, P(step_lib.BATCH_AXES))
  return jax.tree.map(
    lambda x: jax.ShapeDtypeStruct((rows,) + x.shape[1:], x.dtype, sharding=rows_sharding), one
  )


def lowered_step(
  model_cfg: ModelConfig, train_cfg: TrainConfig, mesh: Mesh, rows: int, seq_len: int
):
  """The jitted train step (fixed rows) lowered on `mesh` with the state donated."""
  state, optimizer = abstract_state(model_cfg, train_cfg, mesh)
  batch = abstract_batch(train_cfg, mesh, rows, seq_len)
  step_fn = step_lib.make_step_fn(
    registry.build_model(model_cfg), model_cfg, train_cfg, optimizer, mesh
  )
  shardings = jax.tree.map(lambda x: x.sharding, state)
  jitted = jax.jit(
    step_fn, donate_argnums=(0,), out_shardings=(shardings, NamedSharding(mesh, P()))
  )
  with sharding.use_mesh(mesh, model_cfg.logical_axis_rules):
    return jitted.lower(state, batch)


def compiled_step_memory(
  model_cfg: ModelConfig, train_cfg: TrainConfig, mesh: Mesh, rows: int, seq_len: int
) -> dict[str, float]:
  """XLA's memory analysis of the jitted train step (per device): argument, output, alias and
  temp bytes, and `total` = what the step needs at its peak (donated state aliased)."""
  what = f"step, {model_cfg.num_hidden_layers} layers, [{rows}, {seq_len}]"
  return _memory(_compiled(lowered_step(model_cfg, train_cfg, mesh, rows, seq_len), what))


def _compiled(lowered, what: str):
  """The compiled program's memory analysis; one progress bar per compile on stderr (a recipe
  model's compile takes a minute or more on CPU)."""
  with cli.progress(total=1, desc=f"plan: compile {what}", unit="compile") as bar:
    mem = lowered.compile().memory_analysis()
    bar.set_postfix_str(f"temp {mem.temp_size_in_bytes / GB:.2f} GB", refresh=False)
    bar.update(1)
  return mem


def _memory(mem) -> dict[str, float]:
  """argument, output, alias, temp bytes and `total` = what the program needs at its peak
  (donated arguments aliased to outputs)."""
  out = {
    "argument": float(mem.argument_size_in_bytes),
    "output": float(mem.output_size_in_bytes),
    "alias": float(mem.alias_size_in_bytes),
    "temp": float(mem.temp_size_in_bytes),
  }
  out["total"] = out["argument"] + out["temp"] + out["output"] - out["alias"]
  return out


def _fp32_like(params: Any) -> Any:
  return jax.tree.map(
    lambda x: jax.ShapeDtypeStruct(x.shape, jnp.float32, sharding=x.sharding), params
  )


def _abstract_sums(model_cfg: ModelConfig, train_cfg: TrainConfig, mesh: Mesh, rows, row_len):
  """(state, micro-batch dict, accumulated sums, loss_fn) of the packed step, abstract and placed
  as Trainer places them (loss and stats replicated, the fp32 grads like the params)."""
  state, optimizer = abstract_state(model_cfg, train_cfg, mesh)
  batch = abstract_batch(train_cfg, mesh, rows, row_len)
  mb = {k: v for k, v in batch.fields().items() if v is not None}
  loss_fn = step_lib.make_loss_fn(registry.build_model(model_cfg), model_cfg, train_cfg)
  replicated = NamedSharding(mesh, P())
  with sharding.use_mesh(mesh, model_cfg.logical_axis_rules):
    loss, stats, grads = jax.eval_shape(
      functools.partial(step_lib.zeros_like_sums, loss_fn), state.params, mb
    )
  acc = (
    _with(loss, replicated),
    jax.tree.map(lambda x: _with(x, replicated), stats),
    _with(grads, jax.tree.map(lambda x: x.sharding, state.params)),
  )
  return state, optimizer, mb, acc, loss_fn


def lowered_micro(
  model_cfg: ModelConfig, train_cfg: TrainConfig, mesh: Mesh, rows: int, row_len: int
):
  """The packed step's accumulation (step.make_micro_fn, the sums donated as Trainer jits it)
  lowered on `mesh` for one [rows, row_len] micro-batch."""
  state, _, mb, acc, loss_fn = _abstract_sums(model_cfg, train_cfg, mesh, rows, row_len)
  jitted = jax.jit(step_lib.make_micro_fn(loss_fn), donate_argnums=(0,))
  with sharding.use_mesh(mesh, model_cfg.logical_axis_rules):
    return jitted.lower(acc, state.params, mb)


@functools.cache  # the worst bucket's scan compile is reused for its plan
def compiled_micro_memory(
  model_cfg: ModelConfig, train_cfg: TrainConfig, mesh: Mesh, rows: int, row_len: int
) -> dict[str, float]:
  """XLA's memory analysis of `lowered_micro` per device; the optimizer state is live on the
  device but no argument of it (add it)."""
  what = f"micro-batch, {model_cfg.num_hidden_layers} layers, [{rows}, {row_len}]"
  return _memory(_compiled(lowered_micro(model_cfg, train_cfg, mesh, rows, row_len), what))


def lowered_update(
  model_cfg: ModelConfig, train_cfg: TrainConfig, mesh: Mesh, rows: int, row_len: int
):
  """The packed step's final update (normalise the sums, clip, AdamW; state donated, as Trainer
  jits it) lowered on `mesh`: no model forward."""
  state, optimizer, _, acc, _ = _abstract_sums(model_cfg, train_cfg, mesh, rows, row_len)
  apply_fn = step_lib.make_apply_fn(train_cfg, optimizer)
  shardings = jax.tree.map(lambda x: x.sharding, state)

  def finish(st, acc):
    return apply_fn(st, *step_lib.normalise(*acc))

  jitted = jax.jit(finish, donate_argnums=(0,), out_shardings=(shardings, acc[0].sharding))
  with sharding.use_mesh(mesh, model_cfg.logical_axis_rules):
    return jitted.lower(state, acc)


def compiled_update_memory(
  model_cfg: ModelConfig, train_cfg: TrainConfig, mesh: Mesh, rows: int, row_len: int
) -> dict[str, float]:
  """XLA's memory analysis of `lowered_update` per device (compiles quickly at the full layer
  count)."""
  return _memory(_compiled(lowered_update(model_cfg, train_cfg, mesh, rows, row_len), "update"))


def _extrapolated(compile_at, model_cfg: ModelConfig, layers: tuple[int, int] | None) -> float:
  """Temp bytes at the model's layer count from `compile_at(cut config)` at `layers` (default:
  two and three periods of the layer pattern; a scan of length one is compiled differently, its
  temp does not lie on the line), linear in the layer count."""
  n, p = model_cfg.num_hidden_layers, layer_period(model_cfg)
  l1, l2 = layers or (2 * p, 3 * p)
  t1, t2 = (compile_at(with_layers(model_cfg, k))["temp"] for k in (l1, l2))
  return t1 + (t2 - t1) * (n - l1) / (l2 - l1)


def trainer_memory(
  model_cfg: ModelConfig,
  train_cfg: TrainConfig,
  mesh: Mesh,
  rows: int,
  seq_len: int,
  layers: tuple[int, int] | None = None,
  packed: bool = False,
) -> dict[str, float]:
  """Per-device trainer bytes at a [rows, seq_len] batch; activations extrapolated in the layer
  count (`_extrapolated`). Fixed rows (`packed` False): the whole jitted step, `rows` split into
  train.micro_batches; activations = its temp minus the gradient accumulator. Packed: one
  micro-batch of that bucket shape through the packed step's accumulation, the accumulator an
  argument; activations = its temp (which includes the micro-batch's own gradient before it is
  added), and the peak is the larger of that and the final update's."""
  state, _ = abstract_state(model_cfg, train_cfg, mesh)
  grads = _bytes_per_device(_fp32_like(state.params))
  if packed:
    temp = _extrapolated(
      lambda c: compiled_micro_memory(c, train_cfg, mesh, rows, seq_len), model_cfg, layers
    )
    activations = temp
  else:
    temp = _extrapolated(
      lambda c: compiled_step_memory(c, train_cfg, mesh, rows, seq_len), model_cfg, layers
    )
    activations = max(temp - grads, 0.0)
  out = {
    "params": _bytes_per_device(state.params),
    "optimizer": _bytes_per_device(state.opt_state),
    "gradients": grads,
    "activations": activations,
    "batch": _bytes_per_device(abstract_batch(train_cfg, mesh, rows, seq_len)),
  }
  out["total"] = sum(out.values()) + _bytes_per_device((state.step, state.rng))
  if packed:  # the update runs after the last micro-batch, whose batch and activations are freed
    update = compiled_update_memory(model_cfg, train_cfg, mesh, rows, seq_len)["total"]
    out["total"] = max(out["total"], update)
  return out


def server_cache_bytes(served_cfg: ModelConfig, serving, mesh: Mesh) -> float:
  """Decode memory of one replica, per device: the engine's own paged pool (K/V pages of every
  attention layer, split over tensor when the KV heads divide) and recurrent-state blocks, as
  decode.PagedCore lays them out for `serving` (slots, max_len, page_size, num_pages)."""
  engine_cfg = serving.engine
  replica = Mesh(np.asarray(mesh.devices).reshape(-1)[: mesh.shape["tensor"]], (decode.TENSOR,))
  core = decode.PagedCore(
    served_cfg, engine_cfg.core_shape(decode.is_stateful(served_cfg)), replica
  )
  pool = _with(core._abstract_state()["pool"], core.state_shardings["pool"])
  return _bytes_per_device(pool)


def server_memory(served_cfg: ModelConfig, serving, mesh: Mesh) -> dict[str, float]:
  replica = Mesh(np.asarray(mesh.devices)[:1], mesh.axis_names)
  # the engine's prepared head [D, V] in the head dtype (decode.PagedCore.prepare), counted as
  # split over the replica's tensor devices
  head = (
    served_cfg.hidden_size
    * served_cfg.vocab_size
    * jnp.dtype(served_cfg.dtypes.head).itemsize
    / replica.shape["tensor"]
  )
  try:
    params = _bytes_per_device(served_target(served_cfg, replica))
  except ValueError as err:  # jax's IndivisibleError: a tensor split the weights do not divide
    raise ValueError(
      f"serving.tensor={replica.shape['tensor']} does not split the served params evenly: {err}"
    ) from None
  out = {
    "params": params,
    "head": float(head),
    "cache": server_cache_bytes(served_cfg, serving, replica),
  }
  out["total"] = sum(out.values())
  return out


def server_only_mesh(serving, devices: list) -> Mesh:
  """The ("replica", "tensor") mesh of a job without a trainer (eval, serve): the first
  serving.replicas x serving.tensor of `devices`."""
  n = serving.replicas * serving.tensor
  if len(devices) < n:
    raise ValueError(
      f"serving.replicas x serving.tensor = {n} does not fit the topology's {len(devices)} devices"
    )
  return placement.server_mesh(serving, devices[:n])


def _meshes(job, devices: list, processes: int):
  """(trainer mesh or None, one serving replica's mesh or None) of `job` on `devices` split into
  `processes` equal hosts, as loop/placement.py lays them out (no trainer: an eval / serve job's
  server on the first host)."""
  if len(devices) % processes:
    raise ValueError(f"--devices={len(devices)} does not split into --processes={processes}")
  per = len(devices) // processes
  hosts = [devices[i * per : (i + 1) * per] for i in range(processes)]
  if not hasattr(job, "train"):
    return None, server_only_mesh(job.serving, hosts[0])
  serving = getattr(job, "serving", None)
  if serving is None:
    return placement.build_mesh(job.mesh, devices, "mesh", f"{len(devices)} devices"), None
  n_serve = serving.replicas * serving.tensor
  if serving.placement == "disaggregated":
    train = [d for h in hosts for d in h[: per - serving.devices]]
    serve = hosts[0][per - serving.devices :]
  else:
    train, serve = devices, hosts[0][:n_serve]
  if len(serve) < n_serve:
    raise ValueError(
      f"serving.replicas x serving.tensor = {n_serve} does not fit {len(serve)} "
      "serving device(s) per host"
    )
  trainer = placement.build_mesh(job.mesh, train, "mesh", f"{len(train)} trainer devices")
  return trainer, placement.server_mesh(serving, serve[:n_serve], trainer)


def _packed_bucket(job, model_cfg: ModelConfig, mesh: Mesh, bucket: int) -> tuple[int, int]:
  """The (rows, row length) micro-batch the packed step compiles with the most temp memory: every
  bucket compiled at the smaller layer count (`bucket` >= 0 takes that bucket without the scan)."""
  shards = mesh.shape["data"] * mesh.shape["fsdp"]
  buckets = job.train.packing.buckets(job.seq_len, shards)
  if bucket >= 0:
    return buckets[bucket]
  if len(buckets) == 1:
    return buckets[0]
  cut = with_layers(model_cfg, 2 * layer_period(model_cfg))
  temps = [compiled_micro_memory(cut, job.train, mesh, r, n)["temp"] for r, n in buckets]
  return buckets[int(np.argmax(temps))]


def plan_job(
  job, device_memory_gb: float, processes: int = 1, bucket: int = -1, devices: list | None = None
) -> Plan:
  """The plan of an RLConfig / SFTConfig (trainer, and its server when it has one) or an eval /
  serve job (its server alone) on `devices` (default: every visible device; fake CPU devices
  here). A packed job (train.packing) is planned at its packed step's worst bucket
  (`_packed_bucket`)."""
  model_cfg = policy.model_config(job.model)
  trainer, server, notes, place = {}, {}, [], "trainer only"
  if hasattr(job, "train"):
    # memory does not depend on the lr schedule's horizon; an SFT job's depends on its data
    job = dataclasses.replace(job, train=job.train.for_run(job.steps or 1))
  else:  # the rules an eval / serve job's engine holds its model with (policy.served_model)
    model_cfg = model_cfg.replace(logical_axis_rules=DEFAULT_LOGICAL_AXIS_RULES)
    place = "server only"
  trainer_mesh, server_mesh = _meshes(job, devices or jax.devices(), processes)
  if trainer_mesh is not None:
    trainer, notes = _trainer_plan(job, model_cfg, trainer_mesh, processes, bucket)
  if server_mesh is not None:
    server = server_memory(policy.served_config(model_cfg, job.serving), job.serving, server_mesh)
    place = job.serving.placement if trainer_mesh is not None else place
    notes.append(
      f"server mesh {dict(server_mesh.shape)}, {job.serving.engine.max_concurrent_decodes} "
      f"slots x {job.serving.engine.max_len} tokens per replica"
    )
  # a trainer-only job is judged like a disaggregated one (each side on its own devices)
  return Plan(trainer, server, place, device_memory_gb * GB, notes)


def _trainer_plan(job, model_cfg: ModelConfig, trainer_mesh: Mesh, processes: int, bucket: int):
  """(trainer bytes per device, notes) of an RL / SFT job on its trainer mesh."""
  shape = dict(trainer_mesh.shape)
  notes = [f"trainer mesh {shape}"]
  packed = job.train.packing.enabled
  if packed and processes > 1 and hasattr(job, "rollout"):  # as loop/rl.py refuses it
    raise ValueError(
      f"train.packing with --processes={processes}: multi-process RL runs take fixed rows "
      "(train.packing.tokens_per_micro_batch=0)"
    )
  if packed:
    rows, row_len = _packed_bucket(job, model_cfg, trainer_mesh, bucket)
  else:
    rl = getattr(job, "rollout", None)
    rows = rl.prompts_per_batch * rl.group_size if rl is not None else job.train.global_batch
    row_len = job.seq_len
  trainer = trainer_memory(model_cfg, job.train, trainer_mesh, rows, row_len, packed=packed)
  per_row = rows // job.train.micro_batches if not packed else rows
  notes.append(
    f"{'packed' if packed else 'fixed'} micro-batch [{per_row}, {row_len}]: "
    f"{per_row * row_len // (shape['data'] * shape['fsdp'] * shape['sequence'])} "
    "tokens per trainer device"
  )
  return trainer, notes
