"""Model families register themselves here; everything else looks them up by HF `model_type`.

A family package (e.g. `tmax_jax.models.qwen`) calls `register(Family(...))` at import time. The
registry imports the known family packages lazily so that `build_model(cfg)` works after importing
only this module.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from tmax_jax.models.config import ModelConfig, UnsupportedConfigError

# Packages that register families on import; a missing package (not written yet) is skipped.
FAMILY_PACKAGES = ("tmax_jax.models.qwen", "tmax_jax.models.qwen3_5")


@dataclasses.dataclass(frozen=True)
class Family:
  """One model family.

  model_types: HF `model_type` values it implements (text config's, for nested configs).
  build: ModelConfig -> flax.linen.Module following the Model API in BUILD_NOTES.md.
  parse_hf: HF text-config dict -> ModelConfig kwargs (validates; raises UnsupportedConfigError).
  to_hf: ModelConfig -> config.json dict (incl. `architectures`).
  key_map: ModelConfig -> list[hf_io.KeyRule], the declarative HF <-> param map.
  generation_defaults: extra generation_config.json fields written on export.
  """

  name: str
  model_types: tuple[str, ...]
  build: Callable[[ModelConfig], nn.Module]
  parse_hf: Callable[[dict], dict]
  to_hf: Callable[[ModelConfig], dict]
  key_map: Callable[[ModelConfig], list]
  generation_defaults: dict = dataclasses.field(default_factory=dict)


_FAMILIES: dict[str, Family] = {}
_loaded = False


def register(family: Family) -> None:
  for model_type in family.model_types:
    existing = _FAMILIES.get(model_type)
    if existing is not None and existing.name != family.name:
      raise ValueError(f"model_type {model_type!r} already registered by family {existing.name!r}")
    _FAMILIES[model_type] = family


def _load_families() -> None:
  global _loaded
  if _loaded:
    return
  for package in FAMILY_PACKAGES:
    try:
      importlib.import_module(package)
    except ModuleNotFoundError as e:
      if e.name != package:  # a real import error inside an existing family package
        raise
  _loaded = True


def family_for(model_type: str | None) -> Family:
  _load_families()
  if model_type not in _FAMILIES:
    raise UnsupportedConfigError(
      f"unsupported model_type={model_type!r}; supported: {sorted(_FAMILIES)}")
  return _FAMILIES[model_type]


def build_model(cfg: ModelConfig) -> nn.Module:
  """The Flax module for `cfg` (see BUILD_NOTES.md "Model API" for the calling convention)."""
  return family_for(cfg.model_type).build(cfg)


def head_weight(params: dict, cfg: ModelConfig) -> jax.Array:
  """-> [D, V]: the embedding transposed when tied, else the lm_head kernel."""
  if cfg.tie_word_embeddings:
    return params["model"]["embed_tokens"]["embedding"].T
  return params["lm_head"]["kernel"]


def dummy_inputs(batch: int = 1, length: int = 1) -> tuple[jax.Array, jax.Array, jax.Array]:
  """(tokens, positions, segment_ids) for `init`/`eval_shape`."""
  tokens = jnp.zeros((batch, length), jnp.int32)
  return tokens, jnp.zeros_like(tokens), jnp.ones_like(tokens)


def abstract_params(cfg: ModelConfig, boxed: bool = False) -> Any:
  """ShapeDtypeStruct param tree (no allocation); `boxed` keeps the nn.Partitioned metadata."""
  model = build_model(cfg)
  variables = jax.eval_shape(lambda r: model.init(r, *dummy_inputs()), jax.random.key(0))
  params = variables["params"]
  return params if boxed else nn.unbox(params)


def init_params(cfg: ModelConfig, rng: jax.Array, shardings: Any = None) -> Any:
  """Random params (the family's init), created directly in `shardings` when given (see
  sharding.param_shardings)."""
  model = build_model(cfg)

  def init(r):
    return nn.unbox(model.init(r, *dummy_inputs())["params"])

  return jax.jit(init, out_shardings=shardings)(rng)


def count_params(tree: Any) -> int:
  return sum(int(x.size) for x in jax.tree.leaves(tree))
