"""Blockwise (flash-style) causal attention in pure JAX with a custom VJP.

The forward pass walks [block_q, block_k] tiles with an online softmax and keeps only the output and
the row log-sum-exp; the backward pass recomputes each tile's probabilities from that log-sum-exp.
No step holds more than one tile of scores, so memory is O(T) in the forward and the backward pass
(the reference materialises [T, S]). Each pass is ONE scan over a static list of (query block, key
block) pairs: the lower block triangle for causal self-attention (so compiled FLOPs are the causal
half), every pair on ring steps. The mask is computed per tile from positions and segment ids
(query i sees key j iff the segments match, are non-zero and pos_j <= pos_i), never as a [T, S]
array; a tile with no visible pair (padding, two different packed segments) is skipped with
`lax.cond`.

Rows that see no key at all (padding) give output 0 and log-sum-exp `EMPTY_LSE`; both merge
NaN-free, which is what ring attention (ring.py) relies on when it combines per-shard partials.

`attend_tiles` / `attend_tiles_bwd` are the tile loops the ring reuses on each visiting K/V shard.
Shapes: B batch, T query time, S key time, N query heads, K kv heads, G = N / K, H head dim.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from tmax_jax.models.attention.reference import attention_mask as tile_mask  # on [Q, C] tiles

F32 = jnp.float32
# The tile edge on both axes unless the config says otherwise (docs/design/long-context.md).
DEFAULT_BLOCK = 256
EMPTY_LSE = -1e30  # finite "log 0": exp(EMPTY_LSE - x) underflows to 0, never NaN


def _blocks(x: jax.Array, block: int) -> jax.Array:
  """[B,T,...] -> [T/block, B, block, ...] (T already padded to a multiple of block)."""
  b, t = x.shape[:2]
  return x.reshape(b, t // block, block, *x.shape[2:]).swapaxes(0, 1)


def pad_time(x: jax.Array, block: int) -> jax.Array:
  """Right-pads axis 1 with zeros to a multiple of block (segment id 0 = masked, for int inputs)."""
  pad = -x.shape[1] % block
  if not pad:
    return x
  return jnp.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2))


def _tie(*xs):
  """Ties positions/segments to q/k/v so no transformation sees the tile masks as independent of
  them. Without it, a scan over layers (positions are loop-invariant there) hoists every tile's
  mask out of the layer loop as a stacked [T/Q, S/C, ..., Q, C] array: quadratic memory."""
  return lax.optimization_barrier(xs)


# The tile loops work head-major: queries as [nq, B, K, G, Q, (H)] and keys as [nk, B, K, C, H]
# (values of the forward and keys of dq's product as [nk, B, K, H, C]), so every tile product is a
# dot with the batch dims (B, K) leading and, where it can be, the contraction on the minor axis of
# both operands, and the softmax statistics reduce along the minor axis. The inputs are re-laid out
# once per call (O(T) copies), not once per tile as a [B, Q, K, G, H] layout costs.
def _query_major(x: jax.Array, kh: int, block: int) -> jax.Array:
  """[B,T,N,(H)] -> [T/block, B, K, G, block, (H)]."""
  b, t, n = x.shape[:3]
  x = x.reshape(b, t // block, block, kh, n // kh, *x.shape[3:])
  return x.transpose((1, 0, 3, 4, 2) + tuple(range(5, x.ndim)))


def _query_minor(x: jax.Array) -> jax.Array:
  """Inverse of _query_major: [nq, B, K, G, Q, (H)] -> [B, nq * Q, K * G, (H)]."""
  nq, b, kh, g, q = x.shape[:5]
  x = x.transpose((1, 0, 4, 2, 3) + tuple(range(5, x.ndim)))
  return x.reshape(b, nq * q, kh * g, *x.shape[5:])


def _key_major(x: jax.Array, block: int, time_minor: bool = False) -> jax.Array:
  """[B,S,K,H] -> [S/block, B, K, block, H], or [S/block, B, K, H, block] when time_minor."""
  b, s, kh, h = x.shape
  x = x.reshape(b, s // block, block, kh, h)
  return x.transpose((1, 0, 3, 4, 2) if time_minor else (1, 0, 3, 2, 4))


def _key_minor(x: jax.Array) -> jax.Array:
  """Inverse of _key_major: [nk, B, K, C, H] -> [B, nk * C, K, H]."""
  nk, b, kh, c, h = x.shape
  return x.transpose(1, 0, 3, 2, 4).reshape(b, nk * c, kh, h)


def _scores(q_i, k_j, scale):
  """q_i [B,K,G,Q,H], k_j [B,K,C,H] -> fp32 scores [B,K,G,Q,C]."""
  return jnp.einsum("bkgqh,bkch->bkgqc", q_i, k_j, preferred_element_type=F32) * scale


def _tile_masks(q_pos, q_seg, k_pos, k_seg, block_q: int, block_k: int, keys_major: bool = False):
  """-> mask(i, j): the [B,1,1,Q,C] visibility of query block i to key block j, or [B,1,C,1,Q]
  (the transposed tile) when keys_major."""
  qposb, qsegb = _blocks(q_pos, block_q), _blocks(q_seg, block_q)
  kposb, ksegb = _blocks(k_pos, block_k), _blocks(k_seg, block_k)

  def mask(i, j):
    m = tile_mask(qposb[i], qsegb[i], kposb[j], ksegb[j], keys_major)  # [B,Q,C] or [B,C,Q]
    return m[:, None, :, None] if keys_major else m[:, None, None]

  return mask


def tile_pairs(nq: int, nk: int, block_q: int, block_k: int, causal: bool):
  """The (query block, key block) pairs to visit, query-major -> (qi [P], kj [P]) int32.

  causal: keys after every query of a block (by index) are never visible, which holds when q and
  k are the same tokens and positions increase along each segment (how packing writes rows); then
  only the lower triangle of blocks is listed. Otherwise (ring steps) every pair is.
  """
  qi, kj = np.meshgrid(np.arange(nq), np.arange(nk), indexing="ij")
  keep = (kj * block_k <= qi * block_q + block_q - 1) if causal else np.ones_like(qi, bool)
  return jnp.asarray(qi[keep], jnp.int32), jnp.asarray(kj[keep], jnp.int32)


def attend_tiles(
  q, k, v, q_pos, q_seg, k_pos, k_seg, *, scale: float, block_q: int, block_k: int, causal: bool
) -> tuple[jax.Array, jax.Array]:
  """Forward tile loop on padded inputs: one scan over `tile_pairs`, online softmax per block.

  q [B,T,N,H], k/v [B,S,K,H], positions/segments [B,T] / [B,S] with T, S multiples of the blocks
  -> (out [B,T,N,H] fp32, lse [B,T,N] fp32). Rows with no visible key: out 0, lse EMPTY_LSE.
  """
  q, k, v, q_pos, q_seg, k_pos, k_seg = _tie(q, k, v, q_pos, q_seg, k_pos, k_seg)
  kh = k.shape[2]
  qb = _query_major(q, kh, block_q)  # [nq,B,K,G,Q,H]
  kb, vtb = _key_major(k, block_k), _key_major(v, block_k, time_minor=True)
  tile_mask_ij = _tile_masks(q_pos, q_seg, k_pos, k_seg, block_q, block_k)

  def step(carry, pair):
    i, j = pair
    q_i, k_j, vt_j = qb[i], kb[j], vtb[j]
    mask = tile_mask_ij(i, j)

    def visit(state):
      m, denom, acc = state  # [B,K,G,Q], [B,K,G,Q], [B,K,G,Q,H]
      s = jnp.where(mask, _scores(q_i, k_j, scale), EMPTY_LSE)  # [B,K,G,Q,C]
      m_new = jnp.maximum(m, jnp.max(s, axis=-1))
      p = jnp.where(mask, jnp.exp(s - m_new[..., None]), 0.0)
      corr = jnp.exp(m - m_new)
      pv = jnp.einsum("bkgqc,bkhc->bkgqh", p.astype(vt_j.dtype), vt_j, preferred_element_type=F32)
      return m_new, denom * corr + jnp.sum(p, axis=-1), acc * corr[..., None] + pv

    block = lax.cond(jnp.any(mask), visit, lambda st: st, tuple(x[i] for x in carry))
    return tuple(x.at[i].set(y) for x, y in zip(carry, block, strict=True)), None

  stats = qb.shape[:-1]
  init = (jnp.full(stats, EMPTY_LSE, F32), jnp.zeros(stats, F32), jnp.zeros(qb.shape, F32))
  pairs = tile_pairs(qb.shape[0], kb.shape[0], block_q, block_k, causal)
  (m, denom, acc), _ = lax.scan(step, init, pairs)
  seen = denom > 0
  out = acc / jnp.where(seen, denom, 1.0)[..., None]
  lse = jnp.where(seen, m + jnp.log(jnp.where(seen, denom, 1.0)), EMPTY_LSE)
  return _query_minor(out), _query_minor(lse)


def attend_tiles_bwd(
  q,
  k,
  v,
  q_pos,
  q_seg,
  k_pos,
  k_seg,
  lse,
  delta,
  dout,
  *,
  scale: float,
  block_q: int,
  block_k: int,
  causal: bool,
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Backward tile loop: the gradient contributions of keys k/v to queries q.

  lse, delta [B,T,N] are the FINAL row log-sum-exp and rowsum(dout * out) (minus the log-sum-exp's
  own cotangent), dout [B,T,N,H]. -> fp32 (dq [B,T,N,H], dk [B,S,K,H], dv [B,S,K,H]). Because the
  probabilities come from the final lse, the contributions of several key shards simply add up.

  Each tile works on the TRANSPOSED scores s^T [B,K,C,G,Q] (keys major, queries minor): dv = p^T do
  and dk = ds^T q then contract over the queries, the minor axis of p^T / ds^T, and dq is built
  transposed (dq^T = k^T ds^T, [B,K,H,G,Q]) and laid out back once per call. With s [.., Q, C] two
  of the four products contract over s's major axis, and XLA:CPU materialised a transposed copy of
  p and of ds in every tile (docs/design/long-context.md "Attention backward").
  """
  q, k, v, q_pos, q_seg, k_pos, k_seg = _tie(q, k, v, q_pos, q_seg, k_pos, k_seg)
  kh = k.shape[2]
  qb, dob = _query_major(q, kh, block_q), _query_major(dout, kh, block_q)  # [nq,B,K,G,Q,H]
  lseb, deltab = _query_major(lse, kh, block_q), _query_major(delta, kh, block_q)  # [nq,B,K,G,Q]
  kb, vb = _key_major(k, block_k), _key_major(v, block_k)  # [nk,B,K,C,H]
  ktb = _key_major(k, block_k, time_minor=True)  # [nk,B,K,H,C]
  tile_mask_ij = _tile_masks(q_pos, q_seg, k_pos, k_seg, block_q, block_k, keys_major=True)

  def step(carry, pair):
    i, j = pair
    dqt, dk, dv = carry
    q_i, do_i, k_j, v_j, kt_j = qb[i], dob[i], kb[j], vb[j], ktb[j]
    lse_i, delta_i = lseb[i][:, :, None], deltab[i][:, :, None]  # [B,K,1,G,Q]
    mask = tile_mask_ij(i, j)  # [B,1,C,1,Q]

    def visit(grads):
      dqt_i, dk_j, dv_j = grads
      st = jnp.einsum("bkch,bkgqh->bkcgq", k_j, q_i, preferred_element_type=F32) * scale
      pt = jnp.where(mask, jnp.exp(st - lse_i), 0.0)  # [B,K,C,G,Q]
      dv_j = dv_j + jnp.einsum(
        "bkcgq,bkgqh->bkch", pt.astype(do_i.dtype), do_i, preferred_element_type=F32
      )
      dpt = jnp.einsum("bkch,bkgqh->bkcgq", v_j, do_i, preferred_element_type=F32)
      dst = (pt * (dpt - delta_i) * scale).astype(q_i.dtype)
      dk_j = dk_j + jnp.einsum("bkcgq,bkgqh->bkch", dst, q_i, preferred_element_type=F32)
      dqt_i = dqt_i + jnp.einsum("bkhc,bkcgq->bkhgq", kt_j, dst, preferred_element_type=F32)
      return dqt_i, dk_j, dv_j

    dqt_i, dk_j, dv_j = lax.cond(jnp.any(mask), visit, lambda g: g, (dqt[i], dk[j], dv[j]))
    return (dqt.at[i].set(dqt_i), dk.at[j].set(dk_j), dv.at[j].set(dv_j)), None

  nq, b, _, g, bq, h = qb.shape
  init = (jnp.zeros((nq, b, kh, h, g, bq), F32), jnp.zeros(kb.shape, F32), jnp.zeros(vb.shape, F32))
  pairs = tile_pairs(nq, kb.shape[0], block_q, block_k, causal)
  (dqt, dk, dv), _ = lax.scan(step, init, pairs)
  dq = _query_minor(jnp.moveaxis(dqt, 3, 5))  # [nq,B,K,H,G,Q] -> [nq,B,K,G,Q,H] -> [B,T,N,H]
  return dq, _key_minor(dk), _key_minor(dv)


