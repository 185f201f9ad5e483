"""Qwen3.5 hybrid decoder: Gated DeltaNet layers and gated full-attention layers (`layer_types`).

The shared decoder shell (decoder.py) in its grouped form: the layer pattern has a period P (3 x
linear + 1 x full for every public size); with `scan_layers` the model `nn.scan`s over G = L / P
groups of P layers `layer_0 .. layer_{P-1}` (params stacked on a leading `layers` axis of size G,
HF layer i = g * P + p); without it layer i is `model/layers_{i}`. Only the token mixer of a
linear layer is Qwen3.5's own (`linear_attn`, gated_deltanet.py); the gated attention is
layers.Attention with `attn_output_gate`.

Decode cache (`init_cache`), scanned or not: `layer_{p}` -> a Gated DeltaNet layer's {conv
[G,B,Kc-1,C], recurrent [G,B,N,Hk,Hv] fp32} or a full-attention layer's KV cache {k, v
[G,B,S,K,H], segment_ids [G,B,S]}.
"""

from __future__ import annotations

from tmax_jax.models import decoder, layers
from tmax_jax.models.config import ModelConfig
from tmax_jax.models.qwen3_5.config import FULL, LINEAR, family
from tmax_jax.models.qwen3_5.gated_deltanet import STATE_AXES, GatedDeltaNet, init_state

Cache = dict


class DecoderLayer(decoder.DecoderLayer):
  """The shared pre-norm block; a linear layer's mixer is the Gated DeltaNet (`linear_attn`)."""

  def mixer(self, h, cos, sin, positions, segment_ids, cache):
    if self.layer_type != LINEAR:
      return super().mixer(h, cos, sin, positions, segment_ids, cache)
    cfg = self.config
    return GatedDeltaNet(family(cfg), cfg.rms_norm_eps, name="linear_attn", **decoder.dtypes(cfg))(
      h, positions, segment_ids, cache
    )


class Qwen3_5Model(decoder.DecoderStack):
  """Embedding, hybrid decoder layers, final norm (HF `model.` / `model.language_model.`)."""

  layer = DecoderLayer
  grouped = True

  @classmethod
  def layer_types(cls, cfg: ModelConfig) -> tuple[str, ...]:
    return family(cfg).layer_types


class Qwen3_5ForCausalLM(decoder.CausalLM):
  """The Qwen3.5 hybrid causal LM (calling convention: decoder.CausalLM). With a cache from
  `init_cache`, the decode state is advanced (K/V written at `positions`, conv/recurrent state
  carried to the row's last live token) and returned."""

  stack = Qwen3_5Model

  def init_cache(self, batch: int, max_len: int) -> Cache:
    """Empty decode state; leaves have a leading layer axis (see the module docstring)."""
    cfg = self.config

    def one_layer(layer_type: str) -> Cache:
      if layer_type == FULL:
        return layers.init_kv_cache(
          batch, max_len, cfg.num_key_value_heads, cfg.head_dim, cfg.dtypes.compute
        )
      return init_state(family(cfg), batch, cfg.dtypes.compute)

    return self.stacked_cache(one_layer)

  def cache_logical_axes(self) -> Cache:
    """Logical axis names of `init_cache`'s leaves (map with sharding.logical_to_sharding)."""
    return self.stacked_axes(lambda t: decoder.KV_CACHE_AXES if t == FULL else STATE_AXES)
