"""GPU: cuDNN fused (flash) attention, the kernel behind
`jax.nn.dot_product_attention(implementation="cudnn")`.

Packed rows need cuDNN's packed ("THD") layout: per row the start offset and length of each
segment, the mask (causal inside each segment) then lives inside the kernel. jax.nn's public
signature has no segment offsets (only one valid length per row), so this calls the same function
jax.nn's cudnn branch calls, `jax._src.cudnn.fused_attention_stablehlo.dot_product_attention`, with
`q_offsets` / `kv_offsets`. Rows with a single segment are the same call with one entry.

The offsets have a static capacity `max_segments` per row; a batch with a row holding more segments
falls back to the blockwise kernel at run time (`lax.cond`; never a silent drop). cuDNN computes in
fp16/bf16 only: fp32 inputs are refused (attention_impl="auto" picks blockwise for them).
Like splash, causality is by index inside a segment (positions count up by one there).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from tmax_jax.models.attention import blockwise

DEFAULT_MAX_SEGMENTS = 64
DTYPES = (jnp.bfloat16, jnp.float16)


def packed_segments(segment_ids: jax.Array, max_segments: int):
  """segment_ids [B,T] -> (lengths [B,M] int32, offsets [B,M+1] int32, count [B] int32).

  A segment is a maximal run of one non-zero id; entries past a row's count are -1 (cuDNN's fill).
  Runs beyond M are counted in `count` but not stored (the caller checks count <= M).
  """
  b, t = segment_ids.shape
  live = segment_ids != 0
  prev = jnp.concatenate([jnp.zeros((b, 1), segment_ids.dtype), segment_ids[:, :-1]], axis=1)
  start = live & (segment_ids != prev)  # [B,T]
  index = jnp.cumsum(start, axis=1) - 1  # run index of each token (valid where live)
  count = jnp.sum(start, axis=1).astype(jnp.int32)
  rows = jnp.arange(b)[:, None]
  slot = jnp.where(live, index, max_segments)  # padding / overflow runs -> dropped
  lengths = jnp.zeros((b, max_segments), jnp.int32).at[rows, slot].add(1, mode="drop")
  lengths = jnp.where(jnp.arange(max_segments)[None] < count[:, None], lengths, -1)
  start_slot = jnp.where(start, index, max_segments + 1)  # only run starts are written
  t_idx = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
  offsets = (
    jnp.full((b, max_segments + 1), -1, jnp.int32).at[rows, start_slot].set(t_idx, mode="drop")
  )
  stored = jnp.minimum(count, max_segments)[:, None]
  offsets = jnp.where(jnp.arange(max_segments + 1)[None] < stored, offsets, -1)
  return lengths, offsets, count


def _cudnn(q, k, v, segment_ids, scale, max_segments):
  # private JAX module: cuDNN path only
  from jax._src.cudnn import fused_attention_stablehlo as fa  # noqa: PLC0415

  lengths, offsets, _ = packed_segments(segment_ids, max_segments)
  return fa.dot_product_attention(
    q,
    k,
    v,
    q_seqlen=lengths,
    kv_seqlen=lengths,
    q_offsets=offsets,
    kv_offsets=offsets,
    scale=scale,
    mask_type=fa.MaskType.PADDING_CAUSAL,
    qkv_layout="BTNH",
  )


def attention(
  q,
  k,
  v,
  positions,
  segment_ids,
  *,
  scale: float | None = None,
  max_segments: int = DEFAULT_MAX_SEGMENTS,
  block_q: int | None = None,
  block_k: int | None = None,
) -> jax.Array:
  """q [B,T,N,H], k/v [B,T,K,H] (bf16/fp16), positions/segment_ids [B,T] -> [B,T,N,H].

  Padding rows come out as 0. block_q / block_k only size the blockwise fallback.
  """
  if q.dtype not in DTYPES:
    raise ValueError(
      f"attention_impl='cudnn' needs bfloat16/float16 compute, got {q.dtype}; use "
      "'blockwise' (or 'auto') for float32"
    )
  scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
  _, _, count = packed_segments(segment_ids, max_segments)

  def fallback(q, k, v):
    return blockwise.attention(
      q,
      k,
      v,
      positions,
      segment_ids,
      positions,
      segment_ids,
      scale=scale,
      block_q=block_q,
      block_k=block_k,
    )

  def kernel(q, k, v):
    # cuDNN leaves tokens outside every segment (padding) undefined in out and in dq/dk/dv;
    # the selects keep them 0 both ways (a select's VJP never reads the unselected side)
    live = (segment_ids != 0)[..., None, None]
    q, k, v = (jnp.where(live, x, jnp.zeros((), x.dtype)) for x in (q, k, v))
    out = _cudnn(q, k, v, segment_ids, scale, max_segments).astype(q.dtype)
    return jnp.where(live, out, jnp.zeros((), out.dtype))

  return lax.cond(jnp.max(count) <= max_segments, kernel, fallback, q, k, v)
