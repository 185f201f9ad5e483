"""launch/serve.py as a real subprocess: kill mid-stream, restart, clean SIGTERM shutdown."""

import asyncio
import pathlib
import signal
import subprocess
import time

import pytest

from tests.inference import serve_process
from tmax_jax.inference import client as client_lib
from tmax_jax.inference import sampling
from tmax_jax.inference.server import free_port


def _start(port: int, ready: pathlib.Path, log: pathlib.Path) -> subprocess.Popen:
  return serve_process.start(
    port,
    ready,
    log,
    "--config.serving.engine.max_len=4096",
    "--config.serving.engine.max_concurrent_decodes=2",
  )


@pytest.mark.slow
def test_kill_mid_stream_then_restart(tmp_path):
  port = free_port()
  address = f"127.0.0.1:{port}"
  ready, log = tmp_path / "ready.json", tmp_path / "server.log"
  proc = _start(port, ready, log)
  timeout_s = 30.0

  async def until_killed(c):
    task = asyncio.create_task(c.generate([1, 2, 3], 4000, sampling.SamplingParams(seed=0)))
    while (await c.status()).active_requests < 1:
      await asyncio.sleep(0.02)
    await asyncio.sleep(0.3)
    proc.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    with pytest.raises(client_lib.ServerUnavailableError, match=address) as err:
      await task
    return time.monotonic() - killed_at, str(err.value)

  async def after_restart(c):
    await c.wait_until_ready(timeout_s=60)
    return await c.generate([4, 5, 6], 8, sampling.SamplingParams(temperature=0.0))

  async def go():
    cfg = client_lib.ClientConfig(timeout_s=timeout_s, max_attempts=4, backoff_s=0.2)
    async with client_lib.RolloutClient(address, cfg) as c:
      elapsed, message = await until_killed(c)
      proc.wait(timeout=10)
      restarted = _start(port, ready, log)
      try:
        out = await after_restart(c)  # the same client picks the new server up
      finally:
        restarted.send_signal(signal.SIGTERM)
        code = restarted.wait(timeout=30)
      return elapsed, message, out, code

  try:
    elapsed, message, out, code = asyncio.run(go())
  finally:
    proc.kill()
  assert elapsed < timeout_s, message
  assert "unavailable" in message
  assert len(out.token_ids) == 8 and out.finish_reason == "length"
  assert code == 0 and "STOPPED" in log.read_text()  # SIGTERM -> clean shutdown
