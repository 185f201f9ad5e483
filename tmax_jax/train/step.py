"""The RL / SFT train step: packed rows -> chunked fp32-head logprobs -> registered policy loss ->
gradient accumulation over micro-batches -> global-norm clip + AdamW, under jit with mesh shardings.

Exactness of accumulation: aggregation weights (rl/aggregation.py) are computed on the WHOLE global
batch before it is split, so the micro-batch losses and gradients simply add up.
Non-finite handling: a step whose batch has no loss token, or whose loss or gradient is NaN/inf,
leaves params and optimizer state untouched (selected inside the jit) and reports a reason code;
`Trainer.step` then raises NonFiniteStepError or logs and skips, per `TrainConfig.on_nonfinite`.
"""

import contextlib
import logging
import time
from typing import Any, Callable, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from tmax_jax import rl, sharding
from tmax_jax.models import logprobs as logprobs_lib
from tmax_jax.models import registry
from tmax_jax.models.config import ModelConfig
from tmax_jax.rl import losses as rl_losses
from tmax_jax.train import batch as batch_lib
from tmax_jax.train import compact
from tmax_jax.train import optimizer as opt_lib
from tmax_jax.train import state as state_lib
from tmax_jax.train.config import TrainConfig
from tmax_jax.train.topk import topk_logprobs

log = logging.getLogger(__name__)
BATCH_AXES = ("data", "fsdp")  # mesh axes the batch dimension is split over
SKIP_REASONS = {1: "no loss tokens in the batch (every token masked)", 2: "non-finite loss",
                3: "non-finite gradient"}


class NonFiniteStepError(RuntimeError):
  """A step was rejected (no loss tokens, or NaN/inf loss or gradient); the state is unchanged."""


def flops_per_token(cfg: ModelConfig, seq_len: int) -> float:
  """Training FLOPs per token: 6 x (matmul params incl. the head) + causal attention 6 L T N H.

  Embedding lookups are free; remat recomputation is not counted (MFU convention)."""
  d, f, n_layers = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
  qo = 2 * d * cfg.num_attention_heads * cfg.head_dim
  kv = 2 * d * cfg.num_key_value_heads * cfg.head_dim
  dense = n_layers * (qo + kv + 3 * d * f) + d * cfg.vocab_size
  attn = n_layers * seq_len * cfg.num_attention_heads * cfg.head_dim  # QK^T + AV, causal half
  return 6.0 * dense + 6.0 * attn


def _split_micro(x: Optional[jax.Array], m: int, mesh: Optional[Mesh]) -> Optional[jax.Array]:
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
  """(params, micro-batch dict with "weights") -> (weighted loss sum, stats sums)."""
  policy_loss = rl.get("policy_loss", cfg.loss.policy_loss)
  hyper = cfg.loss.hyper()
  topk = cfg.loss.policy_loss == "dppo" and cfg.loss.divergence.startswith("topk")
  head_dtype = model_cfg.dtypes.head

  def loss_fn(params, mb):
    hidden, _ = model.apply({"params": params}, mb["tokens"], mb["positions"], mb["segment_ids"])
    if cfg.loss_tokens_per_row:  # the head only where the loss is (train/compact.py)
      hidden, mb = compact.gather_loss_tokens(hidden, mb, cfg.loss_tokens_per_row)
    head_w = registry.head_weight(params, model_cfg)  # [D, V]
    logp, ent = logprobs_lib.token_logprobs(
      hidden, head_w, mb["targets"], chunk_size=cfg.logprob_chunk_size, head_dtype=head_dtype,
      temperature=cfg.temperature)  # [b, T] each
    mask = mb["loss_mask"]
    cur_topk = None
    if topk:
      cur_topk = topk_logprobs(hidden, head_w, mb["topk_ids"], chunk_size=cfg.logprob_chunk_size,
                               head_dtype=head_dtype, temperature=cfg.temperature)
    x = rl.PolicyInputs(logp, mb["behaviour_logp"], mb["advantages"], mask, cur_topk,
                        mb.get("behaviour_topk_logp"))
    terms = policy_loss(x, **hyper)
    per_token = terms.loss
    if cfg.loss.kl_beta > 0:
      per_token = per_token + cfg.loss.kl_beta * rl_losses.k3_kl(logp, mb["ref_logp"], mask)
    loss = jnp.sum(per_token * mb["weights"])
    on = (mask > 0).astype(jnp.float32)
    lp, blp = jax.lax.stop_gradient(logp), jnp.where(mask > 0, mb["behaviour_logp"], logp)
    stats = {"kept": jnp.sum(terms.kept * on), "entropy": jnp.sum(ent * on),
             "tv": jnp.sum(rl_losses.binary_tv(lp, blp) * on),
             "kl": jnp.sum(rl_losses.binary_kl(lp, blp) * on)}
    return loss, stats

  return loss_fn


