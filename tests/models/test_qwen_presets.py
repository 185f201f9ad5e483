"""Full-size presets: eval_shape parameter counts equal transformers' (meta device, no download)."""

import pytest
import torch
import transformers

from tmax_jax.models import abstract_params, count_params, from_hf_config, registry
from tmax_jax.models.qwen import presets

SIZES = [
  "qwen2.5-0.5b",
  "qwen2.5-7b",
  "qwen3-0.6b",
  "qwen3-1.7b",
  "qwen3-4b",
  "qwen3-8b",
  "qwen3-14b",
  "qwen3-32b",
]


def torch_param_count(cfg) -> int:
  hf = registry.family_for(cfg.model_type).to_hf(cfg)
  hf_cfg = transformers.AutoConfig.for_model(
    **{k: v for k, v in hf.items() if k != "architectures"}
  )
  with torch.device("meta"):
    model = transformers.AutoModelForCausalLM.from_config(hf_cfg)
  return sum(p.numel() for p in model.parameters())  # shared (tied) tensors counted once


@pytest.mark.parametrize("name", SIZES)
def test_preset_param_count_matches_transformers(name):
  cfg = registry.preset(name)
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


QWEN3_8B_CONFIG = {  # the published Qwen/Qwen3-8B config.json
  "architectures": ["Qwen3ForCausalLM"],
  "attention_bias": False,
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 12288,
  "max_position_embeddings": 40960,
  "max_window_layers": 36,
  "model_type": "qwen3",
  "num_attention_heads": 32,
  "num_hidden_layers": 36,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06,
  "rope_scaling": None,
  "rope_theta": 1000000,
  "sliding_window": None,
  "tie_word_embeddings": False,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.51.0",
  "use_cache": True,
  "use_sliding_window": False,
  "vocab_size": 151936,
}
QWEN2_5_7B_INSTRUCT_CONFIG = {  # the published Qwen/Qwen2.5-7B-Instruct config.json
  "architectures": ["Qwen2ForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "hidden_act": "silu",
  "hidden_size": 3584,
  "initializer_range": 0.02,
  "intermediate_size": 18944,
  "max_position_embeddings": 32768,
  "max_window_layers": 28,
  "model_type": "qwen2",
  "num_attention_heads": 28,
  "num_hidden_layers": 28,
  "num_key_value_heads": 4,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "sliding_window": 131072,
  "tie_word_embeddings": False,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.1",
  "use_cache": True,
  "use_sliding_window": False,
  "vocab_size": 152064,
}


@pytest.mark.parametrize(
  "hf, name", [(QWEN3_8B_CONFIG, "qwen3-8b"), (QWEN2_5_7B_INSTRUCT_CONFIG, "qwen2.5-7b")]
)
def test_published_configs_parse_to_presets(hf, name):
  parsed = from_hf_config(hf)
  want = registry.preset(name, eos_token_id=hf["eos_token_id"])
  assert parsed == want
