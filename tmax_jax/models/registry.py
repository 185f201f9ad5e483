"""Model families register themselves here; everything else looks them up by HF `model_type`.

A family is one package that calls `register(Family(...))` at import time: its model class, HF
config in/out, key map, presets, and per model type the tokenizer spec (which carries the chat
template, the tool-call syntax and the stop tokens). Nothing else in the tree names a family: the
loader, the server, the trainer, the tokenizer builder and the harnesses all derive what they need
from `ModelConfig.model_type` (or a tokenizer name). The subpackages of `tmax_jax.models` are
imported on the first lookup; a family outside the tree registers when its package is imported.
"""

from __future__ import annotations

import dataclasses
import importlib
import pathlib
import pkgutil
from collections.abc import Callable, Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from tmax_jax import sharding
from tmax_jax.models import decoder
from tmax_jax.models.config import ModelConfig, UnsupportedConfigError, load_hf_dict
from tmax_jax.models.tokenizer_spec import TokenizerSpec

_MODELS_PACKAGE = "tmax_jax.models"


@dataclasses.dataclass(frozen=True)
class Family:
  """One model family.

  model_types: HF `model_type` values it implements (text config's, for nested configs).
  model_class: its decoder.CausalLM subclass (Model API in docs/design/models.md); it must
    implement the abstract cache methods (`init_cache`, `cache_logical_axes`) or `register`
    refuses it.
  parse_hf: HF text-config dict -> ModelConfig kwargs (validates; raises UnsupportedConfigError).
  to_hf: ModelConfig -> config.json dict (incl. `architectures`).
  key_map: ModelConfig -> list[hf_io.KeyRule], the declarative HF <-> param map.
  presets: preset name (e.g. "qwen3-8b") -> constructor(**overrides) -> ModelConfig.
  tokenizers: model_type -> its TokenizerSpec (chat template, tool-call format, stop tokens);
    a model type without one (e.g. qwen2) needs an explicit tokenizer.
  generation_defaults: extra generation_config.json fields written on export.
  """

  name: str
  model_types: tuple[str, ...]
  model_class: type
  parse_hf: Callable[[dict], dict]
  to_hf: Callable[[ModelConfig], dict]
  key_map: Callable[[ModelConfig], list]
  presets: Mapping[str, Callable[..., ModelConfig]] = dataclasses.field(default_factory=dict)
  tokenizers: Mapping[str, TokenizerSpec] = dataclasses.field(default_factory=dict)
  generation_defaults: dict = dataclasses.field(default_factory=dict)

  def build(self, cfg: ModelConfig) -> nn.Module:
    return self.model_class(cfg)


_FAMILIES: dict[str, Family] = {}  # model_type -> family
_loaded = False


def _check(family: Family) -> None:
  """A family that breaks the contract fails here, at import time, not at its first decode."""
  cls = family.model_class
  if not (isinstance(cls, type) and issubclass(cls, decoder.CausalLM)):
    raise TypeError(
      f"family {family.name!r}: model_class must subclass decoder.CausalLM, got {cls!r}"
    )
  missing = decoder.missing_contract(cls)
  if missing:
    raise TypeError(
      f"family {family.name!r}: {cls.__name__} does not implement the abstract "
      f"CausalLM methods {missing}"
    )
  stray = sorted(set(family.tokenizers) - set(family.model_types))
  if stray:
    raise ValueError(
      f"family {family.name!r}: tokenizers for {stray}, which are not among its "
      f"model_types {list(family.model_types)}"
    )
  for other in {id(f): f for f in _FAMILIES.values()}.values():
    if other.name == family.name:
      continue
    clash = sorted(set(other.presets) & set(family.presets))
    if clash:
      raise ValueError(
        f"family {family.name!r}: presets {clash} already registered by family {other.name!r}"
      )
    for spec in family.tokenizers.values():
      theirs = {s.family: s for s in other.tokenizers.values()}.get(spec.family)
      if theirs is not None and theirs != spec:
        raise ValueError(
          f"family {family.name!r}: tokenizer {spec.family!r} already registered "
          f"with a different spec by family {other.name!r}"
        )


