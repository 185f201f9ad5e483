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


def test_delivered_steps_become_one_generate_response():
  """What the Rollout service sends when its stream lags: the step it read plus take_ready(), as
  one GenerateResponse (tokens, logprobs, versions and top-K concatenated in order, the finish
  reason of the last step; a finish without a token adds none)."""
  from tmax_jax.inference import driver, server

  steps = [
    driver.RLStep(5, -0.5, 0, "", (5, 1), (-0.5, -1.0)),
    driver.RLStep(7, -0.25, 1, "", (7, 2), (-0.25, -2.0)),
    driver.RLStep(None, 0.0, 1, "stop"),
  ]

  async def go():
    channel = StepChannel()
    _feed(channel, steps)
    first = await channel.__anext__()
    return server._response([first, *channel.take_ready()], "abc")

  r = asyncio.run(go())
  assert list(r.token_ids) == [5, 7] and list(r.policy_versions) == [0, 1]
  assert list(r.logprobs) == [-0.5, -0.25] and r.finish_reason == "stop"
  assert list(r.topk_ids) == [5, 1, 7, 2] and list(r.topk_logprobs) == [-0.5, -1.0, -0.25, -2.0]
  assert r.instance_id == "abc"
