"""launch/serve.py as a real subprocess on a fixed loopback port (kill/restart tests)."""

import json
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]


def start(
  port: int,
  ready: pathlib.Path,
  log: pathlib.Path,
  *overrides: str,
  config: str = "configs/serve_tiny.py",
  timeout_s: float = 300,
) -> subprocess.Popen:
  """Starts the server and waits for its ready file; its output is appended to `log`."""
  ready.unlink(missing_ok=True)
  cmd = [
    sys.executable,
    str(ROOT / "launch/serve.py"),
    f"--config={ROOT / config}",
    f"--config.serving.port={port}",
    f"--config.ready_file={ready}",
    *overrides,
  ]
  proc = subprocess.Popen(
    cmd,
    cwd=ROOT,
    stdout=log.open("a"),
    stderr=subprocess.STDOUT,
    env=dict(os.environ, JAX_PLATFORMS="cpu"),
  )
  deadline = time.monotonic() + timeout_s
  while not ready.exists():
    if proc.poll() is not None or time.monotonic() > deadline:
      proc.kill()
      raise AssertionError(f"server did not start; log:\n{log.read_text()[-3000:]}")
    time.sleep(0.2)
  assert json.loads(ready.read_text())["address"] == f"127.0.0.1:{port}"
  return proc
