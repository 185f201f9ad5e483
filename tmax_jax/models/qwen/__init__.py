"""Qwen2 / Qwen2.5 / Qwen3 dense family: registers itself with the model registry on import."""

from __future__ import annotations

from tmax_jax.models import config as config_lib
from tmax_jax.models import registry
from tmax_jax.models.qwen.model import QwenForCausalLM
from tmax_jax.models.qwen.presets import PRESETS, qwen2_5, qwen3
from tmax_jax.models.qwen.tokenizer import ADDED_TOKENS, CHATML, QWEN3
from tmax_jax.models.qwen.weights import key_map

_ARCH = {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}


def parse_hf(hf: dict) -> dict:
  """HF Qwen2/Qwen3 config dict -> ModelConfig kwargs."""
  fields = config_lib.common_fields_from_hf(hf)
  layer_types = hf.get("layer_types") or []
  bad = sorted({t for t in layer_types if t != "full_attention"})
  if bad:
    raise config_lib.UnsupportedConfigError(
      f"unsupported layer_types {bad}; supported: ['full_attention']"
    )
  if hf["model_type"] == "qwen2":  # Qwen2 has q/k/v bias always, no o bias, no q/k norm
    return dict(fields, attention_bias=True, o_proj_bias=False, qk_norm=False)
  bias = bool(hf.get("attention_bias", False))
  return dict(fields, attention_bias=bias, o_proj_bias=bias, qk_norm=True)


def to_hf(cfg: config_lib.ModelConfig) -> dict:
  out = config_lib.common_fields_to_hf(cfg)
  out["architectures"] = [_ARCH[cfg.model_type]]
  if cfg.model_type == "qwen3":
    out["attention_bias"] = cfg.attention_bias
  out["layer_types"] = ["full_attention"] * cfg.num_hidden_layers
  return out


def _check_representable(cfg: config_lib.ModelConfig) -> None:
  """Our config must be expressible by the HF class (the export would be wrong otherwise)."""
  want: tuple[bool, ...] = (
    (True, False, False)
    if cfg.model_type == "qwen2"
    else (cfg.attention_bias, cfg.attention_bias, True)
  )
  want += (False, False)
  got = (
    cfg.attention_bias,
    cfg.o_proj_bias,
    cfg.qk_norm,
    cfg.attn_output_gate,
    cfg.norm_zero_centered,
  )
  if got != want:
    raise config_lib.UnsupportedConfigError(
      f"{cfg.model_type}: (attention_bias, o_proj_bias, qk_norm, attn_output_gate, "
      f"norm_zero_centered)={got}; expected {want}"
    )


def _to_hf_checked(cfg):
  _check_representable(cfg)
  return to_hf(cfg)


registry.register(
  registry.Family(
    name="qwen",
    model_types=("qwen2", "qwen3"),
    model_class=QwenForCausalLM,
    parse_hf=parse_hf,
    to_hf=_to_hf_checked,
    key_map=key_map,
    presets=PRESETS,
    tokenizers={"qwen3": QWEN3},
  )
)

__all__ = [
  "QwenForCausalLM",
  "key_map",
  "parse_hf",
  "qwen2_5",
  "qwen3",
  "to_hf",
  # the ChatML tokens and template Qwen3.5's tokenizer reuses
  "ADDED_TOKENS",
  "CHATML",
]
