"""The decoder shell every family shares, and the CausalLM contract a family implements.

embedding -> rotary tables -> the layers -> final norm (HF `model.`), plus the untied LM head. The
layers are described by HF `layer_types` (one string per layer). A dense family has one type and
scans `DecoderLayer` over L (params `model/layers/<HF names>` stacked on a leading `layers` axis);
a hybrid family (Qwen3.5) sets `grouped`: its pattern has period P and `nn.scan` runs L / P groups
of P layers (`model/layers/layer_{p}/...`, HF layer i = g * P + p). Unscanned, layer i is always
`model/layers_{i}`. A family with another token mixer subclasses `DecoderLayer` and overrides
`mixer`; the norms, residuals, MLP, remat and scan are shared.

Decode caches follow the same layout whether scanned or not: a dense family's leaves are
[L, B, ...]; a grouped family's are `{layer_{p}: [L/P, B, ...]}` (layer axis 0, batch axis 1).
Unscanned, the cache may also be a list of L per-layer caches (no layer axis): layer i reads and
returns entry i, so a caller holding one buffer per layer (the serving pool, inference/decode.py)
never slices or restacks a stacked one.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

from tmax_jax.models import layers
from tmax_jax.models.config import UnsupportedConfigError

FULL_ATTENTION = "full_attention"  # HF's layer_types value of a softmax-attention layer
# Logical axes of one layer's KV cache (layers.init_kv_cache), without the layer axis.
KV_CACHE_AXES = {
  "k": PartitionSpec("batch", "length", "kv_heads", "head_dim"),
  "v": PartitionSpec("batch", "length", "kv_heads", "head_dim"),
  "segment_ids": PartitionSpec("batch", "length"),
}
CONTRACT = ("init_cache", "cache_logical_axes")  # abstract CausalLM methods every family defines


def dtypes(cfg) -> dict:
  """The dtype kwargs every block takes: compute dtype and param dtype."""
  return dict(dtype=cfg.dtypes.compute, param_dtype=cfg.dtypes.param)


def attention_spec(cfg) -> layers.AttentionSpec:
  """The softmax-attention block of `cfg` (q/k/v bias, q/k norm, output gate, kernel and blocks)."""
  return layers.AttentionSpec(
    num_heads=cfg.num_attention_heads,
    num_kv_heads=cfg.num_key_value_heads,
    head_dim=cfg.head_dim,
    qkv_bias=cfg.attention_bias,
    o_bias=cfg.o_proj_bias,
    qk_norm=cfg.qk_norm,
    output_gate=cfg.attn_output_gate,
    norm_eps=cfg.rms_norm_eps,
    norm_zero_centered=cfg.norm_zero_centered,
    impl=cfg.attention_impl,
    q_chunk=cfg.attention_q_chunk,
    kv_chunk=cfg.attention_kv_chunk,
  )


def layer_period(layer_types: tuple[str, ...]) -> int:
  """Smallest P dividing L with layer_types[i] == layer_types[i % P] (P = L when aperiodic)."""
  n = len(layer_types)
  for p in range(1, n + 1):
    if n % p == 0 and all(layer_types[i] == layer_types[i % p] for i in range(n)):
      return p
  return n


class DecoderLayer(nn.Module):
  """Pre-norm block: x + mixer(norm(x)); x + mlp(norm(x)). Its (carry, *xs) -> (carry, ys)
  signature is what nn.scan wants: x is the carry, the layer's cache slice is scanned."""

  config: Any  # ModelConfig
  layer_type: str = FULL_ATTENTION

  def mixer(self, h, cos, sin, positions, segment_ids, cache):
    """The token mixer of `layer_type` -> ([B,T,D], updated cache); here softmax attention."""
    if self.layer_type != FULL_ATTENTION:
      raise UnsupportedConfigError(
        f"{type(self).__name__}: unsupported layer type {self.layer_type!r}; supported: "
        f"[{FULL_ATTENTION!r}] (a family with other types overrides DecoderLayer.mixer)"
      )
    return layers.Attention(attention_spec(self.config), name="self_attn", **dtypes(self.config))(
      h, cos, sin, positions, segment_ids, cache
    )

  @nn.compact
  def __call__(self, x, cos, sin, positions, segment_ids, cache=None):
    """x [B,T,D] -> ([B,T,D], this layer's updated cache or None)."""
    cfg = self.config
    norm = dict(eps=cfg.rms_norm_eps, zero_centered=cfg.norm_zero_centered, **dtypes(cfg))
    h = layers.RMSNorm(name="input_layernorm", **norm)(x)
    h, cache = self.mixer(h, cos, sin, positions, segment_ids, cache)
    x = x + h
    h = layers.RMSNorm(name="post_attention_layernorm", **norm)(x)
    x = x + layers.MLP(cfg.intermediate_size, name="mlp", **dtypes(cfg))(h)
    return layers.constrain(x, ("batch", "length", "embed")), cache


