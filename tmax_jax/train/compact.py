"""Loss-token compaction: run the LM head only where the loss is.

In RL and agent SFT most tokens of a row are prompt and observation tokens (loss weight 0), yet the
head (D x V per token, V ~ 152k-248k for Qwen) dominates the cost of small and mid-size models. With
`TrainConfig.loss_tokens_per_row = K > 0` the step gathers, per row, the hidden states of the first
K loss tokens (in position order) and computes logprobs, entropies and the loss on those [B, K]
positions only. Every per-token input is gathered with the same indices, so the loss and its
gradient are identical to the full path as long as no row has more than K loss tokens; the Trainer
checks that on the host and raises naming the row, instead of silently dropping tokens.
"""

from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from tmax_jax.train.batch import TOPK_FIELDS, MicroBatch

# Per-token [B, T] fields gathered along time; [B, T, K] top-K fields use the same indices.
PER_TOKEN = ("targets", "loss_mask", "behaviour_logp", "advantages", "ref_logp", "weights")


def loss_token_index(loss_mask: jax.Array, k: int) -> jax.Array:
  """[B, T] -> [B, K] int32: positions of the first K loss tokens, then (padding) non-loss ones."""
  t = loss_mask.shape[-1]
  pos = jnp.arange(t, dtype=jnp.int32)[None, :]
  key = jnp.where(loss_mask > 0, pos, pos + t)  # loss tokens first, each group in order
  return jnp.argsort(key, axis=-1)[:, :k].astype(jnp.int32)


def gather_loss_tokens(
  hidden: Float[Array, "B T D"], mb: MicroBatch, k: int
) -> tuple[Float[Array, "B K D"], MicroBatch]:
  """hidden [B,T,D] and the micro-batch's per-token fields -> their [B,K,...] loss-token views."""
  idx = loss_token_index(mb["loss_mask"], k)  # [B, K]
  out: dict[str, Any] = dict(mb)
  for name in PER_TOKEN:
    if out.get(name) is not None:
      out[name] = jnp.take_along_axis(out[name], idx, axis=1)
  for name in TOPK_FIELDS:
    if out.get(name) is not None:
      out[name] = jnp.take_along_axis(out[name], idx[..., None], axis=1)
  h = jnp.take_along_axis(hidden, idx[..., None], axis=1)  # [B, K, D]
  return h, cast(MicroBatch, out)  # the same fields, K tokens per row


def check_capacity(loss_mask: np.ndarray | jax.Array, k: int) -> None:
  """Host-side: every row's loss-token count must fit K (else the step would drop tokens)."""
  counts = (np.asarray(loss_mask) > 0).sum(axis=-1)
  worst = int(np.argmax(counts)) if counts.size else 0
  if counts.size and counts[worst] > k:
    raise ValueError(
      f"row {worst} has {int(counts[worst])} loss tokens > "
      f"loss_tokens_per_row={k}; raise TrainConfig.loss_tokens_per_row"
    )
