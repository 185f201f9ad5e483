"""Current-policy logprobs at given token ids (the rollout's top-K), chunked over time like
models.logprobs.token_logprobs: peak memory O(B x chunk x V), logits rematerialised in backward."""

import jax
import jax.numpy as jnp

from tmax_jax.models import full_logits


def topk_logprobs(
  hidden: jax.Array,
  head_w: jax.Array,
  ids: jax.Array,
  *,
  chunk_size: int,
  head_dtype=jnp.float32,
  temperature: float = 1.0,
) -> jax.Array:
  """hidden [B,T,D], head_w [D,V], ids [B,T,K] int -> log pi(ids) [B,T,K] float32."""
  b, t, d = hidden.shape
  k = ids.shape[-1]
  chunk = min(chunk_size, t)
  n = -(-t // chunk)
  pad = n * chunk - t
  if pad:
    hidden = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0)))
    ids = jnp.pad(ids, ((0, 0), (0, pad), (0, 0)))
  w = head_w.astype(head_dtype)
  hs = hidden.reshape(b, n, chunk, d).swapaxes(0, 1)  # [n,B,C,D]
  ks = ids.reshape(b, n, chunk, k).swapaxes(0, 1).astype(jnp.int32)  # [n,B,C,K]

  @jax.checkpoint
  def body(h, idx):
    logits = full_logits(h, w, head_dtype) / temperature  # [B,C,V]
    lse = jax.nn.logsumexp(logits, axis=-1, keepdims=True)
    return jnp.take_along_axis(logits, idx, axis=-1) - lse  # [B,C,K]

  _, out = jax.lax.scan(lambda c, xs: (c, body(*xs)), None, (hs, ks))  # [n,B,C,K]
  return out.swapaxes(0, 1).reshape(b, n * chunk, k)[:, :t]
