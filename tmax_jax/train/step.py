"""The RL / SFT train step: packed rows -> chunked fp32-head logprobs -> registered policy loss ->
gradient accumulation over micro-batches -> global-norm clip + AdamW, under jit with mesh shardings.

Two batch forms share every piece: a fixed-shape TrainBatch [B, T] (one jit: split into
`micro_batches` equal parts, scanned), and a PackedBatch (train/batch.pack_micro_batches) whose
micro-batches have bucket shapes and whose number follows the step's tokens: one jitted
accumulation per micro-batch (compiled once per bucket) and one jitted optimizer update.
Exactness of accumulation: the aggregation's per-token weights depend only on their own row
(rl/aggregation.py), so every micro-batch adds sum(w * loss), its gradient and sum(w), and the
sums are divided by the batch's total sum(w) once, at the end.
Non-finite handling: a step whose batch has no loss token, or whose loss or gradient is NaN/inf,
leaves params and optimizer state untouched (selected inside the jit) and reports a reason code;
`Trainer.step` then raises NonFiniteStepError or logs and skips, per `TrainConfig.on_nonfinite`.
"""

import contextlib
import functools
import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from jaxtyping import Array, Float

from tmax_jax import rl, sharding
from tmax_jax.models import ModelConfig, registry
from tmax_jax.models import logprobs as logprobs_lib
from tmax_jax.rl import aggregation as rl_aggregation
from tmax_jax.rl import losses as rl_losses
from tmax_jax.train import batch as batch_lib
from tmax_jax.train import compact
from tmax_jax.train import optimizer as opt_lib
from tmax_jax.train import state as state_lib
from tmax_jax.train.config import TrainConfig
from tmax_jax.train.distributed import global_batch
from tmax_jax.train.topk import topk_logprobs

log = logging.getLogger(__name__)
BATCH_AXES = ("data", "fsdp")  # mesh axes the batch dimension is split over
SKIP_REASONS = {
  1: "no loss tokens in the batch (every token masked)",
  2: "non-finite loss",
  3: "non-finite gradient",
}


Stats = dict[str, Float[Array, ""]]  # named fp32 scalar sums over a (micro-)batch


class NonFiniteStepError(RuntimeError):
  """A step was rejected (no loss tokens, or NaN/inf loss or gradient); the state is unchanged and
  is `.state`."""

  def __init__(self, message: str, state: Any = None):
    super().__init__(message)
    self.state = state


def flops_per_token(cfg: ModelConfig, seq_len: int) -> float:
  """Training FLOPs per token: 6 x (matmul params incl. the head) + causal attention 6 L T N H.

  Embedding lookups are free; remat recomputation is not counted (MFU convention)."""
  d, f, n_layers = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
  qo = 2 * d * cfg.num_attention_heads * cfg.head_dim
  kv = 2 * d * cfg.num_key_value_heads * cfg.head_dim
  dense = n_layers * (qo + kv + 3 * d * f) + d * cfg.vocab_size
  attn = n_layers * seq_len * cfg.num_attention_heads * cfg.head_dim  # QK^T + AV, causal half
  return 6.0 * dense + 6.0 * attn


