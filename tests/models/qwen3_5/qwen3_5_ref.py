"""Helpers for the Qwen3.5 tests: tiny random transformers models as the numerical reference."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
import transformers

from tests.models.qwen_ref import torch_logits  # noqa: F401  (re-exported for the tests)
from tmax_jax.models import build_model, full_logits, head_weight

# 4 layers = 2 periods of (Gated DeltaNet, gated attention); GQA 4/2; 2 key heads serve 4 value
# heads; partial rotary 0.25 of head_dim 16.
TINY_TEXT = dict(
  vocab_size=128,
  hidden_size=32,
  intermediate_size=48,
  num_hidden_layers=4,
  num_attention_heads=4,
  num_key_value_heads=2,
  head_dim=16,
  linear_num_key_heads=2,
  linear_num_value_heads=4,
  linear_key_head_dim=8,
  linear_value_head_dim=8,
  linear_conv_kernel_dim=4,
  layer_types=["linear_attention", "full_attention"] * 2,
  max_position_embeddings=256,
  rms_norm_eps=1e-6,
  tie_word_embeddings=False,
  rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
)
TINY_VISION = dict(
  depth=1,
  hidden_size=16,
  intermediate_size=32,
  num_heads=2,
  patch_size=4,
  temporal_patch_size=2,
  spatial_merge_size=2,
  out_hidden_size=32,
  num_position_embeddings=16,
)


def text_config(**extra) -> transformers.Qwen3_5TextConfig:
  return transformers.Qwen3_5TextConfig(**{**TINY_TEXT, **extra})


def randomize(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
  """Every weight random (fp32, eager); zero-centred norms around 0, gated norm around 1."""
  torch.manual_seed(seed)
  model.config._attn_implementation = "eager"
  with torch.no_grad():
    for name, p in model.named_parameters():
      if name.endswith("A_log"):
        p.copy_(torch.empty_like(p).uniform_(0.01, 4.0).log())
      elif name.endswith("linear_attn.norm.weight"):
        p.copy_(1.0 + 0.1 * torch.randn_like(p))
      else:
        p.copy_(0.2 * torch.randn_like(p) if "norm" not in name else 0.1 * torch.randn_like(p))
  return model.float().eval()


def causal_lm(seed: int = 0, **extra) -> transformers.PreTrainedModel:
  return randomize(transformers.Qwen3_5ForCausalLM(text_config(**extra)), seed)


def conditional_generation(seed: int = 0) -> transformers.PreTrainedModel:
  config = transformers.Qwen3_5Config(text_config=dict(TINY_TEXT), vision_config=TINY_VISION)
  return randomize(transformers.Qwen3_5ForConditionalGeneration(config), seed)


def padded_batch(seed: int = 0, b: int = 3, t: int = 21, vocab: int = 128):
  """Row 0 full, row 1 right-padded, row 2 left-padded -> tokens, positions, mask [B,T] int32."""
  rng = np.random.default_rng(seed)
  tokens = rng.integers(0, vocab, (b, t)).astype(np.int32)
  mask = np.ones((b, t), np.int32)
  mask[1, t - 6 :] = 0
  mask[2, :5] = 0
  positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0).astype(np.int32)
  return tokens, positions, mask


def our_logits(cfg, params, tokens, positions, segments, cache=None):
  """-> logits [B,T,V] float32 (and the cache when one is passed)."""
  hidden, cache_out = build_model(cfg).apply(
    {"params": params}, np.asarray(tokens), np.asarray(positions), np.asarray(segments), cache=cache
  )
  logits = np.asarray(full_logits(hidden, head_weight(params, cfg), cfg.dtypes.head))
  return logits if cache is None else (logits, cache_out)


def with_chunk_size(cfg, chunk_size: int):
  return cfg.replace(family_config=dataclasses.replace(cfg.family_config, chunk_size=chunk_size))


def rel_err(ours, ref, mask=None) -> float:
  """max|diff| / max|ref| over non-padding positions."""
  ours, ref = np.asarray(ours), np.asarray(ref)
  if mask is not None:
    keep = np.asarray(mask, bool)
    ours, ref = ours[keep], ref[keep]
  return float(np.max(np.abs(ours - ref)) / np.max(np.abs(ref)))
