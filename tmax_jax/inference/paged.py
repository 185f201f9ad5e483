"""Host-side bookkeeping of paged KV memory: the page pool and the prefix cache (no JAX here).

PagePool: fixed-size pages with two reference counts each: `seq` (live sequences whose block table
holds the page) and `cache` (prefix-cache entries that hold it). A page is free when both are 0 and
*evictable* when only the cache holds it. Admission reserves the pages a request may ever need
(prompt + max_tokens + 1 for the lagged decode step, see scheduler.py) and takes them lazily, when
the sequence crosses into a new page, so a slot holds only the pages its tokens use while admitted
requests can never run out. `available()` = free + evictable - reserved.

PrefixCache: a page-aligned chain (radix tree over whole pages): node key = (parent node id, the
page's P tokens), exact (no hashing collisions), so a prompt finds the longest run of whole cached
pages from the start. Boundaries that are not page-aligned, and the recurrent state of models that
have one (Qwen3.5's Gated DeltaNet conv/recurrent state: valid only at the exact boundary it was
taken at), are *snapshots*: (chain node, tail tokens < P, tail page, state block). A lookup returns
the longest usable match: for stateless models whole pages or a snapshot, for stateful ones only a
snapshot. A snapshot's tail page is shared read-only: the reader copies it before writing into it.
Eviction is LRU over leaves (nodes without children, snapshots); touching a path refreshes it leaf
first, so the oldest entries are leaves. Not thread-safe on its own: the scheduler serialises
mutation; `peek` (routing, other threads) takes `lock`.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
from collections.abc import Callable


def pages_for(tokens: int, page_size: int) -> int:
  return -(-tokens // page_size)


class PagePool:
  """Page ids 0 .. num_pages-1 with seq/cache reference counts and a reservation counter."""

  def __init__(self, num_pages: int, evict: Callable[[], bool] | None = None):
    self.num_pages = num_pages
    self.seq_refs = [0] * num_pages
    self.cache_refs = [0] * num_pages
    self._free = collections.deque(range(num_pages))
    self.reserved = 0
    self.evictable = 0  # pages with cache_refs > 0 and seq_refs == 0
    self._evict = evict or (lambda: False)

  @property
  def free(self) -> int:
    return len(self._free)

  @property
  def in_use(self) -> int:
    return self.num_pages - self.free - self.evictable

  def available(self) -> int:
    return self.free + self.evictable - self.reserved

  def reserve(self, n: int) -> bool:
    if n > self.available():
      return False
    self.reserved += n
    return True

  def unreserve(self, n: int) -> None:
    if n > self.reserved:
      raise AssertionError(f"unreserve {n} > reserved {self.reserved}")
    self.reserved -= n

  def take(self) -> int:
    """A page for a sequence, out of its reservation (evicts cached pages if none is free)."""
    if self.reserved < 1:
      raise AssertionError("take() without a reservation")
    while not self._free:
      if not self._evict():
        raise AssertionError("page pool exhausted despite a reservation")
    self.reserved -= 1
    page = self._free.popleft()
    self.seq_refs[page] = 1
    return page

  def _changed(self, page: int, seq_delta: int, cache_delta: int) -> None:
    was_evictable = self.cache_refs[page] > 0 and self.seq_refs[page] == 0
    self.seq_refs[page] += seq_delta
    self.cache_refs[page] += cache_delta
    if self.seq_refs[page] < 0 or self.cache_refs[page] < 0:
      raise AssertionError(f"page {page}: negative reference count")
    now_evictable = self.cache_refs[page] > 0 and self.seq_refs[page] == 0
    self.evictable += int(now_evictable) - int(was_evictable)
    if self.seq_refs[page] == 0 and self.cache_refs[page] == 0:
      self._free.append(page)

  def seq_ref(self, page: int, delta: int = 1) -> None:
    self._changed(page, delta, 0)

  def cache_ref(self, page: int, delta: int = 1) -> None:
    self._changed(page, 0, delta)


@dataclasses.dataclass(eq=False)
class _Node:
  """One whole page of a cached token chain."""

  id: int
  key: tuple
  page: int
  parent: _Node | None
  children: int = 0  # child nodes + snapshots that hang off this node


@dataclasses.dataclass(eq=False)
class _Snapshot:
  """A boundary inside (or at the end of) a page: tokens = chain(node) + tail."""

  key: tuple
  node: _Node | None  # None = the root (tail starts at position 0)
  tail: tuple
  tail_page: int | None  # page holding the tail tokens (None when the tail is empty)
  state: int | None  # recurrent-state block id (None for stateless models)
  length: int = 0  # tokens covered (chain pages + tail)


@dataclasses.dataclass
class Match:
  """What a lookup found. `pages` (whole pages, in order) carry a seq reference the caller now
  owns; `tail_page` carries one until the caller has copied it (then `release_tail`)."""

  length: int = 0
  pages: list = dataclasses.field(default_factory=list)
  tail_page: int | None = None
  state: int | None = None


class PrefixCache:
  """The chain + snapshots over one PagePool; `state_blocks` > 0 for models with recurrent state."""

  def __init__(self, pool: PagePool, page_size: int, state_blocks: int = 0, stateful: bool = False):
    self.pool, self.page_size, self.stateful = pool, page_size, stateful
    self.lock = threading.RLock()
    self._nodes: dict[tuple, _Node] = {}
    self._snaps: dict[tuple, _Snapshot] = {}
    self._tails: dict[int, set] = collections.defaultdict(set)  # node id (0 = root) -> tails
    self._lru: collections.OrderedDict = collections.OrderedDict()  # entry -> None, oldest first
    self._free_states = collections.deque(range(state_blocks))
    self._next_id = 1
    pool._evict = self.evict_one

  # ---- lookup ---------------------------------------------------------------------------------

  def _walk(self, tokens, limit: int) -> list[_Node]:
    path, node_id, pos, ps = [], 0, 0, self.page_size
    while pos + ps <= limit:
      node = self._nodes.get((node_id, tuple(tokens[pos : pos + ps])))
      if node is None:
        break
      path.append(node)
      node_id, pos = node.id, pos + ps
    return path

  def _best_snapshot(self, tokens, limit: int, path: list[_Node]) -> _Snapshot | None:
    for level in range(len(path), -1, -1):  # deeper levels are always longer matches
      node_id, base = (path[level - 1].id if level else 0), level * self.page_size
      best = None
      for tail in self._tails.get(node_id, ()):
        end = base + len(tail)
        if (
          end <= limit
          and tuple(tokens[base:end]) == tail
          and (best is None or len(tail) > len(best))
        ):
          best = tail
      if best is not None:
        return self._snaps[(node_id, best)]
    return None

  def peek(self, tokens, limit: int) -> int:
    """Length of the match `lookup` would return (thread-safe, changes nothing)."""
    with self.lock:
      path = self._walk(tokens, limit)
      snap = self._best_snapshot(tokens, limit, path)
      snap_len = 0 if snap is None else snap.length
      return snap_len if self.stateful else max(snap_len, len(path) * self.page_size)

  def lookup(self, tokens, limit: int) -> Match:
    """Longest usable cached prefix of tokens[:limit]; its pages get a seq reference each."""
    with self.lock:
      path = self._walk(tokens, limit)
      snap = self._best_snapshot(tokens, limit, path)
      whole = len(path) * self.page_size
      if snap is None and (self.stateful or not path):
        return Match()
      if snap is not None and not (self.stateful or snap.length > whole):
        snap = None  # whole pages match further
      if snap is not None:
        path = path[: snap.length // self.page_size]
      for node in path:
        self.pool.seq_ref(node.page)
      match = Match(length=whole if snap is None else snap.length, pages=[n.page for n in path])
      if snap is not None:
        match.tail_page, match.state = snap.tail_page, snap.state
        if snap.tail_page is not None:
          self.pool.seq_ref(snap.tail_page)
        self._touch(snap)
      for node in reversed(path):  # leaf first: parents end up younger than their children
        self._touch(node)
      return match

  def release_tail(self, match: Match) -> None:
    if match.tail_page is not None:
      self.pool.seq_ref(match.tail_page, -1)
      match.tail_page = None

  def _touch(self, entry) -> None:
    self._lru[entry] = None
    self._lru.move_to_end(entry)

  # ---- insert ---------------------------------------------------------------------------------

  def insert(
    self, tokens, length: int, pages: list[int], save_state: Callable[[int], None] | None = None
  ) -> None:
    """Registers tokens[:length] held in `pages` (the sequence's block table): every whole page in
    the chain, and a snapshot at `length` (with the recurrent state when the model has one:
    `save_state(block)` must copy the sequence's state into that block)."""
    with self.lock:
      ps, parent, node_id = self.page_size, None, 0
      touched = []
      for i in range(length // ps):
        key = (node_id, tuple(tokens[i * ps : (i + 1) * ps]))
        node = self._nodes.get(key)
        if node is None:
          node = _Node(self._next_id, key, pages[i], parent)
          self._next_id += 1
          self._nodes[key] = node
          self.pool.cache_ref(node.page)
          if parent is not None:
            parent.children += 1
        touched.append(node)
        parent, node_id = node, node.id
      tail = tuple(tokens[(length // ps) * ps : length])
      key = (node_id, tail)
      snap = self._snaps.get(key)
      if snap is None and (tail or self.stateful):
        snap = self._new_snapshot(key, parent, tail, pages, length, save_state)
      if snap is not None:
        self._touch(snap)
      for node in reversed(touched):
        self._touch(node)

  def _new_snapshot(self, key, parent, tail, pages, length, save_state) -> _Snapshot | None:
    state = None
    if self.stateful:
      while not self._free_states and self._evict_state():
        pass
      if not self._free_states:
        return None
      state = self._free_states.popleft()
      save_state(state)
    tail_page = pages[length // self.page_size] if tail else None
    if tail_page is not None:
      self.pool.cache_ref(tail_page)
    snap = _Snapshot(key, parent, tail, tail_page, state, length)
    self._snaps[key] = snap
    self._tails[key[0]].add(tail)
    if parent is not None:
      parent.children += 1
    return snap

  # ---- eviction -------------------------------------------------------------------------------

  def _remove(self, entry) -> None:
    del self._lru[entry]
    parent = entry.node if isinstance(entry, _Snapshot) else entry.parent
    if parent is not None:
      parent.children -= 1
    if isinstance(entry, _Snapshot):
      del self._snaps[entry.key]
      self._tails[entry.key[0]].discard(entry.tail)
      if entry.tail_page is not None:
        self.pool.cache_ref(entry.tail_page, -1)
      if entry.state is not None:
        self._free_states.append(entry.state)
    else:
      del self._nodes[entry.key]
      self.pool.cache_ref(entry.page, -1)

  def _evict_leaf(self, want: Callable) -> bool:
    for entry in self._lru:
      if (isinstance(entry, _Snapshot) or entry.children == 0) and want(entry):
        self._remove(entry)
        return True
    return False

  def evict_one(self) -> bool:
    """Evicts the least recently used leaf (the pool calls it when no page is free)."""
    with self.lock:
      return self._evict_leaf(lambda entry: True)

  def _evict_state(self) -> bool:
    return self._evict_leaf(lambda e: isinstance(e, _Snapshot) and e.state is not None)

  def clear(self) -> None:
    """Drops every entry (pages still used by sequences stay with them)."""
    with self.lock:
      for entry in list(self._lru):
        self._remove(entry)

  @property
  def entries(self) -> int:
    return len(self._lru)
