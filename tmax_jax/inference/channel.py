"""One request's stream of steps, from the driver's detokenize thread to the server's event loop.

`StepChannel` keeps the interface of JetStream's `AsyncMultifuture` (what `ActiveRequest.
return_channel` holds: add_result / close / set_exception / cancel from any thread, `async for`
on the loop) and adds `take_ready()`: every step already delivered behind the one just read. The
Rollout service sends those in one GenerateResponse (the proto's fields are repeated), so when the
server's event loop falls behind the decode loop a stream catches up in one message instead of one
per token (on a 2-core box the gRPC path costs ~200 us of CPU per token,
docs/design/inference.md "Decode profile"). A step is never held back waiting for others.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from concurrent import futures
from typing import Any


class _End:
  """The stream's last item: the exception `__anext__` raises (StopAsyncIteration = closed)."""

  def __init__(self, exception: BaseException):
    self.exception = exception


class StepChannel:
  """A buffered, thread-safe stream of results into the event loop it was created on."""

  def __init__(self) -> None:
    self._loop = asyncio.get_running_loop()
    self._cancelled = threading.Event()
    self._done = threading.Event()
    self._items: collections.deque = collections.deque()
    self._wake = asyncio.Event()

  # ---- producer side (any thread) ------------------------------------------------------------

  def add_result(self, result: Any) -> None:
    self._loop.call_soon_threadsafe(self._put, result)

  def set_exception(self, exception: BaseException) -> None:
    """Ends the stream with `exception` after the results added before it."""
    self._loop.call_soon_threadsafe(self._put, _End(exception))
    self._loop.call_soon_threadsafe(self._done.set)

  def close(self) -> None:
    self.set_exception(StopAsyncIteration())

  def cancel(self, unused: Any = None) -> None:
    """Cancels the request (the signature grpc.aio's add_done_callback calls)."""
    del unused
    self._cancelled.set()
    self.set_exception(futures.CancelledError())

  def cancelled(self) -> bool:
    return self._cancelled.is_set()

  def done(self) -> bool:
    return self._done.is_set()

  # ---- consumer side (the event loop) --------------------------------------------------------

  def _put(self, item: Any) -> None:
    self._items.append(item)
    self._wake.set()

  def __aiter__(self) -> StepChannel:
    return self

  async def __anext__(self) -> Any:
    while not self._items:
      self._wake.clear()
      await self._wake.wait()
    item = self._items.popleft()
    if isinstance(item, _End):
      raise item.exception
    return item

  def take_ready(self) -> list:
    """The results already delivered, in order, up to (not including) the stream's end."""
    out = []
    while self._items and not isinstance(self._items[0], _End):
      out.append(self._items.popleft())
    return out
