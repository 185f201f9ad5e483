"""A script run by the TPU / GPU compiler venv's python (tmax_jax.aot.toolchain), the one way the
accelerator-compile tests run their compiles: ordinary test processes never load libtpu or the
CUDA plugin."""

import json
import pathlib
import subprocess

import pytest

from tmax_jax.aot import toolchain

ROOT = pathlib.Path(__file__).resolve().parents[1]


def compile_report(platform: str, script: str, *args: str, timeout_s: int = 600) -> dict:
  """`script` (`python -c`) with `args`, run from the repository root by the compiler venv's
  python -> the JSON object on its last stdout line. Skips the test when `platform`'s compiler
  ("tpu" | "gpu") is not installed; fails with the script's stderr when it exits non-zero."""
  reason = toolchain.unavailable(platform)
  if reason:
    pytest.skip(reason)
  proc = subprocess.run(
    [str(toolchain.python()), "-c", script, *args],
    cwd=ROOT,
    capture_output=True,
    text=True,
    env=toolchain.environ(),
    timeout=timeout_s,
    check=False,
  )
  assert proc.returncode == 0, proc.stderr[-4000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])
