"""Qwen2 / Qwen2.5 (q/k/v bias) and Qwen3 dense (q/k RMSNorm) decoders.

Module names follow Hugging Face (`model/embed_tokens`, `model/layers/self_attn/q_proj`, ...), so the
weight map in weights.py is nearly empty. Layers are `nn.scan`ned (params stacked on a leading
`layers` axis) and optionally wrapped in `nn.remat` with a named policy.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

from tmax_jax.models import layers
from tmax_jax.models.config import ModelConfig

Cache = dict[str, jax.Array]


def attention_spec(cfg: ModelConfig) -> layers.AttentionSpec:
  return layers.AttentionSpec(
    num_heads=cfg.num_attention_heads, num_kv_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim,
    qkv_bias=cfg.attention_bias, o_bias=cfg.o_proj_bias, qk_norm=cfg.qk_norm,
    norm_eps=cfg.rms_norm_eps, norm_zero_centered=cfg.norm_zero_centered,
    q_chunk=cfg.attention_q_chunk)


class DecoderLayer(nn.Module):
  """Pre-norm block: x + attn(norm(x)); x + mlp(norm(x)). Its (carry, *xs) -> (carry, ys) signature
  is what nn.scan wants: x is the carry, the layer's cache slice is scanned."""

  config: ModelConfig

  @nn.compact
  def __call__(self, x, cos, sin, positions, segment_ids, cache=None):
    """x [B,T,D] -> ([B,T,D], this layer's updated cache or None)."""
    cfg = self.config
    dt = dict(dtype=cfg.dtypes.compute, param_dtype=cfg.dtypes.param)
    norm = dict(eps=cfg.rms_norm_eps, zero_centered=cfg.norm_zero_centered, **dt)
    h = layers.RMSNorm(name="input_layernorm", **norm)(x)
    h, cache = layers.Attention(attention_spec(cfg), name="self_attn", **dt)(
      h, cos, sin, positions, segment_ids, cache)
    x = x + h
    h = layers.RMSNorm(name="post_attention_layernorm", **norm)(x)
    x = x + layers.MLP(cfg.intermediate_size, name="mlp", **dt)(h)
    return layers.constrain(x, ("batch", "length", "embed")), cache


class QwenModel(layers.DecoderStack):
  """Embedding, decoder layers, final norm (HF `model.`)."""

  def _layers(self, x, cos, sin, positions, segment_ids, cache):
    cfg = self.config
    block = layers.remat_layer(DecoderLayer, cfg.remat_policy, cfg.scan_layers)
    if cfg.scan_layers:
      scanned = nn.scan(
        block, variable_axes={"params": 0}, split_rngs={"params": True},
        in_axes=(nn.broadcast, nn.broadcast, nn.broadcast, nn.broadcast, 0),
        length=cfg.num_hidden_layers, metadata_params={nn.PARTITION_NAME: "layers"})
      return scanned(cfg, name="layers")(x, cos, sin, positions, segment_ids, cache)
    new_cache = []
    for i in range(cfg.num_hidden_layers):
      layer_cache = None if cache is None else jax.tree.map(lambda c, i=i: c[i], cache)
      x, layer_cache = block(cfg, name=f"layers_{i}")(x, cos, sin, positions, segment_ids,
                                                       layer_cache)
      new_cache.append(layer_cache)
    if cache is None:
      return x, None
    return x, jax.tree.map(lambda *c: jnp.stack(c), *new_cache)


class QwenForCausalLM(layers.CausalLM):
  """The Qwen2/3 dense causal LM (calling convention: layers.CausalLM). With a cache from
  `init_cache`, K/V are written at `positions` and it is returned."""

  stack = QwenModel

  def init_cache(self, batch: int, max_len: int) -> Cache:
    """-> {k, v: [L,B,S,K,H] compute dtype, segment_ids: [L,B,S] int32}, all empty."""
    cfg = self.config
    one = layers.init_kv_cache(batch, max_len, cfg.num_key_value_heads, cfg.head_dim,
                               cfg.dtypes.compute)
    return jax.tree.map(lambda c: jnp.broadcast_to(c, (cfg.num_hidden_layers,) + c.shape), one)

  def cache_logical_axes(self) -> dict[str, PartitionSpec]:
    """Logical axis names of `init_cache`'s leaves (map with sharding.logical_to_sharding)."""
    kv = PartitionSpec("layers", "batch", "length", "kv_heads", "head_dim")
    return {"k": kv, "v": kv, "segment_ids": PartitionSpec("layers", "batch", "length")}
