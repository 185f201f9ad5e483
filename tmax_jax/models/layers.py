"""Shared decoder blocks: RMSNorm (optionally gated), rotary (default/linear/yarn, partial),
attention with segment ids and a KV cache, SwiGLU MLP, the param init. Every family reuses these;
none copies them (the decoder shell that stacks them is decoder.py).

Shapes: B batch, T query time, S key time, D model, N heads, K kv heads, H head dim, F MLP hidden.
Parameters carry logical axis names (see config.DEFAULT_LOGICAL_AXIS_RULES).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.ad_checkpoint import checkpoint_name

from tmax_jax.models import attention as attention_lib
from tmax_jax.models import matmul, paged_attention
from tmax_jax.models.attention.reference import attention_mask, dot_product_attention
from tmax_jax.models.config import RopeScaling

Dtype = Any
F32 = jnp.float32
WEIGHT_INIT = nn.initializers.normal(0.02)  # every projection and embedding (HF initializer_range)


def param_init(init_fn, axes: tuple[str | None, ...]):
  """`init_fn` with logical axis names attached (the one way params are created here)."""
  return nn.with_logical_partitioning(init_fn, axes)


def dense(
  features: int, axes: tuple[str, str], dtype: Dtype, param_dtype: Dtype, name: str
) -> Einsum:
  """A bias-free projection [in, features] with logical `axes` (MLP, Gated DeltaNet); the param
  is `<name>/kernel` [in, features], as nn.Dense names it."""
  return Einsum(
    "...d,df->...f", (None, features), axes, dtype=dtype, param_dtype=param_dtype, name=name
  )


def constrain(x: jax.Array, axes: tuple[str, ...]) -> jax.Array:
  """Logical sharding constraint on an activation (a no-op outside a mesh/rules context)."""
  return nn.with_logical_constraint(x, axes)


class RMSNorm(nn.Module):
  """RMSNorm over the last axis with fp32 statistics, following HF's cast order.

  zero_centered=False (Qwen2/3): y = w * to_input_dtype(x32 * rsqrt(mean(x32^2) + eps)).
  zero_centered=True (Qwen3.5, scale stored as w - 1): y = to_input_dtype(x_hat32 * (1 + w32)).
  With a `gate` (HF's RMSNormGated, norm before gate): y * silu(gate32), in fp32 before the cast.
  """

  eps: float = 1e-6
  zero_centered: bool = False
  dtype: Dtype = F32
  param_dtype: Dtype = F32
  axis_name: str = "embed"

  @nn.compact
  def __call__(self, x: jax.Array, gate: jax.Array | None = None) -> jax.Array:
    """x [..., D] (gate: same shape) -> [..., D] in `dtype`."""
    init = nn.initializers.zeros if self.zero_centered else nn.initializers.ones
    scale = self.param(
      "scale", param_init(init, (self.axis_name,)), (x.shape[-1],), self.param_dtype
    )
    x32 = x.astype(F32)
    normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
    y = normed * (1.0 + scale.astype(F32)) if self.zero_centered else scale * normed.astype(x.dtype)
    if gate is not None:
      y = y * jax.nn.silu(gate.astype(F32))
    return y.astype(self.dtype)


# ----------------------------------------------------------------------------------------- rotary


def rope_frequencies(
  head_dim: int,
  theta: float,
  partial_rotary_factor: float = 1.0,
  scaling: RopeScaling | None = None,
) -> tuple[np.ndarray, float]:
  """-> (inv_freq [R/2] float32, attention_scaling) as transformers computes them; R: rotary dim"""
  dim = int(head_dim * partial_rotary_factor)
  exponents = np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)
  pos_freqs = np.float32(theta) ** exponents
  inv_freq = (1.0 / pos_freqs).astype(np.float32)
  if scaling is None or scaling.rope_type == "default":
    return inv_freq, 1.0
  if scaling.rope_type == "linear":
    return (inv_freq / np.float32(scaling.factor)).astype(np.float32), 1.0
  if scaling.rope_type == "yarn":
    return _yarn(dim, theta, pos_freqs, scaling)
  raise ValueError(f"unsupported rope_type={scaling.rope_type!r}")


def _yarn(
  dim: int, theta: float, pos_freqs: np.ndarray, s: RopeScaling
) -> tuple[np.ndarray, float]:
  """YaRN: blend interpolated and extrapolated frequencies with a linear ramp over dims."""

  def mscale(scale, m=1.0):
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

  factor = s.factor
  if s.attention_factor is not None:
    attention_factor = s.attention_factor
  elif s.mscale and s.mscale_all_dim:
    attention_factor = mscale(factor, s.mscale) / mscale(factor, s.mscale_all_dim)
  else:
    attention_factor = mscale(factor)
  orig = s.original_max_position_embeddings

  def correction_dim(rotations):
    return dim * math.log(orig / (rotations * 2 * math.pi)) / (2 * math.log(theta))

  low, high = correction_dim(s.beta_fast or 32), correction_dim(s.beta_slow or 1)
  if s.truncate:
    low, high = math.floor(low), math.ceil(high)
  low, high = max(low, 0), min(high, dim - 1)
  if low == high:
    high += 0.001
  ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - low) / (high - low), 0, 1)
  extrapolation = (1 - ramp).astype(np.float32)
  inv_extra = (1.0 / pos_freqs).astype(np.float32)
  inv_inter = (1.0 / (np.float32(factor) * pos_freqs)).astype(np.float32)
  inv_freq = inv_inter * (1 - extrapolation) + inv_extra * extrapolation
  return inv_freq.astype(np.float32), float(attention_factor)


def rotary_cos_sin(
  positions: jax.Array, inv_freq: np.ndarray, attention_scaling: float, dtype: Dtype
) -> tuple[jax.Array, jax.Array]:
  """positions [B,T] -> cos, sin [B,T,R] in `dtype` (angles computed in fp32, as HF does)."""
  freqs = positions.astype(F32)[..., None] * jnp.asarray(inv_freq, F32)  # [B,T,R/2]
  emb = jnp.concatenate([freqs, freqs], axis=-1)  # [B,T,R]
  cos = jnp.cos(emb) * attention_scaling
  sin = jnp.sin(emb) * attention_scaling
  return cos.astype(dtype), sin.astype(dtype)


def apply_rotary(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
  """x [B,T,N,H], cos/sin [B,T,R] with R <= H: rotate-half RoPE on the first R dims of each head."""
  rot_dim = cos.shape[-1]
  x_rot, x_pass = x[..., :rot_dim], x[..., rot_dim:]
  c, s = cos[:, :, None, :], sin[:, :, None, :]
  half = rot_dim // 2
  rotated = jnp.concatenate([-x_rot[..., half:], x_rot[..., :half]], axis=-1)
  out = (x_rot * c + rotated * s).astype(x.dtype)
  return jnp.concatenate([out, x_pass], axis=-1) if x_pass.shape[-1] else out


# -------------------------------------------------------------------------------------- attention


def init_kv_cache(
  batch: int, max_len: int, num_kv_heads: int, head_dim: int, dtype: Dtype
) -> dict[str, jax.Array]:
  """One layer's cache: k/v [B,S,K,H] and segment_ids [B,S] (0 = empty slot). Slot s holds the
  token at position s, so key positions are implicit."""
  kv = jnp.zeros((batch, max_len, num_kv_heads, head_dim), dtype)
  return {"k": kv, "v": kv, "segment_ids": jnp.zeros((batch, max_len), jnp.int32)}


def update_kv_cache(
  cache: dict[str, jax.Array],
  k: jax.Array,
  v: jax.Array,
  positions: jax.Array,
  segment_ids: jax.Array,
) -> dict[str, jax.Array]:
  """Scatter k/v [B,T,K,H] into slots `positions` [B,T] per row; padding (segment 0) is dropped."""
  max_len = cache["k"].shape[1]
  slot = jnp.where(segment_ids != 0, positions, max_len)  # out of range -> dropped
  rows = jnp.arange(k.shape[0])[:, None]
  return {
    "k": cache["k"].at[rows, slot].set(k.astype(cache["k"].dtype), mode="drop"),
    "v": cache["v"].at[rows, slot].set(v.astype(cache["v"].dtype), mode="drop"),
    "segment_ids": cache["segment_ids"].at[rows, slot].set(segment_ids, mode="drop"),
  }


class Einsum(nn.Module):
  """A projection y = einsum(eqn, x, kernel) (+ bias over the output axes), in compute dtype.

  kernel_shape: the kernel's shape; a None entry is taken from x's last axis (the input width).
  The output axes are the kernel axes that are not contracted (for the bias). The kernel's
  leading axes are contracted with x's trailing ones (matmul.linear: its backward pass orders
  the weight-gradient operands for the CPU dot).
  """

  eqn: str
  kernel_shape: tuple[int | None, ...]
  kernel_axes: tuple[str, ...]
  use_bias: bool = False
  dtype: Dtype = F32
  param_dtype: Dtype = F32

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    shape = tuple(x.shape[-1] if s is None else s for s in self.kernel_shape)
    kernel = self.param(
      "kernel", param_init(WEIGHT_INIT, self.kernel_axes), shape, self.param_dtype
    )
    operands, y_spec = self.eqn.replace("...", "").split("->")
    x_spec, k_spec = operands.split(",")
    n_in = sum(c in x_spec for c in k_spec)
    if (
      k_spec[:n_in] != x_spec[len(x_spec) - n_in :]
      or y_spec != x_spec[: len(x_spec) - n_in] + k_spec[n_in:]
    ):
      raise ValueError(
        f"Einsum {self.eqn!r}: the kernel's leading axes must be x's trailing ones "
        "and the output x's other axes followed by the kernel's"
      )
    y = matmul.linear(x.astype(self.dtype), kernel.astype(self.dtype), n_in)
    if self.use_bias:
      out = [i for i, c in enumerate(k_spec) if c not in x_spec]
      bias_axes = tuple(self.kernel_axes[i] for i in out)
      bias = self.param(
        "bias",
        param_init(nn.initializers.zeros, bias_axes),
        tuple(shape[i] for i in out),
        self.param_dtype,
      )
      y = y + bias.astype(self.dtype)
    return y


@dataclasses.dataclass(frozen=True)
class AttentionSpec:
  """What an attention block needs to know (its own sub-config).

  output_gate: q_proj emits [N, 2H] per token (query | gate, per head, as Qwen3.5 does) and the
  attention output is multiplied by sigmoid(gate) before o_proj.
  """

  num_heads: int
  num_kv_heads: int
  head_dim: int
  qkv_bias: bool = False
  o_bias: bool = False
  qk_norm: bool = False
  output_gate: bool = False
  norm_eps: float = 1e-6
  norm_zero_centered: bool = False
  impl: str = "auto"  # training-path kernel, see models/attention (decode uses the reference)
  q_chunk: int | None = None  # query block (reference: query chunk, see dot_product_attention)
  kv_chunk: int | None = None  # key block of the blockwise / ring kernels


class Attention(nn.Module):
  """Self-attention with GQA, optional q/k RMSNorm and output gate, RoPE, segment ids, KV cache.

  Params (HF names): q_proj kernel [D,N,H] (or [D,N,2H] gated), bias [N,H]; k_proj/v_proj kernel
  [D,K,H], bias [K,H]; o_proj kernel [N,H,D]; q_norm/k_norm scale [H].
  """

  spec: AttentionSpec
  dtype: Dtype = F32
  param_dtype: Dtype = F32

  def _proj(self, name, heads, head_dim, heads_axis, bias):
    return Einsum(
      "btd,dnh->btnh",
      (None, heads, head_dim),
      ("embed", heads_axis, "head_dim"),
      bias,
      dtype=self.dtype,
      param_dtype=self.param_dtype,
      name=name,
    )

  @nn.compact
  def __call__(self, x, cos, sin, positions, segment_ids, cache=None):
    """x [B,T,D], cos/sin [B,T,R], positions/segment_ids [B,T] -> ([B,T,D], updated cache)."""
    sp = self.spec
    q_width = 2 * sp.head_dim if sp.output_gate else sp.head_dim
    q = self._proj("q_proj", sp.num_heads, q_width, "heads", sp.qkv_bias)(x)  # [B,T,N,H|2H]
    gate = None
    if sp.output_gate:
      q, gate = q[..., : sp.head_dim], q[..., sp.head_dim :]
    k = self._proj("k_proj", sp.num_kv_heads, sp.head_dim, "kv_heads", sp.qkv_bias)(x)  # [B,T,K,H]
    v = self._proj("v_proj", sp.num_kv_heads, sp.head_dim, "kv_heads", sp.qkv_bias)(x)  # [B,T,K,H]
    if sp.qk_norm:
      norm = dict(
        eps=sp.norm_eps,
        zero_centered=sp.norm_zero_centered,
        dtype=self.dtype,
        param_dtype=self.param_dtype,
        axis_name="head_dim",
      )
      q = RMSNorm(name="q_norm", **norm)(q)
      k = RMSNorm(name="k_norm", **norm)(k)
    q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
    if cache is None:  # training / cache-free prefill: the configured kernel
      out = attention_lib.self_attention(
        q, k, v, positions, segment_ids, impl=sp.impl, q_chunk=sp.q_chunk, kv_chunk=sp.kv_chunk
      )
    elif paged_attention.is_paged(cache):  # serving: pages in, the call's new K/V out
      mask = attention_mask(positions, segment_ids, positions, segment_ids)
      out, cache = paged_attention.attend(q, k, v, mask, cache)
    else:  # dense-cache decode keeps its own path: the reference over the cache
      cache = update_kv_cache(cache, k, v, positions, segment_ids)
      slots = jnp.broadcast_to(jnp.arange(cache["k"].shape[1]), cache["segment_ids"].shape)
      mask = attention_mask(positions, segment_ids, slots, cache["segment_ids"])
      out = dot_product_attention(
        q, cache["k"].astype(self.dtype), cache["v"].astype(self.dtype), mask, q_chunk=sp.q_chunk
      )
    out = constrain(out, ("batch", "length", "heads", "head_dim"))  # [B,T,N,H]
    if gate is not None:
      out = out * jax.nn.sigmoid(gate)
    out = Einsum(
      "btnh,nhd->btd",
      (sp.num_heads, sp.head_dim, x.shape[-1]),
      ("heads", "head_dim", "embed"),
      sp.o_bias,
      dtype=self.dtype,
      param_dtype=self.param_dtype,
      name="o_proj",
    )(out)
    return checkpoint_name(out, "attn_out"), cache


class Kernel(nn.Module):
  """A projection kernel `<name>/kernel` returned unapplied (for blocks with a fused backward);
  same param, init and logical axes as `dense`/`Einsum` create."""

  shape: tuple[int, ...]
  axes: tuple[str, ...]
  param_dtype: Dtype = F32

  @nn.compact
  def __call__(self) -> jax.Array:
    return self.param("kernel", param_init(WEIGHT_INIT, self.axes), self.shape, self.param_dtype)


def _mlp_constrain(h: jax.Array) -> jax.Array:
  return constrain(h, ("batch", "length", "mlp"))


class MLP(nn.Module):
  """SwiGLU: down(silu(gate(x)) * up(x)); gate/up kernels [D,F], down [F,D] (matmul.swiglu)."""

  intermediate_size: int
  dtype: Dtype = F32
  param_dtype: Dtype = F32

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    """x [B,T,D] -> [B,T,D]."""
    d, f = x.shape[-1], self.intermediate_size
    kernels = [
      Kernel(shape, axes, self.param_dtype, name=name)().astype(self.dtype)
      for name, shape, axes in (
        ("gate_proj", (d, f), ("embed", "mlp")),
        ("up_proj", (d, f), ("embed", "mlp")),
        ("down_proj", (f, d), ("mlp", "embed")),
      )
    ]
    return matmul.swiglu(x.astype(self.dtype), *kernels, _mlp_constrain)


REMAT_POLICY_FNS = {
  "full": None,  # save nothing: recompute the whole layer
  "dots": matmul.saving_projections(jax.checkpoint_policies.checkpoint_dots),
  "dots_no_batch": matmul.saving_projections(
    jax.checkpoint_policies.dots_with_no_batch_dims_saveable
  ),
  "save_attn_out": jax.checkpoint_policies.save_only_these_names("attn_out"),
}


def remat_layer(layer_cls, policy: str, scanned: bool):
  """Wrap a layer class in nn.remat with a named policy ("none" returns it unchanged)."""
  if policy == "none":
    return layer_cls
  return nn.remat(layer_cls, policy=REMAT_POLICY_FNS[policy], prevent_cse=not scanned)
