"""Paged attention (models/paged_attention.py) equals dense attention over the same keys (fp32)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tmax_jax.models import layers, paged_attention

B, T, N, K, H, P, NP = 3, 5, 4, 2, 8, 4, 12


@pytest.mark.parametrize("block_tokens", [4, 512])  # one page per block; one block in all
@pytest.mark.parametrize("keep_scores", [True, False])  # pass 2 reuses / recomputes the scores
def test_attend_matches_dense_over_cached_pages_plus_new_tokens(block_tokens, keep_scores):
  rng = np.random.default_rng(0)
  cached = np.array([0, 7, 13], np.int32)  # tokens already in each row's pages
  nb = 5  # table width (pages): covers the longest row's cached tokens
  k_pages = rng.normal(size=(NP, P, K, H)).astype(np.float32)
  v_pages = rng.normal(size=(NP, P, K, H)).astype(np.float32)
  table = np.stack([rng.permutation(NP)[:nb] for _ in range(B)]).astype(np.int32)
  q = rng.normal(size=(B, T, N, H)).astype(np.float32)
  k = rng.normal(size=(B, T, K, H)).astype(np.float32)
  v = rng.normal(size=(B, T, K, H)).astype(np.float32)
  seg = np.ones((B, T), np.int32)
  seg[2, 3:] = 0  # right padding in one row
  pos = cached[:, None] + np.arange(T)[None]
  new_mask = layers.attention_mask(
    jnp.asarray(pos), jnp.asarray(seg), jnp.asarray(pos), jnp.asarray(seg)
  )
  cache = dict(k_pages=k_pages, v_pages=v_pages, table=table, cached=cached)
  out, new = jax.jit(paged_attention.attend, static_argnames=("block_tokens", "keep_scores_bytes"))(
    q,
    k,
    v,
    new_mask,
    cache,
    block_tokens=block_tokens,
    keep_scores_bytes=1 << 30 if keep_scores else 0,
  )
  assert new["k"].shape == (B, T, K, H)
  for b in range(B):  # reference: dense attention over [the row's cached keys | new keys]
    old_k = k_pages[table[b]].reshape(-1, K, H)[: cached[b]]
    old_v = v_pages[table[b]].reshape(-1, K, H)[: cached[b]]
    kk, vv = np.concatenate([old_k, k[b]])[None], np.concatenate([old_v, v[b]])[None]
    kpos = np.arange(cached[b] + T)[None]
    kseg = np.concatenate([np.ones(cached[b], np.int32), seg[b]])[None]
    mask = layers.attention_mask(
      jnp.asarray(pos[b : b + 1]), jnp.asarray(seg[b : b + 1]), jnp.asarray(kpos), jnp.asarray(kseg)
    )
    ref = layers.dot_product_attention(q[b : b + 1], kk, vv, mask)
    live = seg[b] != 0
    np.testing.assert_allclose(
      np.asarray(out[b])[live], np.asarray(ref[0])[live], atol=1e-5, rtol=0
    )
