"""A 2-process trainer (jax.distributed on loopback, 2 x 4 fake CPU devices, launch/train_rl.py)
sharing one separately launched server (launch/serve.py), or a router in front of two of them:
every process runs its own rollouts against it, each version is pushed once by process 0 from
params both processes gathered to its host, and every server ends serving exactly the trainer's
final params; a server SIGKILLed mid-rollouts and started again is resynced without a collective
(process 0 from its host copy) and the run goes on."""

import asyncio
import concurrent.futures
import json
import re

import jax
import numpy as np
import pytest

from tests.conftest import require_base_rootfs
from tests.inference import serve_process
from tests.loop.rl_helpers import tiny_rl_config
from tests.loop.test_rl_fault import SERVE, restart_during_rollouts
from tests.loop.test_rl_processes import _env, _launch
from tmax_jax.agents.episode import EpisodeConfig
from tmax_jax.inference import router as router_lib
from tmax_jax.inference.client import RolloutClient
from tmax_jax.inference.sampling import SamplingParams
from tmax_jax.inference.server import free_port
from tmax_jax.loop import policy
from tmax_jax.models import hf_io
from tmax_jax.train.metrics import read_jsonl

PROMPT = [151644, 872, 198, 9707, 11, 1879, 0, 151645]  # any token ids of the tiny vocabulary


def _serve(tmp, name: str):
  """(process, address) of a launch/serve.py for the loop's model; its log is tmp/<name>.log."""
  port = free_port()
  proc = serve_process.start(port, tmp / f"{name}.json", tmp / f"{name}.log", *SERVE)
  return proc, f"127.0.0.1:{port}"


async def _sample(addresses, push_to: str = "", hf_dir: str = "", version: int = 0):
  """[(served version, tokens, logprobs)] of a fixed seeded sample from each of `addresses`,
  after pushing HF dir `hf_dir` to `push_to` as `version`."""
  if hf_dir:
    async with RolloutClient(push_to) as c:
      assert await c.update_weights(path=hf_dir, version=version) == version
  out = []
  for address in addresses:
    async with RolloutClient(address) as c:
      got = await c.generate(PROMPT, 8, SamplingParams(temperature=1.0, seed=7))
      out.append(((await c.status()).version, got.token_ids, np.asarray(got.logprobs)))
  return out