def _accumulate(loss_fn: Callable, params: Any, mbs: dict, m: int):
  """Sum of loss, stats and fp32 grads over the M micro-batches (a scan when M > 1)."""
  grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
  if m == 1:
    (loss, stats), grads = grad_fn(params, jax.tree.map(lambda x: x[0], mbs))
    return loss, stats, grads

  def body(carry, mb):
    (loss, stats), grads = grad_fn(params, mb)
    return jax.tree.map(jnp.add, carry, (loss, stats, grads)), None

  zero_loss, zero_stats = jax.eval_shape(loss_fn, params, jax.tree.map(lambda x: x[0], mbs))
  zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, jnp.float32), (zero_loss, zero_stats, params))
  (loss, stats, grads), _ = jax.lax.scan(body, zeros, mbs)
  return loss, stats, grads


def make_grad_fn(model: nn.Module, model_cfg: ModelConfig, cfg: TrainConfig,
                 mesh: Optional[Mesh] = None) -> Callable:
  """(params, batch) -> (loss, stats sums, grads): the accumulated whole-batch gradient."""
  loss_fn = make_loss_fn(model, model_cfg, cfg)
  aggregate = rl.get("aggregation", cfg.loss.aggregation)

  def grad_fn(params, batch: batch_lib.TrainBatch):
    fields = {k: v for k, v in batch.fields().items() if v is not None}
    mask = fields["loss_mask"].astype(jnp.float32)
    fields["weights"] = aggregate(mask, fields["segment_ids"])  # whole-batch denominators
    mbs = {k: _split_micro(v, cfg.micro_batches, mesh) for k, v in fields.items()}
    return _accumulate(loss_fn, params, mbs, cfg.micro_batches)

  return grad_fn


def make_step_fn(model: nn.Module, model_cfg: ModelConfig, cfg: TrainConfig,
                 optimizer: optax.GradientTransformation, mesh: Optional[Mesh] = None) -> Callable:
  """The pure step (state, batch) -> (state, metrics); wrap in jax.jit (Trainer does)."""
  grad_fn = make_grad_fn(model, model_cfg, cfg, mesh)
  schedule = opt_lib.make_schedule(cfg.optimizer)

  def step_fn(state: state_lib.TrainState, batch: batch_lib.TrainBatch):
    loss, stats, grads = grad_fn(state.params, batch)
    n_tokens = jnp.sum((batch.loss_mask > 0).astype(jnp.float32))
    grad_norm = optax.tree.norm(grads)
    reason = jnp.where(n_tokens == 0, 1, jnp.where(~jnp.isfinite(loss), 2,
                                                    jnp.where(~jnp.isfinite(grad_norm), 3, 0)))
    lr = schedule(opt_lib.optimizer_step_count(state.opt_state))

    def apply(operands):
      params, opt_state = operands
      updates, opt_state = optimizer.update(grads, opt_state, params)
      return optax.apply_updates(params, updates), opt_state

    # cond, not a where-select: a rejected step never computes the update, and an accepted one
    # does not hold a second copy of params + optimizer state
    params, opt_state = jax.lax.cond(reason == 0, apply, lambda operands: operands,
                                     (state.params, state.opt_state))
    new_state = state.replace(params=params, opt_state=opt_state, step=state.step + 1)
    denom = jnp.maximum(n_tokens, 1.0)
    metrics = {"loss": loss, "grad_norm": grad_norm, "lr": lr, "n_loss_tokens": n_tokens,
               "n_tokens": jnp.sum((batch.segment_ids > 0).astype(jnp.float32)),
               "kept_frac": stats["kept"] / denom, "tv_mean": stats["tv"] / denom,
               "kl_mean": stats["kl"] / denom, "entropy": stats["entropy"] / denom,
               "skip_reason": reason}
    return new_state, metrics

  return step_fn


