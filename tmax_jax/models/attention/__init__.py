"""Training-path attention behind one switch, `ModelConfig.attention_impl`.

  reference  the whole [T, S] score matrix (optionally query-chunked); the numerical reference
  blockwise  flash-style tiles in pure JAX with a custom VJP (O(T) memory); any platform
  cudnn      cuDNN fused attention (GPU, bf16/fp16)
  splash     the Pallas splash kernel (TPU)
  auto       per platform: splash on TPU, cudnn on GPU for bf16/fp16 compute, else blockwise;
             the platform is the mesh's (sharding.platform), so a compile for a TPU topology on a
             CPU host picks splash (the Mosaic kernel) while jax.default_backend() says "cpu"

All take packed rows (segment ids), causal masking and GQA; Qwen3.5's output gate is applied by the
caller (layers.Attention) on every path. Under a mesh whose `sequence` axis is > 1 (context
parallelism), every implementation except `reference` runs as ring attention over that axis
(ring.py, blockwise tiles on each step); `reference` is then left to XLA's partitioner (it gathers
K/V), which keeps it an independent check. Decode (a KV cache) does not come here: it stays on
reference.dot_product_attention in layers.Attention.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from tmax_jax import sharding
from tmax_jax.models import context_parallel as cp
from tmax_jax.models.attention import blockwise, cudnn, reference, ring
from tmax_jax.models.attention.reference import attention_mask, dot_product_attention
from tmax_jax.models.config import ATTENTION_IMPLS as IMPLS


def resolve(impl: str, dtype=jnp.float32, platform: str | None = None) -> str:
  """`impl` with "auto" replaced by the platform's kernel for `dtype`; platform None = the mesh
  being traced under (sharding.platform)."""
  if impl not in IMPLS:
    raise ValueError(f"attention_impl={impl!r}; expected one of {list(IMPLS)}")
  if impl != "auto":
    return impl
  platform = platform or sharding.platform()
  if platform == "tpu":
    return "splash"
  if platform == "gpu" and jnp.dtype(dtype) in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16)):
    return "cudnn"
  return "blockwise"


def self_attention(
  q,
  k,
  v,
  positions,
  segment_ids,
  *,
  impl: str = "auto",
  q_chunk: int | None = None,
  kv_chunk: int | None = None,
  scale: float | None = None,
) -> jax.Array:
  """Causal self-attention of packed rows (the training / prefill-without-cache path).

  q [B,T,N,H], k/v [B,T,K,H], positions/segment_ids [B,T] int32 (segment 0 = padding)
  -> [B,T,N,H] in q's dtype. q_chunk / kv_chunk: tile (block) sizes; for `reference` q_chunk is its
  query chunk. `splash` off TPU runs in the Pallas interpreter (slow; for CPU tests); under a mesh
  it runs per shard inside shard_map (splash.py).
  """
  impl = resolve(impl, q.dtype)
  if impl == "reference":
    mask = attention_mask(positions, segment_ids, positions, segment_ids)
    return dot_product_attention(q, k, v, mask, scale=scale, q_chunk=q_chunk)
  if cp.splits(q.shape[1]):
    return ring.attention(
      q, k, v, positions, segment_ids, scale=scale, block_q=q_chunk, block_k=kv_chunk
    )
  if impl == "blockwise":
    return blockwise.attention(
      q,
      k,
      v,
      positions,
      segment_ids,
      positions,
      segment_ids,
      scale=scale,
      block_q=q_chunk,
      block_k=kv_chunk,
    )
  if impl == "cudnn":
    return cudnn.attention(
      q, k, v, positions, segment_ids, scale=scale, block_q=q_chunk, block_k=kv_chunk
    )
  from tmax_jax.models.attention import splash  # noqa: PLC0415  (Pallas TPU kernels: TPU only)

  return splash.attention(q, k, v, segment_ids, scale=scale, block=q_chunk)


__all__ = [
  "IMPLS",
  "attention_mask",
  "blockwise",
  "dot_product_attention",
  "reference",
  "resolve",
  "ring",
  "self_attention",
  "splash",  # the Pallas TPU kernel, reused by the paged decode (models/pallas_paged.py)
]