def row_delta(out: jax.Array, dout: jax.Array) -> jax.Array:
  """rowsum(dout * out) [B,T,N] fp32 (FlashAttention-2's D)."""
  return jnp.sum(out.astype(F32) * dout.astype(F32), axis=-1)


@functools.partial(jax.custom_vjp, nondiff_argnums=(7, 8, 9, 10))
def _flash(q, k, v, q_pos, q_seg, k_pos, k_seg, scale, block_q, block_k, causal):
  out, _ = _flash_fwd(q, k, v, q_pos, q_seg, k_pos, k_seg, scale, block_q, block_k, causal)
  return out


def _flash_fwd(q, k, v, q_pos, q_seg, k_pos, k_seg, scale, block_q, block_k, causal):
  out, lse = attend_tiles(
    q,
    k,
    v,
    q_pos,
    q_seg,
    k_pos,
    k_seg,
    scale=scale,
    block_q=block_q,
    block_k=block_k,
    causal=causal,
  )
  out = out.astype(q.dtype)
  return out, (q, k, v, q_pos, q_seg, k_pos, k_seg, out, lse)


def _flash_bwd(scale, block_q, block_k, causal, res, dout):
  q, k, v, q_pos, q_seg, k_pos, k_seg, out, lse = res
  dq, dk, dv = attend_tiles_bwd(
    q,
    k,
    v,
    q_pos,
    q_seg,
    k_pos,
    k_seg,
    lse,
    row_delta(out, dout),
    dout,
    scale=scale,
    block_q=block_q,
    block_k=block_k,
    causal=causal,
  )
  return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), None, None, None, None


