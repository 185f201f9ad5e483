"""Reference attention: the whole [T, S] score matrix at once (optionally in query chunks).

It is the numerical reference for every other implementation and the path decode uses (one query
against the cache). Shapes: B batch, T query time, S key time, N heads, K kv heads, H head dim.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

F32 = jnp.float32


def attention_mask(
  q_pos: jax.Array, q_seg: jax.Array, k_pos: jax.Array, k_seg: jax.Array, keys_major: bool = False
) -> jax.Array:
  """-> bool [B,T,S]: query i sees key j iff segments match, are non-zero, and pos_j <= pos_i.
  keys_major: the same mask laid out [B,S,T] (built in that order, not transposed)."""

  def query(x):  # [B,T] -> broadcast along the key axis
    return x[:, None, :] if keys_major else x[:, :, None]

  def key(x):  # [B,S] -> broadcast along the query axis
    return x[:, :, None] if keys_major else x[:, None, :]

  same = (query(q_seg) == key(k_seg)) & (query(q_seg) != 0)
  return same & (key(k_pos) <= query(q_pos))


def _attend(q, k, v, mask, scale):
  """q [B,T,N,H], k/v [B,S,K,H], mask [B,T,S] -> [B,T,N,H] (one block of queries)."""
  b, t, n, h = q.shape
  kv = k.shape[2]
  qg = q.reshape(b, t, kv, n // kv, h)  # [B,T,K,G,H]
  scores = jnp.einsum("btkgh,bskh->bkgts", qg, k, preferred_element_type=F32) * scale
  scores = jnp.where(mask[:, None, None], scores, jnp.finfo(F32).min)
  probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)  # [B,K,G,T,S]
  out = jnp.einsum("bkgts,bskh->btkgh", probs, v)
  return out.reshape(b, t, n, h)


def dot_product_attention(
  q: jax.Array,
  k: jax.Array,
  v: jax.Array,
  mask: jax.Array,
  scale: float | None = None,
  q_chunk: int | None = None,
) -> jax.Array:
  """q [B,T,N,H], k/v [B,S,K,H], mask [B,T,S] -> [B,T,N,H]; scores and softmax in fp32 (GQA:
  query head n uses kv head n // (N/K), like HF's repeat_kv). Fully masked rows give finite junk.

  q_chunk: process queries in blocks of this size (scan + remat), so the fp32 score buffer is
  [B,N,q_chunk,S] instead of [B,N,T,S] in the forward and the backward pass.
  """
  scale = q.shape[-1] ** -0.5 if scale is None else scale
  b, t, n, h = q.shape
  if not q_chunk or t <= q_chunk:
    return _attend(q, k, v, mask, scale)
  n_chunks = -(-t // q_chunk)
  pad = n_chunks * q_chunk - t
  q = jnp.pad(q, ((0, 0), (0, pad), (0, 0), (0, 0)))
  mask = jnp.pad(mask, ((0, 0), (0, pad), (0, 0)))
  qs = q.reshape(b, n_chunks, q_chunk, n, h).swapaxes(0, 1)  # [n,B,C,N,H]
  ms = mask.reshape(b, n_chunks, q_chunk, -1).swapaxes(0, 1)  # [n,B,C,S]
  body = jax.checkpoint(lambda qc, mc: _attend(qc, k, v, mc, scale))
  _, out = jax.lax.scan(lambda c, xs: (c, body(*xs)), None, (qs, ms))  # [n,B,C,N,H]
  return out.swapaxes(0, 1).reshape(b, n_chunks * q_chunk, n, h)[:, :t]


def segment_positions(segment_ids: jax.Array) -> jax.Array:
  """segment_ids [B,T] -> positions [B,T] int32 counting 0, 1, ... from each run's first token
  (the layout packing writes; padding gets positions too, they are never attended)."""
  t = segment_ids.shape[1]
  idx = jnp.arange(t, dtype=jnp.int32)
  prev = jnp.concatenate([segment_ids[:, :1] - 1, segment_ids[:, :-1]], axis=1)
  start = jax.lax.cummax(jnp.where(segment_ids != prev, idx, 0), axis=1)
  return idx - start
