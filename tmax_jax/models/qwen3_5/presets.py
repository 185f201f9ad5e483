"""Size presets with the public Hugging Face config values of the dense Qwen3.5 models (the text
part of Qwen/Qwen3.5-{0.8B,2B,4B,9B,27B}: every 4th layer gated attention, the rest Gated DeltaNet).

9B and 27B are the recipe's models; the small sizes' values come from public copies of their
config.json (not re-checkable offline here), so treat them as best effort.
"""

from __future__ import annotations

import functools

from tmax_jax.models.config import ModelConfig
from tmax_jax.models.qwen3_5.config import Qwen3_5Config, default_layer_types

_COMMON = dict(
  model_type="qwen3_5_text",
  vocab_size=248320,
  head_dim=256,
  rms_norm_eps=1e-6,
  rope_theta=10_000_000.0,
  partial_rotary_factor=0.25,
  max_position_embeddings=262144,
  attention_bias=False,
  o_proj_bias=False,
  qk_norm=True,
  attn_output_gate=True,
  norm_zero_centered=True,
  eos_token_id=248044,
)
# name: (hidden, intermediate, layers, heads, kv_heads, linear key heads, linear value heads, tied)
_SIZES = {
  "0.8b": (1024, 3584, 24, 8, 2, 16, 16, True),
  "2b": (2048, 6144, 24, 8, 2, 16, 16, True),
  "4b": (2560, 9216, 32, 16, 4, 16, 32, True),
  "9b": (4096, 12288, 32, 16, 4, 16, 32, False),
  "27b": (5120, 17408, 64, 24, 4, 16, 48, False),
}


def qwen3_5(size: str, *, chunk_size: int = Qwen3_5Config.chunk_size, **overrides) -> ModelConfig:
  """Qwen3.5-<size> text model (0.8b, 2b, 4b, 9b, 27b); `overrides` replace any field."""
  if size.lower() not in _SIZES:
    raise ValueError(f"unknown Qwen3.5 size {size!r}; known: {list(_SIZES)}")
  d, f, n_layers, n, k, lin_k, lin_v, tied = _SIZES[size.lower()]
  fam = Qwen3_5Config(
    layer_types=default_layer_types(n_layers),
    linear_conv_kernel_dim=4,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    linear_num_key_heads=lin_k,
    linear_num_value_heads=lin_v,
    chunk_size=chunk_size,
  )
  fields = dict(
    _COMMON,
    hidden_size=d,
    intermediate_size=f,
    num_hidden_layers=n_layers,
    num_attention_heads=n,
    num_key_value_heads=k,
    tie_word_embeddings=tied,
    family_config=fam,
  )
  return ModelConfig(**{**fields, **overrides})


# Preset name -> constructor(**overrides), registered with the family (registry.preset).
PRESETS = {f"qwen3.5-{s}": functools.partial(qwen3_5, s) for s in _SIZES}
