"""SFT through the shared step driver: a run SIGKILLed after a checkpoint and restarted resumes at
that step with the same data position (epoch and batch) and ends bit-identical to an uninterrupted
run; the learning rate follows the run's own step count."""

import os
import pathlib
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from tmax_jax.json_io import write_jsonl_atomic
from tmax_jax.models import hf_io
from tmax_jax.train.metrics import read_jsonl

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFIG = "tests/loop/sft_tiny_config.py"


def _records(n: int, seed: int = 0) -> list[dict]:
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(n):
    length = int(rng.integers(16, 100))
    mask = [0] * (length // 3) + [1] * (length - length // 3)
    out.append({"tokens": rng.integers(0, 5000, length).tolist(), "loss_mask": mask})
  return out


def _launch(run: pathlib.Path, data: pathlib.Path) -> subprocess.Popen:
  cmd = [
    sys.executable,
    str(ROOT / "launch" / "train_sft.py"),
    f"--config={CONFIG}",
    f"--config.output_dir={run}",
    f"--config.trajectories={data}",
  ]
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=1")
  return subprocess.Popen(
    cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
  )


@pytest.mark.slow  # the default suite's budget (docs/design/ci.md)
@pytest.mark.timeout(1800)
def test_sft_sigkill_then_restart_is_bit_identical(tmp_path):
  data = tmp_path / "sft.jsonl"
  write_jsonl_atomic(_records(10), data)  # 3 batches of 4 per epoch, 2 epochs: 6 steps
  full = _launch(tmp_path / "full", data)
  out = full.communicate(timeout=900)[0]
  assert full.returncode == 0, out[-4000:]
  killed = _launch(tmp_path / "killed", data)
  mark = tmp_path / "killed" / "ckpt" / "4"  # mid epoch 2: the position is (epoch 1, batch 1)
  deadline = time.monotonic() + 900
  while not mark.exists() and killed.poll() is None and time.monotonic() < deadline:
    time.sleep(0.02)
  assert mark.exists(), killed.communicate()[0][-4000:]
  killed.send_signal(signal.SIGKILL)
  killed.communicate(timeout=60)
  assert killed.returncode == -signal.SIGKILL
  assert not (tmp_path / "killed" / "hf").exists()  # no export from a killed run
  again = _launch(tmp_path / "killed", data)
  out = again.communicate(timeout=900)[0]
  assert again.returncode == 0, out[-4000:]
  assert "sft: resumed from step" in out, out[-4000:]
  full_m = read_jsonl(tmp_path / "full" / "metrics.jsonl")
  killed_m = {m["step"]: m for m in read_jsonl(tmp_path / "killed" / "metrics.jsonl")}
  assert [m["step"] for m in full_m] == [1, 2, 3, 4, 5, 6]
  for m in full_m:  # a step both attempts wrote has the same loss; every step was written once
    assert killed_m[m["step"]]["loss"] == m["loss"], m["step"]
    assert killed_m[m["step"]]["data/epoch"] == m["data/epoch"]
  a, b = (hf_io.load_pretrained(tmp_path / run / "hf")[1] for run in ("full", "killed"))
  for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(a), jax.tree.leaves(b), strict=True):
    np.testing.assert_array_equal(np.asarray(y), np.asarray(x), err_msg=jax.tree_util.keystr(path))
