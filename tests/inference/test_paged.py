"""Host-side page bookkeeping (inference/paged.py): reservations, reference counts, the prefix
chain and snapshots, LRU eviction. Pure Python, no device."""

import pytest

from tmax_jax.inference import paged

PS = 4


def _pool_cache(pages=8, stateful=False, state_blocks=0):
  pool = paged.PagePool(pages)
  return pool, paged.PrefixCache(pool, PS, state_blocks=state_blocks, stateful=stateful)


def _seq_pages(pool, n):
  assert pool.reserve(n)
  return [pool.take() for _ in range(n)]


def _release(pool, pages):
  for p in pages:
    pool.seq_ref(p, -1)


def test_reserve_take_free_and_exhaustion():
  pool = paged.PagePool(4)
  assert pool.reserve(3) and not pool.reserve(2)  # only 1 left unreserved
  a = [pool.take() for _ in range(3)]
  assert pool.free == 1 and pool.in_use == 3 and pool.reserved == 0
  with pytest.raises(AssertionError, match="without a reservation"):
    pool.take()
  _release(pool, a)
  assert pool.free == 4 and pool.in_use == 0 and pool.available() == 4


def test_chain_match_whole_pages_and_snapshot_tail():
  pool, cache = _pool_cache()
  tokens = list(range(10))  # 2 whole pages + tail of 2
  pages = _seq_pages(pool, 3)
  cache.insert(tokens, 10, pages)
  _release(pool, pages)
  assert pool.free == 5 and pool.evictable == 3  # held by the cache only
  m = cache.lookup(tokens + [99, 98], limit=11)
  assert m.length == 10 and m.pages == pages[:2] and m.tail_page == pages[2]
  assert pool.evictable == 0  # pinned by the new sequence (and the tail until copied)
  cache.release_tail(m)
  _release(pool, m.pages)
  # A prompt that diverges inside page 2 matches page 1 only (whole pages are exact).
  m = cache.lookup(list(range(5)) + [77] * 6, limit=10)
  assert m.length == 4 and m.tail_page is None
  _release(pool, m.pages)
  # The limit (prompt length - 1) caps the match.
  m = cache.lookup(tokens, limit=9)
  assert m.length == 8 and m.tail_page is None
  _release(pool, m.pages)


def test_stateful_cache_matches_only_snapshots():
  pool, cache = _pool_cache(stateful=True, state_blocks=2)
  saved = []
  tokens = list(range(9))
  pages = _seq_pages(pool, 3)
  cache.insert(tokens, 9, pages, save_state=saved.append)
  assert saved == [0]
  m = cache.lookup(tokens + [5, 5, 5, 5], limit=12)  # whole pages 0..11 don't exist past 8
  assert (m.length, m.state, m.tail_page) == (9, 0, pages[2])
  cache.release_tail(m)
  _release(pool, m.pages)
  # Two whole pages are cached but no state at 8: nothing usable for a stateful model.
  m = cache.lookup(tokens[:8] + [1, 2, 3], limit=10)
  assert m.length == 0 and m.pages == []
  _release(pool, pages)


def test_state_blocks_are_recycled_lru():
  pool, cache = _pool_cache(pages=16, stateful=True, state_blocks=1)
  saved = []
  a, b = [1, 2, 3, 4, 5], [6, 7, 8, 9, 10]
  pa, pb = _seq_pages(pool, 2), _seq_pages(pool, 2)
  cache.insert(a, 5, pa, save_state=saved.append)
  cache.insert(b, 5, pb, save_state=saved.append)  # evicts a's snapshot for the one block
  assert saved == [0, 0]
  assert cache.lookup(a + [0], 5).length == 0
  m = cache.lookup(b + [0], 5)
  assert m.length == 5
  cache.release_tail(m)
  _release(pool, m.pages + pa + pb)


def test_eviction_frees_pages_lru_leaf_first_and_never_pinned_ones():
  pool, cache = _pool_cache(pages=6)
  old, new = list(range(8)), list(range(100, 108))
  p_old, p_new = _seq_pages(pool, 2), _seq_pages(pool, 2)
  cache.insert(old, 8, p_old)
  cache.insert(new, 8, p_new)
  _release(pool, p_old)
  m = cache.lookup(new + [0], 8)  # touches `new` (and pins its pages)
  assert pool.available() == 4  # 2 free + old's 2 evictable
  got = _seq_pages(pool, 4)  # forces eviction of old's chain (leaf first), not new's pinned pages
  assert set(got) >= set(p_old) and not set(got) & set(p_new)
  assert cache.lookup(old + [0], 8).length == 0
  _release(pool, got + m.pages)
  _release(pool, p_new)
  assert pool.free + pool.evictable == 6


def test_clear_keeps_pages_of_live_sequences():
  pool, cache = _pool_cache()
  tokens = list(range(8))
  pages = _seq_pages(pool, 2)
  cache.insert(tokens, 8, pages)
  cache.clear()
  assert cache.entries == 0 and pool.in_use == 2 and pool.evictable == 0
  _release(pool, pages)
  assert pool.free == 8
