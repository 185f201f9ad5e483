"""Our eval output (results.json) exported as a Harbor job directory, read by Harbor's own viewer
(`harbor view`, its REST API) and loaded by Harbor's models."""

import json
import socket
import subprocess
import time
import urllib.request

from tests.conftest import require_base_rootfs
from tests.harbor.harbor_helpers import require_harbor, write_tasks
from tmax_jax.harbor import jobs, venv
from tmax_jax.loop.evaluate import EvalConfig, evaluate


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _get(url: str, deadline: float):
  while True:
    try:
      with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())
    except OSError:
      if time.monotonic() > deadline:
        raise
      time.sleep(0.5)


def test_eval_results_read_by_harbor_view(tmp_path):
  require_harbor()
  require_base_rootfs()
  tasks = write_tasks(tmp_path / "tasks", levels=(0, 1))
  broken = "line_tool-d0-s0"  # does not build: a trial without an episode, reported as such
  (tasks / broken / "environment" / "Dockerfile").write_text("FROM tmax-base:bookworm\nX\n")
  results = evaluate(
    EvalConfig(tasks_dir=str(tasks), output_dir=str(tmp_path / "eval"), policy="oracle", plot=False)
  )
  ours = {t["task"]: t for t in results["trials"]}
  job = jobs.export_eval(tmp_path / "eval" / "results.json", tmp_path / "jobs", "ours")
  assert job == tmp_path / "jobs" / "ours"
  port = _free_port()
  viewer = subprocess.Popen(
    [str(venv.bin_path("harbor")), "view", str(tmp_path / "jobs"), "--jobs", "--no-build"]
    + ["--port", str(port)],
    env=venv.environ(),
    stdout=subprocess.DEVNULL,
    stderr=subprocess.STDOUT,
  )
  try:
    base = f"http://127.0.0.1:{port}/api"
    (summary,) = _get(f"{base}/jobs", time.monotonic() + 60)["items"]
    assert summary["name"] == "ours" and summary["n_total_trials"] == len(ours) == 2
    assert summary["agents"] == ["tmax_jax-bash_tool"] and summary["models"] == ["oracle"]
    mean = sum(t["reward"] for t in ours.values()) / 2
    assert list(summary["evals"].values())[0]["metrics"] == [{"mean": mean}]
    trials = _get(f"{base}/jobs/ours/trials", time.monotonic() + 10)["items"]
    assert {t["task_name"]: t["reward"] for t in trials} == {
      name: t["reward"] for name, t in ours.items()
    }
    trial = _get(f"{base}/jobs/ours/trials/{broken}__0", time.monotonic() + 10)
    meta = trial["agent_result"]["metadata"]
    assert meta["reward_reason"].startswith("build_failed: ") and meta["status"] == "build_failed"
  finally:
    viewer.terminate()
    viewer.wait(timeout=30)
  assert {k: v.reward for k, v in _flat(jobs.outcomes(job)).items()} == {
    t["task"]: t["reward"] for t in ours.values()
  }


def _flat(outcomes: dict) -> dict:
  """{task dir name: its one outcome} -> keyed by our task name (the dirs are named so)."""
  return {name: trials[0] for name, trials in outcomes.items()}
