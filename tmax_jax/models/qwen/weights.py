"""Declarative HF <-> param key map for Qwen2/2.5/3 dense (one rule per HF tensor kind)."""

from __future__ import annotations

from tmax_jax.models.config import ModelConfig
from tmax_jax.models.hf_io import KeyRule


def key_map(cfg: ModelConfig) -> list[KeyRule]:
  """Rules for `cfg`; "{i}" is the layer index. Linear weights are HF [out, in] -> ours [in..,
  out..] (`in_axes` = how many leading param axes are the input)."""
  layer = "model/layers_{i}" if not cfg.scan_layers else "model/layers"
  rules = [
    KeyRule("model.embed_tokens.weight", "model/embed_tokens/embedding", hf_ndim=2),
    KeyRule("model.norm.weight", "model/norm/scale"),
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
  for name, in_axes in linear.items():
    path = name.replace(".", "/")
    rules.append(
      KeyRule(f"model.layers.{{i}}.{name}.weight", f"{layer}/{path}/kernel", in_axes=in_axes)
    )
  bias = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"] if cfg.attention_bias else []
  bias += ["self_attn.o_proj"] if cfg.o_proj_bias else []
  for name in bias:
    rules.append(
      KeyRule(f"model.layers.{{i}}.{name}.bias", f"{layer}/{name.replace('.', '/')}/bias")
    )
  norms = ["input_layernorm", "post_attention_layernorm"]
  norms += ["self_attn.q_norm", "self_attn.k_norm"] if cfg.qk_norm else []
  for name in norms:
    rules.append(
      KeyRule(f"model.layers.{{i}}.{name}.weight", f"{layer}/{name.replace('.', '/')}/scale")
    )
  if not cfg.tie_word_embeddings:
    rules.append(KeyRule("lm_head.weight", "lm_head/kernel", in_axes=1))
  return rules
