"""Loss aggregation as per-token weights over the WHOLE optimizer batch (kind "aggregation").

loss = sum_t weight[t] * per_token_loss[t]. Computing the weights once on the full batch, before it
is split into gradient-accumulation micro-batches, makes accumulation exact: the micro-batch losses
simply add up.
"""

import jax
import jax.numpy as jnp

from tmax_jax.rl.registry import register


@register("aggregation", "token")
def token(loss_mask: jax.Array, segment_ids: jax.Array) -> jax.Array:
  """weight = loss_mask / sum(loss_mask): sum over kept tokens / total response-token count.

  loss_mask [B, T] (0/1 or per-token weights), segment_ids [B, T] unused -> [B, T] float32.
  Dropped (masked-by-DPPO) tokens still count in the denominator, as in the recipe.
  """
  del segment_ids
  m = loss_mask.astype(jnp.float32)
  return m / jnp.maximum(jnp.sum(m), 1e-30)


def _row_segment_counts(m: jax.Array, seg: jax.Array) -> jax.Array:
  """Per token: the loss-mask total of its (row, segment). [T], [T] -> [T]."""
  n = seg.shape[0] + 1
  counts = jax.ops.segment_sum(m, seg, num_segments=n)  # [T+1]
  return counts[seg]


@register("aggregation", "sequence")
def sequence(loss_mask: jax.Array, segment_ids: jax.Array) -> jax.Array:
  """Mean over sequences of the per-sequence token mean.

  A sequence is one (row, segment id) of a packed batch that has at least one loss token;
  weight = loss_mask / (its sequence's token total * number of such sequences). [B, T] -> [B, T].
  """
  m = loss_mask.astype(jnp.float32)
  seg = jnp.where(m > 0, segment_ids, 0).astype(jnp.int32)  # loss on padding never counts
  per_token_total = jax.vmap(_row_segment_counts)(m, seg)  # [B, T]
  safe = jnp.where(per_token_total > 0, per_token_total, 1.0)
  # each sequence's tokens sum to exactly 1 in m / safe, so the sum counts the sequences
  num_seqs = jnp.round(jnp.sum(jnp.where(m > 0, m / safe, 0.0)))
  return jnp.where(m > 0, m / (safe * jnp.maximum(num_seqs, 1e-30)), 0.0)
