"""Model configuration: typed, frozen, Hugging Face field names.

`ModelConfig` is shared by every family. Family-specific extras (e.g. Qwen3.5's linear-attention
settings) go into `family_config`, a frozen dataclass owned by the family package; the family's
registered `parse_hf` hook fills it from the HF config. `registry.from_hf_config` reads flat or
nested (`text_config`) HF configs, in the legacy (`rope_theta` + `rope_scaling`) or transformers>=5
(`rope_parameters`) spelling, and raises `UnsupportedConfigError` naming any value we do not
support.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Any

import jax.numpy as jnp

from tmax_jax.errors import UserError

SUPPORTED_ROPE_TYPES = ("default", "linear", "yarn")
SUPPORTED_ACTIVATIONS = ("silu",)
HF_DEFAULT_ROPE_THETA = 10_000.0  # what transformers assumes when a config.json omits rope_theta
REMAT_POLICIES = ("none", "full", "dots", "dots_no_batch", "save_attn_out")
ATTENTION_IMPLS = ("auto", "reference", "blockwise", "cudnn", "splash")  # see models/attention

# Logical axis -> mesh axes. Order matters: flax assigns each mesh axis at most once per array, in
# rule order, so activations' `batch` takes (data, fsdp) and their `embed` then stays replicated,
# while params (no `batch` axis) shard `embed` over fsdp (ZeRO-3 style) and heads/mlp/vocab over
# tensor (Megatron style).
DEFAULT_LOGICAL_AXIS_RULES: tuple[tuple[str, Any], ...] = (
  ("batch", ("data", "fsdp")),
  ("length", "sequence"),  # context parallelism (a no-op while the sequence axis is 1)
  ("vocab", "tensor"),
  ("heads", "tensor"),
  ("kv_heads", "tensor"),
  ("mlp", "tensor"),
  ("embed", "fsdp"),
  ("head_dim", None),
  ("layers", None),
)
# The same with the params' embed dim split over fsdp x sequence: under context parallelism the
# sequence devices hold a share of the params and optimizer state too (ZeRO-3 over every device
# the batch and the rows split over) instead of a full fsdp share each.
CONTEXT_PARALLEL_RULES: tuple[tuple[str, Any], ...] = tuple(
  (name, ("fsdp", "sequence")) if name == "embed" else (name, axes)
  for name, axes in DEFAULT_LOGICAL_AXIS_RULES
)


class UnsupportedConfigError(UserError):
  """A config field holds a value this implementation does not support (the message names both)."""


DTYPE_EXAMPLES = ("float32", "bfloat16", "float16")


def check_dtype(field: str, value: str) -> None:
  """`value` names a dtype numpy/JAX know (e.g. "bfloat16"), else UnsupportedConfigError naming
  `field` (jnp.dtype's own TypeError names neither the field nor the spellings)."""
  try:
    jnp.dtype(value)
  except TypeError:
    raise UnsupportedConfigError(
      f"{field}={value!r}: not a dtype; expected a name such as {', '.join(DTYPE_EXAMPLES)}"
    ) from None


@dataclasses.dataclass(frozen=True)
class RopeScaling:
  """HF `rope_scaling` / `rope_parameters` (minus rope_theta) for the types we support."""

  rope_type: str = "default"
  factor: float = 1.0
  original_max_position_embeddings: int | None = None
  beta_fast: float = 32.0
  beta_slow: float = 1.0
  mscale: float | None = None
  mscale_all_dim: float | None = None
  attention_factor: float | None = None
  truncate: bool = True


@dataclasses.dataclass(frozen=True)
class DtypePolicy:
  """Weights are stored in `param_dtype` (the head's weight in `head_weight`), computed in
  `compute_dtype`; the LM head (hidden state and head weight both) is cast to `head_dtype` before
  its matmul. Norm statistics and softmax are fp32."""

  param_dtype: str = "float32"
  compute_dtype: str = "float32"
  head_dtype: str = "float32"

  @property
  def param(self) -> jnp.dtype:
    return jnp.dtype(self.param_dtype)

  @property
  def compute(self) -> jnp.dtype:
    return jnp.dtype(self.compute_dtype)

  @property
  def head(self) -> jnp.dtype:
    return jnp.dtype(self.head_dtype)

  @property
  def head_weight(self) -> jnp.dtype:
    """What the head's weight is stored in (lm_head/kernel, or the embedding when tied): the wider
    of param and head dtype. A bf16-param server with an fp32 head then holds the trainer's fp32
    head weight, not a bf16-rounded copy cast back up (recipe.md: fp32 head on both sides)."""
    return jnp.promote_types(self.param, self.head)


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """One decoder config. Field names follow Hugging Face; defaults are Qwen3-0.6B's."""

  model_type: str = "qwen3"
  vocab_size: int = 151936
  hidden_size: int = 1024
  intermediate_size: int = 3072
  num_hidden_layers: int = 28
  num_attention_heads: int = 16
  num_key_value_heads: int = 8
  head_dim: int = 128
  hidden_act: str = "silu"
  max_position_embeddings: int = 40960
  rms_norm_eps: float = 1e-6
  rope_theta: float = 1_000_000.0
  rope_scaling: RopeScaling | None = None
  partial_rotary_factor: float = 1.0
  tie_word_embeddings: bool = True
  attention_bias: bool = False  # bias on q/k/v projections
  o_proj_bias: bool = False
  qk_norm: bool = True  # Qwen3: RMSNorm over head_dim on q and k before rotary
  attn_output_gate: bool = False  # Qwen3.5: q_proj also emits a per-head sigmoid output gate
  norm_zero_centered: bool = False  # RMSNorm scale stored as (weight - 1): y = x_hat * (1 + w)
  bos_token_id: int | None = None
  eos_token_id: int | tuple[int, ...] | None = None
  pad_token_id: int | None = None
  dtypes: DtypePolicy = DtypePolicy()
  remat_policy: str = "none"
  scan_layers: bool = True
  # Training attention kernel (models/attention): auto | reference | blockwise | cudnn | splash;
  # "auto" = splash on TPU, cudnn on GPU (bf16/fp16), blockwise otherwise.
  attention_impl: str = "auto"
  attention_q_chunk: int | None = None  # query block (None: the kernel's default; reference: T)
  attention_kv_chunk: int | None = None  # key block of blockwise / ring (None: kernel default)
  logical_axis_rules: tuple[tuple[str, Any], ...] = DEFAULT_LOGICAL_AXIS_RULES
  family_config: Any = None  # frozen dataclass owned by a family package, or None

  def __post_init__(self):
    _check_choice("hidden_act", self.hidden_act, SUPPORTED_ACTIVATIONS)
    _check_choice("remat_policy", self.remat_policy, REMAT_POLICIES)
    _check_choice("attention_impl", self.attention_impl, ATTENTION_IMPLS)
    if self.rope_scaling is not None:
      _check_choice("rope_scaling.rope_type", self.rope_scaling.rope_type, SUPPORTED_ROPE_TYPES)
    if self.num_attention_heads % self.num_key_value_heads:
      raise UnsupportedConfigError(
        f"num_attention_heads={self.num_attention_heads} must be a multiple of "
        f"num_key_value_heads={self.num_key_value_heads}"
      )
    for name in ("param_dtype", "compute_dtype", "head_dtype"):
      check_dtype(f"dtypes.{name}", getattr(self.dtypes, name))  # fails early on a misspelt dtype

  def replace(self, **changes) -> ModelConfig:
    return dataclasses.replace(self, **changes)

  def with_dtypes(self, **changes) -> ModelConfig:
    """E.g. `cfg.with_dtypes(compute_dtype="bfloat16")`."""
    return dataclasses.replace(self, dtypes=dataclasses.replace(self.dtypes, **changes))


def _check_choice(field: str, value, supported) -> None:
  if value not in supported:
    raise UnsupportedConfigError(f"unsupported {field}={value!r}; supported: {list(supported)}")


def load_hf_dict(dict_or_path: dict | str | pathlib.Path) -> dict:
  """A config dict, a config.json path, or a checkpoint directory -> the text-model config dict."""
  if isinstance(dict_or_path, dict):
    raw = dict(dict_or_path)
  else:
    path = pathlib.Path(dict_or_path)
    if path.is_dir():
      path = path / "config.json"
    try:
      raw = json.loads(path.read_text())
    except FileNotFoundError as e:
      raise FileNotFoundError(f"no HF config at {path}") from e
  if isinstance(raw.get("text_config"), dict):
    nested = dict(raw["text_config"])
    for key in ("tie_word_embeddings", "bos_token_id", "eos_token_id", "pad_token_id"):
      if key not in nested and key in raw:
        nested[key] = raw[key]
    nested.setdefault("model_type", raw.get("model_type"))
    raw = nested
  return raw


def rope_from_hf(hf: dict) -> tuple[float, RopeScaling | None, float]:
  """-> (rope_theta, rope_scaling or None, partial_rotary_factor) from either HF spelling."""
  params = dict(hf.get("rope_parameters") or {})
  legacy = dict(hf.get("rope_scaling") or {})
  merged = {**legacy, **params}
  theta = merged.pop("rope_theta", hf.get("rope_theta", HF_DEFAULT_ROPE_THETA))
  partial = merged.pop("partial_rotary_factor", hf.get("partial_rotary_factor", 1.0))
  rope_type = merged.pop("rope_type", merged.pop("type", "default"))
  where = "rope_parameters" if "rope_parameters" in hf else "rope_scaling"
  _check_choice(f"{where}.rope_type", rope_type, SUPPORTED_ROPE_TYPES)
  if rope_type == "default":
    return float(theta), None, float(partial)
  known = {f.name for f in dataclasses.fields(RopeScaling)} - {"rope_type"}
  unknown = sorted(set(merged) - known)
  if unknown:
    raise UnsupportedConfigError(f"unsupported {where} keys {unknown}; supported: {sorted(known)}")
  if rope_type == "yarn":
    merged.setdefault("original_max_position_embeddings", hf.get("max_position_embeddings"))
  kwargs = {k: v for k, v in merged.items() if v is not None}
  return float(theta), RopeScaling(rope_type=rope_type, **kwargs), float(partial)


def common_fields_from_hf(hf: dict) -> dict:
  """The fields every family shares, read and validated from an HF text config dict."""
  required = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
  )
  missing = [k for k in required if k not in hf]
  if missing:
    raise UnsupportedConfigError(f"HF config lacks required fields {missing}")
  act = hf.get("hidden_act", "silu")
  _check_choice("hidden_act", act, SUPPORTED_ACTIVATIONS)
  if hf.get("use_sliding_window"):
    raise UnsupportedConfigError("unsupported use_sliding_window=True; supported: [False]")
  theta, scaling, partial = rope_from_hf(hf)
  eos = hf.get("eos_token_id")
  fields = dict(
    model_type=hf["model_type"],
    vocab_size=hf["vocab_size"],
    hidden_size=hf["hidden_size"],
    intermediate_size=hf["intermediate_size"],
    num_hidden_layers=hf["num_hidden_layers"],
    num_attention_heads=hf["num_attention_heads"],
    num_key_value_heads=hf.get("num_key_value_heads") or hf["num_attention_heads"],
    head_dim=hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"],
    hidden_act=act,
    rms_norm_eps=hf.get("rms_norm_eps", ModelConfig.rms_norm_eps),
    rope_theta=theta,
    rope_scaling=scaling,
    partial_rotary_factor=partial,
    tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
    bos_token_id=hf.get("bos_token_id"),
    pad_token_id=hf.get("pad_token_id"),
    eos_token_id=tuple(eos) if isinstance(eos, list) else eos,
  )
  if "max_position_embeddings" in hf:
    fields["max_position_embeddings"] = hf["max_position_embeddings"]
  return fields


