"""Loss aggregation as per-token weights over the WHOLE optimizer batch (kind "aggregation").

loss = sum_t weight[t] * per_token_loss[t] with weight = w / sum(w) over the optimizer batch. A
registered aggregation returns the unnormalised `w`, which depends only on the token's own row
(and segment), never on the rest of the batch; the normaliser is then just another sum. So a batch
split into micro-batches of ANY shapes (packed buckets, gradient accumulation) is exact: each
micro-batch adds its sum(w * loss), its gradient and its sum(w), and the trainer divides once at the
end (by `normaliser(total sum(w))`).
"""

import jax
import jax.numpy as jnp

from tmax_jax.rl.registry import get, register


@register("aggregation", "token")
def token(loss_mask: jax.Array, segment_ids: jax.Array) -> jax.Array:
  """w = loss_mask: normalised, the sum over kept tokens / total response-token count.

  loss_mask [B, T] (0/1 or per-token weights), segment_ids [B, T] unused -> [B, T] float32.
  Dropped (masked-by-DPPO) tokens still count in the denominator, as in the recipe.
  """
  del segment_ids
  return loss_mask.astype(jnp.float32)


def _row_segment_counts(m: jax.Array, seg: jax.Array) -> jax.Array:
  """Per token: the loss-mask total of its (row, segment). [T], [T] -> [T]."""
  n = seg.shape[0] + 1
  counts = jax.ops.segment_sum(m, seg, num_segments=n)  # [T+1]
  return counts[seg]


@register("aggregation", "sequence")
def sequence(loss_mask: jax.Array, segment_ids: jax.Array) -> jax.Array:
  """w = loss_mask / (its sequence's loss-mask total): every sequence's weights sum to 1, so the
  normaliser counts the sequences and the result is the mean over sequences of the token mean.

  A sequence is one (row, segment id) of a packed batch with at least one loss token. [B, T].
  """
  m = loss_mask.astype(jnp.float32)
  seg = jnp.where(m > 0, segment_ids, 0).astype(jnp.int32)  # loss on padding never counts
  per_token_total = jax.vmap(_row_segment_counts)(m, seg)  # [B, T]
  return jnp.where(m > 0, m / jnp.where(per_token_total > 0, per_token_total, 1.0), 0.0)


def normaliser(w_sum: jax.Array) -> jax.Array:
  """1 / sum(w), safe for a batch without loss tokens (w_sum 0 -> the weights stay 0)."""
  return 1.0 / jnp.maximum(w_sum, 1e-30)


def weights(name: str, loss_mask: jax.Array, segment_ids: jax.Array) -> jax.Array:
  """The normalised weights of one whole batch under aggregation `name`. [B, T] -> [B, T]."""
  w = get("aggregation", name)(loss_mask, segment_ids)
  return w * normaliser(jnp.sum(w))
