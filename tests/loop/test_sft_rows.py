"""SFT data is checked against the row length when it is loaded (issue 45 point 6): a trajectory
longer than seq_len (or shorter than 2 tokens) is refused, naming the file, the line and its
length against seq_len, before the model loads (preflight, run_sft) and never at its batch."""

import json
import pathlib
import subprocess
import sys

import pytest

from tmax_jax import errors
from tmax_jax.agents import oracle_data
from tmax_jax.loop import preflight
from tmax_jax.loop.config import ModelSpec, SFTConfig
from tmax_jax.loop.sft import run_sft

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _jsonl(path: pathlib.Path, lengths: list[int]) -> pathlib.Path:
  lines = [json.dumps({"tokens": [1] * n, "loss_mask": [1] * n}) for n in lengths]
  path.write_text("\n".join(lines[:1] + [""] + lines[1:]) + "\n")  # a blank line 2
  return path


def test_a_trajectory_longer_than_the_row_is_named_by_line(tmp_path):
  data = _jsonl(tmp_path / "t.jsonl", [40, 64, 65, 10])
  assert len(oracle_data.read_jsonl(data)) == 4  # no row given: lengths are not checked
  assert len(oracle_data.read_jsonl(data, seq_len=65)) == 4
  with pytest.raises(errors.UserError, match=rf"^{data}:4: a trajectory of 65 tokens does not "):
    oracle_data.read_jsonl(data, seq_len=64)
  cfg = SFTConfig(trajectories=str(data), seq_len=64)
  with pytest.raises(errors.ConfigError, match=r"^config\.trajectories: .*:4: .* seq_len=64"):
    preflight.check_inputs(cfg)
  short = _jsonl(tmp_path / "s.jsonl", [3, 1])
  with pytest.raises(errors.UserError, match=rf"{short}:3: a trajectory of 1 tokens"):
    oracle_data.read_jsonl(short, seq_len=64)


def test_run_sft_refuses_before_the_model_loads(tmp_path):
  """The checkpoint does not exist: the run reaches it only after the data was checked."""
  data = _jsonl(tmp_path / "t.jsonl", [40, 100])
  cfg = SFTConfig(
    model=ModelSpec(checkpoint=str(tmp_path / "no-checkpoint")),
    trajectories=str(data),
    seq_len=64,
    output_dir=str(tmp_path / "out"),
  )
  with pytest.raises(errors.UserError, match=r":3: a trajectory of 100 tokens .* seq_len=64"):
    run_sft(cfg)
  assert not (tmp_path / "out").exists()
  records = [{"tokens": [1] * 70, "loss_mask": [1] * 70, "task": "t0"}]
  ok = SFTConfig(model=ModelSpec(checkpoint=str(tmp_path / "no")), seq_len=64)
  with pytest.raises(errors.UserError, match=r"record 1 \(task t0\): a trajectory of 70 tokens"):
    run_sft(ok, model_cfg=object(), params={}, records=records)


def test_the_launcher_says_error_and_exits_2(tmp_path):
  """The shipped TerminalHorizon SFT config (seq_len 65,536) on a JSONL with a longer record: exit
  2 before the model loads (the checkpoint's weights are a stand-in nothing could load)."""
  data = _jsonl(tmp_path / "t.jsonl", [100, 65537])
  ckpt = tmp_path / "ckpt"
  ckpt.mkdir()
  (ckpt / "config.json").write_text(json.dumps({"model_type": "qwen3_5"}))
  (ckpt / "model.safetensors").write_bytes(b"")
  proc = subprocess.run(
    [
      sys.executable,
      "launch/train_sft.py",
      "--config=configs/sft_terminal_horizon.py",
      f"--config.model.checkpoint={ckpt}",
      f"--config.trajectories={data}",
    ],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert proc.returncode == 2, proc.stderr
  assert "Traceback" not in proc.stderr
  assert f"error: config.trajectories: {data}:3: a trajectory of 65537 tokens" in proc.stderr
  assert "seq_len=65536" in proc.stderr
