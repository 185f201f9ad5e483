"""A toy model family defined outside the library: one module and one `registry.register` call.

It is what a new family looks like: a CausalLM built from the shared decoder shell (no q/k norm,
an untied head, its own HF model_type), its HF config in/out, its declarative key map and a preset.
Nothing under tmax_jax/ names it; importing this module is all the registration there is.
"""

from __future__ import annotations

import functools

from tmax_jax.models import config as config_lib
from tmax_jax.models import decoder, layers, registry
from tmax_jax.models.hf_io import KeyRule

MODEL_TYPE = "tmax_toy"


class ToyForCausalLM(decoder.CausalLM):
  """Pre-norm softmax-attention decoder with a KV cache (the shared shell, unchanged)."""

  def init_cache(self, batch: int, max_len: int) -> dict:
    cfg = self.config
    return self.stacked_cache(
      lambda _: layers.init_kv_cache(
        batch, max_len, cfg.num_key_value_heads, cfg.head_dim, cfg.dtypes.compute
      )
    )

  def cache_logical_axes(self) -> dict:
    return self.stacked_axes(lambda _: decoder.KV_CACHE_AXES)


def parse_hf(hf: dict) -> dict:
  return dict(
    config_lib.common_fields_from_hf(hf), attention_bias=False, o_proj_bias=False, qk_norm=False
  )


def to_hf(cfg: config_lib.ModelConfig) -> dict:
  return dict(config_lib.common_fields_to_hf(cfg), architectures=["ToyForCausalLM"])


def key_map(cfg: config_lib.ModelConfig) -> list[KeyRule]:
  layer = "model/layers" if cfg.scan_layers else "model/layers_{i}"
  rules = [
    KeyRule("model.embed_tokens.weight", "model/embed_tokens/embedding", hf_ndim=2),
    KeyRule("model.norm.weight", "model/norm/scale"),
    KeyRule("lm_head.weight", "lm_head/kernel", in_axes=1),
  ]
  linear = {
    "self_attn.q_proj": 1,
    "self_attn.k_proj": 1,
    "self_attn.v_proj": 1,
    "self_attn.o_proj": 2,
    "mlp.gate_proj": 1,
    "mlp.up_proj": 1,
    "mlp.down_proj": 1,
  }
  rules += [
    KeyRule(
      f"model.layers.{{i}}.{name}.weight",
      f"{layer}/{name.replace('.', '/')}/kernel",
      in_axes=in_axes,
    )
    for name, in_axes in linear.items()
  ]
  rules += [
    KeyRule(f"model.layers.{{i}}.{name}.weight", f"{layer}/{name}/scale")
    for name in ("input_layernorm", "post_attention_layernorm")
  ]
  return rules


TINY = dict(
  model_type=MODEL_TYPE,
  vocab_size=64,
  hidden_size=32,
  intermediate_size=64,
  num_hidden_layers=2,
  num_attention_heads=4,
  num_key_value_heads=2,
  head_dim=8,
  max_position_embeddings=128,
  rope_theta=10_000.0,
  tie_word_embeddings=False,
  qk_norm=False,
)

registry.register(
  registry.Family(
    name="toy",
    model_types=(MODEL_TYPE,),
    model_class=ToyForCausalLM,
    parse_hf=parse_hf,
    to_hf=to_hf,
    key_map=key_map,
    presets={"toy-tiny": functools.partial(config_lib.ModelConfig, **TINY)},
  )
)
