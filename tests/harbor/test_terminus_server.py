"""Our model under Harbor's harness (slow): launch/harbor_eval.py serves a tiny Qwen3 checkpoint
(real Qwen3 tokenizer) with the OpenAI-compatible API and runs Harbor's terminus-2 on three tasks x
two turns in our plugin environment: every request answered (usage counted, no protocol error),
Harbor's trial results and ATIF trajectories written. The ATIF files then become SFT records that
train one step."""

import json
import math
import os
import subprocess
import sys

import pytest

from tests.conftest import require_base_rootfs
from tests.harbor.harbor_helpers import require_harbor, stop_biased_checkpoint, write_tasks
from tmax_jax import tokenizers
from tmax_jax.agents import oracle_data
from tmax_jax.harbor import trajectories
from tmax_jax.loop.config import MeshConfig, ModelSpec, SFTConfig
from tmax_jax.loop.sft import run_sft
from tmax_jax.train.config import LossConfig, OptimizerConfig, TrainConfig

pytestmark = pytest.mark.slow
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TURNS = 2


def test_terminus2_against_our_server_then_sft(tmp_path):
  require_harbor()
  require_base_rootfs()
  ckpt = stop_biased_checkpoint(tmp_path / "ckpt")
  tasks = write_tasks(tmp_path / "tasks", levels=(0, 1, 2))
  cmd = [
    sys.executable,
    os.path.join(ROOT, "launch/harbor_eval.py"),
    "--serve=" + os.path.join(ROOT, "configs/serve_tiny.py"),
    f"--serve.model.checkpoint={ckpt}",
    "--serve.serving.port=0",
    "--serve.serving.engine.max_len=2048",
    "--serve.serving.engine.max_prefill_length=2048",
    "--config=" + os.path.join(ROOT, "configs/harbor_eval.py"),
    f"--config.tasks={tasks}",
    f"--config.jobs_dir={tmp_path / 'jobs'}",
    "--config.job_name=t2",
    "--config.n_concurrent=3",
    f"--config.agent_kwargs=('max_turns={TURNS}', 'record_terminal_session=false')",
  ]
  run = subprocess.run(cmd, capture_output=True, text=True, timeout=1500, check=False)
  assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
  summary = json.loads(run.stdout.strip().splitlines()[-1])
  assert (summary["trials"], summary["errors"]) == (3, 0), summary
  job = tmp_path / "jobs" / "t2"
  trials = sorted(p for p in job.iterdir() if (p / "result.json").is_file())
  assert len(trials) == 3
  for trial in trials:
    result = json.loads((trial / "result.json").read_text())
    assert result["exception_info"] is None, result["exception_info"]
    assert result["verifier_result"]["rewards"] == {"reward": 0.0}
    agent = result["agent_result"]
    assert agent["metadata"]["n_episodes"] == TURNS
    assert len(agent["metadata"]["api_request_times_msec"]) == TURNS  # every request answered
    assert agent["n_input_tokens"] > 0 and agent["n_output_tokens"] > 0  # usage came back
    atif = json.loads((trial / "agent" / "trajectory.json").read_text())
    steps = [s for s in atif["steps"] if s["source"] == "agent"]
    assert len(steps) == TURNS and all(s["metrics"]["completion_tokens"] > 0 for s in steps)

  tok = tokenizers.load_tokenizer("qwen3")
  records = trajectories.job_records(job, tok)
  assert len(records) == 3 and all(sum(r["loss_mask"]) > 0 for r in records)
  path = tmp_path / "records.jsonl"
  oracle_data.write_jsonl(records, path)
  tiny = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=1,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=16,
    tie_word_embeddings=True,
  )
  sft = SFTConfig(
    model=ModelSpec(preset="qwen3-0.6b", overrides=tiny),
    trajectories=str(path),
    train=TrainConfig(
      optimizer=OptimizerConfig(learning_rate=1e-3, total_steps=1, warmup_steps=0),
      loss=LossConfig(policy_loss="sft"),
      global_batch=1,
      logprob_chunk_size=512,
      loss_tokens_per_row=max(sum(r["loss_mask"]) for r in records),
    ),
    steps=1,
    seq_len=max(len(r["tokens"]) for r in records),
    mesh=MeshConfig(num_devices=1),
    output_dir=str(tmp_path / "sft"),
  )
  (metrics,) = run_sft(sft).metrics
  assert math.isfinite(metrics["loss"]) and metrics["loss"] > 0 and metrics["grad_norm"] > 0
