"""Attention over a paged KV cache: the serving path (inference/decode.py) of every family.

The K/V of a sequence live in fixed-size pages of a shared pool; a row's block table lists its pages
in order, so the token at position p sits in page `table[p // P]` at offset `p % P` (P = page size).
A layer called with a paged cache attends over
  * the row's `cached` tokens already in its pages (positions 0 .. cached-1, all visible: every
    query of the call comes after them), read page block by page block (two passes: softmax
    statistics, then normalised probabilities times V), so the work and the score buffer scale with
    the table's length (bucketed by the caller), not with the maximum sequence length, and
  * the call's own new tokens (causal and segment mask from the caller, as in the dense path),
and returns, as its "cache", only the new K/V {k, v: [B,T,K,H]}: the caller scatters them into the
pool after the model call, in place. Returning the updated pool from every scanned layer instead
would copy the whole pool per step.

Paged layer cache (leaves carry the model's leading layer axis outside the layer):
  k_pages, v_pages [NP,P,K,H]   the pool of this layer (NP pages)
  table            [B,NB] int32 page ids of each row's logical pages 0 .. NB-1 (unused: any id)
  cached           [B] int32    tokens of the row already in its pages

Scores and softmax statistics are fp32; fully masked rows give finite junk, as in the dense path.
A decode step (one query token per row) traced on a TPU mesh inside `use_kernel("pallas")` (the
serving programs set it from EngineConfig.paged_kernel) runs jax's Pallas paged attention kernel
instead (models/pallas_paged.py); prefill chunks and every other platform stay here.
Shapes: B batch, T query time, S key time, N heads, K kv heads, G = N/K, H head dim.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import jax
import jax.numpy as jnp

from tmax_jax import sharding
from tmax_jax.errors import UserError

F32 = jnp.float32
NEG = float(jnp.finfo(F32).min)
BLOCK_TOKENS = 512  # keys per online-softmax block (a multiple of the page size is used)
KEEP_SCORES_BYTES = 64 << 20  # pass-1 scores kept for pass 2 up to this size (decode steps)
PAGED_KEYS = ("k_pages", "v_pages", "table", "cached")
KERNELS = ("jax", "pallas")  # EngineConfig.paged_kernel's choices
LANES = 128  # TPU lane width: the Pallas kernel's head_dim must be a multiple of it
_KERNEL = contextvars.ContextVar("paged_kernel", default="jax")  # EngineConfig.paged_kernel


def check_kernel(kernel: str, head_dim: int, compute_dtype) -> None:
  """Raises a one-line UserError when `kernel` (EngineConfig.paged_kernel) cannot serve a model of
  this head_dim and compute dtype; checked on every platform, so a CPU rehearsal of a TPU config
  fails as the TPU run would."""
  if kernel not in KERNELS:
    raise UserError(f"EngineConfig.paged_kernel={kernel!r}; expected one of {list(KERNELS)}")
  if kernel != "pallas":
    return
  if head_dim % LANES:
    raise UserError(
      f"EngineConfig.paged_kernel='pallas' needs the model's head_dim to be a multiple of {LANES} "
      f"(the TPU lane width), got {head_dim}; use paged_kernel='jax'"
    )
  if jnp.dtype(compute_dtype) != jnp.bfloat16:
    raise UserError(
      "EngineConfig.paged_kernel='pallas' needs dtypes.compute_dtype='bfloat16' (jax's kernel "
      f"rounds K/V pages to bfloat16), got {jnp.dtype(compute_dtype).name}; use paged_kernel='jax'"
    )


@contextlib.contextmanager
def use_kernel(name: str) -> Iterator[None]:
  """Within it, `attend` traces decode steps with kernel `name` (KERNELS): a context,
  not an argument, because the layers call `attend` with the cache alone."""
  token = _KERNEL.set(name)
  try:
    yield
  finally:
    _KERNEL.reset(token)


def kernel_for(query_tokens: int) -> str:
  """The kernel a call of `query_tokens` per row takes here: "pallas" for a decode step under
  use_kernel("pallas") on a TPU mesh (sharding.platform, not jax.default_backend()), else "jax"."""
  pallas = _KERNEL.get() == "pallas" and query_tokens == 1 and sharding.platform() == "tpu"
  return "pallas" if pallas else "jax"


def is_paged(cache) -> bool:
  """True for a layer cache in the paged layout above (dense caches have k/v/segment_ids)."""
  return isinstance(cache, dict) and "k_pages" in cache


def _scores(qg, k, mask, scale):
  """qg [B,T,K,G,H], k [B,S,K,H], mask [B,T|1,S] -> fp32 scores [B,K,G,T,S] (masked: NEG)."""
  s = jnp.einsum("btkgh,bskh->bkgts", qg, k, preferred_element_type=F32) * scale
  return jnp.where(mask[:, None, None], s, NEG)


def attend(
  q: jax.Array,
  k: jax.Array,
  v: jax.Array,
  new_mask: jax.Array,
  cache: dict,
  scale: float | None = None,
  block_tokens: int = BLOCK_TOKENS,
  keep_scores_bytes: int = KEEP_SCORES_BYTES,
) -> tuple[jax.Array, dict]:
  """q [B,T,N,H], k/v [B,T,K,H] (the call's tokens, rotary applied), new_mask [B,T,T] (which of the
  call's tokens each query sees), cache: a paged layer cache -> (out [B,T,N,H], {k, v}).

  Two passes over the key blocks: the softmax max and normaliser first, then the normalised
  probabilities, cast to v's dtype as the dense path casts them, times V accumulated in fp32. So
  with bf16 compute the rounding is the dense (training) path's, and served logprobs stay the
  trainer's (a one-pass online softmax would round unnormalised probabilities instead). When all
  of pass 1's scores fit `keep_scores_bytes` (decode steps), pass 2 reuses them instead of
  gathering the keys and computing QK^T again (the same values).
  """
  b, t, n, h = q.shape
  if kernel_for(t) == "pallas":
    from tmax_jax.models import pallas_paged  # noqa: PLC0415  (Pallas TPU kernels: TPU only)

    pages = tuple(cache[name] for name in PAGED_KEYS)
    return pallas_paged.attend(q, k, v, pages, BLOCK_TOKENS, scale), {"k": k, "v": v}
  kv = k.shape[2]
  g = n // kv
  scale = h**-0.5 if scale is None else scale
  k_pages, v_pages, table, cached = (cache[name] for name in PAGED_KEYS)
  page = k_pages.shape[1]
  qg = q.reshape(b, t, kv, g, h)  # [B,T,K,G,H]
  per_block = max(1, min(table.shape[1], block_tokens // page))  # pages per key block
  n_blocks = -(-table.shape[1] // per_block)
  table = jnp.pad(table, ((0, 0), (0, n_blocks * per_block - table.shape[1])))
  width = per_block * page

  def old_block(pages, i, dtype):
    """Block i of the cached tokens' keys or values: [B,S,K,H]."""
    ids = jax.lax.dynamic_slice_in_dim(table, i * per_block, per_block, axis=1)  # [B,nb]
    return pages[ids].reshape(b, width, kv, h).astype(dtype)

  def old_scores(i):
    """Scores of key block i [B,K,G,T,S] (cached keys beyond the row's length masked)."""
    j = i * width + jnp.arange(width)  # logical key positions
    mask = (j[None, :] < cached[:, None])[:, None, :]  # [B,1,S]
    return _scores(qg, old_block(k_pages, i, q.dtype), mask, scale)

  def stats(carry, s):  # running max and normaliser [B,K,G,T]
    m, norm = carry
    m_new = jnp.maximum(m, jnp.max(s, axis=-1))
    return m_new, norm * jnp.exp(m - m_new) + jnp.sum(jnp.exp(s - m_new[..., None]), axis=-1)

  # Decode-sized calls keep pass 1's scores for pass 2; a long prefill chunk's would not fit.
  keep = b * n * t * width * n_blocks * 4 <= keep_scores_bytes

  def pass1(carry, i):
    s = old_scores(i)
    return stats(carry, s), (s if keep else None)

  init = (jnp.full((b, kv, g, t), NEG, F32), jnp.zeros((b, kv, g, t), F32))
  carry, kept = jax.lax.scan(pass1, init, jnp.arange(n_blocks))  # kept [n_blocks,B,K,G,T,S]
  s_new = _scores(qg, k, new_mask, scale)
  m, norm = stats(carry, s_new)

  def pv(s, vb):  # normalised probabilities in v's dtype times V, accumulated in fp32
    p = (jnp.exp(s - m[..., None]) / norm[..., None]).astype(vb.dtype)
    return jnp.einsum("bkgts,bskh->bkgth", p, vb, preferred_element_type=F32)

  def pass2(acc, xs):
    i, s = xs
    return acc + pv(old_scores(i) if s is None else s, old_block(v_pages, i, v.dtype)), None

  acc, _ = jax.lax.scan(pass2, jnp.zeros((b, kv, g, t, h), F32), (jnp.arange(n_blocks), kept))
  out = acc + pv(s_new, v)  # [B,K,G,T,H]
  out = jnp.moveaxis(out, 3, 1).reshape(b, t, n, h).astype(v.dtype)
  return out, {"k": k, "v": v}
