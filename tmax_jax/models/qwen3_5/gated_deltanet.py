"""Qwen3.5's Gated DeltaNet token mixer (transformers' `Qwen3_5GatedDeltaNet`), with decode state.

x -> in_proj_qkv -> causal depthwise conv (kernel Kc) + silu -> q, k, v;  in_proj_z -> output gate
z; in_proj_b -> beta = sigmoid(b);  in_proj_a -> g = -exp(A_log) * softplus(a + dt_bias);
gated delta rule (gated_delta.py) -> RMSNorm(out, gate=z) per value head -> out_proj.

Segments and padding (segment_ids 0): padded tokens' inputs are zeroed (as HF does with its 2-D
mask) and they get g = beta = 0, so they leave the state untouched; a token starts a new state (conv
window and recurrent state) when its segment id differs from the previous token's or its position is
0. Decode state per layer: `conv` [B,Kc-1,C] (the last Kc-1 conv inputs of the row's live segment)
   and
`recurrent` [B,N,Hk,Hv] fp32. Shapes: C conv channels (2*K*Hk + N*Hv), K key heads, N value heads.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name
from jax.sharding import PartitionSpec

from tmax_jax.models import gated_delta
from tmax_jax.models.layers import RMSNorm, constrain, dense, param_init
from tmax_jax.models.qwen3_5.config import Qwen3_5Config

F32 = jnp.float32
# Logical axes of one layer's decode state (init_state), without the layer axis: conv channels
# are sharded like in_proj_qkv's output, the recurrent state by value head.
STATE_AXES = {
  "conv": PartitionSpec("batch", None, "heads"),
  "recurrent": PartitionSpec("batch", "heads", None, None),
}


def segment_resets(positions: jax.Array, segment_ids: jax.Array) -> tuple[jax.Array, jax.Array]:
  """positions/segment_ids [B,T] -> (live [B,T]: not padding, reset [B,T]: a live token whose state
  starts fresh: its segment differs from the previous token's (the first token of a call continues
  the cached state unless its position is 0))."""
  live = segment_ids != 0
  prev = jnp.concatenate([segment_ids[:, :1], segment_ids[:, :-1]], axis=1)
  return live, live & ((positions == 0) | (segment_ids != prev))


_NO_RESET = -(1 << 30)  # "the segment started before this call": every cached conv input is live


def _segment_starts(reset: jax.Array) -> jax.Array:
  """reset [B,T] -> index of the last reset at or before t [B,T] (_NO_RESET when none)."""
  idx = jnp.arange(reset.shape[1])
  return jax.lax.cummax(jnp.where(reset, idx, _NO_RESET), axis=1)


def causal_conv(
  x: jax.Array, kernel: jax.Array, state: jax.Array, reset: jax.Array, live: jax.Array
) -> tuple[jax.Array, jax.Array]:
  """Segment-aware causal depthwise conv + silu, continuing from `state`.

  x [B,T,C], kernel [C,1,Kc] (HF layout), state [B,Kc-1,C], reset/live [B,T] ->
  (silu(conv) [B,T,C] in x's dtype, new state [B,Kc-1,C]: the Kc-1 inputs ending at the row's last
  live token, zero before its segment start; unchanged when the call has no live token).
  """
  b, t, c = x.shape
  kc = kernel.shape[-1]
  w = kernel[:, 0, :].astype(F32)  # [C,Kc]; tap kc-1 multiplies the current token
  xcat = jnp.concatenate([state.astype(x.dtype), x], axis=1)  # [B,Kc-1+T,C]; row j = token j-Kc+1
  starts = _segment_starts(reset)  # [B,T]
  out = jnp.zeros((b, t, c), F32)
  for d in range(kc):  # d tokens back
    src = xcat[:, kc - 1 - d : kc - 1 - d + t].astype(F32)  # token t-d
    ok = (jnp.arange(t) - d >= starts)[..., None]
    out = out + jnp.where(ok, src, 0.0) * w[:, kc - 1 - d]
  y = jax.nn.silu(out).astype(x.dtype)
  if kc == 1:
    return y, state
  t_idx = jnp.arange(t)
  last = jnp.max(jnp.where(live, t_idx, -1), axis=1)  # [B] last live token (-1: none)
  win = last[:, None] + 1 + jnp.arange(kc - 1)  # xcat rows of tokens last-Kc+2 .. last
  new = jnp.take_along_axis(xcat, win[..., None], axis=1)  # [B,Kc-1,C]
  start_last = jnp.take_along_axis(starts, jnp.maximum(last, 0)[:, None], axis=1)  # [B,1]
  keep = (last[:, None] < 0) | (win - (kc - 1) >= start_last)
  return y, jnp.where(keep[..., None], new, 0).astype(state.dtype)


def init_state(spec: Qwen3_5Config, batch: int, dtype) -> dict[str, jax.Array]:
  """Empty decode state of one layer: conv [B,Kc-1,C] in `dtype`, recurrent [B,N,Hk,Hv] fp32."""
  return {
    "conv": jnp.zeros((batch, spec.linear_conv_kernel_dim - 1, spec.conv_dim), dtype),
    "recurrent": jnp.zeros(
      (batch, spec.linear_num_value_heads, spec.linear_key_head_dim, spec.linear_value_head_dim),
      F32,
    ),
  }


class ConvKernel(nn.Module):
  """Holds the depthwise conv kernel [C,1,Kc] (HF's Conv1d weight layout: the key map copies it)."""

  shape: tuple[int, int, int]
  param_dtype: jnp.dtype = F32

  @nn.compact
  def __call__(self) -> jax.Array:
    init = nn.initializers.variance_scaling(1.0, "fan_in", "normal", in_axis=(1, 2), out_axis=0)
    return self.param(
      "kernel", param_init(init, ("heads", None, None)), self.shape, self.param_dtype
    )


class GatedDeltaNet(nn.Module):
  """Params (HF names): in_proj_qkv [D,C], in_proj_z [D,N*Hv], in_proj_b/in_proj_a [D,N],
  conv1d [C,1,Kc], dt_bias [N], A_log [N], norm scale [Hv], out_proj [N*Hv,D]."""

  spec: Qwen3_5Config
  norm_eps: float = 1e-6
  dtype: jnp.dtype = F32
  param_dtype: jnp.dtype = F32

  def _dense(self, name, features, axes):
    # 2-D kernels only: flax's DenseGeneral inits multi-axis kernels flat, which breaks logical
    # sharding constraints when params are shape-checked under a mesh.
    return dense(features, axes, self.dtype, self.param_dtype, name)

  @nn.compact
  def __call__(self, x, positions, segment_ids, cache=None):
    """x [B,T,D] -> ([B,T,D], updated {conv, recurrent} or None)."""
    sp = self.spec
    b, t, _ = x.shape
    n, hk, hv = sp.linear_num_value_heads, sp.linear_key_head_dim, sp.linear_value_head_dim
    live, reset = segment_resets(positions, segment_ids)
    x = jnp.where(live[..., None], x, 0).astype(self.dtype)
    qkv = self._dense("in_proj_qkv", sp.conv_dim, ("embed", "heads"))(x)  # [B,T,C]
    z = self._dense("in_proj_z", n * hv, ("embed", "heads"))(x).reshape(b, t, n, hv)  # [B,T,N,Hv]
    beta_logit = self._dense("in_proj_b", n, ("embed", "heads"))(x)  # [B,T,N]
    a = self._dense("in_proj_a", n, ("embed", "heads"))(x)  # [B,T,N]
    kernel = ConvKernel(
      (sp.conv_dim, 1, sp.linear_conv_kernel_dim), self.param_dtype, name="conv1d"
    )()
    dt_bias = self.param(
      "dt_bias", param_init(nn.initializers.ones, ("heads",)), (n,), self.param_dtype
    )
    a_log = self.param("A_log", param_init(_a_log_init, ("heads",)), (n,), self.param_dtype)
    state = init_state(sp, b, self.dtype) if cache is None else cache
    qkv, conv_state = causal_conv(qkv, kernel, state["conv"], reset, live)
    q, k, v = jnp.split(qkv, [sp.key_dim, 2 * sp.key_dim], axis=-1)
    q = q.reshape(b, t, sp.linear_num_key_heads, hk)  # [B,T,K,Hk]
    k = k.reshape(b, t, sp.linear_num_key_heads, hk)
    v = v.reshape(b, t, n, hv)  # [B,T,N,Hv]
    beta = jnp.where(live[..., None], jax.nn.sigmoid(beta_logit), 0)
    g = -jnp.exp(a_log.astype(F32)) * jax.nn.softplus(a.astype(F32) + dt_bias.astype(F32))
    g = jnp.where(live[..., None], g, 0.0)  # [B,T,N]
    init = None if cache is None else state["recurrent"]
    if t == 1 and cache is not None:
      out, rec = gated_delta.recurrent_gated_delta_rule(
        q, k, v, g, beta, initial_state=init, reset=reset
      )
    else:
      out, rec = gated_delta.chunk_gated_delta_rule(
        q, k, v, g, beta, chunk_size=sp.chunk_size, initial_state=init, reset=reset
      )
    out = constrain(out, ("batch", "length", "heads", "head_dim"))  # [B,T,N,Hv]
    # HF's Qwen3_5RMSNormGated: plain scale (init 1) per value head dim, then * silu(z).
    out = RMSNorm(self.norm_eps, False, self.dtype, self.param_dtype, "head_dim", name="norm")(
      out, gate=z
    )
    y = self._dense("out_proj", x.shape[-1], ("heads", "embed"))(out.reshape(b, t, n * hv))
    new_cache = None if cache is None else {"conv": conv_state, "recurrent": rec}
    return checkpoint_name(y, "attn_out"), new_cache  # same remat name as layers.Attention


def _a_log_init(key, shape, dtype=F32):
  """HF: A ~ U(0.01, 16) (kept away from 0 so log A is finite), stored as log A."""
  return jnp.log(jax.random.uniform(key, shape, F32, 0.01, 16.0)).astype(dtype)
