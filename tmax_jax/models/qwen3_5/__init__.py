"""Qwen3.5 hybrid family (Gated DeltaNet + gated attention): registers itself on import.

Both HF layouts load through hf_io (`model.language_model.*` is read as `model.*`); the vision tower
and MTP head of `Qwen3_5ForConditionalGeneration` checkpoints are not ported: `load_pretrained` here
says so in one log line. Export writes a text-only `Qwen3_5ForCausalLM` checkpoint.
"""

from __future__ import annotations

from tmax_jax.models import registry
from tmax_jax.models.qwen3_5.checkpoint import load_pretrained, skipped_tensors
from tmax_jax.models.qwen3_5.config import (
  MODEL_TYPES,
  Qwen3_5Config,
  default_layer_types,
  parse_hf,
  to_hf,
)
from tmax_jax.models.qwen3_5.gated_deltanet import GatedDeltaNet
from tmax_jax.models.qwen3_5.model import Qwen3_5ForCausalLM
from tmax_jax.models.qwen3_5.presets import PRESETS, qwen3_5
from tmax_jax.models.qwen3_5.tokenizer import QWEN3_5
from tmax_jax.models.qwen3_5.weights import key_map

registry.register(
  registry.Family(
    name="qwen3_5",
    model_types=MODEL_TYPES,
    model_class=Qwen3_5ForCausalLM,
    parse_hf=parse_hf,
    to_hf=to_hf,
    key_map=key_map,
    presets=PRESETS,
    tokenizers={model_type: QWEN3_5 for model_type in MODEL_TYPES},
  )
)

__all__ = [
  "GatedDeltaNet",
  "Qwen3_5Config",
  "Qwen3_5ForCausalLM",
  "default_layer_types",
  "key_map",
  "load_pretrained",
  "parse_hf",
  "qwen3_5",
  "skipped_tensors",
  "to_hf",
]
