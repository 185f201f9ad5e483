"""Per-token log-probabilities and entropies through the LM head, computed in chunks along time.

Peak memory is O(B x chunk x V) rather than O(B x T x V): a `lax.scan` over time chunks computes one
chunk's logits, reduces them to (logp, entropy) and drops them; the chunk body is rematerialised so
the backward pass recomputes logits chunk by chunk too. The trainer and the inference server both
use `token_logprobs`; `full_logits` is for parity tests and sampling.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

F32 = jnp.float32


def full_logits(hidden: jax.Array, head_w: jax.Array, head_dtype=F32) -> jax.Array:
  """hidden [B,T,D], head_w [D,V] -> logits [B,T,V] float32; both operands cast to head_dtype.

  An fp32 head asks for HIGHEST precision so GPUs do not silently use TF32 for it."""
  precision = (jax.lax.Precision.HIGHEST if jnp.dtype(head_dtype) == F32
               else jax.lax.Precision.DEFAULT)
  return jnp.einsum("btd,dv->btv", hidden.astype(head_dtype), head_w.astype(head_dtype),
                    preferred_element_type=F32, precision=precision).astype(F32)


def _chunk_stats(h: jax.Array, w: jax.Array, targets: jax.Array, head_dtype,
                 temperature: float) -> tuple[jax.Array, jax.Array]:
  """h [B,C,D], w [D,V], targets [B,C] -> (logp [B,C], entropy [B,C]) float32."""
  logits = full_logits(h, w, head_dtype)  # [B,C,V]
  if temperature != 1.0:
    logits = logits / temperature
  lse = jax.nn.logsumexp(logits, axis=-1)  # [B,C]
  target_logit = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
  probs = jnp.exp(logits - lse[..., None])
  entropy = lse - jnp.sum(probs * logits, axis=-1)
  return target_logit - lse, entropy


def token_logprobs(hidden: jax.Array, head_w: jax.Array, targets: jax.Array, *,
                   chunk_size: int = 512, head_dtype=F32,
                   temperature: float = 1.0) -> tuple[jax.Array, jax.Array]:
  """log p(targets) and the entropy of the predictive distribution at each position.

  hidden [B,T,D] (final-normed), head_w [D,V], targets [B,T] int -> (logp [B,T], entropy [B,T]),
  both float32. T need not divide chunk_size (the tail is padded and dropped). `temperature` divides
  the logits (sampling temperature), matching the sampler's distribution.
  """
  b, t, d = hidden.shape
  chunk = min(chunk_size, t)
  n_chunks = -(-t // chunk)
  pad = n_chunks * chunk - t
  if pad:
    hidden = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0)))
    targets = jnp.pad(targets, ((0, 0), (0, pad)))
  w = head_w.astype(head_dtype)
  hs = hidden.reshape(b, n_chunks, chunk, d).swapaxes(0, 1)  # [n,B,C,D]
  ts = targets.reshape(b, n_chunks, chunk).swapaxes(0, 1).astype(jnp.int32)  # [n,B,C]

  @jax.checkpoint
  def body(h, tgt):
    return _chunk_stats(h, w, tgt, head_dtype, temperature)

  def step(carry, xs):
    return carry, body(*xs)

  _, (logp, ent) = jax.lax.scan(step, None, (hs, ts))  # [n,B,C] each
  logp = logp.swapaxes(0, 1).reshape(b, n_chunks * chunk)[:, :t]
  ent = ent.swapaxes(0, 1).reshape(b, n_chunks * chunk)[:, :t]
  return logp, ent
