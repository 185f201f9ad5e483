"""Qwen3.5 hybrid decoder: Gated DeltaNet layers and gated full-attention layers (`layer_types`).

Module names follow Hugging Face. The layer pattern has a period P (3 x linear + 1 x full for every
public size): with `scan_layers` the model `nn.scan`s over G = L / P groups, each group holding P
layers `layer_0 .. layer_{P-1}` whose params are stacked on a leading `layers` axis of size G (HF
layer i = g * P + p). Without `scan_layers` the layers are `model/layers_{i}`.

Decode cache (`init_cache`): for each layer of a group, a Gated DeltaNet layer keeps {conv [B,Kc-1,C],
recurrent [B,N,Hk,Hv] fp32} and a full-attention layer the shared KV cache {k, v [B,S,K,H],
segment_ids [B,S]}; every leaf carries the leading layer axis (G, or L unscanned).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from tmax_jax.models import layers
from tmax_jax.models.config import ModelConfig
from tmax_jax.models.qwen3_5.config import FULL, LINEAR, family, layer_period
from tmax_jax.models.qwen3_5.gated_deltanet import GatedDeltaNet, init_state

Cache = dict


def attention_spec(cfg: ModelConfig) -> layers.AttentionSpec:
  """Gated attention: q_proj emits query | gate per head, zero-centred q/k RMSNorm."""
  return layers.AttentionSpec(
    num_heads=cfg.num_attention_heads, num_kv_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim,
    qkv_bias=cfg.attention_bias, o_bias=cfg.o_proj_bias, qk_norm=cfg.qk_norm, output_gate=True,
    norm_eps=cfg.rms_norm_eps, norm_zero_centered=cfg.norm_zero_centered)


class DecoderLayer(nn.Module):
  """Pre-norm block with a Gated DeltaNet (`linear_attn`) or gated attention (`self_attn`) mixer."""

  config: ModelConfig
  layer_type: str

  @nn.compact
  def __call__(self, x, cos, sin, positions, segment_ids, cache=None):
    """x [B,T,D] -> ([B,T,D], this layer's updated cache or None)."""
    cfg = self.config
    dt = dict(dtype=cfg.dtypes.compute, param_dtype=cfg.dtypes.param)
    norm = dict(eps=cfg.rms_norm_eps, zero_centered=cfg.norm_zero_centered, **dt)
    h = layers.RMSNorm(name="input_layernorm", **norm)(x)
    if self.layer_type == LINEAR:
      h, cache = GatedDeltaNet(family(cfg), cfg.rms_norm_eps, name="linear_attn", **dt)(
        h, positions, segment_ids, cache)
    else:
      h, cache = layers.Attention(attention_spec(cfg), name="self_attn", **dt)(
        h, cos, sin, positions, segment_ids, cache)
    x = x + h
    h = layers.RMSNorm(name="post_attention_layernorm", **norm)(x)
    x = x + layers.MLP(cfg.intermediate_size, name="mlp", **dt)(h)
    return layers.constrain(x, ("batch", "length", "embed")), cache


class LayerGroup(nn.Module):
  """One period of the layer pattern (the unit `nn.scan` repeats); each layer remat'ed on its own."""

  config: ModelConfig
  layer_types: tuple[str, ...]

  @nn.compact
  def __call__(self, x, cos, sin, positions, segment_ids, cache=None):
    cfg = self.config
    block = layers.remat_layer(DecoderLayer, cfg.remat_policy, cfg.scan_layers)
    new_cache = {}
    for p, layer_type in enumerate(self.layer_types):
      name = f"layer_{p}"
      x, c = block(cfg, layer_type, name=name)(
        x, cos, sin, positions, segment_ids, None if cache is None else cache[name])
      new_cache[name] = c
    return x, (None if cache is None else new_cache)


class Qwen3_5Model(layers.DecoderStack):
  """Embedding, hybrid decoder layers, final norm (HF `model.` / `model.language_model.`)."""

  def _layers(self, x, cos, sin, positions, segment_ids, cache):
    cfg = self.config
    types = family(cfg).layer_types
    if cfg.scan_layers:
      period = layer_period(types)
      scanned = nn.scan(
        LayerGroup, variable_axes={"params": 0}, split_rngs={"params": True},
        in_axes=(nn.broadcast, nn.broadcast, nn.broadcast, nn.broadcast, 0),
        length=len(types) // period, metadata_params={nn.PARTITION_NAME: "layers"})
      return scanned(cfg, types[:period], name="layers")(x, cos, sin, positions, segment_ids, cache)
    block = layers.remat_layer(DecoderLayer, cfg.remat_policy, False)
    new_cache = {}
    for i, layer_type in enumerate(types):  # unscanned caches keep a layer axis of size 1
      name = f"layers_{i}"
      layer_cache = None if cache is None else jax.tree.map(lambda c: c[0], cache[name])
      x, layer_cache = block(cfg, layer_type, name=name)(
        x, cos, sin, positions, segment_ids, layer_cache)
      new_cache[name] = None if cache is None else jax.tree.map(lambda c: c[None], layer_cache)
    return x, (None if cache is None else new_cache)


def _layer_cache(cfg: ModelConfig, layer_type: str, batch: int, max_len: int) -> Cache:
  if layer_type == FULL:
    return layers.init_kv_cache(batch, max_len, cfg.num_key_value_heads, cfg.head_dim,
                                cfg.dtypes.compute)
  return init_state(family(cfg), batch, cfg.dtypes.compute)


class Qwen3_5ForCausalLM(layers.CausalLM):
  """The Qwen3.5 hybrid causal LM (calling convention: layers.CausalLM). With a cache from
  `init_cache`, the decode state is advanced (K/V written at `positions`, conv/recurrent state
  carried to the row's last live token) and returned."""

  stack = Qwen3_5Model

  def init_cache(self, batch: int, max_len: int) -> Cache:
    """Empty decode state; leaves have a leading layer axis (see the module docstring)."""
    cfg = self.config
    types = family(cfg).layer_types
    if not cfg.scan_layers:
      one = {f"layers_{i}": _layer_cache(cfg, t, batch, max_len) for i, t in enumerate(types)}
      return jax.tree.map(lambda c: c[None], one)
    period = layer_period(types)
    groups = len(types) // period
    one = {f"layer_{p}": _layer_cache(cfg, t, batch, max_len) for p, t in enumerate(types[:period])}
    return jax.tree.map(lambda c: jnp.broadcast_to(c, (groups,) + c.shape), one)