_flash.defvjp(_flash_fwd, _flash_bwd)


def block_sizes(t: int, s: int, block_q: int | None, block_k: int | None) -> tuple[int, int]:
  """Tile edges for a [T, S] problem: the configured sizes (DEFAULT_BLOCK when None), never larger
  than the (8-rounded) sequence itself, so short inputs are not padded to a whole default block."""

  def fit(block, length):
    return max(1, min(block or DEFAULT_BLOCK, -(-length // 8) * 8))

  return fit(block_q, t), fit(block_k, s)


def attention(
  q,
  k,
  v,
  q_pos,
  q_seg,
  k_pos,
  k_seg,
  *,
  scale: float | None = None,
  block_q: int | None = None,
  block_k: int | None = None,
  index_causal: bool = True,
) -> jax.Array:
  """Causal, segment-masked attention; same contract as reference.dot_product_attention.

  q [B,T,N,H], k/v [B,S,K,H] (N a multiple of K: GQA), q_pos/q_seg [B,T], k_pos/k_seg [B,S] int32
  -> [B,T,N,H] in q's dtype. Scores and softmax statistics are fp32. Any T, S (padded internally
  with segment 0). Rows with no visible key give 0. index_causal: q and k are the same tokens and
  positions increase along each segment (packed training rows), so blocks above the diagonal are
  never visited; False visits every block pair (any positions).
  """
  scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
  t, s = q.shape[1], k.shape[1]
  bq, bk = block_sizes(t, s, block_q, block_k)
  q, q_pos, q_seg = (pad_time(x, bq) for x in (q, q_pos, q_seg))
  k, v, k_pos, k_seg = (pad_time(x, bk) for x in (k, v, k_pos, k_seg))
  out = _flash(
    q,
    k,
    v,
    q_pos.astype(jnp.int32),
    q_seg.astype(jnp.int32),
    k_pos.astype(jnp.int32),
    k_seg.astype(jnp.int32),
    scale,
    bq,
    bk,
    index_causal,
  )
  return out[:, :t]
