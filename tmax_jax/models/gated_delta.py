"""The gated delta rule (Gated DeltaNet linear attention), as pure JAX functions.

Per value head, with a state S [Hk, Hv] and per-token decay a_t = exp(g_t) (g_t <= 0):
  S'_t = a_t * S_{t-1};  S_t = S'_t + k_t (beta_t (v_t - S'_t^T k_t))^T;  o_t = S_t^T q_t
with q, k L2-normalised (in fp32, eps 1e-6) and q scaled by Hk^-0.5, exactly as transformers'
`torch_chunk_gated_delta_rule` / `torch_recurrent_gated_delta_rule` for qwen3_5.

Two forms with identical semantics:
- `chunk_gated_delta_rule`: training and prefill. Within a chunk the delta rule is solved with a UT
  transform (one unit-lower-triangular system, via its explicit inverse); a `lax.scan` carries the
  state across chunks.
- `recurrent_gated_delta_rule`: decode (a `lax.scan` over tokens; one step for T == 1).

Packing and padding: `reset[b, t]` zeroes the state before token t is applied (a new segment starts
there), so nothing leaks across segments of a packed row. A token with g == 0 and beta == 0 leaves
the state unchanged, which is how callers make padding a no-op (see qwen3_5/gated_deltanet.py).

Shapes: B batch, T time, K key heads, N value heads (a multiple of K; each key head serves N // K
consecutive value heads), Hk key head dim, Hv value head dim, C chunk size, M number of chunks.
All maths is fp32; outputs are cast back to the dtype of `v`, the state is fp32.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P

from tmax_jax.models import context_parallel as cp

L2_EPS = 1e-6  # transformers' (and FLA's) l2norm epsilon


def l2_normalize(x: jax.Array, eps: float = L2_EPS) -> jax.Array:
  """x * rsqrt(sum(x^2) + eps) over the last axis (FLA's form, not x / max(|x|, eps))."""
  return x * lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) + eps)


