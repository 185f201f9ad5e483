"""Declarative HF <-> param key map for Qwen3.5 (text model of either checkpoint layout).

Keys are written for `Qwen3_5ForCausalLM` (`model.layers.{i}...`); hf_io reads
`Qwen3_5ForConditionalGeneration`'s `model.language_model.*` as the same keys. Linear weights are HF
[out, in] -> ours [in.., out..]; the depthwise conv keeps HF's [C,1,Kc] layout.
"""

from __future__ import annotations

import dataclasses

from tmax_jax.models.config import ModelConfig
from tmax_jax.models.decoder import layer_period
from tmax_jax.models.hf_io import KeyRule
from tmax_jax.models.qwen3_5.config import LINEAR, family

# HF module (under model.layers.{i}.) -> in_axes (0: not a linear weight), hf_ndim, param leaf
_LINEAR_ATTN = {
  "linear_attn.in_proj_qkv.weight": (1, None, "kernel"),
  "linear_attn.in_proj_z.weight": (1, None, "kernel"),
  "linear_attn.in_proj_b.weight": (1, None, "kernel"),
  "linear_attn.in_proj_a.weight": (1, None, "kernel"),
  "linear_attn.out_proj.weight": (1, None, "kernel"),
  "linear_attn.conv1d.weight": (0, 3, "kernel"),
  "linear_attn.norm.weight": (0, None, "scale"),
  "linear_attn.dt_bias": (0, None, None),
  "linear_attn.A_log": (0, None, None),
}
_FULL_ATTN = {
  "self_attn.q_proj.weight": (1, None, "kernel"),
  "self_attn.k_proj.weight": (1, None, "kernel"),
  "self_attn.v_proj.weight": (1, None, "kernel"),
  "self_attn.o_proj.weight": (2, None, "kernel"),
  "self_attn.q_norm.weight": (0, None, "scale"),
  "self_attn.k_norm.weight": (0, None, "scale"),
}
_COMMON = {
  "input_layernorm.weight": (0, None, "scale"),
  "post_attention_layernorm.weight": (0, None, "scale"),
  "mlp.gate_proj.weight": (1, None, "kernel"),
  "mlp.up_proj.weight": (1, None, "kernel"),
  "mlp.down_proj.weight": (1, None, "kernel"),
}


def _param_path(prefix: str, hf_name: str, leaf: str | None) -> str:
  module = hf_name.rsplit(".", 1)[0] if leaf else hf_name
  return f"{prefix}/{module.replace('.', '/')}" + (f"/{leaf}" if leaf else "")


def _layer_rules(prefix: str, layer_type: str, layer_ids: tuple[int, ...] | None) -> list[KeyRule]:
  names = {**(_LINEAR_ATTN if layer_type == LINEAR else _FULL_ATTN), **_COMMON}
  return [
    KeyRule(
      f"model.layers.{{i}}.{name}",
      _param_path(prefix, name, leaf),
      in_axes=in_axes,
      hf_ndim=ndim,
      layers=layer_ids,
    )
    for name, (in_axes, ndim, leaf) in names.items()
  ]


def key_map(cfg: ModelConfig) -> list[KeyRule]:
  """Rules for `cfg`; "{i}" is the HF layer index (see model.py for the param layout)."""
  types = family(cfg).layer_types
  rules = [
    KeyRule("model.embed_tokens.weight", "model/embed_tokens/embedding", hf_ndim=2),
    KeyRule("model.norm.weight", "model/norm/scale"),
  ]
  if cfg.scan_layers:
    period = layer_period(types)
    for p, layer_type in enumerate(types[:period]):
      ids = tuple(range(p, len(types), period))
      rules += _layer_rules(f"model/layers/layer_{p}", layer_type, ids)
  else:
    for i, layer_type in enumerate(types):
      rules += [
        dataclasses.replace(r, hf=r.hf.replace("{i}", str(i)))
        for r in _layer_rules(f"model/layers_{i}", layer_type, None)
      ]
  if not cfg.tie_word_embeddings:
    rules.append(KeyRule("lm_head.weight", "lm_head/kernel", in_axes=1))
  return rules