def _mesh_context(mesh: Optional[Mesh], model_cfg: ModelConfig):
  if mesh is None:
    return contextlib.nullcontext()
  return sharding.use_mesh(mesh, model_cfg.logical_axis_rules)


class Trainer:
  """Host-side driver of the jitted step: validation, global batch assembly, timing, MFU and the
  non-finite policy. `step(state, batch)` donates `state`; use the returned one."""

  def __init__(self, model: nn.Module, model_cfg: ModelConfig, cfg: TrainConfig,
               mesh: Optional[Mesh] = None):
    self.model, self.model_cfg, self.cfg, self.mesh = model, model_cfg, cfg, mesh
    self.optimizer = opt_lib.make_optimizer(cfg.optimizer)
    self._step_fn = make_step_fn(model, model_cfg, cfg, self.optimizer, mesh)
    self._step = None  # jitted on the first call, when the state's shardings are known

  def _compiled(self, state: state_lib.TrainState) -> Callable:
    """The state keeps its shardings (e.g. FSDP params) across steps; metrics are replicated."""
    if self._step is None:
      if self.mesh is None:
        self._step = jax.jit(self._step_fn, donate_argnums=(0,))
      else:
        shardings = jax.tree.map(lambda x: x.sharding, state)
        self._step = jax.jit(self._step_fn, donate_argnums=(0,),
                             out_shardings=(shardings, NamedSharding(self.mesh, P())))
    return self._step

  def init_state(self, params: Any) -> state_lib.TrainState:
    replicated = None if self.mesh is None else NamedSharding(self.mesh, P())
    return state_lib.create(params, self.optimizer, self.cfg.seed, replicated)

  def to_device(self, local: batch_lib.TrainBatch) -> batch_lib.TrainBatch:
    """This process's rows (NumPy) -> the global batch (sharded over the mesh's batch axes when a
    mesh is set; every process passes its own equal share, in process-index order)."""
    batch_lib.validate(local)
    if self.mesh is None:
      return jax.tree.map(jnp.asarray, local)
    from tmax_jax.train.distributed import global_batch
    return global_batch(local, self.mesh)

  def step(self, state: state_lib.TrainState, batch: batch_lib.TrainBatch):
    """-> (new state, metrics dict of Python floats). Raises NonFiniteStepError (on_nonfinite
    "raise", with the unchanged state as `.state`) or logs and skips (on_nonfinite "skip")."""
    if isinstance(batch.tokens, np.ndarray):
      if self.cfg.loss_tokens_per_row:
        compact.check_capacity(batch.loss_mask, self.cfg.loss_tokens_per_row)
      batch = self.to_device(batch)
    b, t = batch.tokens.shape
    if b % self.cfg.micro_batches:
      raise ValueError(f"global batch of {b} rows is not divisible by micro_batches="
                       f"{self.cfg.micro_batches}")
    start = time.perf_counter()
    with _mesh_context(self.mesh, self.model_cfg):
      state, metrics = self._compiled(state)(state, batch)
    metrics = {k: float(v) for k, v in jax.device_get(metrics).items()}
    elapsed = time.perf_counter() - start
    metrics["step_time_s"] = elapsed
    metrics["tokens_per_s"] = metrics["n_tokens"] / elapsed
    flops = flops_per_token(self.model_cfg, t) * metrics["n_tokens"]
    metrics["mfu"] = flops / elapsed / (self.cfg.peak_flops_per_device * jax.device_count())
    reason = int(metrics.pop("skip_reason"))
    metrics["skipped"] = float(reason != 0)
    if reason:
      msg = f"step {int(state.step) - 1} rejected: {SKIP_REASONS[reason]}; state unchanged"
      if self.cfg.on_nonfinite == "raise":
        err = NonFiniteStepError(msg)
        err.state = state
        raise err
      log.warning("%s (skipped)", msg)
      metrics["skip_reason"] = SKIP_REASONS[reason]
    return state, metrics
