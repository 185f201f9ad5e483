"""TPU: the Pallas splash attention kernel (jax.experimental.pallas.ops.tpu.splash_attention).

The kernel works per example on [N, T, H] with GQA natively (N a multiple of K), a lazy causal mask
and segment ids, all evaluated inside the kernel. Its causal mask is by index, which equals the
model's position mask for training rows (positions increase by one inside each contiguous packed
segment; packing writes them that way). Padding tokens (segment 0) attend among themselves inside
the kernel (finite junk, as in the reference); no live token sees them. `interpret=True` runs the
same kernel through the Pallas interpreter, which is how CPU tests check it.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as kernel_lib
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as mask_lib

from tmax_jax.models.attention import blockwise

MIN_BLOCK = 128  # the kernel's lane width: T is padded to a multiple of the block, >= this
DEFAULT_BLOCK = 512  # TPU tile edge unless the config says otherwise


@functools.lru_cache(maxsize=32)
def _kernel(t: int, num_heads: int, block: int, interpret: bool):
  mask = mask_lib.MultiHeadMask([mask_lib.CausalMask((t, t)) for _ in range(num_heads)])
  sizes = kernel_lib.BlockSizes(
    block_q=block,
    block_kv=block,
    block_kv_compute=block,
    block_q_dkv=block,
    block_kv_dkv=block,
    block_kv_dkv_compute=block,
    block_q_dq=block,
    block_kv_dq=block,
  )
  # concrete mask tables even when first called under jit (the kernel object is cached)
  with jax.ensure_compile_time_eval():
    return kernel_lib.make_splash_mha(
      mask, block_sizes=sizes, head_shards=1, q_seq_shards=1, interpret=interpret
    )


def attention(
  q,
  k,
  v,
  segment_ids,
  *,
  scale: float | None = None,
  block: int | None = None,
  interpret: bool | None = None,
) -> jax.Array:
  """q [B,T,N,H], k/v [B,T,K,H], segment_ids [B,T] -> [B,T,N,H] in q's dtype (causal by index).

  interpret: run the kernel in the Pallas interpreter; None = whenever the platform is not TPU.
  """
  b, t, n, h = q.shape
  interpret = jax.default_backend() != "tpu" if interpret is None else interpret
  scale = h**-0.5 if scale is None else float(scale)
  block = max(MIN_BLOCK, min(block or DEFAULT_BLOCK, -(-t // MIN_BLOCK) * MIN_BLOCK))
  q, k, v, seg = (blockwise.pad_time(x, block) for x in (q, k, v, segment_ids.astype(jnp.int32)))
  kernel = _kernel(q.shape[1], n, block, interpret)

  def heads_first(x):  # [B,T,N,H] -> [B,N,T,H]
    return jnp.swapaxes(x, 1, 2)

  def one(q_b, k_b, v_b, seg_b):
    return kernel(q_b, k_b, v_b, segment_ids=kernel_lib.SegmentIds(seg_b, seg_b))

  # the kernel does not scale the scores: fold the scale into q (as the kernel's reference does)
  out = jax.vmap(one)(
    heads_first(q * jnp.asarray(scale, q.dtype)), heads_first(k), heads_first(v), seg
  )
  return jnp.swapaxes(out, 1, 2)[:, :t].astype(q.dtype)
