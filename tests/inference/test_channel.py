"""channel.StepChannel: JetStream's AsyncMultifuture interface fed from another thread, plus
take_ready (what the Rollout service coalesces into one message)."""

import asyncio
import threading
from concurrent import futures

import pytest

from tmax_jax.inference.channel import StepChannel


def _feed(channel, items, end=None):
  def run():
    for item in items:
      channel.add_result(item)
    if end is None:
      channel.close()
    else:
      channel.set_exception(end)

  thread = threading.Thread(target=run)
  thread.start()
  thread.join()


def test_results_in_order_then_closed():
  async def go():
    channel = StepChannel()
    _feed(channel, [1, 2, 3])
    first = await channel.__anext__()
    rest = channel.take_ready()  # everything delivered, not the end marker
    tail = [x async for x in channel]
    return first, rest, tail, channel.done()

  assert asyncio.run(go()) == (1, [2, 3], [], True)


def test_take_ready_stops_at_the_end_and_the_exception_follows():
  async def go():
    channel = StepChannel()
    _feed(channel, ["a"], end=RuntimeError("server shutting down"))
    await asyncio.sleep(0)  # let the thread's callbacks run
    assert channel.take_ready() == ["a"] and channel.take_ready() == []
    with pytest.raises(RuntimeError, match="shutting down"):
      await channel.__anext__()

  asyncio.run(go())


def test_cancel_is_seen_by_both_sides():
  async def go():
    channel = StepChannel()
    waiter = asyncio.ensure_future(channel.__anext__())
    await asyncio.sleep(0)
    channel.cancel()
    with pytest.raises(futures.CancelledError):
      await waiter
    return channel.cancelled()

  assert asyncio.run(go())
