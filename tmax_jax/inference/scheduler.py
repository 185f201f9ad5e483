"""One replica's continuous-batching scheduler over paged KV memory (no JetStream import).

Each `step()`:
  1. takes new/cancelled requests from the inbox (thread-safe `submit` / `cancel`);
  2. admits waiting requests in arrival order while a slot is free and the pool can reserve every
     page the request may need (prompt + max_tokens + 1); otherwise they wait. A prompt that shares
     most of its tokens with one still prefilling is held back one prefill so it finds that prefix
     in the cache (G samples of one task arrive together);
  3. runs ONE prefill program over up to `prefill_batch` admitted prompts, each advancing by up to
     `prefill_chunk` tokens: several requests prefill together and a long prompt is prefilled in
     chunks interleaved with decode steps, so running requests keep streaming;
  4. dispatches one decode call for every decoding slot (`decode_steps` steps each: one dispatch
     and one read-back per that many tokens), and only then reads back the previous call's
     tokens (one call of lag keeps the host off the device's critical path; a slot that finished
     runs one extra step, writing its last token, whose output is dropped; within a call a slot
     stops by itself, decode.py);
  5. on completion registers the sequence's pages (and Qwen3.5 state) in the prefix cache, frees
     its pages and slot.
A prompt of n tokens writes tokens[0:n-1] in prefill and keeps tokens[n-1] pending: every emitted
token comes from a decode step (JetStream 0.2.2's protocol).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from tmax_jax.inference import decode, paged, sampling
from tmax_jax.models import paged_attention

log = logging.getLogger(__name__)


@dataclasses.dataclass(eq=False)
class Sequence:
  """A request inside a replica. `handle` is the caller's object (returned in events)."""

  handle: Any
  prompt: list
  max_tokens: int
  params: sampling.SamplingParams
  stop_ids: frozenset = frozenset()
  topk: int = 0
  is_cancelled: Callable[[], bool] = lambda: False
  slot: int = -1
  pages: list = dataclasses.field(default_factory=list)
  reserved: int = 0
  written: int = 0  # tokens in pages/state (at most: decode calls in flight may stop early)
  position: int = 0  # position of the pending token after the calls dispatched (at most)
  dispatched: int = 0  # decode steps dispatched that may be live (the device's counter + 1)
  generated: list = dataclasses.field(default_factory=list)
  cached_tokens: int = 0  # prompt tokens the prefix cache supplied
  version: int = -1  # weight version at admission (its KV is reusable only under that version)
  done: bool = False


@dataclasses.dataclass(frozen=True)
class Event:
  """One generated token of a sequence (token None: the slot ran out of cache, 'length')."""

  handle: Any
  token: int | None
  logprob: float
  version: int
  finish_reason: str  # '' | 'stop' | 'length' | 'cancelled' (dropped: no token)
  topk_ids: tuple = ()
  topk_logprobs: tuple = ()


@dataclasses.dataclass(frozen=True)
class SchedulerConfig:
  prefill_chunk: int = 256
  prefill_batch: int = 8
  prefix_cache: bool = True
  min_chunk: int = 16  # smallest prefill chunk bucket (compile once per power of two above it)
  # Decode steps per dispatched program: fewer host round trips per token (and k tokens per
  # message on a stream), admission and weight swaps wait up to k steps.
  decode_steps: int = 4
  # Every prefill and decode program at its largest shape (chunk, rows, block-table pages): a
  # request's numbers then do not depend on which others share its steps (XLA's reductions over a
  # bucketed axis round differently at another length). For deterministic runs; slower.
  batch_invariant: bool = False


def bucket(n: int, cap: int, lo: int = 1) -> int:
  """Smallest power of two >= max(n, lo), at most cap (one compiled program per bucket)."""
  b = lo
  while b < n:
    b *= 2
  return min(b, cap)


