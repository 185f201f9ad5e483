"""Size presets with the public Hugging Face config values (Qwen2.5 and Qwen3 dense)."""

from __future__ import annotations

import functools

from tmax_jax.models.config import ModelConfig

_QWEN2_5_COMMON = dict(
  model_type="qwen2",
  vocab_size=152064,
  rms_norm_eps=1e-6,
  rope_theta=1_000_000.0,
  max_position_embeddings=32768,
  attention_bias=True,
  qk_norm=False,
  head_dim=128,
  bos_token_id=151643,
  eos_token_id=151643,
)
# name: (hidden, intermediate, layers, heads, kv_heads, tied, vocab override)
_QWEN2_5 = {
  "0.5b": (896, 4864, 24, 14, 2, True, 151936),
  "1.5b": (1536, 8960, 28, 12, 2, True, 151936),
  "3b": (2048, 11008, 36, 16, 2, True, 151936),
  "7b": (3584, 18944, 28, 28, 4, False, None),
  "14b": (5120, 13824, 48, 40, 8, False, None),
  "32b": (5120, 27648, 64, 40, 8, False, None),
  "72b": (8192, 29568, 80, 64, 8, False, None),
}
_QWEN3_COMMON = dict(
  model_type="qwen3",
  vocab_size=151936,
  rms_norm_eps=1e-6,
  rope_theta=1_000_000.0,
  max_position_embeddings=40960,
  attention_bias=False,
  qk_norm=True,
  head_dim=128,
  bos_token_id=151643,
  eos_token_id=151645,
)
_QWEN3 = {
  "0.6b": (1024, 3072, 28, 16, 8, True),
  "1.7b": (2048, 6144, 28, 16, 8, True),
  "4b": (2560, 9728, 36, 32, 8, True),
  "8b": (4096, 12288, 36, 32, 8, False),
  "14b": (5120, 17408, 40, 40, 8, False),
  "32b": (5120, 25600, 64, 64, 8, False),
}


def qwen2_5(size: str, **overrides) -> ModelConfig:
  """Qwen2.5-<size> (0.5b, 1.5b, 3b, 7b, 14b, 32b, 72b); `overrides` replace any field."""
  if size.lower() not in _QWEN2_5:
    raise ValueError(f"unknown Qwen2.5 size {size!r}; known: {list(_QWEN2_5)}")
  d, f, n_layers, n, k, tied, vocab = _QWEN2_5[size.lower()]
  fields = dict(
    _QWEN2_5_COMMON,
    hidden_size=d,
    intermediate_size=f,
    num_hidden_layers=n_layers,
    num_attention_heads=n,
    num_key_value_heads=k,
    head_dim=d // n,
    tie_word_embeddings=tied,
  )
  if vocab is not None:
    fields["vocab_size"] = vocab
  return ModelConfig(**{**fields, **overrides})


def qwen3(size: str, **overrides) -> ModelConfig:
  """Qwen3-<size> dense (0.6b, 1.7b, 4b, 8b, 14b, 32b); `overrides` replace any field."""
  if size.lower() not in _QWEN3:
    raise ValueError(f"unknown Qwen3 size {size!r}; known: {list(_QWEN3)}")
  d, f, n_layers, n, k, tied = _QWEN3[size.lower()]
  fields = dict(
    _QWEN3_COMMON,
    hidden_size=d,
    intermediate_size=f,
    num_hidden_layers=n_layers,
    num_attention_heads=n,
    num_key_value_heads=k,
    tie_word_embeddings=tied,
  )
  return ModelConfig(**{**fields, **overrides})


# Preset name -> constructor(**overrides), registered with the family (registry.preset).
PRESETS = {f"qwen2.5-{s}": functools.partial(qwen2_5, s) for s in _QWEN2_5} | {
  f"qwen3-{s}": functools.partial(qwen3, s) for s in _QWEN3
}
