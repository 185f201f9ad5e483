"""The RL job on a local Ray cluster with its sandboxes on a sandbox node (issue 44 point 3):
launch/cluster.py --rl_config ... --rl_config.runner.sandbox_hosts=ray places a sandbox host on
the node offering `sandbox` beside the inference node's server, the trainer process joins the
cluster from its episode threads (RAY_ADDRESS), every episode's sandbox is the host's, and the
hosts are gone when the launcher exits."""

import json
import pathlib
import subprocess
import sys

import pytest

ray = pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[cluster]')")

from tests.cluster import ray_local  # noqa: E402
from tests.conftest import require_base_rootfs  # noqa: E402
from tmax_jax.cluster import sandbox_hosts as hosts_lib  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.timeout(1200)
def test_rl_episodes_run_their_sandboxes_on_the_sandbox_node(tmp_path):
  require_base_rootfs()
  log_dir, run = tmp_path / "nodes", tmp_path / "run"
  with ray_local.local_cluster(1, str(log_dir), sandbox_nodes=1) as c:
    out = subprocess.run(
      [
        sys.executable,
        "launch/cluster.py",
        f"--address={c.address}",
        "--rl_config=tests/loop/rl_tiny_config.py",
        "--rl_config.serving.placement=nodes",
        "--rl_config.serving.nodes=1",
        "--rl_config.steps=1",
        f"--rl_config.output_dir={run}",
        "--trainer_env=XLA_FLAGS=--xla_force_host_platform_device_count=1",
        "--rl_config.runner.sandbox_hosts=ray",
        "--router_port=0",
        "--noopenai",
        f"--server_log_dir={log_dir}",
        "--trainer_restarts=0",
      ],
      cwd=ROOT,
      capture_output=True,
      text=True,
      timeout=1100,
    )
    assert out.returncode == 0 and "RL DONE" in out.stdout, (out.stdout + out.stderr)[-4000:]
    names = {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)}
    assert not {n for n in names if n.startswith(hosts_lib.PREFIX)}, names  # stopped with the job
  groups = [json.loads(x) for p in run.glob("rollouts*.jsonl") for x in p.read_text().splitlines()]
  sandboxes = [e["sandbox"] for g in groups for e in g["episodes"]]
  assert sandboxes and all(s.startswith("host0/") for s in sandboxes), groups
  failures = [f for g in groups for f in g["failures"]]
  assert not [f for f in failures if f["kind"] in ("sandbox_start", "sandbox_lost")], failures
