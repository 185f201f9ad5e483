"""TPU decode attention over pages with jax's Pallas paged attention kernel (an engine option).

`EngineConfig.paged_kernel = "pallas"` makes a decode step (one query token per row) attend with
jax.experimental.pallas.ops.tpu.paged_attention when the mesh's platform (sharding.platform, not
`jax.default_backend()`) is TPU; everywhere else, and for prefill chunks, models/paged_attention.py
keeps its pure-JAX two-pass path. jax also ships a ragged paged attention kernel (mixed prefill and
decode, K and V interleaved on one head axis), but in jax 0.10.2 neither Pallas interpreter runs it
on CPU (its `kv_bufs.reshape` ref view), so its numerics could not be checked here; the paged
kernel's can (tests/models/test_pallas_paged.py).

Layout. Our pool is [NP,P,K,H] per layer with the call's new K/V not yet written (the decode
program scatters them after the model call); the kernel reads [K,NP',P,H] pages by index, with
each row's length counting every key it attends to. So each layer and step gathers the rows'
table pages into a fresh [K, B*NB, P, H] buffer, writes each row's new token into it (in place)
and hands the kernel page indices 0 .. B*NB-1. That copy is the price: XLA:TPU writes the gathered
pages and relayouts them once more before the kernel reads them, about 1.4x the bytes the
pure-JAX path moves per decode call (BUILD_NOTES "Accelerator compiles"). No copy at all needs the
pool stored [L,K,NP,P,H] and the new token written before attending (inference/decode.py).

Numerics: the kernel casts K/V to bfloat16 (its `_maybe_dequantize`) and computes scores and the
online softmax in fp32; the softmax scale is folded into q (the kernel takes none), as splash does.
Its rounding of probabilities differs from the trainer's (the pure-JAX path rounds the normalised
probabilities to v's dtype, as training does), so served bf16 logprobs move slightly from the
trainer's. Rows whose own token is masked (idle slots) attend to it anyway: their output is unused.
Shapes: B rows (slots), NB table pages per row, P page size, N heads, K kv heads, H head dim.
"""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas.ops.tpu.paged_attention import paged_attention_kernel as kernel_lib
from jax.sharding import PartitionSpec as PS

from tmax_jax.models.attention import splash


def pages_per_block(table_pages: int, page_size: int, block_tokens: int) -> int:
  """The largest divisor of the table's width whose pages hold at most `block_tokens` keys (the
  pure-JAX path's block, paged_attention.BLOCK_TOKENS): the kernel needs one that divides it."""
  most = max(1, block_tokens // page_size)
  return max(d for d in range(1, min(most, table_pages) + 1) if table_pages % d == 0)


def _kernel_pages(pages, table, new, length):
  """pages [NP,P,K,H], table [B,NB], new [B,K,H] (the row's token), length [B] keys per row with
  it -> the rows' pages with the new token at position length-1: [K, B*NB, P, H]."""
  b, nb = table.shape
  _, p, kv, h = pages.shape
  rows = jnp.transpose(pages[table.reshape(-1)], (2, 0, 1, 3))  # [K,B*NB,P,H]
  last = length - 1
  page_of, offset = jnp.arange(b) * nb + last // p, last % p  # the new token's page and slot
  return rows.at[:, page_of, offset].set(jnp.swapaxes(new, 0, 1).astype(pages.dtype))


def _attend_local(q, k, v, k_pages, v_pages, table, cached, scale, interpret, block_tokens):
  """One shard's kernel call: q [B,1,n,H], k/v [B,1,k,H], pages [NP,P,k,H] -> [B,1,n,H]."""
  b, _, n, h = q.shape
  nb, page = table.shape[1], k_pages.shape[1]
  length = jnp.minimum(cached + 1, nb * page).astype(jnp.int32)  # idle slots: clipped junk
  kp, vp = (_kernel_pages(x, table, y[:, 0], length) for x, y in ((k_pages, k), (v_pages, v)))
  indices = jnp.arange(b * nb, dtype=jnp.int32).reshape(b, nb)
  ppb = pages_per_block(nb, page, block_tokens)
  q1 = q[:, 0] * scale  # [B,n,H]
  # interpret: the TPU interpreter (simulated DMAs and semaphores on the host), for CPU tests
  with pltpu.force_tpu_interpret_mode() if interpret else contextlib.nullcontext():
    out = kernel_lib.paged_attention(q1, kp, vp, length, indices, pages_per_compute_block=ppb)
  return out.reshape(b, 1, n, h)


def attend(
  q, k, v, pages: tuple, block_tokens: int, scale: float | None = None, interpret: bool = False
) -> jax.Array:
  """q [B,1,N,H], k/v [B,1,K,H] (the step's token, rotary applied), cache: a paged layer cache
  (models/paged_attention.py) -> [B,1,N,H] in q's dtype: each row attends to its `cached` tokens
  and its own. Under a mesh the kernel runs per shard in shard_map (XLA cannot partition a Mosaic
  kernel), heads split as splash splits them. interpret: the Pallas TPU interpreter (CPU tests)."""
  if q.shape[1] != 1:
    raise ValueError(f"the paged kernel takes one query token per row, got {q.shape[1]}")
  factor = jnp.asarray(q.shape[-1] ** -0.5 if scale is None else scale, q.dtype)
  k_pages, v_pages, table, cached = pages
  plan = splash.shard_plan(q.shape, k.shape[2])
  if plan is None:
    return _attend_local(q, k, v, k_pages, v_pages, table, cached, factor, interpret, block_tokens)
  q_spec, kv_spec, take, free = plan
  n = q.shape[2]

  def body(q, k, v, k_pages, v_pages, table, cached):
    if take is not None:  # K/V replicated over the head shards: keep the heads this shard reads
      k, v = splash._local_kv_heads(k, v, n, q.shape[2], take)
      k_pages, v_pages = splash._local_kv_heads(k_pages, v_pages, n, q.shape[2], take)
    return _attend_local(q, k, v, k_pages, v_pages, table, cached, factor, interpret, block_tokens)

  pages_spec = PS(None, None, kv_spec[2], None)
  return jax.shard_map(
    body,
    in_specs=(q_spec, kv_spec, kv_spec, pages_spec, pages_spec, PS(), PS()),
    out_specs=q_spec,
    axis_names=set(free),
    check_vma=False,
  )(q, k, v, k_pages, v_pages, table, cached)
