"""Shared helpers for tests/tasks (a plain module, not a conftest, to avoid clashes): run a generated checker on the host, free ports."""

import json
import os
import pathlib
import socket
import subprocess
import sys


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def run_checker_on_host(tests: dict, tmp: pathlib.Path) -> tuple[dict, str]:
  """Runs a generated tests/ bundle's checker.py on the host (logs under tmp/logs) -> (reward.json, stdout)."""
  tdir, logs = tmp / "tests", tmp / "logs"
  tdir.mkdir(exist_ok=True)
  for name, data in tests.items():
    (tdir / name).write_bytes(data)
  for f in logs.glob("*"):
    f.unlink()
  env = {**os.environ, "TMAX_VERIFIER_LOGS": str(logs)}
  proc = subprocess.run([sys.executable, str(tdir / "checker.py"), str(tdir / "spec.json")], env=env,
                        capture_output=True, text=True, timeout=120)
  out = proc.stdout + proc.stderr
  if proc.returncode != 0:
    raise RuntimeError(f"checker crashed:\n{out}")
  return json.loads((logs / "reward.json").read_text()), out
