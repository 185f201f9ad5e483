"""The RL job on a local Ray cluster of three nodes (issue 44's rehearsal): launch/cluster.py
--rl_config places one server per inference node (configs/serve_policy.py) behind the router and
the trainer on the trainer node, which pushes every version through the router to both and runs
its episodes against them. Two steps, then a resume to a third; both servers took rollouts and
end at the trainer's last version; nothing is left running."""

import json
import pathlib
import subprocess
import sys

import pytest

ray = pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[cluster]')")

from tests.cluster import ray_local  # noqa: E402
from tests.conftest import require_base_rootfs  # noqa: E402
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
  ]
  return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1200)


@pytest.mark.timeout(1500)
def test_rl_on_three_nodes_two_steps_then_a_resume(tmp_path):
  require_base_rootfs()
  log_dir, run = tmp_path / "nodes", tmp_path / "run"
  with ray_local.local_cluster(2, str(log_dir), head_cpus=2) as c:
    first = _launch(c.address, run, log_dir, 2)
    assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
    assert "RL DONE" in first.stdout
    replicas = json.loads(first.stdout.split("REPLICAS ", 1)[1].splitlines()[0])
    assert len(replicas) == 2 and all(r["prefill_tokens"] > 0 for r in replicas), replicas
    assert {r["version"] for r in replicas} == {2}, replicas  # every push reached both
    again = _launch(c.address, run, log_dir, 3)
    assert again.returncode == 0, (again.stdout + again.stderr)[-4000:]
    logs = sorted(log_dir.glob("trainer-*.log"))
    assert "resumed from step 2" in logs[-1].read_text()
  metrics = read_jsonl(run / "metrics.jsonl")
  assert [m["step"] for m in metrics] == [1, 2, 3]
  assert all(m["policy_version"] == m["step"] for m in metrics)
  servers = sorted(log_dir.glob("replica-*.log"))
  assert len(servers) == 4  # two nodes, two launches
  rollouts = [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines()]
  assert sorted({r["step"] for r in rollouts}) == [1, 2, 3]
