"""Optax AdamW with constant / linear / cosine schedules, linear warmup and global-norm clipping."""

import jax
import jax.numpy as jnp
import optax

from tmax_jax.train.config import OptimizerConfig

NO_DECAY_LEAVES = ("bias", "scale")  # param leaf names excluded from weight decay by default


def make_schedule(cfg: OptimizerConfig) -> optax.Schedule:
  """step -> lr. Warmup lr * s / W for s < W (HF: lr 0 at step 0), then constant, or a linear /
  cosine decay from lr to lr * end_lr_ratio over the remaining total_steps - W steps. Raises when
  the schedule depends on total_steps and the job never filled it in (OptimizerConfig.horizon)."""
  lr, warm, end = cfg.learning_rate, cfg.warmup, cfg.end_lr_ratio
  decay_steps = max(cfg.horizon - warm, 1)

  def schedule(step):
    s = jnp.asarray(step, jnp.float32)
    ramp = jnp.minimum(s / warm, 1.0) if warm > 0 else jnp.float32(1.0)
    p = jnp.clip((s - warm) / decay_steps, 0.0, 1.0)
    if cfg.schedule == "constant":
      shape = jnp.float32(1.0)
    elif cfg.schedule == "linear":
      shape = end + (1.0 - end) * (1.0 - p)
    else:
      shape = end + (1.0 - end) * 0.5 * (1.0 + jnp.cos(jnp.pi * p))
    return lr * ramp * shape

  return schedule


def _decay_mask(params):
  def keep(path, _):
    return getattr(path[-1], "key", None) not in NO_DECAY_LEAVES

  return jax.tree_util.tree_map_with_path(keep, params)


def make_optimizer(cfg: OptimizerConfig) -> optax.GradientTransformation:
  """clip_by_global_norm(max_grad_norm) then AdamW(schedule). Grads arrive already aggregated."""
  mask = None if cfg.decay_norms_and_biases else _decay_mask
  adamw = optax.adamw(
    make_schedule(cfg), b1=cfg.b1, b2=cfg.b2, eps=cfg.eps, weight_decay=cfg.weight_decay, mask=mask
  )
  if cfg.max_grad_norm <= 0:
    return adamw
  return optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm), adamw)


def optimizer_step_count(opt_state) -> jax.Array:
  """Number of applied updates, read from the Adam state (skipped steps do not count)."""

  def is_adam(x):
    return isinstance(x, optax.ScaleByAdamState)

  for leaf in jax.tree_util.tree_leaves(opt_state, is_leaf=is_adam):
    if is_adam(leaf):
      return leaf.count
  raise ValueError("optimizer state holds no step count (expected an optax Adam state)")
