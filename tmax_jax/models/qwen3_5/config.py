"""Qwen3.5's family sub-config (`ModelConfig.family_config`) and its HF config translation.

The hybrid stack is described by `layer_types` ("linear_attention" = Gated DeltaNet,
"full_attention" = gated softmax attention). Everything else shared with dense Qwen lives in
ModelConfig (Qwen3.5 uses zero-centred RMSNorm, q/k norm, partial rotary and an attention output
gate).
"""

from __future__ import annotations

import dataclasses

from tmax_jax.models import config as config_lib
from tmax_jax.models.config import ModelConfig, UnsupportedConfigError
from tmax_jax.models.decoder import FULL_ATTENTION as FULL

LINEAR = "linear_attention"
LAYER_TYPES = (LINEAR, FULL)
TEXT_ARCH = "Qwen3_5ForCausalLM"
MODEL_TYPES = ("qwen3_5_text", "qwen3_5")


@dataclasses.dataclass(frozen=True)
class Qwen3_5Config:
  """Gated DeltaNet settings (HF names) and the per-layer type list.

  chunk_size: chunk length of the chunked gated delta rule used for training and prefill (not an HF
  field; any value gives the same result up to fp rounding).
  """

  layer_types: tuple[str, ...] = ()
  linear_conv_kernel_dim: int = 4
  linear_key_head_dim: int = 128
  linear_value_head_dim: int = 128
  linear_num_key_heads: int = 16
  linear_num_value_heads: int = 32
  chunk_size: int = 64

  def __post_init__(self):
    bad = sorted({t for t in self.layer_types if t not in LAYER_TYPES})
    if bad:
      raise UnsupportedConfigError(f"unsupported layer_types {bad}; supported: {list(LAYER_TYPES)}")
    if self.linear_num_value_heads % self.linear_num_key_heads:
      raise UnsupportedConfigError(
        f"linear_num_value_heads={self.linear_num_value_heads} must be a multiple of "
        f"linear_num_key_heads={self.linear_num_key_heads}"
      )
    if self.chunk_size < 1 or self.linear_conv_kernel_dim < 1:
      raise UnsupportedConfigError(
        f"chunk_size={self.chunk_size} and linear_conv_kernel_dim={self.linear_conv_kernel_dim} "
        "must be >= 1"
      )

  @property
  def key_dim(self) -> int:
    return self.linear_num_key_heads * self.linear_key_head_dim

  @property
  def value_dim(self) -> int:
    return self.linear_num_value_heads * self.linear_value_head_dim

  @property
  def conv_dim(self) -> int:
    """Channels of the depthwise conv: q | k | v, as in HF's in_proj_qkv."""
    return 2 * self.key_dim + self.value_dim


def default_layer_types(num_layers: int, full_attention_interval: int = 4) -> tuple[str, ...]:
  """HF's default: every `full_attention_interval`-th layer is full attention."""
  return tuple(
    FULL if (i + 1) % full_attention_interval == 0 else LINEAR for i in range(num_layers)
  )


def family(cfg: ModelConfig) -> Qwen3_5Config:
  fam = cfg.family_config
  if not isinstance(fam, Qwen3_5Config):
    raise UnsupportedConfigError(
      f"model_type={cfg.model_type!r} needs family_config=Qwen3_5Config, got {type(fam).__name__}"
    )
  if len(fam.layer_types) != cfg.num_hidden_layers:
    raise UnsupportedConfigError(
      f"family_config.layer_types has {len(fam.layer_types)} entries, expected "
      f"num_hidden_layers={cfg.num_hidden_layers}"
    )
  return fam


def parse_hf(hf: dict) -> dict:
  """HF Qwen3.5 text-config dict (flat, or nested already flattened by config.load_hf_dict) ->
  ModelConfig kwargs."""
  fields = config_lib.common_fields_from_hf(hf)
  fields["model_type"] = "qwen3_5_text"
  n = hf["num_hidden_layers"]
  layer_types = hf.get("layer_types")
  if layer_types is None:
    layer_types = default_layer_types(n, hf.get("full_attention_interval", 4))
  if len(layer_types) != n:
    raise UnsupportedConfigError(
      f"layer_types has {len(layer_types)} entries, expected num_hidden_layers={n}"
    )
  if not hf.get("attn_output_gate", True):  # some configs spell out the (always-on) gate
    raise UnsupportedConfigError(
      "unsupported attn_output_gate=False for qwen3_5; supported: [True]"
    )
  if hf.get("attention_bias", False):
    raise UnsupportedConfigError("unsupported attention_bias=True for qwen3_5; supported: [False]")
  defaults = Qwen3_5Config()
  fam = Qwen3_5Config(
    layer_types=tuple(layer_types),
    **{
      f: hf.get(f, getattr(defaults, f))
      for f in (
        "linear_conv_kernel_dim",
        "linear_key_head_dim",
        "linear_value_head_dim",
        "linear_num_key_heads",
        "linear_num_value_heads",
      )
    },
  )
  if "partial_rotary_factor" not in (hf.get("rope_parameters") or {}) and (
    "partial_rotary_factor" not in hf
  ):
    fields["partial_rotary_factor"] = 0.25  # HF's Qwen3_5TextConfig default
  return dict(
    fields,
    attention_bias=False,
    o_proj_bias=False,
    qk_norm=True,
    attn_output_gate=True,
    norm_zero_centered=True,
    family_config=fam,
  )


def check_representable(cfg: ModelConfig) -> None:
  """Our config must be expressible by Qwen3_5TextConfig (the export would be wrong otherwise)."""
  got = (
    cfg.attention_bias,
    cfg.o_proj_bias,
    cfg.qk_norm,
    cfg.attn_output_gate,
    cfg.norm_zero_centered,
  )
  if got != (False, False, True, True, True):
    raise UnsupportedConfigError(
      f"qwen3_5: (attention_bias, o_proj_bias, qk_norm, attn_output_gate, norm_zero_centered)="
      f"{got}; expected (False, False, True, True, True)"
    )
  family(cfg)


def to_hf(cfg: ModelConfig) -> dict:
  """Text-only config.json (Qwen3_5ForCausalLM, model_type qwen3_5_text)."""
  check_representable(cfg)
  fam = family(cfg)
  out = config_lib.common_fields_to_hf(cfg)
  out.pop("use_sliding_window", None)
  out.update(
    model_type="qwen3_5_text",
    architectures=[TEXT_ARCH],
    attention_bias=False,
    layer_types=list(fam.layer_types),
    linear_conv_kernel_dim=fam.linear_conv_kernel_dim,
    linear_key_head_dim=fam.linear_key_head_dim,
    linear_value_head_dim=fam.linear_value_head_dim,
    linear_num_key_heads=fam.linear_num_key_heads,
    linear_num_value_heads=fam.linear_num_value_heads,
  )
  out["rope_parameters"]["partial_rotary_factor"] = cfg.partial_rotary_factor
  return out
