"""Helpers for Qwen parity tests: tiny random transformers models as the numerical reference."""

from __future__ import annotations

import numpy as np
import torch
import transformers

TINY = dict(
  vocab_size=256,
  hidden_size=64,
  intermediate_size=112,
  num_hidden_layers=2,
  num_attention_heads=4,
  num_key_value_heads=2,
  max_position_embeddings=512,
  rms_norm_eps=1e-6,
)
VARIANTS = {
  "qwen2_bias": dict(model_type="qwen2", tie_word_embeddings=False, rope_theta=10000.0),
  "qwen3_tied": dict(
    model_type="qwen3", tie_word_embeddings=True, head_dim=32, rope_theta=1_000_000.0
  ),
  "qwen3_untied": dict(
    model_type="qwen3", tie_word_embeddings=False, head_dim=16, rope_theta=10000.0
  ),
}


def hf_config(variant: str, **extra) -> transformers.PretrainedConfig:
  fields = {**TINY, **VARIANTS[variant], **extra}
  model_type = fields.pop("model_type")
  rope = {"rope_type": "default", "rope_theta": fields.pop("rope_theta")}
  rope.update(fields.pop("rope_extra", {}))
  return transformers.AutoConfig.for_model(model_type, rope_parameters=rope, **fields)


def torch_model(config, seed: int = 0) -> transformers.PreTrainedModel:
  """Random fp32 eager model; every weight (norms around 1, biases too) is randomised."""
  torch.manual_seed(seed)
  config._attn_implementation = "eager"
  model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
  with torch.no_grad():
    for name, p in model.named_parameters():
      p.copy_(torch.randn_like(p) * 0.1 + (1.0 if "norm" in name else 0.0))
  return model


def batch(seed: int = 0, b: int = 3, t: int = 9, vocab: int = 256):
  """A padded batch: row 0 full, row 1 right-padded, row 2 left-padded.
  -> tokens, positions, segment_ids (np int32 [B,T]); padding has segment 0."""
  rng = np.random.default_rng(seed)
  tokens = rng.integers(0, vocab, (b, t)).astype(np.int32)
  mask = np.ones((b, t), np.int32)
  mask[1, t - 3 :] = 0
  mask[2, :2] = 0
  positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0).astype(np.int32)
  return tokens, positions, mask


def torch_logits(model, tokens, positions, mask) -> np.ndarray:
  with torch.no_grad():
    out = model(
      input_ids=torch.tensor(tokens, dtype=torch.long),
      attention_mask=torch.tensor(mask, dtype=torch.long),
      position_ids=torch.tensor(positions, dtype=torch.long),
    )
  return out.logits.float().numpy()


def rel_err(ours, ref, mask) -> float:
  """max|diff| / max|ref| over non-padding positions."""
  keep = np.asarray(mask, bool)
  ours, ref = np.asarray(ours)[keep], np.asarray(ref)[keep]
  return float(np.max(np.abs(ours - ref)) / np.max(np.abs(ref)))
