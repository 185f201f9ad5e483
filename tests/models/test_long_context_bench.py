"""The long-context bench scripts' CPU modes run end to end (slow: they compile several steps)."""

import json
import pathlib
import subprocess
import sys

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench"


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
  proc = subprocess.run(
    [sys.executable, str(BENCH / script), *args], capture_output=True, text=True, timeout=1800
  )
  assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
  return proc


@pytest.mark.slow
@pytest.mark.full  # CI's room for the TPU compiles (docs/design/ci.md): a bench smoke run, 368 s
def test_long_context_bench_tiny(tmp_path):
  out = tmp_path / "lc.jsonl"
  _run("long_context.py", "--tiny", "--repeats", "1", "--out", str(out))
  rows = [json.loads(line) for line in out.read_text().splitlines()]
  # 2 models x (2 kernels x 2 lengths + 3 sequence-axis sizes)
  assert len(rows) == 14 and all(r["temp_mib"] > 0 and r["tokens_per_s"] > 0 for r in rows)
  per_device = {(r["model"], r["sequence"]): r["temp_mib"] for r in rows if r["sequence"] > 1}
  assert per_device[("qwen3_5", 4)] < per_device[("qwen3_5", 2)]


@pytest.mark.full  # out of CI's slow run: docs/design/ci.md (python3 -m pytest -m full)
@pytest.mark.slow
def test_gpu_long_context_script_tiny(tmp_path):
  out = tmp_path / "gpu.jsonl"
  proc = _run("gpu_long_context.py", "--tiny", "--out", str(out))
  rows = [json.loads(line) for line in out.read_text().splitlines()]
  steps = {r["impl"]: r for r in rows if r["check"] == "train_step"}
  assert steps["cudnn"]["status"].startswith("skipped: needs a GPU"), proc.stdout
  assert steps["blockwise"]["status"] == "ok" and steps["blockwise"]["tokens_per_s"] > 0
  assert any(
    r["check"] == "parity" and r["kernel"] == "blockwise" and r["status"] == "ok" for r in rows
  )
