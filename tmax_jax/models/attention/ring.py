"""Ring attention over the `sequence` mesh axis (context parallelism for full-attention layers).

Shard i keeps its T/S queries; the K/V shards travel round the ring (`ppermute` i -> i+1). Each of
the S steps attends the local queries to the visiting K/V shard with the blockwise tile loop
(blockwise.attend_tiles) and merges the partial (out, lse) by log-sum-exp, so no device ever holds
more than T/S tokens of K/V (two shards while one is in flight). The backward pass turns the ring
once more: the visiting shard's dK/dV travel with it and arrive home after S steps, dQ stays local,
and every tile's probabilities come from the final lse (custom VJP; nothing per step is saved).

The mask is the model's (segments + positions, computed per tile), so packed rows and any shard
order are exact. Causal load: shards ahead of the queries are fully masked and skipped tile by tile
(lax.cond), but the ring is synchronous, so the last shard's work sets the pace (no zig-zag
re-layout yet; see docs/design/long-context.md).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from tmax_jax.models import context_parallel as cp
from tmax_jax.models.attention import blockwise

F32 = jnp.float32


def _ring_shift(xs, n: int):
  perm = [(i, (i + 1) % n) for i in range(n)]
  return tuple(lax.ppermute(x, cp.AXIS, perm) for x in xs)


def _merge(out, lse, o_s, lse_s):
  """Combine two normalised partial attentions over disjoint key sets (NaN-free for empty rows)."""
  new = jnp.logaddexp(lse, lse_s)
  return (out * jnp.exp(lse - new)[..., None] + o_s * jnp.exp(lse_s - new)[..., None]), new


def _forward(q, k, v, q_pos, q_seg, k_pos, k_seg, scale, bq, bk, n):
  tiles = functools.partial(
    blockwise.attend_tiles, scale=scale, block_q=bq, block_k=bk, causal=False
  )  # a visiting shard may lie before, at or after ours

  def step(carry, _):
    kv, out, lse = carry  # kv: the visiting shard (k, v, k_pos, k_seg)
    o_s, lse_s = tiles(q, kv[0], kv[1], q_pos, q_seg, kv[2], kv[3])
    out, lse = _merge(out, lse, o_s, lse_s)
    return (_ring_shift(kv, n), out, lse), None

  b, t, nh, h = q.shape
  init = (
    (k, v, k_pos, k_seg),
    jnp.zeros((b, t, nh, h), F32),
    jnp.full((b, t, nh), blockwise.EMPTY_LSE, F32),
  )
  (_, out, lse), _ = lax.scan(step, init, None, length=n)
  return out, lse


@functools.partial(jax.custom_vjp, nondiff_argnums=(7, 8, 9, 10))
def _ring(q, k, v, q_pos, q_seg, k_pos, k_seg, scale, bq, bk, n):
  return _forward(q, k, v, q_pos, q_seg, k_pos, k_seg, scale, bq, bk, n)[0].astype(q.dtype)


def _ring_fwd(q, k, v, q_pos, q_seg, k_pos, k_seg, scale, bq, bk, n):
  out, lse = _forward(q, k, v, q_pos, q_seg, k_pos, k_seg, scale, bq, bk, n)
  out = out.astype(q.dtype)
  return out, (q, k, v, q_pos, q_seg, k_pos, k_seg, out, lse)


def _ring_bwd(scale, bq, bk, n, res, dout):
  q, k, v, q_pos, q_seg, k_pos, k_seg, out, lse = res
  delta = blockwise.row_delta(out, dout)
  tiles = functools.partial(
    blockwise.attend_tiles_bwd, scale=scale, block_q=bq, block_k=bk, causal=False
  )

  def step(carry, _):
    travelling, dq = carry  # the visiting shard: (k, v, k_pos, k_seg, dk, dv)
    k_s, v_s, kpos_s, kseg_s, dk_s, dv_s = travelling
    dq_t, dk_t, dv_t = tiles(q, k_s, v_s, q_pos, q_seg, kpos_s, kseg_s, lse, delta, dout)
    travelling = (k_s, v_s, kpos_s, kseg_s, dk_s + dk_t, dv_s + dv_t)
    return (_ring_shift(travelling, n), dq + dq_t), None

  zeros_kv = jnp.zeros(k.shape, F32)
  init = ((k, v, k_pos, k_seg, zeros_kv, zeros_kv), jnp.zeros(q.shape, F32))
  ((_, _, _, _, dk, dv), dq), _ = lax.scan(step, init, None, length=n)  # n shifts: dK/dV home
  return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), None, None, None, None


_ring.defvjp(_ring_fwd, _ring_bwd)


def attention(
  q,
  k,
  v,
  positions,
  segment_ids,
  *,
  scale: float | None = None,
  block_q: int | None = None,
  block_k: int | None = None,
) -> jax.Array:
  """Causal self-attention of a row split over the `sequence` axis (call under that mesh).

  q [B,T,N,H], k/v [B,T,K,H], positions/segment_ids [B,T] (global arrays, T divisible by the axis
  size) -> [B,T,N,H] in q's dtype, split on T like the inputs. Same result as
  blockwise.attention on the whole row.
  """
  n = cp.check_divisible(q.shape[1], "ring attention")
  scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
  local = q.shape[1] // n
  bq, bk = blockwise.block_sizes(local, local, block_q, block_k)

  def body(q, k, v, pos, seg):
    pos, seg = pos.astype(jnp.int32), seg.astype(jnp.int32)
    queries = [blockwise.pad_time(x, bq) for x in (q, pos, seg)]
    keys = [blockwise.pad_time(x, bk) for x in (k, v, pos, seg)]
    q_p, qpos, qseg = queries
    k_p, v_p, kpos, kseg = keys
    out = _ring(q_p, k_p, v_p, qpos, qseg, kpos, kseg, scale, bq, bk, n)
    return out[:, :local]

  return cp.shard_tokens(body, in_specs=(cp.TOKENS,) * 5, out_specs=cp.TOKENS)(
    q, k, v, positions, segment_ids
  )