def rope_to_hf(cfg: ModelConfig) -> dict:
  """The transformers>=5 `rope_parameters` dict plus the legacy top-level `rope_theta`."""
  params: dict[str, Any] = {"rope_type": "default", "rope_theta": cfg.rope_theta}
  if cfg.rope_scaling is not None:
    params.update({k: v for k, v in dataclasses.asdict(cfg.rope_scaling).items() if v is not None})
  if cfg.partial_rotary_factor != 1.0:
    params["partial_rotary_factor"] = cfg.partial_rotary_factor
  return {"rope_parameters": params, "rope_theta": cfg.rope_theta}


def common_fields_to_hf(cfg: ModelConfig) -> dict:
  """The shared part of an HF config.json for `cfg` (families add theirs)."""
  eos = list(cfg.eos_token_id) if isinstance(cfg.eos_token_id, tuple) else cfg.eos_token_id
  out = dict(
    model_type=cfg.model_type,
    vocab_size=cfg.vocab_size,
    hidden_size=cfg.hidden_size,
    intermediate_size=cfg.intermediate_size,
    num_hidden_layers=cfg.num_hidden_layers,
    num_attention_heads=cfg.num_attention_heads,
    num_key_value_heads=cfg.num_key_value_heads,
    head_dim=cfg.head_dim,
    hidden_act=cfg.hidden_act,
    max_position_embeddings=cfg.max_position_embeddings,
    rms_norm_eps=cfg.rms_norm_eps,
    tie_word_embeddings=cfg.tie_word_embeddings,
    bos_token_id=cfg.bos_token_id,
    eos_token_id=eos,
    pad_token_id=cfg.pad_token_id,
    use_sliding_window=False,
    torch_dtype=cfg.dtypes.param_dtype,
    dtype=cfg.dtypes.param_dtype,
  )
  out.update(rope_to_hf(cfg))
  return out
