"""The RL job on a local Ray cluster of three nodes (issue 44's rehearsal): launch/cluster.py
--rl_config places one server per inference node (configs/serve_policy.py) behind the router and
two trainer processes (jax.distributed, 2 x 4 fake CPU devices) on the trainer node, which push
every version through the router to both servers and run their episodes against them. Two
steps, then a resume to a third; both servers took rollouts and end at the trainer's last
version; nothing is left running."""

import json
import pathlib
import subprocess
import sys

import pytest

ray = pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[cluster]')")

from tests.cluster import ray_local  # noqa: E402
from tests.conftest import SLOW_COLLECTIVE_FLAGS, require_base_rootfs  # noqa: E402
from tmax_jax.train.metrics import read_jsonl  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = pathlib.Path(__file__).resolve().parents[2]


def _launch(address: str, run: pathlib.Path, log_dir: pathlib.Path, steps: int):
  cmd = [
    sys.executable,
    "launch/cluster.py",
    f"--address={address}",
    "--rl_config=tests/loop/rl_tiny_config.py",
    "--rl_config.serving.placement=nodes",
    "--rl_config.serving.nodes=2",
    f"--rl_config.steps={steps}",
    f"--rl_config.output_dir={run}",
    "--router_port=0",
    "--noopenai",
    f"--server_log_dir={log_dir}",
    "--trainer_restarts=0",
    "--rl_config.topology.processes=2",
    "--rl_config.mesh.num_devices=0",  # every device trains: data 2 x fsdp 2 x tensor 2
    "--rl_config.mesh.data=2",
    "--rl_config.mesh.fsdp=2",
    "--rl_config.mesh.tensor=2",
    f"--trainer_env=XLA_FLAGS=--xla_force_host_platform_device_count=4 {SLOW_COLLECTIVE_FLAGS}",
  ]
  return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1200)


@pytest.mark.timeout(1500)
def test_rl_on_three_nodes_two_steps_then_a_resume(tmp_path):
  require_base_rootfs()
  log_dir, run = tmp_path / "nodes", tmp_path / "run"
  with ray_local.local_cluster(2, str(log_dir), trainers=2) as c:
    first = _launch(c.address, run, log_dir, 2)
    assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
    assert "RL DONE" in first.stdout
    replicas = json.loads(first.stdout.split("REPLICAS ", 1)[1].splitlines()[0])
    assert len(replicas) == 2 and all(r["prefill_tokens"] > 0 for r in replicas), replicas
    assert {r["version"] for r in replicas} == {2}, replicas  # every push reached both
    again = _launch(c.address, run, log_dir, 3)
    assert again.returncode == 0, (again.stdout + again.stderr)[-4000:]
    logs = [p.read_text() for p in log_dir.glob("trainer-*.log")]
    assert len(logs) == 4 and any("resumed from step 2" in x for x in logs)
  metrics = read_jsonl(run / "metrics.jsonl")
  assert [m["step"] for m in metrics] == [1, 2, 3]
  assert all(m["policy_version"] == m["step"] for m in metrics)
  rates = [m["prefix_hit_rate"] for m in metrics]  # each turn after an episode's first
  assert all(0.0 < r < 1.0 for r in rates), rates  # finds its prefix on its replica
  servers = sorted(log_dir.glob("replica-*.log"))
  assert len(servers) == 4  # two nodes, two launches
  for p in range(2):  # each trainer process played its share of every step
    log = (run / f"rollouts.process_{p}_of_2.jsonl").read_text().splitlines()
    assert sorted({json.loads(x)["step"] for x in log}) == [1, 2, 3]