def _split_micro(x: jax.Array | None, m: int, mesh: Mesh | None) -> jax.Array | None:
  """[B, ...] -> [M, B/M, ...]; micro-batch j takes rows j, M + j, ... so that every data shard
  keeps an equal share of each micro-batch (no cross-device movement)."""
  if x is None:
    return None
  b = x.shape[0]
  y = x.reshape(b // m, m, *x.shape[1:]).swapaxes(0, 1)
  if mesh is not None:
    y = jax.lax.with_sharding_constraint(y, NamedSharding(mesh, P(None, BATCH_AXES)))
  return y


def make_loss_fn(model: nn.Module, model_cfg: ModelConfig, cfg: TrainConfig) -> Callable:
  """(params, micro-batch dict) -> (loss, stats), both UNNORMALISED sums over the micro-batch:
  loss = sum(w * per-token loss) with w the aggregation's per-row weights, stats["weight"] =
  sum(w); the caller divides by the whole batch's sum(w) (`normalise`)."""
  loss_entry = rl.entry("policy_loss", cfg.loss.policy_loss)
  hyper = cfg.loss.hyper
  aggregate = rl.get("aggregation", cfg.loss.aggregation)
  reads_topk = "topk_ids" in cfg.loss.batch_fields()
  reads_behaviour = "behaviour_logp" in cfg.loss.batch_fields()
  head_dtype = model_cfg.dtypes.head

  def loss_fn(params: Any, mb: batch_lib.MicroBatch) -> tuple[Float[Array, ""], Stats]:
    mask = mb["loss_mask"].astype(jnp.float32)
    w: Float[Array, "B T"] = aggregate(mask, mb["segment_ids"])
    counts = {
      "weight": jnp.sum(w),
      "n_loss_tokens": jnp.sum((mask > 0).astype(jnp.float32)),
      "n_tokens": jnp.sum((mb["segment_ids"] > 0).astype(jnp.float32)),
    }
    mb = {**mb, "weights": w}  # compact.gather_loss_tokens gathers it with the rest
    hidden, _ = model.apply({"params": params}, mb["tokens"], mb["positions"], mb["segment_ids"])
    if cfg.loss_tokens_per_row:  # the head only where the loss is (train/compact.py)
      hidden, mb = compact.gather_loss_tokens(hidden, mb, cfg.loss_tokens_per_row)
    head_w = registry.head_weight(params, model_cfg)  # [D, V]
    save = logprobs_lib.saves_logits(
      model_cfg.remat_policy, hidden.shape[0] * hidden.shape[1], head_w.shape[1]
    )
    logp, ent = logprobs_lib.token_logprobs(
      hidden,
      head_w,
      mb["targets"],
      chunk_size=cfg.logprob_chunk_size,
      head_dtype=head_dtype,
      temperature=cfg.temperature,
      save_logits=save,
    )  # [b, T] each
    mask = mb["loss_mask"]
    cur_topk = None
    if reads_topk:  # current logprobs at the behaviour's top-K ids [b, T, K]
      cur_topk = topk_logprobs(
        hidden,
        head_w,
        mb["topk_ids"],
        chunk_size=cfg.logprob_chunk_size,
        head_dtype=head_dtype,
        temperature=cfg.temperature,
      )
    x = rl.PolicyInputs(
      logp, mb["behaviour_logp"], mb["advantages"], mask, cur_topk, mb.get("behaviour_topk_logp")
    )
    terms = loss_entry.fn(x, hyper)
    per_token = terms.loss
    if cfg.loss.kl_beta > 0:
      per_token = per_token + cfg.loss.kl_beta * rl_losses.k3_kl(logp, mb["ref_logp"], mask)
    loss = jnp.sum(per_token * mb["weights"])
    on = (mask > 0).astype(jnp.float32)
    lp, blp = jax.lax.stop_gradient(logp), jnp.where(mask > 0, mb["behaviour_logp"], logp)
    stats = {
      "kept": jnp.sum(terms.kept * on),
      "entropy": jnp.sum(ent * on),
      "tv": jnp.sum(rl_losses.binary_tv(lp, blp) * on),
      "kl": jnp.sum(rl_losses.binary_kl(lp, blp) * on),
      **counts,
    }
    if reads_behaviour:
      stats.update(mismatch_stats(lp, blp, mask))
    return loss, stats

  return loss_fn


def mismatch_stats(
  logp: Float[Array, "B T"], behaviour_logp: Float[Array, "B T"], mask: Float[Array, "B T"]
) -> Stats:
  """Trainer-vs-behaviour mismatch sums over the loss (response) tokens: |log pi - log mu| and
  the k3 estimate of KL(mu || pi), r - 1 - log r with r = pi / mu (the tokens were sampled from
  mu, so E_mu[r - 1] = 0 and the estimate is unbiased and >= 0; rl_losses.k3_kl with mu in the
  policy's place). The recipe's stability indicator: the fp32 head on both sides keeps it small."""
  on = (mask > 0).astype(jnp.float32)
  return {
    "abs_dlogp": jnp.sum(jnp.abs(logp - behaviour_logp) * on),
    "mismatch_k3": jnp.sum(rl_losses.k3_kl(behaviour_logp, logp, mask)),
  }


def _value_and_grad(loss_fn: Callable, params: Any, mb: dict):
  (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, mb)
  return loss, stats, grads


def zeros_like_sums(loss_fn: Callable, params: Any, mb: dict):
  """fp32 zeros shaped like (loss, stats, grads) of one micro-batch (nothing is computed)."""
  shapes = jax.eval_shape(functools.partial(_value_and_grad, loss_fn), params, mb)
  return jax.tree.map(lambda s: jnp.zeros(s.shape, jnp.float32), shapes)


def make_micro_fn(loss_fn: Callable) -> Callable:
  """(acc, params, micro-batch dict) -> acc + the micro-batch's (loss, stats, fp32 grads): the
  packed step's accumulation (Trainer jits it with acc donated, once per bucket shape; the memory
  plan compiles the same function)."""

  def micro(acc, params, mb: dict):
    return jax.tree.map(jnp.add, acc, _value_and_grad(loss_fn, params, mb))

  return micro


def _accumulate(loss_fn: Callable, params: Any, mbs: dict, m: int):
  """Sum of loss, stats and fp32 grads over the M micro-batches (a scan when M > 1)."""
  if m == 1:
    return _value_and_grad(loss_fn, params, jax.tree.map(lambda x: x[0], mbs))

  micro = make_micro_fn(loss_fn)

  def body(carry, mb):
    return micro(carry, params, mb), None

  zeros = zeros_like_sums(loss_fn, params, jax.tree.map(lambda x: x[0], mbs))
  (loss, stats, grads), _ = jax.lax.scan(body, zeros, mbs)
  return loss, stats, grads


def normalise(
  loss: Float[Array, ""], stats: Stats, grads: Any
) -> tuple[Float[Array, ""], Stats, Any]:
  """Divides the summed loss and gradient by the batch's total aggregation weight."""
  scale = rl_aggregation.normaliser(stats["weight"])
  return loss * scale, stats, jax.tree.map(lambda g: g * scale, grads)


def _fields(batch: batch_lib.TrainBatch) -> dict:
  return {k: v for k, v in batch.fields().items() if v is not None}


def make_grad_fn(
  model: nn.Module, model_cfg: ModelConfig, cfg: TrainConfig, mesh: Mesh | None = None
) -> Callable:
  """(params, fixed-shape batch) -> (loss, stats sums, grads): the whole-batch normalised loss and
  gradient, accumulated over `cfg.micro_batches` equal micro-batches."""
  loss_fn = make_loss_fn(model, model_cfg, cfg)

  def grad_fn(params, batch: batch_lib.TrainBatch):
    mbs = {k: _split_micro(v, cfg.micro_batches, mesh) for k, v in _fields(batch).items()}
    return normalise(*_accumulate(loss_fn, params, mbs, cfg.micro_batches))

  return grad_fn


def make_apply_fn(cfg: TrainConfig, optimizer: optax.GradientTransformation) -> Callable:
  """(state, normalised loss, stats sums, grads) -> (state, metrics): the optimizer update, or the
  unchanged state with a skip reason."""
  schedule = opt_lib.make_schedule(cfg.optimizer)

  def apply_fn(state: state_lib.TrainState, loss, stats, grads):
    n_tokens = stats["n_loss_tokens"]
    grad_norm = optax.tree.norm(grads)
    reason = jnp.where(
      n_tokens == 0, 1, jnp.where(~jnp.isfinite(loss), 2, jnp.where(~jnp.isfinite(grad_norm), 3, 0))
    )
    lr = schedule(opt_lib.optimizer_step_count(state.opt_state))

    def apply(operands):
      params, opt_state = operands
      updates, opt_state = optimizer.update(grads, opt_state, params)
      return optax.apply_updates(params, updates), opt_state

    # cond, not a where-select: a rejected step never computes the update, and an accepted one
    # does not hold a second copy of params + optimizer state
    params, opt_state = jax.lax.cond(
      reason == 0, apply, lambda operands: operands, (state.params, state.opt_state)
    )
    new_state = state.replace(params=params, opt_state=opt_state, step=state.step + 1)
    denom = jnp.maximum(n_tokens, 1.0)
    metrics = {
      "loss": loss,
      "grad_norm": grad_norm,
      "lr": lr,
      "n_loss_tokens": n_tokens,
      "n_tokens": stats["n_tokens"],
      "kept_frac": stats["kept"] / denom,
      "tv_mean": stats["tv"] / denom,
      "kl_mean": stats["kl"] / denom,
      "entropy": stats["entropy"] / denom,
      "skip_reason": reason,
    }
    if "mismatch_k3" in stats:  # losses that read behaviour logprobs (RL)
      metrics["mismatch_abs_logp"] = stats["abs_dlogp"] / denom
      metrics["mismatch_kl_k3"] = stats["mismatch_k3"] / denom
    return new_state, metrics

  return apply_fn


def make_step_fn(
  model: nn.Module,
  model_cfg: ModelConfig,
  cfg: TrainConfig,
  optimizer: optax.GradientTransformation,
  mesh: Mesh | None = None,
) -> Callable:
  """The pure fixed-shape step (state, batch) -> (state, metrics); jit it (Trainer does)."""
  grad_fn = make_grad_fn(model, model_cfg, cfg, mesh)
  apply_fn = make_apply_fn(cfg, optimizer)

  def step_fn(state: state_lib.TrainState, batch: batch_lib.TrainBatch):
    return apply_fn(state, *grad_fn(state.params, batch))

  return step_fn


def _mesh_context(mesh: Mesh | None, model_cfg: ModelConfig):
  if mesh is None:
    return contextlib.nullcontext()
  return sharding.use_mesh(mesh, model_cfg.logical_axis_rules)


class Trainer:
  """Host-side driver of the jitted step: batch building and validation, global batch assembly,
  timing, MFU, padding and the non-finite policy. `step(state, batch)` donates `state`; use the
  returned one."""

  def __init__(
    self, model: nn.Module, model_cfg: ModelConfig, cfg: TrainConfig, mesh: Mesh | None = None
  ):
    self.model, self.model_cfg, self.cfg, self.mesh = model, model_cfg, cfg, mesh
    self.optimizer = opt_lib.make_optimizer(cfg.optimizer)
    self._loss_fn = make_loss_fn(model, model_cfg, cfg)
    self._step_fn = make_step_fn(model, model_cfg, cfg, self.optimizer, mesh)
    self._apply_fn = make_apply_fn(cfg, self.optimizer)
    # jitted on first use, when the state's shardings are known
    self._step: Callable[..., Any] | None = None
    self._micro: Callable[..., Any] | None = None
    self._zeros: Callable[..., Any] | None = None
    self._finish: Callable[..., Any] | None = None

  @property
  def batch_shards(self) -> int:
    """How many ways the batch (row) axis is split: the mesh's data x fsdp size."""
    if self.mesh is None:
      return 1
    return math.prod(self.mesh.shape.get(a, 1) for a in BATCH_AXES)

  def make_batch(
    self,
    trajectories: Sequence[batch_lib.Trajectory],
    seq_len: int,
    *,
    num_rows: int | None = None,
    pack_rows: bool = True,
  ) -> batch_lib.TrainBatch | batch_lib.PackedBatch:
    """The step's batch with exactly the fields the loss reads: packed micro-batches when
    `cfg.packing` is on (num_rows / pack_rows are then unused), else one [num_rows, seq_len]
    batch (batch.pack)."""
    fields, k = self.cfg.loss.batch_fields(), self.cfg.loss.top_k
    if self.cfg.packing.enabled:
      buckets = self.cfg.packing.buckets(seq_len, self.batch_shards)
      return batch_lib.pack_micro_batches(
        trajectories, buckets, shards=self.batch_shards, fields=fields, top_k=k
      )
    return batch_lib.pack(
      trajectories, seq_len, num_rows=num_rows, pack_rows=pack_rows, fields=fields, top_k=k
    )

  def _replicated(self):
    return None if self.mesh is None else NamedSharding(self.mesh, P())

  def _jit(self, fn: Callable, state: state_lib.TrainState, donate=(0,)):
    """jit of a (state, ...) -> (state, metrics) function: the state keeps its shardings (e.g.
    FSDP params) across steps; metrics are replicated."""
    if self.mesh is None:
      return jax.jit(fn, donate_argnums=donate)
    shardings = jax.tree.map(lambda x: x.sharding, state)
    return jax.jit(fn, donate_argnums=donate, out_shardings=(shardings, self._replicated()))

  def init_state(self, params: Any) -> state_lib.TrainState:
    return state_lib.create(params, self.optimizer, self.cfg.seed, self._replicated())

  def to_device(self, local: batch_lib.TrainBatch) -> batch_lib.TrainBatch:
    """This process's rows (NumPy) -> the global batch (sharded over the mesh's batch axes when a
    mesh is set; every process passes its own equal share, in process-index order)."""
    batch_lib.validate(local, self.cfg.loss.batch_fields())
    if self.cfg.loss_tokens_per_row:
      compact.check_capacity(local.loss_mask, self.cfg.loss_tokens_per_row)
    if self.mesh is None:
      return jax.tree.map(jnp.asarray, local)
    return global_batch(local, self.mesh)

  def _fixed_step(self, state, batch: batch_lib.TrainBatch):
    if isinstance(batch.tokens, np.ndarray):
      batch = self.to_device(batch)
    b, t = batch.tokens.shape
    if b % self.cfg.micro_batches:
      raise ValueError(
        f"global batch of {b} rows is not divisible by micro_batches={self.cfg.micro_batches}"
      )
    if self._step is None:
      self._step = self._jit(self._step_fn, state)
    state, metrics = self._step(state, batch)
    return state, metrics, [(b, t)], self.cfg.micro_batches

  def _packed_sums(self, params: Any, packed: batch_lib.PackedBatch):
    """Unnormalised (loss, stats, grads) sums over the micro-batches, one compiled accumulation
    per bucket shape; and the micro-batches' global shapes. Multi-process: every process packs
    the same trajectories (packing is deterministic) and passes its own rows of each
    micro-batch, as for a fixed batch."""
    if self._micro is None or self._zeros is None:
      self._micro = jax.jit(make_micro_fn(self._loss_fn), donate_argnums=(0,))
      grads_sharding = None if self.mesh is None else jax.tree.map(lambda x: x.sharding, params)
      out = None if self.mesh is None else (self._replicated(), self._replicated(), grads_sharding)
      self._zeros = jax.jit(functools.partial(zeros_like_sums, self._loss_fn), out_shardings=out)
    acc, shapes = None, []
    for local in packed.micro_batches:
      mb = _fields(self.to_device(local))
      acc = self._zeros(params, mb) if acc is None else acc  # laid out like the sums
      acc = self._micro(acc, params, mb)
      shapes.append(tuple(mb["tokens"].shape))  # global rows
    return acc, shapes

  def _packed_step(self, state, packed: batch_lib.PackedBatch):
    """The micro-batches' sums, then one optimizer update on their normalised gradient."""
    acc, shapes = self._packed_sums(state.params, packed)
    if self._finish is None:
      self._finish = self._jit(lambda st, acc: self._apply_fn(st, *normalise(*acc)), state)
    state, metrics = self._finish(state, acc)
    return state, metrics, shapes, len(shapes)

  def grads(self, params: Any, batch: batch_lib.TrainBatch | batch_lib.PackedBatch):
    """(loss, stats sums, grads) of a batch, normalised exactly as the step uses them (no
    update): for tests and analysis."""
    with _mesh_context(self.mesh, self.model_cfg):
      if isinstance(batch, batch_lib.PackedBatch):
        return jax.jit(normalise)(*self._packed_sums(params, batch)[0])
      dev = self.to_device(batch) if isinstance(batch.tokens, np.ndarray) else batch
      return jax.jit(make_grad_fn(self.model, self.model_cfg, self.cfg, self.mesh))(params, dev)

  def step(self, state: state_lib.TrainState, batch: batch_lib.TrainBatch | batch_lib.PackedBatch):
    """-> (new state, metrics dict of Python floats). Raises NonFiniteStepError (on_nonfinite
    "raise", with the unchanged state as `.state`) or logs and skips (on_nonfinite "skip")."""
    start = time.perf_counter()
    with _mesh_context(self.mesh, self.model_cfg):
      if isinstance(batch, batch_lib.PackedBatch):
        state, metrics, shapes, n_micro = self._packed_step(state, batch)
      else:
        state, metrics, shapes, n_micro = self._fixed_step(state, batch)
    metrics = {k: float(v) for k, v in jax.device_get(metrics).items()}
    elapsed = time.perf_counter() - start
    slots = sum(b * t for b, t in shapes)
    metrics["step_time_s"] = elapsed
    metrics["tokens_per_s"] = metrics["n_tokens"] / elapsed
    metrics["padding_fraction"] = 1.0 - metrics["n_tokens"] / max(slots, 1)
    metrics["micro_batches"] = float(n_micro)
    # attention FLOPs grow with the row length: weight each shape by its share of the slots
    flops = sum(flops_per_token(self.model_cfg, t) * b * t for b, t in shapes) / max(slots, 1)
    metrics["mfu"] = (
      flops * metrics["n_tokens"] / elapsed / (self.cfg.peak_flops_per_device * jax.device_count())
    )
    reason = int(metrics.pop("skip_reason"))
    metrics["skipped"] = float(reason != 0)
    if reason:
      msg = f"step {int(state.step) - 1} rejected: {SKIP_REASONS[reason]}; state unchanged"
      if self.cfg.on_nonfinite == "raise":
        raise NonFiniteStepError(msg, state)
      log.warning("%s (skipped)", msg)
      metrics["skip_reason"] = SKIP_REASONS[reason]
    return state, metrics