def _train(run, address: str, *extra: str) -> None:
  """launch/train_rl.py in 2 processes on the tiny config (2 steps) against `address`."""
  flags = [
    *extra,
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


def _check_run_and_served(tmp, run, push_to: str, servers: list[str]) -> None:
  """The run's 2 steps, both processes' rollouts, and every server in `servers` holding the
  trainer's final params: the same seeded sample as after pushing the run's HF export through
  `push_to`, unlike after pushing the initial params."""
  final = asyncio.run(_sample(servers))
  exported = asyncio.run(_sample(servers, push_to, str(run / "hf"), 3))
  cfg = tiny_rl_config(run, 2)
  model_cfg, initial, _ = policy.load_policy(cfg.model, EpisodeConfig())
  hf_io.save_pretrained(tmp / "initial", initial, model_cfg)
  before = asyncio.run(_sample(servers, push_to, str(tmp / "initial"), 4))

  metrics = read_jsonl(run / "metrics.jsonl")  # process 0 only
  assert [m["step"] for m in metrics] == [1, 2]
  assert [m["policy_version"] for m in metrics] == [1, 2]
  assert all(m["loss"] > 0 for m in metrics), metrics
  for p in range(2):  # each process ran its own share of the episodes, in both steps
    lines = (run / f"rollouts.process_{p}_of_2.jsonl").read_text().splitlines()
    assert sorted({json.loads(x)["step"] for x in lines}) == [1, 2], lines
  for f, e, b in zip(final, exported, before, strict=True):
    assert f[0] == 2  # the trainer's last version
    assert e[1] == f[1]
    np.testing.assert_array_equal(e[2], f[2])
    assert b[1] != f[1] or not np.array_equal(b[2], f[2])  # the check tells params apart


def _pushes(log) -> list[str]:
  return re.findall(r"weights updated to version (\d+)", log.read_text())


@pytest.mark.slow  # two trainer processes, a server and sandboxes: ~2 min on the test machine
@pytest.mark.timeout(1800)
def test_two_processes_share_one_external_server(tmp_path):
  require_base_rootfs()
  if jax.device_count() != 8:
    pytest.skip("needs the 8 fake CPU devices of tests/conftest.py")
  server, address = _serve(tmp_path, "server")
  try:
    _train(tmp_path / "run", address)
    _check_run_and_served(tmp_path, tmp_path / "run", address, [address])
  finally:
    server.kill()
  assert _pushes(tmp_path / "server.log") == ["0", "1", "2", "3", "4"]  # one per version


@pytest.mark.slow
@pytest.mark.full  # CI's time: tests/cluster/test_ray_rl.py runs two processes through a router
@pytest.mark.timeout(1800)
def test_two_processes_share_a_router_of_two_replicas(tmp_path):
  """The same through launch/router.py's Router in front of two replicas: every push reaches
  both once, and both end on the trainer's params."""
  require_base_rootfs()
  if jax.device_count() != 8:
    pytest.skip("needs the 8 fake CPU devices of tests/conftest.py")
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    replicas = list(pool.map(lambda name: _serve(tmp_path, name), ["a", "b"]))
  router = None
  try:
    addresses = [a for _, a in replicas]
    router = router_lib.RouterThread(
      router_lib.RouterConfig(replicas=tuple(addresses), port=0, poll_s=0.2)
    )
    _train(tmp_path / "run", router.address)
    _check_run_and_served(tmp_path, tmp_path / "run", router.address, addresses)
  finally:
    if router is not None:
      router.stop()
    for proc, _ in replicas:
      proc.kill()
  for name in ("a", "b"):
    assert _pushes(tmp_path / f"{name}.log") == ["0", "1", "2", "3", "4"], name


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_two_processes_resync_a_restarted_server(tmp_path):
  """The server SIGKILLed while episodes generate after step 1, then started again on its port:
  no process deadlocks in a collective, the new instance gets the current version from process
  0's host copy, the cut groups are dropped and counted, and the 3 steps finish."""
  require_base_rootfs()
  if jax.device_count() != 8:
    pytest.skip("needs the 8 fake CPU devices of tests/conftest.py")
  port, run = free_port(), tmp_path / "run"
  address, ready, log = f"127.0.0.1:{port}", tmp_path / "ready.json", tmp_path / "server.log"
  procs = [serve_process.start(port, ready, log, *SERVE)]
  monitor, killed = restart_during_rollouts(procs, port, ready, log, run / "metrics.jsonl")
  try:
    _train(run, address, "--config.steps=3")
    monitor.join(timeout=300)
    served = asyncio.run(_sample([address]))[0][0]
  finally:
    for p in procs:
      p.kill()
  assert "version" in killed and len(procs) == 2, "the server was not killed during the run"
  m = read_jsonl(run / "metrics.jsonl")
  assert [x["step"] for x in m] == [1, 2, 3] and served == 3
  assert [x["policy_version"] for x in m] == [1, 2, 3]
  assert m[-1]["server_restarts"] == 1  # process 0's client saw the new instance once
  assert m[-1]["rollout/groups_dropped_server"] >= 1  # the groups the kill cut, either process
  # the new instance got the version then current (process 0's resync, or the next push when
  # that came first), then one push per version, never one per process
  pushes = [int(v) for v in _pushes(log)]
  assert pushes[-1] == 3 and pushes == sorted(pushes), pushes
  assert all(pushes.count(v) == 1 for v in range(killed["version"] + 1, 4)), pushes
