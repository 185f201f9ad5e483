"""Qwen2 / Qwen2.5 (q/k/v bias) and Qwen3 dense (q/k RMSNorm) decoders.

The whole structure is the shared decoder shell (decoder.py: pre-norm attention + SwiGLU layers,
`nn.scan`ned, optionally remat'ed); module names follow Hugging Face (`model/embed_tokens`,
`model/layers/self_attn/q_proj`, ...), so the weight map in weights.py is nearly empty.
"""

from __future__ import annotations

import jax
from jax.sharding import PartitionSpec

from tmax_jax.models import decoder, layers

Cache = dict[str, jax.Array]


class QwenForCausalLM(decoder.CausalLM):
  """The Qwen2/3 dense causal LM (calling convention: decoder.CausalLM). With a cache from
  `init_cache`, K/V are written at `positions` and it is returned."""

  def init_cache(self, batch: int, max_len: int) -> Cache:
    """-> {k, v: [L,B,S,K,H] compute dtype, segment_ids: [L,B,S] int32}, all empty."""
    cfg = self.config
    return self.stacked_cache(
      lambda _: layers.init_kv_cache(
        batch, max_len, cfg.num_key_value_heads, cfg.head_dim, cfg.dtypes.compute
      )
    )

  def cache_logical_axes(self) -> dict[str, PartitionSpec]:
    """Logical axis names of `init_cache`'s leaves (map with sharding.logical_to_sharding)."""
    return self.stacked_axes(lambda _: decoder.KV_CACHE_AXES)