class Scheduler:
  """Slots, pages, prefix cache and the step loop of one replica."""

  def __init__(
    self, core: decode.PagedCore, box, cfg: SchedulerConfig, emit: Callable[[list[Event]], None]
  ):
    self.core, self.box, self.cfg, self.emit = core, box, cfg, emit
    shape = core.shape
    self.page_size = shape.page_size
    # Block tables are cut to a power-of-two number of pages, at least one attention block (one
    # compiled program covers every sequence shorter than that).
    self._min_pages = min(shape.max_pages, max(1, paged_attention.BLOCK_TOKENS // shape.page_size))
    self.pool = paged.PagePool(shape.num_pages)
    self.cache = (
      paged.PrefixCache(self.pool, shape.page_size, shape.state_blocks, core.stateful)
      if cfg.prefix_cache
      else None
    )
    self.state = core.init_state()
    self.table = np.zeros((shape.slots, shape.max_pages), np.int32)
    self.free_slots = collections.deque(range(shape.slots))
    self.waiting: collections.deque[Sequence] = collections.deque()
    self.prefilling: list[Sequence] = []
    self.decoding: dict[int, Sequence] = {}
    self.inbox: queue.SimpleQueue = queue.SimpleQueue()
    self._pending = None
    self._dropped: list[Event] = []
    self._cache_version = box.version  # 'cancelled' events of requests dropped this step
    self.stats: collections.Counter = collections.Counter()
    self.trace: list | None = (
      None  # [] records ("prefill", rows, tokens) / ("decode", slots, steps)
    )
    self._status_lock = threading.Lock()
    self._status: dict[str, int] = {}
    self._shapes_called: set[tuple] = set()  # (program, *shape) called at least once
    self._publish_status()

  # ---- thread-safe entry points ---------------------------------------------------------------

  def submit(self, seq: Sequence) -> None:
    """Queues `seq`; a ValueError names what the replica cannot serve (too many stop ids)."""
    decode.slot_arrays(seq.params, seq.max_tokens, seq.stop_ids, self.core.shape.max_stop)
    self.inbox.put(seq)

  def status(self) -> dict[str, int]:
    with self._status_lock:
      return dict(self._status, waiting=self._status["waiting"] + self.inbox.qsize())

  def load(self) -> int:
    s = self.status()
    return s["waiting"] + s["prefilling"] + s["active"]

  def cached_prefix(self, tokens) -> int:
    return 0 if self.cache is None else self.cache.peek(tokens, len(tokens) - 1)

  # ---- the loop -------------------------------------------------------------------------------

  @property
  def busy(self) -> bool:
    return bool(self.waiting or self.prefilling or self.decoding or self._pending)

  def step(self, timeout: float = 0.0) -> None:
    """One iteration; when idle, waits up to `timeout` seconds for a request first."""
    self._drain(0.0 if self.busy else timeout)
    self._check_version()
    self._admit()
    if self.prefilling:
      self._prefill_once()
    pending = self._dispatch_decode() if self.decoding else None
    events: list[Event] = [] if self._pending is None else self._process(*self._pending)
    self._pending = pending
    dropped, self._dropped = self._dropped, []
    # The status first: a client holding a request's last event then sees it retired.
    self._publish_status()
    for batch in (events, dropped):
      if batch:
        self.emit(batch)

  def run_until_idle(self) -> None:
    """Steps until every submitted request has finished (tests, benchmarks)."""
    while self.busy or not self.inbox.empty():
      self.step()

  def _check_version(self) -> None:
    """Cached K/V and states were computed by the weights of their version: a weight swap
    empties the prefix cache (in-flight requests keep their pages and continue)."""
    version = self.box.version
    if self.cache is not None and version != self._cache_version:
      self.cache.clear()
      self._cache_version = version

  def _drain(self, timeout: float) -> None:
    try:
      item = self.inbox.get(timeout=timeout) if timeout > 0 else self.inbox.get_nowait()
    except queue.Empty:
      return
    while True:
      self.waiting.append(item)
      try:
        item = self.inbox.get_nowait()
      except queue.Empty:
        return

  # ---- admission ------------------------------------------------------------------------------

  def _admit(self) -> None:
    for seq in list(self.waiting):
      if seq.is_cancelled():
        self.waiting.remove(seq)
        seq.done = True
        self._dropped.append(Event(seq.handle, None, 0.0, -1, "cancelled"))
        continue
      if not self.free_slots:
        return
      if self._defer(seq):
        continue
      if not self._try_admit(seq):
        return  # pages: later requests do not overtake (no starvation of long prompts)
      self.waiting.remove(seq)

  def _defer(self, seq: Sequence) -> bool:
    """Hold back a prompt that mostly repeats one being prefilled now (its prefix will be cached
    as soon as that prefill ends) instead of prefilling the same tokens twice."""
    if self.cache is None or not self.prefilling:
      return False
    n = len(seq.prompt) - 1
    cached = self.cache.peek(seq.prompt, n)
    for other in self.prefilling:
      common = _common_prefix(seq.prompt, other.prompt, n)
      if common - cached >= max(self.page_size, n // 2):
        return True
    return False

  def _try_admit(self, seq: Sequence) -> bool:
    n, shape, ps = len(seq.prompt), self.core.shape, self.page_size
    match = self.cache.lookup(seq.prompt, n - 1) if self.cache else paged.Match()
    need = min(paged.pages_for(n + seq.max_tokens, ps), shape.max_pages) - len(match.pages)
    if not self.pool.reserve(need):
      for page in match.pages:
        self.pool.seq_ref(page, -1)
      if self.cache:
        self.cache.release_tail(match)
      return False
    seq.slot, seq.pages, seq.reserved = self.free_slots.popleft(), list(match.pages), need
    seq.written = seq.cached_tokens = match.length
    seq.version = self._cache_version
    if match.tail_page is not None:  # copy-on-write: the tail page is shared read-only
      dst = self._take(seq)
      self.state = self.core.copy_page(self.state, np.int32(match.tail_page), np.int32(dst))
      seq.pages.append(dst)
      assert self.cache is not None  # only the prefix cache hands out a tail page
      self.cache.release_tail(match)
    if match.state is not None:
      self.state = self.core.copy_state(
        self.state, np.int32(shape.slots + match.state), np.int32(seq.slot)
      )
    while len(seq.pages) < paged.pages_for(n - 1, ps):
      seq.pages.append(self._take(seq))
    self.table[seq.slot] = 0
    self.table[seq.slot, : len(seq.pages)] = seq.pages
    self.stats["cached_tokens"] += match.length
    self.stats["admitted"] += 1
    if seq.written == n - 1:
      self._start_decode(seq)
    else:
      self.prefilling.append(seq)
    return True

  def _take(self, seq: Sequence) -> int:
    page = self.pool.take()
    seq.reserved -= 1
    return page

  # ---- prefill --------------------------------------------------------------------------------

  def _prefill_once(self) -> None:
    cfg, shape, ps = self.cfg, self.core.shape, self.page_size
    for s in [s for s in self.prefilling if s.is_cancelled()]:
      self._finish(s, cancelled=True)
    rows = self.prefilling[: cfg.prefill_batch]
    if not rows:
      return
    lens = [min(len(s.prompt) - 1 - s.written, cfg.prefill_chunk) for s in rows]
    c = bucket(max(lens), cfg.prefill_chunk, min(cfg.min_chunk, cfg.prefill_chunk))
    r = 1 if len(rows) == 1 else cfg.prefill_batch  # two programs per chunk size, not log2(R)
    nb = bucket(
      max(paged.pages_for(s.written + n, ps) for s, n in zip(rows, lens, strict=True)),
      shape.max_pages,
      self._min_pages,
    )
    if cfg.batch_invariant:
      c, r, nb = cfg.prefill_chunk, cfg.prefill_batch, shape.max_pages
    tokens = np.zeros((r, c), np.int32)
    positions = np.zeros((r, c), np.int32)
    segments = np.zeros((r, c), np.int32)
    slots = np.full((r,), self.core.state_rows, np.int32)  # padding rows: out of range, dropped
    cached = np.zeros((r,), np.int32)
    table = np.zeros((r, nb), np.int32)
    for i, (s, n) in enumerate(zip(rows, lens, strict=True)):
      tokens[i, :n] = s.prompt[s.written : s.written + n]
      positions[i] = s.written + np.arange(c)
      segments[i, :n] = 1
      slots[i], cached[i], table[i] = s.slot, s.written, self.table[s.slot, :nb]
    params = self.box.get()[0]["params"]
    with self._first_call("prefill", rows=r, chunk=c, pages=nb):
      self.state = self.core.prefill(
        params, self.state, tokens, positions, segments, slots, table, cached
      )
    self.stats["prefill_calls"] += 1
    self.stats["prefill_tokens"] += sum(lens)
    if self.trace is not None:
      self.trace.append(("prefill", len(rows), sum(lens)))
    for s, n in zip(rows, lens, strict=True):
      s.written += n
      if s.written == len(s.prompt) - 1:
        self.prefilling.remove(s)
        self._register(s, s.prompt, s.written)
        self._start_decode(s)

  def _start_decode(self, seq: Sequence) -> None:
    n = len(seq.prompt)
    seq.position = n - 1
    sa = decode.slot_arrays(seq.params, seq.max_tokens, seq.stop_ids, self.core.shape.max_stop)
    sa.update(token=np.int32(seq.prompt[-1]), position=np.int32(n - 1))
    self.state = self.core.activate(
      self.state, np.int32(seq.slot), *(sa[name] for name in decode.SLOT_FIELDS)
    )
    self.decoding[seq.slot] = seq

  # ---- decode ---------------------------------------------------------------------------------

  def _dispatch_decode(self, steps: int = 0):
    """Dispatches `steps` (default: SchedulerConfig.decode_steps) decode steps of every slot,
    after taking the pages of every position they may write (live steps: see decode.py)."""
    ps, shape = self.page_size, self.core.shape
    # One step while prompts are prefilling or could be admitted: each prefill runs between two
    # decode calls, so a k-step call would hold the next prompt back k steps.
    # batch_invariant keeps k: a request's steps then run in the same program whatever shares
    # them (bit-identical numbers).
    prefill_due = self.prefilling or (self.waiting and self.free_slots) or not self.inbox.empty()
    if not steps:
      steps = 1 if prefill_due and not self.cfg.batch_invariant else self.cfg.decode_steps
    for slot, s in self.decoding.items():
      n = max(0, min(steps, s.max_tokens + 1 - s.dispatched, shape.max_len - s.position))
      s.position += n
      s.written += n
      s.dispatched += n
      while len(s.pages) < paged.pages_for(s.position, ps):
        s.pages.append(self._take(s))
        self.table[slot, len(s.pages) - 1] = s.pages[-1]
    nb = bucket(
      max((paged.pages_for(s.position, ps) for s in self.decoding.values()), default=1),
      shape.max_pages,
      self._min_pages,
    )
    if self.cfg.batch_invariant:
      nb = shape.max_pages
    served, version = self.box.get()
    with self._first_call("decode", steps=steps, pages=nb):
      self.state, data = self.core.decode_program(steps)(
        served, self.state, self.table[:, :nb].copy(), np.int32(version)
      )
    self.stats["decode_calls"] += 1
    self.stats["decode_steps"] += steps
    self.stats["peak_pages_in_use"] = max(self.stats["peak_pages_in_use"], self.pool.in_use)
    if self.trace is not None:
      self.trace.append(("decode", len(self.decoding), steps))
    return data, list(self.decoding.items())

  @contextlib.contextmanager
  def _first_call(self, program: str, **shape: int):
    """Logs around the first call of a program at a shape, which waits for XLA to compile it (a
    server's first request would otherwise wait in silence): the first shape of each program at
    INFO, the later buckets at DEBUG."""
    key = (program, *shape.items())
    if key in self._shapes_called:
      yield
      return
    first = not any(k[0] == program for k in self._shapes_called)
    self._shapes_called.add(key)
    level = logging.INFO if first else logging.DEBUG
    what = f"{program} program ({', '.join(f'{k} {v}' for k, v in shape.items())})"
    log.log(level, "compiling the %s; requests wait for it", what)
    start = time.perf_counter()
    yield
    log.log(level, "compiled the %s in %.1f s", what, time.perf_counter() - start)

  def _process(self, data, live) -> list[Event]:
    """Reads back a decode call's tokens -> their events; finished sequences are freed here."""
    data = np.asarray(data)
    events: list[Event] = []
    for step in data.reshape((-1,) + data.shape[-2:]):  # [steps, B, C]
      self._process_step(decode.decode_rows(step, self.core.shape.max_topk), live, events)
    return events

  def _process_step(self, rows, live, events: list[Event]) -> None:
    for slot, s in live:
      if s.done:
        continue
      if s.is_cancelled():
        self._finish(s, cancelled=True)
        continue
      version = int(rows["version"][slot])
      if not rows["valid"][slot]:
        events.append(Event(s.handle, None, 0.0, version, "length"))
        self._finish(s)
        continue
      token = int(rows["token"][slot])
      s.generated.append(token)
      finish = (
        "stop" if token in s.stop_ids else "length" if len(s.generated) >= s.max_tokens else ""
      )
      k = s.topk
      events.append(
        Event(
          s.handle,
          token,
          float(rows["logprob"][slot]),
          version,
          finish,
          tuple(int(i) for i in rows["topk_ids"][slot, :k]),
          tuple(float(x) for x in rows["topk_logprobs"][slot, :k]),
        )
      )
      if finish:
        self._finish(s)

  # ---- completion -----------------------------------------------------------------------------

  def _register(self, seq: Sequence, tokens, length: int) -> None:
    if self.cache is None or length < 1 or seq.version != self._cache_version:
      return

    def save(block: int) -> None:
      self.state = self.core.copy_state(
        self.state, np.int32(seq.slot), np.int32(self.core.shape.slots + block)
      )

    self.cache.insert(tokens, length, seq.pages, save if self.core.stateful else None)

  def _finish(self, seq: Sequence, cancelled: bool = False) -> None:
    """Frees the sequence's slot and pages (after registering them in the prefix cache)."""
    seq.done = True
    if cancelled:
      self._dropped.append(Event(seq.handle, None, 0.0, -1, "cancelled"))
    if self.decoding.get(seq.slot) is seq:
      del self.decoding[seq.slot]
      self.state = self.core.deactivate(self.state, np.int32(seq.slot))
    if seq in self.prefilling:
      self.prefilling.remove(seq)
    tokens = list(seq.prompt) + seq.generated
    # What the pages (and the recurrent state) hold: a finished slot stopped by itself after
    # writing its last token (decode.py), a cancelled one ran every step dispatched for it.
    length = min(seq.written, len(tokens), self.core.shape.max_len)
    if not (cancelled and self.core.stateful and seq.written > length):
      self._register(seq, tokens, length)
    for page in seq.pages:
      self.pool.seq_ref(page, -1)
    self.pool.unreserve(seq.reserved)
    seq.pages, seq.reserved = [], 0
    self.table[seq.slot] = 0
    self.free_slots.append(seq.slot)
    self.stats["finished"] += 1

  # ---- JetStream Engine API (engine.ReplicaEngine): the caller picks slots and ends requests --

  def insert_at(self, seq: Sequence, slot: int) -> None:
    """Admits `seq` into `slot` now (freeing its previous occupant) and prefills it fully."""
    old = self.decoding.get(slot) or next((s for s in self.prefilling if s.slot == slot), None)
    if old is not None:
      self._finish(old)
    self.free_slots.remove(slot)
    self.free_slots.appendleft(slot)
    if not self._try_admit(seq):
      raise RuntimeError(
        f"no KV pages for a {len(seq.prompt)}-token prompt in slot {slot}: "
        "the stock JetStream Driver needs EngineConfig.num_pages = 0 (dense)"
      )
    while seq in self.prefilling:
      self._prefill_once()

  def generate_now(self):
    """One decode step over the slots, results not read back here -> data [B, 5 + 2K]."""
    return self._dispatch_decode(1)[0]

  def _publish_status(self) -> None:
    pool = self.pool
    status = dict(
      pages_total=pool.num_pages,
      pages_used=pool.in_use,
      pages_free=pool.free,
      pages_cached=pool.evictable,
      pages_reserved=pool.reserved,
      waiting=len(self.waiting),
      prefilling=len(self.prefilling),
      active=len(self.decoding),
      prefill_tokens=self.stats["prefill_tokens"],
      cached_tokens=self.stats["cached_tokens"],
      peak_pages_in_use=self.stats["peak_pages_in_use"],
    )
    with self._status_lock:
      self._status = status


def _common_prefix(a, b, limit: int) -> int:
  n = min(len(a), len(b), limit)
  x, y = np.asarray(a[:n]), np.asarray(b[:n])
  diff = np.flatnonzero(x != y)
  return int(diff[0]) if diff.size else n
