"""Episodes per minute of the toy RL job on a local Ray cluster with 1 and 2 inference nodes:
launch/cluster.py --rl_config=tests/loop/rl_tiny_config.py with serving.placement
'nodes', one trainer process, the same steps each run, the two node counts alternated; a run's
rate = the episodes its steps after the first consumed (step 1 holds the compiles) over the time
between step 1's end and the last step's end (metrics.jsonl `time`).

  python3 bench/cluster_rl.py [--steps 5] [--pairs 1] [--out r.json]
On one machine every raylet shares its cores: the ratio says what a second node's server costs
or gives when both sit on the same CPU, not a cluster's scaling (docs/design/cluster.md).
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.cluster import ray_local  # noqa: E402
from tmax_jax import cli, json_io  # noqa: E402
from tmax_jax.train import read_jsonl  # noqa: E402


def _args(argv):
  p = cli.ArgumentParser(description=cli.description(__doc__))
  p.add_argument("--steps", type=int, default=5, help="RL steps per run (the first is not timed)")
  p.add_argument("--pairs", type=int, default=1, help="alternated (1 node, 2 nodes) run pairs")
  p.add_argument("--out", default="", help="JSON output path")
  return p.parse_args(argv)


def episodes_per_minute(metrics: list[dict]) -> float:
  """Episodes consumed by the steps after the first, per minute between their ends."""
  later = metrics[1:]
  episodes = sum(v for m in later for k, v in m.items() if k.startswith("rollout/episodes_"))
  return 60.0 * episodes / (later[-1]["time"] - metrics[0]["time"])


def run(address: str, nodes: int, steps: int, tmp: pathlib.Path) -> float:
  out = tmp / f"run-{nodes}-{len(list(tmp.iterdir()))}"
  cmd = [
    sys.executable,
    "launch/cluster.py",
    f"--address={address}",
    "--rl_config=tests/loop/rl_tiny_config.py",
    "--rl_config.serving.placement=nodes",
    f"--rl_config.serving.nodes={nodes}",
    f"--rl_config.steps={steps}",
    f"--rl_config.output_dir={out}",
    "--router_port=0",
    "--noopenai",
    f"--server_log_dir={tmp / 'logs'}",
    "--trainer_restarts=0",
  ]
  res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
  if res.returncode:
    raise SystemExit(f"error: the run with {nodes} node(s) failed: {res.stderr[-2000:]}")
  return episodes_per_minute(read_jsonl(out / "metrics.jsonl"))


def main(argv=None) -> dict:
  args = _args(argv)
  os.environ.setdefault("JAX_PLATFORMS", "cpu")
  # this checkout first for the launcher and every Ray worker (they inherit the cluster's env)
  os.environ["PYTHONPATH"] = os.pathsep.join(
    filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])
  )
  rates: dict[int, list[float]] = {1: [], 2: []}
  with tempfile.TemporaryDirectory() as d:
    tmp = pathlib.Path(d)
    (tmp / "logs").mkdir()
    with ray_local.local_cluster(2, str(tmp / "logs")) as cluster:
      for i in range(args.pairs):
        for nodes in (1, 2) if i % 2 == 0 else (2, 1):
          rates[nodes].append(run(cluster.address, nodes, args.steps, tmp))
          print(f"{nodes} inference node(s): {rates[nodes][-1]:.1f} episodes/min", flush=True)
  out = {"steps": args.steps, "pairs": args.pairs, "episodes_per_minute": rates}
  print(json.dumps(out))
  if args.out:
    json_io.write_json_atomic(args.out, out)
  return out


if __name__ == "__main__":
  cli.run(main)