def register(family: Family) -> None:
  """Adds `family` (re-registering the same family name replaces it, e.g. on module reload)."""
  for model_type in family.model_types:
    existing = _FAMILIES.get(model_type)
    if existing is not None and existing.name != family.name:
      raise ValueError(f"model_type {model_type!r} already registered by family {existing.name!r}")
  _check(family)
  for model_type in family.model_types:
    _FAMILIES[model_type] = family


def _load_families() -> None:
  """Imports every subpackage of tmax_jax.models (each family package registers itself)."""
  global _loaded
  if _loaded:
    return
  package = importlib.import_module(_MODELS_PACKAGE)
  for info in pkgutil.iter_modules(package.__path__):
    if info.ispkg:
      importlib.import_module(f"{_MODELS_PACKAGE}.{info.name}")
  _loaded = True


def families() -> list[Family]:
  """Every registered family, by name."""
  _load_families()
  return sorted({f.name: f for f in _FAMILIES.values()}.values(), key=lambda f: f.name)


def family_for(model_type: str | None) -> Family:
  _load_families()
  if model_type not in _FAMILIES:
    raise UnsupportedConfigError(
      f"unsupported model_type={model_type!r}; supported: {sorted(_FAMILIES)}"
    )
  return _FAMILIES[model_type]


def preset(name: str, **overrides) -> ModelConfig:
  """The preset `name` of whichever family owns it, e.g. preset("qwen3.5-9b", remat_policy="full");
  `overrides` replace any ModelConfig field."""
  for family in families():
    if name.lower() in family.presets:
      return family.presets[name.lower()](**overrides)
  known = sorted(p for f in families() for p in f.presets)
  raise ValueError(f"unknown preset {name!r}; known: {known}")


def from_hf_config(dict_or_path: dict | str | pathlib.Path, **overrides) -> ModelConfig:
  """HF config (dict, config.json or checkpoint dir; flat or nested) -> ModelConfig.

  The family registered for `model_type` validates its own fields (see registry.Family.parse_hf).
  `overrides` replace fields afterwards (e.g. dtypes=..., remat_policy=...).
  """
  hf = load_hf_dict(dict_or_path)
  family = family_for(hf.get("model_type"))
  return ModelConfig(**{**family.parse_hf(hf), **overrides})


def tokenizer_for(model_type: str | None) -> TokenizerSpec:
  """The tokenizer spec of `model_type` (its family's); UnsupportedConfigError if it has none."""
  family = family_for(model_type)
  if model_type is None or model_type not in family.tokenizers:
    raise UnsupportedConfigError(
      f"model_type={model_type!r} (family {family.name!r}) has no registered tokenizer; "
      f"model types with one: {sorted(t for f in families() for t in f.tokenizers)}"
    )
  return family.tokenizers[model_type]


def tokenizer_spec(name: str) -> TokenizerSpec:
  """The registered tokenizer spec named `name` (TokenizerSpec.family)."""
  specs = {s.family: s for f in families() for s in f.tokenizers.values()}
  if name not in specs:
    raise UnsupportedConfigError(
      f"unknown tokenizer family {name!r}; expected one of {sorted(specs)}"
    )
  return specs[name]


def build_model(cfg: ModelConfig) -> nn.Module:
  """The Flax module for `cfg` (docs/design/models.md "Model API" has the calling convention)."""
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
  param_shardings)."""
  model = build_model(cfg)

  def init(r):
    return nn.unbox(model.init(r, *dummy_inputs())["params"])

  return jax.jit(init, out_shardings=shardings)(rng)


def count_params(tree: Any) -> int:
  return sum(int(x.size) for x in jax.tree.leaves(tree))


def param_shardings(cfg: ModelConfig, mesh) -> Any:
  """NamedSharding tree matching the params of `cfg` (from the logical names on each param)."""
  specs = nn.get_partition_spec(abstract_params(cfg, boxed=True))
  return sharding.logical_to_sharding(specs, mesh, cfg.logical_axis_rules)
