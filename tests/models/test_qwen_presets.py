"""Full-size presets: eval_shape parameter counts equal transformers' (meta device, no download)."""

import pytest
import torch
import transformers

from tmax_jax.models import abstract_params, count_params, registry
from tmax_jax.models.qwen import presets

SIZES = ["qwen2.5-0.5b", "qwen2.5-7b", "qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b",
         "qwen3-14b", "qwen3-32b"]


def torch_param_count(cfg) -> int:
  hf = registry.family_for(cfg.model_type).to_hf(cfg)
  hf_cfg = transformers.AutoConfig.for_model(**{k: v for k, v in hf.items() if k != "architectures"})
  with torch.device("meta"):
    model = transformers.AutoModelForCausalLM.from_config(hf_cfg)
  return sum(p.numel() for p in model.parameters())  # shared (tied) tensors counted once


@pytest.mark.parametrize("name", SIZES)
def test_preset_param_count_matches_transformers(name):
  cfg = presets.preset(name)
  ours = count_params(abstract_params(cfg))
  assert ours == torch_param_count(cfg)


def test_preset_values():
  cfg = presets.qwen3("8b")
  assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_key_value_heads) == (4096, 36, 8)
  assert not cfg.tie_word_embeddings and cfg.qk_norm and not cfg.attention_bias
  small = presets.qwen2_5("0.5b")
  assert small.tie_word_embeddings and small.attention_bias and small.head_dim == 64
  assert presets.qwen2_5("7b").vocab_size == 152064
  with pytest.raises(ValueError, match="unknown Qwen3 size"):
    presets.qwen3("9b")
