"""launch/train_rl.py as real processes on fake CPU devices (real sandboxes, real servers):
2 processes x 4 devices under jax.distributed (gloo) run the loop end to end, and their state
restores on 1 process x 8 devices; in deterministic mode a run SIGKILLed mid-step and restarted
ends bit-identical to an uninterrupted one."""

import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from tests.conftest import SLOW_COLLECTIVE_FLAGS, require_base_rootfs
from tests.loop.rl_helpers import assert_same_training, tiny_rl_config
from tmax_jax.loop.config import MeshConfig
from tmax_jax.loop.rl import run_rl
from tmax_jax.models import hf_io
from tmax_jax.train.metrics import read_jsonl

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFIG = "tests/loop/rl_tiny_config.py"


def _env(devices: int, **extra) -> dict:
  return dict(
    os.environ,
    JAX_PLATFORMS="cpu",
    XLA_FLAGS=f"--xla_force_host_platform_device_count={devices} {SLOW_COLLECTIVE_FLAGS}",
    **extra,
  )


def _launch(flags: list[str], env: dict, **kw) -> subprocess.Popen:
  cmd = [sys.executable, str(ROOT / "launch" / "train_rl.py"), f"--config={CONFIG}", *flags]
  return subprocess.Popen(
    cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw
  )


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _export_params(run: pathlib.Path):
  return hf_io.load_pretrained(run / "hf")[1]


@pytest.mark.slow  # the default suite's budget (docs/design/ci.md)
def test_two_processes_run_the_loop_then_restore_on_one(tmp_path):
  """Disaggregated on each process (2 training + 2 serving devices): the trainer mesh data=2 x
  fsdp=2 spans both processes; each process serves its own share of the episodes."""
  require_base_rootfs()
  if jax.device_count() != 8:
    pytest.skip("needs the 8 fake CPU devices of tests/conftest.py")
  run, batches = tmp_path / "mp", tmp_path / "mp_batches"
  flags = [
    f"--config.output_dir={run}",
    f"--config.record_dir={batches}",
    "--config.mesh.num_devices=0",
    "--config.mesh.data=2",
    "--config.mesh.fsdp=2",
    "--config.serving.placement=disaggregated",
    "--config.serving.devices=2",
    "--config.serving.tensor=2",
  ]
  address = f"127.0.0.1:{_free_port()}"
  procs = [
    _launch(
      flags, _env(4, JAX_COORDINATOR_ADDRESS=address, JAX_NUM_PROCESSES="2", JAX_PROCESS_ID=str(p))
    )
    for p in range(2)
  ]
  outs = [p.communicate(timeout=1500)[0] for p in procs]
  assert all(p.returncode == 0 for p in procs), outs[0][-4000:] + outs[1][-4000:]
  metrics = read_jsonl(run / "metrics.jsonl")  # process 0 only
  assert [m["step"] for m in metrics] == [1, 2] and metrics[-1]["policy_version"] == 2
  assert len(list(batches.glob("step_000001.process_*_of_2.npz"))) == 2

  # the state restores on another mesh and process count (1 x 8 devices) with equal params
  restored = run_rl(tiny_rl_config(run, 2, mesh=MeshConfig(fsdp=4, tensor=2)))
  exported = _export_params(run)
  for a, b in zip(
    jax.tree.leaves(exported), jax.tree.leaves(jax.device_get(restored.params)), strict=True
  ):
    np.testing.assert_array_equal(b, a)
  # and the two processes' global batches, replayed by one process, train to the same state
  single = run_rl(
    tiny_rl_config(
      tmp_path / "replay", 2, replay_dir=str(batches), mesh=MeshConfig(data=2, fsdp=2, tensor=2)
    )
  )
  assert_same_training(metrics, exported, single.metrics, single.params)


@pytest.mark.full  # out of CI's slow run: docs/design/ci.md (python3 -m pytest -m full)
@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_sigkill_mid_step_then_restart_is_bit_identical(tmp_path):
  require_base_rootfs()
  deterministic = [
    "--config.deterministic=True",
    "--config.rollout.async_steps=0",
    "--config.rollout.on_failure=rerun",
    "--config.steps=3",
  ]

  def flags(name):
    return deterministic + [
      f"--config.output_dir={tmp_path / name}",
      f"--config.record_dir={tmp_path / (name + '_batches')}",
    ]

  full = _launch(flags("full"), _env(1))
  out = full.communicate(timeout=1500)[0]
  assert full.returncode == 0, out[-4000:]
  killed = _launch(flags("killed"), _env(1))
  mark = tmp_path / "killed_batches" / "step_000002.process_0_of_1.npz"
  deadline = time.monotonic() + 1500
  while not mark.exists() and killed.poll() is None and time.monotonic() < deadline:
    time.sleep(0.05)
  assert mark.exists(), killed.communicate()[0][-4000:]
  killed.send_signal(signal.SIGKILL)  # step 2's batch is recorded: its train step is under way
  killed.communicate(timeout=60)
  assert killed.returncode == -signal.SIGKILL
  assert not (tmp_path / "killed" / "hf").exists()
  again = _launch(flags("killed"), _env(1))
  out = again.communicate(timeout=1500)[0]
  assert again.returncode == 0, out[-4000:]
  assert "resumed from step 1" in out, out[-4000:]
  for step in (1, 2, 3):  # the rollouts of the restarted steps are the same, token for token
    name = f"step_{step:06d}.process_0_of_1.npz"
    with (
      np.load(tmp_path / "full_batches" / name) as a,
      np.load(tmp_path / "killed_batches" / name) as b,
    ):
      for key in a.files:
        np.testing.assert_array_equal(b[key], a[key], err_msg=f"{name} {key}")
  states = [_checkpointed_state(tmp_path / name, 3) for name in ("full", "killed")]
  for (path, x), y in zip(
    jax.tree_util.tree_leaves_with_path(states[0]), jax.tree.leaves(states[1]), strict=True
  ):
    np.testing.assert_array_equal(y, x, err_msg=jax.tree_util.keystr(path))
  full_m, killed_m = (read_jsonl(tmp_path / n / "metrics.jsonl") for n in ("full", "killed"))
  assert [m["step"] for m in killed_m] == [1, 2, 3]  # step 2's metrics were never written
  assert [m["loss"] for m in full_m] == [m["loss"] for m in killed_m]


def _checkpointed_state(run: pathlib.Path, step: int):
  """The whole train state (params, optimizer state, step, RNG) of `run`'s checkpoint."""
  from tmax_jax.loop import policy
  from tmax_jax.models import registry
  from tmax_jax.train.checkpoint import Checkpointer
  from tmax_jax.train.config import CheckpointConfig
  from tmax_jax.train.step import Trainer

  cfg = tiny_rl_config(run, step)
  model_cfg, params, _ = policy.load_policy(cfg.model, cfg.episode)
  state = Trainer(registry.build_model(model_cfg), model_cfg, cfg.train).init_state(params)
  with Checkpointer(CheckpointConfig(directory=str(run / "ckpt"))) as ckpt:
    restored, _, got = ckpt.restore(state, step)
  assert got == step
  return jax.device_get(restored)
