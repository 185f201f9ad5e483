"""The async RL loop SIGKILLed mid-rollouts and started again (issue 32, invariant 2), against a
separately launched server that outlives it: the restart resumes from the last checkpoint even
though the server holds a newer version than that checkpoint (a killed trainer pushes its weights
before it checkpoints them; here a real push puts the server ahead), no consumed task position is
lost or repeated (the rollout log against the final checkpoint's position), the steps continue
from the checkpoint, and the killed run's sandboxes are gone after the next start."""

import asyncio
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import require_base_rootfs
from tests.inference import serve_process
from tests.loop.rl_helpers import tiny_rl_config
from tests.loop.test_rl_fault import SERVE
from tmax_jax.agents.episode import EpisodeConfig
from tmax_jax.inference.client import RolloutClient
from tmax_jax.inference.server import free_port
from tmax_jax.loop import policy
from tmax_jax.models import hf_io
from tmax_jax.sandbox import census, runtime
from tmax_jax.train.metrics import read_jsonl

ROOT = pathlib.Path(__file__).resolve().parents[2]
STEPS = 5


def _trainer(run: pathlib.Path, address: str) -> subprocess.Popen:
  flags = [f"--config.output_dir={run}", f"--config.steps={STEPS}"]
  flags.append(f"--config.serving.address={address}")
  return subprocess.Popen(
    [sys.executable, "launch/train_rl.py", "--config=tests/loop/rl_tiny_config.py", *flags],
    cwd=ROOT,
    env=dict(os.environ, JAX_PLATFORMS="cpu"),
    stdout=subprocess.PIPE,
    stderr=subprocess.STDOUT,
    text=True,
  )


def _checkpoints(run: pathlib.Path) -> list[int]:
  return sorted(int(p.name) for p in (run / "ckpt").glob("*") if p.name.isdigit())


async def _push_ahead(address: str, path: pathlib.Path, version: int) -> int:
  async with RolloutClient(address) as c:
    return await c.update_weights(path=str(path), version=version)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_async_run_killed_and_restarted_loses_and_repeats_nothing(tmp_path):
  require_base_rootfs()
  port = free_port()
  address = f"127.0.0.1:{port}"
  ready, log, run = tmp_path / "ready.json", tmp_path / "server.log", tmp_path / "run"
  server = serve_process.start(port, ready, log, *SERVE)
  try:
    first = _trainer(run, address)
    tag = runtime.owner_tag(first.pid)
    deadline = time.monotonic() + 900
    while (len(_checkpoints(run)) < 2 or not census.take({tag}).processes) and first.poll() is None:
      assert time.monotonic() < deadline, "the first run made no progress"
      time.sleep(0.05)
    first.send_signal(signal.SIGKILL)  # two steps checkpointed, episodes in their sandboxes
    out = first.communicate(timeout=60)[0]
    assert first.returncode == -signal.SIGKILL, out[-3000:]
    ckpt = _checkpoints(run)[-1]
    killed_lines = len((run / "rollouts.jsonl").read_text().splitlines())
    # the server ahead of the checkpoint, as after a push the killed run never checkpointed
    cfg = tiny_rl_config(run, STEPS)
    model_cfg, params, _ = policy.load_policy(cfg.model, EpisodeConfig())
    hf_io.save_pretrained(tmp_path / "ahead", params, model_cfg)
    assert asyncio.run(_push_ahead(address, tmp_path / "ahead", ckpt + 3)) == ckpt + 3

    again = _trainer(run, address)
    out = again.communicate(timeout=1500)[0]
    assert again.returncode == 0, out[-4000:]
    assert f"resumed from step {ckpt}" in out, out[-4000:]
    leftovers = census.take({tag})
  finally:
    server.kill()
  assert leftovers.total == 0, leftovers

  lines = [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines()]
  timeline = [r for r in lines[:killed_lines] if r["step"] <= ckpt] + lines[killed_lines:]
  assert min(r["step"] for r in lines[killed_lines:]) == ckpt + 1  # it went on from there
  assert sorted({r["step"] for r in timeline}) == list(range(1, STEPS + 1))
  indices = [r["index"] for r in timeline]
  assert len(indices) == len(set(indices)), "a consumed task position was repeated"
  data = json.loads((run / "ckpt" / str(STEPS) / "data" / "metadata").read_text())
  assert set(range(data["next"])) | set(data["done"]) == set(indices), "a position was lost"
  metrics = {m["step"]: m for m in read_jsonl(run / "metrics.jsonl")}
  assert all(metrics[s]["policy_version"] == s for s in range(ckpt + 1, STEPS + 1))