def _prepare(q, k, v, g, beta, use_qk_l2norm: bool):
  """-> fp32 q, k [B,T,N,Hk] (heads repeated to N), v [B,T,N,Hv], g, beta [B,T,N]."""
  num_k, num_v = k.shape[2], v.shape[2]
  if num_v % num_k:
    raise ValueError(f"value heads ({num_v}) must be a multiple of key heads ({num_k})")
  q, k, v, g, beta = (x.astype(jnp.float32) for x in (q, k, v, g, beta))
  if use_qk_l2norm:
    q, k = l2_normalize(q), l2_normalize(k)
  q = q * (q.shape[-1] ** -0.5)
  if num_v != num_k:
    q = jnp.repeat(q, num_v // num_k, axis=2)  # head h of k serves v heads h*r .. h*r+r-1
    k = jnp.repeat(k, num_v // num_k, axis=2)
  return q, k, v, g, beta


def _zero_state(batch: int, heads: int, hk: int, hv: int) -> jax.Array:
  return jnp.zeros((batch, heads, hk, hv), jnp.float32)


def recurrent_gated_delta_rule(
  q, k, v, g, beta, *, initial_state=None, reset=None, use_qk_l2norm: bool = True
):
  """Token-by-token gated delta rule.

  Args:
    q, k: [B,T,K,Hk]; v: [B,T,N,Hv]; g (log decay, <= 0), beta: [B,T,N].
    initial_state: [B,N,Hk,Hv] or None (zeros).
    reset: [B,T] bool or None; True zeroes the state before that token.
  Returns:
    (out [B,T,N,Hv] in v's dtype, final_state [B,N,Hk,Hv] fp32).
  """
  out_dtype = v.dtype
  q, k, v, g, beta = _prepare(q, k, v, g, beta, use_qk_l2norm)
  b, t, n, hk = k.shape
  state = (
    _zero_state(b, n, hk, v.shape[-1])
    if initial_state is None
    else (initial_state.astype(jnp.float32))
  )
  keep = jnp.ones((b, t), jnp.float32) if reset is None else 1.0 - reset.astype(jnp.float32)
  decay = jnp.exp(g) * keep[:, :, None]  # [B,T,N]

  def step(s, xs):
    q_t, k_t, v_t, a_t, b_t = xs  # [B,N,Hk], [B,N,Hk], [B,N,Hv], [B,N], [B,N]
    s = s * a_t[..., None, None]
    kv_mem = jnp.einsum("bnkv,bnk->bnv", s, k_t)
    delta = (v_t - kv_mem) * b_t[..., None]
    s = s + k_t[..., :, None] * delta[..., None, :]
    return s, jnp.einsum("bnkv,bnk->bnv", s, q_t)

  xs = tuple(jnp.moveaxis(x, 1, 0) for x in (q, k, v, decay, beta))
  state, out = lax.scan(step, state, xs)
  return jnp.moveaxis(out, 0, 1).astype(out_dtype), state


def unit_lower_inverse(a: jax.Array) -> jax.Array:
  """(I + strictly_lower(a))^-1 for a [..., C, C] (a's diagonal and upper triangle are ignored).

  Recursive 2x2 blocking, bottom up: [[T11, 0], [T21, T22]] with T21 = -T22 A21 T11, all levels
  as batched matmuls (what FLA's `solve_tril` does on GPU). Not `lax.linalg.triangular_solve`: on
  XLA:CPU that is jaxlib's LAPACK trsm kernel, which splits a large batch into tasks on the
  intra-op thread pool and blocks its worker until they finish; when every worker of the pool is
  in such a kernel at once (independent solves run concurrently, and a mesh with as many devices
  as pool threads runs one per device), nobody runs the tasks and the program never finishes
  (docs/design/long-context.md, the trsm deadlock).
  """
  c = a.shape[-1]
  size = 1 << max(c - 1, 0).bit_length()  # C padded to a power of two: identity rows appended
  a = jnp.pad(a.astype(jnp.float32), [(0, 0)] * (a.ndim - 2) + [(0, size - c)] * 2)
  lead = a.shape[:-2]
  inv = jnp.ones(lead + (size, 1, 1), jnp.float32)  # the inverted diagonal blocks, side s
  s = 1
  while s < size:
    m = size // (2 * s)  # blocks of side 2s on the diagonal
    blocks = jnp.diagonal(a.reshape(lead + (m, 2 * s, m, 2 * s)), axis1=-4, axis2=-2)
    a21 = jnp.moveaxis(blocks, -1, -3)[..., s:, :s]  # [..., m, s, s]
    t11, t22 = inv[..., 0::2, :, :], inv[..., 1::2, :, :]
    t21 = -jnp.einsum("...ij,...jk,...kl->...il", t22, a21, t11)
    top = jnp.concatenate([t11, jnp.zeros_like(t11)], axis=-1)
    inv = jnp.concatenate([top, jnp.concatenate([t21, t22], axis=-1)], axis=-2)
    s *= 2
  return inv[..., 0, :c, :c]


def _chunk_masks(reset, b: int, m: int, c: int):
  """-> (valid [B,M,C,C]: token j's update reaches token i of the same chunk (j <= i, no reset in
  (j, i]); connected [B,M,C]: the state entering the chunk reaches token i (no reset in [0, i]))."""
  idx = jnp.arange(c)
  causal = idx[:, None] >= idx[None, :]
  if reset is None:
    return jnp.broadcast_to(causal, (b, m, c, c)), jnp.ones((b, m, c), bool)
  starts = jnp.where(reset.reshape(b, m, c), idx, -1)
  starts = lax.cummax(starts, axis=2)  # [B,M,C] last reset at or before i (-1: none)
  valid = causal & (idx[None, None, None, :] >= starts[..., :, None])
  return valid, starts < 0


def _chunk_inputs(q, k, v, g, beta, reset, chunk_size: int, use_qk_l2norm: bool):
  """The per-chunk quantities of the chunked rule (the costly, state-independent part).

  -> tuple of [M,B,N,...] scan inputs (u [C,Hv], w [C,Hk], q_read [C,Hk], k_write [C,Hk],
  intra [C,C], chunk_decay []) and the fp32 head dims (Hk, Hv).
  """
  q, k, v, g, beta = _prepare(q, k, v, g, beta, use_qk_l2norm)
  b, t, n, hk = k.shape
  hv = v.shape[-1]
  c = chunk_size
  pad = (-t) % c
  m = (t + pad) // c
  if reset is None:
    reset = jnp.zeros((b, t), bool)
  q, k, v = (jnp.pad(x, ((0, 0), (0, pad), (0, 0), (0, 0))) for x in (q, k, v))
  g, beta = (jnp.pad(x, ((0, 0), (0, pad), (0, 0))) for x in (g, beta))
  reset = jnp.pad(reset, ((0, 0), (0, pad)))
  valid, conn = _chunk_masks(reset, b, m, c)  # [B,M,C,C], [B,M,C]
  valid, conn = valid[:, None], conn[:, None]  # broadcast over heads

  def chunked(x):  # [B,T',N,...] -> [B,N,M,C,...]
    x = jnp.moveaxis(x, 2, 1)
    return x.reshape(x.shape[:2] + (m, c) + x.shape[3:])

  q, k, v, g, beta = (chunked(x) for x in (q, k, v, g, beta))
  cum = jnp.cumsum(g, axis=-1)  # [B,N,M,C] log decay from the chunk start through token i
  diff = cum[..., :, None] - cum[..., None, :]  # [B,N,M,C,C]
  decay = jnp.where(valid, jnp.exp(jnp.where(valid, diff, 0.0)), 0.0)
  k_beta = k * beta[..., None]
  v_beta = v * beta[..., None]
  # UT transform: (I + strictly_lower(diag(beta) K K^T * decay)) [u | w] = [beta V | beta K
  # exp(cum)], solved with the explicit inverse (see unit_lower_inverse for why not a trsm)
  system = jnp.einsum("bnmik,bnmjk->bnmij", k_beta, k) * decay
  start_decay = jnp.where(conn, jnp.exp(cum), 0.0)  # [B,N,M,C] chunk start -> token i
  rhs = jnp.concatenate([v_beta, k_beta * start_decay[..., None]], axis=-1)
  sol = jnp.einsum("bnmij,bnmjd->bnmid", unit_lower_inverse(system), rhs)
  u, w = sol[..., :hv], sol[..., hv:]  # [B,N,M,C,Hv], [B,N,M,C,Hk]
  intra = jnp.einsum("bnmik,bnmjk->bnmij", q, k) * decay  # [B,N,M,C,C]
  q_read = q * start_decay[..., None]
  end_decay = jnp.where(
    valid[..., -1, :], jnp.exp(cum[..., -1:] - cum), 0.0
  )  # token j -> chunk end
  k_write = k * end_decay[..., None]
  chunk_decay = start_decay[..., -1]  # [B,N,M]
  xs = tuple(jnp.moveaxis(x, 2, 0) for x in (u, w, q_read, k_write, intra, chunk_decay))
  return xs, (hk, hv)


def _chunk_scan(xs, state):
  """Carries the state [B,N,Hk,Hv] through the chunks -> (final state, out [B,T',N,Hv] fp32)."""

  def step(s, xs):  # s [B,N,Hk,Hv]
    u_c, w_c, q_c, k_c, intra_c, a_c = xs
    v_new = u_c - jnp.einsum("bnck,bnkv->bncv", w_c, s)
    out = jnp.einsum("bnck,bnkv->bncv", q_c, s) + jnp.einsum("bnij,bnjv->bniv", intra_c, v_new)
    s = s * a_c[..., None, None] + jnp.einsum("bnck,bncv->bnkv", k_c, v_new)
    return s, out

  state, out = lax.scan(step, state, xs)  # out [M,B,N,C,Hv]
  m, b, n, c, hv = out.shape
  return state, jnp.moveaxis(jnp.moveaxis(out, 0, 2).reshape(b, n, m * c, hv), 1, 2)


def _chunk_transition(xs):
  """The affine map a shard applies to its entering state: final = M @ S_in + S0.

  Per chunk s' = (a I - k_write^T w) s + k_write^T u, so one scan over [M | S0] (init [I | 0])
  gives M [B,N,Hk,Hk] and S0 [B,N,Hk,Hv] (the final state from a zero start).
  """
  u, w, _, k_write, _, a = xs
  _, b, n, _, hk = w.shape
  eye = jnp.broadcast_to(jnp.eye(hk, dtype=jnp.float32), (b, n, hk, hk))
  zero = jnp.zeros(u.shape[1:3] + (hk, u.shape[-1]), jnp.float32)

  def step(carry, xs):
    m_c, s_c = carry
    u_c, w_c, k_c, a_c = xs
    kw = jnp.einsum("bnck,bncj->bnkj", k_c, w_c)  # [B,N,Hk,Hk]
    m_new = m_c * a_c[..., None, None] - jnp.einsum("bnkj,bnjl->bnkl", kw, m_c)
    s_new = (
      s_c * a_c[..., None, None]
      - jnp.einsum("bnkj,bnjv->bnkv", kw, s_c)
      + jnp.einsum("bnck,bncv->bnkv", k_c, u_c)
    )
    return (m_new, s_new), None

  (m_s, s0), _ = lax.scan(step, (eye, zero), (u, w, k_write, a))
  return m_s, s0


def chunk_gated_delta_rule(
  q,
  k,
  v,
  g,
  beta,
  *,
  chunk_size: int = 64,
  initial_state=None,
  reset=None,
  use_qk_l2norm: bool = True,
):
  """Chunked gated delta rule (same args and results as `recurrent_gated_delta_rule`).

  T need not be a multiple of `chunk_size`: the tail is padded with g = beta = 0 tokens, which leave
  the state unchanged, so the final state is the one after token T-1. Under a mesh with a
  `sequence` axis > 1 (context parallelism) the row is split over it (`_sequence_parallel`).
  """
  if cp.splits(q.shape[1]):
    return _sequence_parallel(q, k, v, g, beta, chunk_size, initial_state, reset, use_qk_l2norm)
  t = q.shape[1]
  xs, (hk, hv) = _chunk_inputs(q, k, v, g, beta, reset, chunk_size, use_qk_l2norm)
  b, n = v.shape[0], v.shape[2]
  state = _zero_state(b, n, hk, hv) if initial_state is None else initial_state.astype(jnp.float32)
  state, out = _chunk_scan(xs, state)
  return out[:, :t].astype(v.dtype), state


def _sequence_parallel(q, k, v, g, beta, chunk_size, initial_state, reset, use_qk_l2norm):
  """The chunked rule with T split over the `sequence` axis: each shard computes its chunk inputs
  and its transition (M, S0) from a zero state; the S transitions are all-gathered (a few
  [Hk, Hk + Hv] matrices per head), each shard folds those before it into its entering state, and
  rescans its chunks from there. Exact: the rule is affine in the state."""
  b, t, n, hv = v.shape
  shards = cp.check_divisible(t, "chunk_gated_delta_rule")
  hk = k.shape[-1]
  state0 = _zero_state(b, n, hk, hv) if initial_state is None else initial_state.astype(jnp.float32)
  reset = jnp.zeros((b, t), bool) if reset is None else reset

  def body(q, k, v, g, beta, reset, state0):
    xs, _ = _chunk_inputs(q, k, v, g, beta, reset, chunk_size, use_qk_l2norm)
    m_s, s0 = _chunk_transition(xs)
    all_m, all_s = lax.all_gather(m_s, cp.AXIS), lax.all_gather(s0, cp.AXIS)  # [S,B,N,...]
    me = lax.axis_index(cp.AXIS)

    def fold(carry, xs):  # carry: (state entering my shard, state after the last shard)
      j, m_j, s_j = xs
      after = jnp.einsum("bnkj,bnjv->bnkv", m_j, carry[1]) + s_j
      return (jnp.where(j < me, after, carry[0]), after), None

    (entering, final), _ = lax.scan(fold, (state0, state0), (jnp.arange(shards), all_m, all_s))
    _, out = _chunk_scan(xs, entering)
    return out[:, : q.shape[1]].astype(v.dtype), final

  tokens, rep = cp.TOKENS, P()
  return cp.shard_tokens(body, in_specs=(tokens,) * 6 + (rep,), out_specs=(tokens, rep))(
    q, k, v, g, beta, reset, state0
  )
