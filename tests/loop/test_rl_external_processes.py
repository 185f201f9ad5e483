"""A 2-process trainer (jax.distributed on loopback, 2 x 4 fake CPU devices, launch/train_rl.py)
sharing one separately launched server (launch/serve.py): every process runs its own rollouts
against it, each version is pushed once by process 0 from params both processes gathered to its
host, and the server ends serving exactly the trainer's final params."""

import asyncio
import json
import re

import jax
import numpy as np
import pytest

from tests.conftest import require_base_rootfs
from tests.inference import serve_process
from tests.loop.rl_helpers import tiny_rl_config
from tests.loop.test_rl_fault import SERVE
from tests.loop.test_rl_processes import _env, _launch
from tmax_jax.agents.episode import EpisodeConfig
from tmax_jax.inference.client import RolloutClient
from tmax_jax.inference.sampling import SamplingParams
from tmax_jax.inference.server import free_port
from tmax_jax.loop import policy
from tmax_jax.models import hf_io
from tmax_jax.train.metrics import read_jsonl

PROMPT = [151644, 872, 198, 9707, 11, 1879, 0, 151645]  # any token ids of the tiny vocabulary


async def _sample(address: str, push: str = "", version: int = 0):
  """(served version, tokens, logprobs) of a fixed seeded sample, after pushing HF dir `push`."""
  async with RolloutClient(address) as c:
    if push:
      assert await c.update_weights(path=push, version=version) == version
    out = await c.generate(PROMPT, 8, SamplingParams(temperature=1.0, seed=7))
    return (await c.status()).version, out.token_ids, np.asarray(out.logprobs)


@pytest.mark.slow  # two trainer processes, a server and sandboxes: minutes on the test machine
@pytest.mark.timeout(1800)
def test_two_processes_share_one_external_server(tmp_path):
  require_base_rootfs()
  if jax.device_count() != 8:
    pytest.skip("needs the 8 fake CPU devices of tests/conftest.py")
  port = free_port()
  address = f"127.0.0.1:{port}"
  run = tmp_path / "run"
  server = serve_process.start(port, tmp_path / "ready.json", tmp_path / "server.log", *SERVE)
  try:
    flags = [
      f"--config.output_dir={run}",
      f"--config.serving.address={address}",
      "--config.mesh.num_devices=0",  # every device trains: data 2 x fsdp 2 x tensor 2
      "--config.mesh.data=2",
      "--config.mesh.fsdp=2",
      "--config.mesh.tensor=2",
    ]
    coordinator = f"127.0.0.1:{free_port()}"
    procs = [
      _launch(
        flags,
        _env(4, JAX_COORDINATOR_ADDRESS=coordinator, JAX_NUM_PROCESSES="2", JAX_PROCESS_ID=str(p)),
      )
      for p in range(2)
    ]
    outs = [p.communicate(timeout=1500)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs[0][-4000:] + outs[1][-4000:]
    final = asyncio.run(_sample(address))
    exported = asyncio.run(_sample(address, str(run / "hf"), 3))
    cfg = tiny_rl_config(run, 2)
    model_cfg, initial, _ = policy.load_policy(cfg.model, EpisodeConfig())
    hf_io.save_pretrained(tmp_path / "initial", initial, model_cfg)
    before = asyncio.run(_sample(address, str(tmp_path / "initial"), 4))
  finally:
    server.kill()

  metrics = read_jsonl(run / "metrics.jsonl")  # process 0 only
  assert [m["step"] for m in metrics] == [1, 2]
  assert [m["policy_version"] for m in metrics] == [1, 2]
  assert all(m["loss"] > 0 for m in metrics), metrics
  for p in range(2):  # each process ran its own share of the episodes, in both steps
    lines = (run / f"rollouts.process_{p}_of_2.jsonl").read_text().splitlines()
    assert sorted({json.loads(x)["step"] for x in lines}) == [1, 2], lines
  # the server ends at the trainer's last version, holding exactly the trainer's final params:
  # the same seeded sample as after pushing the run's HF export, unlike the initial params'
  assert final[0] == 2
  pushes = re.findall(r"weights updated to version (\d+)", (tmp_path / "server.log").read_text())
  assert pushes == ["0", "1", "2", "3", "4"]  # one push per version, not one per process
  assert exported[1] == final[1]
  np.testing.assert_array_equal(exported[2], final[2])
  assert before[1] != final[1] or not np.array_equal(before[2], final[2])
