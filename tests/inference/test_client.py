"""Client behaviour without a server: bounded retries and a clear error within the deadline."""

import asyncio
import time

import pytest

from tmax_jax.inference import client as client_lib
from tmax_jax.inference.server import free_port


def test_no_server_raises_clear_error_within_timeout():
  address = f"127.0.0.1:{free_port()}"
  cfg = client_lib.ClientConfig(timeout_s=3.0, max_attempts=100, backoff_s=0.05)

  async def go():
    async with client_lib.RolloutClient(address, cfg) as c:
      t0 = time.monotonic()
      with pytest.raises(client_lib.ServerUnavailableError) as err:
        await c.generate([1, 2, 3], 4)
      return time.monotonic() - t0, str(err.value)

  elapsed, message = asyncio.run(go())
  assert elapsed < 3.0 + 0.5
  assert address in message and "UNAVAILABLE" in message
  assert "attempt" in message


def test_attempts_are_bounded():
  address = f"127.0.0.1:{free_port()}"
  cfg = client_lib.ClientConfig(timeout_s=30.0, max_attempts=3, backoff_s=0.01)

  async def go():
    async with client_lib.RolloutClient(address, cfg) as c:
      t0 = time.monotonic()
      with pytest.raises(client_lib.ServerUnavailableError, match="after 3 attempt"):
        await c.generate([1], 1)
      return time.monotonic() - t0

  assert asyncio.run(go()) < 5.0