class LayerGroup(nn.Module):
  """One period of a grouped layer pattern (the unit nn.scan repeats); each layer remat'ed alone."""

  config: Any  # ModelConfig
  layer_types: tuple[str, ...]
  layer: Any  # the DecoderLayer class

  @nn.compact
  def __call__(self, x, cos, sin, positions, segment_ids, cache=None):
    cfg = self.config
    block = layers.remat_layer(self.layer, cfg.remat_policy, cfg.scan_layers)
    new_cache = {}
    for p, layer_type in enumerate(self.layer_types):
      name = f"layer_{p}"
      x, new_cache[name] = block(cfg, layer_type, name=name)(
        x, cos, sin, positions, segment_ids, None if cache is None else cache[name]
      )
    return x, (None if cache is None else new_cache)


class DecoderStack(nn.Module):
  """HF `model.`: embedding -> rotary tables -> layers -> final norm (see the module docstring).

  Families set `layer` (their DecoderLayer), `grouped`, and override `layer_types` if they have
  more than one.
  """

  config: Any  # ModelConfig
  layer: ClassVar[type] = DecoderLayer
  grouped: ClassVar[bool] = False

  @classmethod
  def layer_types(cls, cfg) -> tuple[str, ...]:
    return (FULL_ATTENTION,) * cfg.num_hidden_layers

  @classmethod
  def period(cls, cfg) -> int:
    """Layers per scanned step: the pattern's period when grouped, else 1 (one type only)."""
    types = cls.layer_types(cfg)
    if cls.grouped:
      return layer_period(types)
    if len(set(types)) > 1:
      raise UnsupportedConfigError(
        f"{cls.__name__}: layer_types {sorted(set(types))} mix types; "
        "only a grouped stack supports that"
      )
    return 1

  @classmethod
  def per_layer(cls, cfg, fn: Callable[[str], Any], lift: Callable[[Any, int], Any]) -> Any:
    """The cache layout: fn(layer_type)'s leaves lifted over the layer axis by lift(leaf, n)."""
    types, period = cls.layer_types(cfg), cls.period(cfg)
    one = {f"layer_{p}": fn(t) for p, t in enumerate(types[:period])}
    tree = jax.tree.map(
      lambda leaf: lift(leaf, len(types) // period),
      one,
      is_leaf=lambda leaf: isinstance(leaf, PartitionSpec),
    )
    return tree if cls.grouped else tree["layer_0"]

  @classmethod
  def layer_entry(cls, cfg, tree: Any, i: int) -> Any:
    """Layer i's part of a stacked per-layer tree (a cache, its axes or the scanned params):
    `(subtree, g)`, where layer i is entry g of the subtree's leading layer axis."""
    period = cls.period(cfg)
    return (tree[f"layer_{i % period}"] if cls.grouped else tree), i // period

  @classmethod
  def unstack_params(cls, cfg, params: dict) -> dict:
    """Scanned params (`model/layers`, layer axis 0) -> the unscanned layout (`model/layers_{i}`),
    the same values; other params are kept as they are."""
    model = dict(params["model"])
    stacked = model.pop("layers")
    for i in range(len(cls.layer_types(cfg))):
      sub, g = cls.layer_entry(cfg, stacked, i)
      model[f"layers_{i}"] = jax.tree.map(lambda x, g=g: x[g], sub)
    return dict(params, model=model)

  @nn.compact
  def __call__(self, tokens, positions, segment_ids, cache=None):
    cfg = self.config
    compute = cfg.dtypes.compute
    embed = nn.Embed(
      cfg.vocab_size,
      cfg.hidden_size,
      dtype=compute,
      param_dtype=cfg.dtypes.head_weight if cfg.tie_word_embeddings else cfg.dtypes.param,
      embedding_init=layers.param_init(layers.WEIGHT_INIT, ("vocab", "embed")),
      name="embed_tokens",
    )
    x = layers.constrain(embed(tokens), ("batch", "length", "embed"))  # [B,T,D]
    inv_freq, scaling = layers.rope_frequencies(
      cfg.head_dim, cfg.rope_theta, cfg.partial_rotary_factor, cfg.rope_scaling
    )
    cos, sin = layers.rotary_cos_sin(positions, inv_freq, scaling, compute)  # [B,T,R]
    if cfg.scan_layers:
      x, cache = self._scanned(x, cos, sin, positions, segment_ids, cache)
    else:
      x, cache = self._unrolled(x, cos, sin, positions, segment_ids, cache)
    x = layers.RMSNorm(
      cfg.rms_norm_eps, cfg.norm_zero_centered, compute, cfg.dtypes.param, name="norm"
    )(x)
    return x, cache

  def _scanned(self, x, cos, sin, positions, segment_ids, cache):
    cfg = self.config
    types, period = self.layer_types(cfg), self.period(cfg)
    if self.grouped:
      block, args = LayerGroup, (cfg, types[:period], self.layer)
    else:
      block, args = layers.remat_layer(self.layer, cfg.remat_policy, True), (cfg, types[0])
    scanned = nn.scan(
      block,
      variable_axes={"params": 0},
      split_rngs={"params": True},
      in_axes=(nn.broadcast, nn.broadcast, nn.broadcast, nn.broadcast, 0),
      length=len(types) // period,
      metadata_params={nn.PARTITION_NAME: "layers"},
    )
    return scanned(*args, name="layers")(x, cos, sin, positions, segment_ids, cache)

  def _unrolled(self, x, cos, sin, positions, segment_ids, cache):
    """Layer i is `layers_{i}`; it reads and writes entry i // P of cache slot i % P, or entry i
    of a per-layer list cache."""
    cfg = self.config
    types, period = self.layer_types(cfg), self.period(cfg)
    block = layers.remat_layer(self.layer, cfg.remat_policy, False)
    per_layer = isinstance(cache, list)
    new_caches = []
    for i, layer_type in enumerate(types):
      layer_cache = None
      if per_layer:
        layer_cache = cache[i]
      elif cache is not None:
        slot, g = self.layer_entry(cfg, cache, i)
        layer_cache = jax.tree.map(lambda c, g=g: c[g], slot)
      x, layer_cache = block(cfg, layer_type, name=f"layers_{i}")(
        x, cos, sin, positions, segment_ids, layer_cache
      )
      x = jax.lax.optimization_barrier(x)  # rounded to the compute dtype here, as a scan carry
      new_caches.append(layer_cache)
    if cache is None:
      return x, None
    if per_layer:
      return x, new_caches
    stacked = {
      f"layer_{p}": jax.tree.map(lambda *c: jnp.stack(c), *new_caches[p::period])
      for p in range(period)
    }
    return x, (stacked if self.grouped else stacked["layer_0"])


class LMHead(nn.Module):
  """Holds the untied head kernel [D,V]; the matmul itself lives in logprobs.py."""

  config: Any  # ModelConfig

  @nn.compact
  def __call__(self) -> jax.Array:
    cfg = self.config
    return self.param(
      "kernel",
      layers.param_init(layers.WEIGHT_INIT, ("embed", "vocab")),
      (cfg.hidden_size, cfg.vocab_size),
      cfg.dtypes.head_weight,
    )


class CausalLM(nn.Module):
  """`hidden, cache = apply({"params": p}, tokens, positions, segment_ids, cache=None)`.

  tokens/positions/segment_ids [B,T] int32 (segment 0 = padding) -> final-normed hidden [B,T,D] in
  compute dtype; `lm_head/kernel` exists only when the embeddings are untied. Families set `stack`
  (their DecoderStack) and implement the abstract `init_cache` and `cache_logical_axes`
  (registry.register refuses a class that does not); `stacked_cache` / `stacked_axes` build them
  from one layer's cache.
  """

  config: Any  # ModelConfig
  stack: ClassVar[type[DecoderStack]] = DecoderStack

  @nn.compact
  def __call__(self, tokens, positions, segment_ids, cache=None):
    hidden, cache = self.stack(self.config, name="model")(tokens, positions, segment_ids, cache)
    if not self.config.tie_word_embeddings:
      LMHead(self.config, name="lm_head")()  # creates lm_head/kernel
    return hidden, cache

  @abc.abstractmethod
  def init_cache(self, batch: int, max_len: int) -> Any:
    """The empty decode cache (see the module docstring for the layout); call it unbound."""
    raise NotImplementedError

  @abc.abstractmethod
  def cache_logical_axes(self) -> Any:
    """`init_cache`'s tree of logical PartitionSpecs (map with sharding.logical_to_sharding)."""
    raise NotImplementedError

  def stacked_cache(self, layer_cache: Callable[[str], Any]) -> Any:
    """layer_cache(layer_type) -> one layer's empty cache; -> the whole cache (layer axis 0)."""
    return self.stack.per_layer(
      self.config, layer_cache, lambda c, n: jnp.broadcast_to(c, (n,) + c.shape)
    )

  def stacked_axes(self, layer_axes: Callable[[str], Any]) -> Any:
    """layer_axes(layer_type) -> one layer's cache PartitionSpecs; -> the whole cache's."""
    return self.stack.per_layer(
      self.config, layer_axes, lambda spec, n: PartitionSpec("layers", *spec)
    )


def missing_contract(model_class: type) -> list[str]:
  """The abstract CausalLM methods `model_class` leaves unimplemented (empty when complete)."""

  def missing(method) -> bool:
    return method is None or getattr(method, "__isabstractmethod__", False)

  return [name for name in CONTRACT if missing(getattr(model_class, name, None))]
