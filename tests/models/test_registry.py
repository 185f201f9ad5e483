"""The registry: the one place a family is declared, and the checks it makes at registration."""

import dataclasses

import pytest

from tmax_jax.models import UnsupportedConfigError, decoder, registry
from tmax_jax.models.qwen import QwenForCausalLM

QWEN = registry.family_for("qwen3")


def _family(**changes) -> registry.Family:
  fields = dict(name="broken", model_types=("tmax_broken",), presets={}, tokenizers={})
  return dataclasses.replace(QWEN, **{**fields, **changes})


def test_family_packages_are_discovered_not_listed():
  names = {f.name for f in registry.families()}
  assert {"qwen", "qwen3_5"} <= names
  assert not hasattr(registry, "FAMILY_PACKAGES")


def test_a_model_class_without_the_cache_contract_fails_at_registration():
  class NoCacheAxes(decoder.CausalLM):
    def init_cache(self, batch, max_len):
      return {}

  with pytest.raises(TypeError, match=r"NoCacheAxes does not implement .*'cache_logical_axes'"):
    registry.register(_family(model_class=NoCacheAxes))
  with pytest.raises(TypeError, match="must subclass decoder.CausalLM"):
    registry.register(_family(model_class=dict))
  with pytest.raises(UnsupportedConfigError, match="tmax_broken"):
    registry.family_for("tmax_broken")  # nothing half-registered


def test_presets_and_tokenizers_cannot_be_claimed_twice():
  with pytest.raises(ValueError, match=r"presets \['qwen3-8b'\] already registered"):
    registry.register(
      _family(model_class=QwenForCausalLM, presets={"qwen3-8b": QWEN.presets["qwen3-8b"]})
    )
  with pytest.raises(ValueError, match="tokenizers for .*not among its model_types"):
    registry.register(
      _family(model_class=QwenForCausalLM, tokenizers={"qwen3": QWEN.tokenizers["qwen3"]})
    )


def test_presets_tokenizers_and_formats_derive_from_the_family():
  assert registry.preset("qwen3.5-9b").model_type == "qwen3_5_text"
  assert registry.preset("Qwen3-8B", scan_layers=False).scan_layers is False
  with pytest.raises(ValueError, match="unknown preset 'qwen4-1b'.*qwen3-8b"):
    registry.preset("qwen4-1b")
  for model_type, name, fmt in (
    ("qwen3", "qwen3", "hermes"),
    ("qwen3_5", "qwen3_5", "xml"),
    ("qwen3_5_text", "qwen3_5", "xml"),
  ):
    spec = registry.tokenizer_for(model_type)
    assert (spec.family, spec.tool_call_format) == (name, fmt)
    assert spec.stop_token_ids() == (spec.token_id("<|im_end|>"), spec.token_id("<|endoftext|>"))
  with pytest.raises(UnsupportedConfigError, match="'qwen2'.*no registered tokenizer"):
    registry.tokenizer_for("qwen2")
