"""Evaluation runner: reference policies on real procedural tasks in real sandboxes (oracle scores
pass@1 = 1, doing nothing 0), the documented results schema, the PNG plot, TB1 input, and the
aggregation maths. Live tests skip (with the reason) when no sandbox backend/rootfs is available."""

import dataclasses
import json
import math
import pathlib
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import require_base_rootfs
from tmax_jax.agents import harnesses
from tmax_jax.agents.episode import EpisodeConfig
from tmax_jax.agents.worker import WorkerConfig
from tmax_jax.errors import UserError
from tmax_jax.inference.engine import EngineConfig
from tmax_jax.loop import evaluate as E
from tmax_jax.tasks import loader
from tmax_jax.tasks.procedural import registry
from tmax_jax.tasks.runner import RunnerConfig
from tmax_jax.tokenizers import load_tokenizer

# Cheap, fast families (each oracle run < 1 s), one per category.
FAMILIES = ("csv_aggregate", "find_large_files", "fix_permissions", "jq_inventory")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
REPO = pathlib.Path(__file__).resolve().parents[2]

TRIAL_KEYS = {
  "task": str,
  "category": str,
  "run": int,
  "reward": float,
  "passed": bool,
  "reward_reason": str,
  "status": str,
  "turns": int,
  "tool_calls": int,
  "format_errors": int,
  "response_tokens": int,
  "duration_s": float,
}
AGG_KEYS = {
  "num_tasks",
  "num_trials",
  "runs_per_task",
  "pass_threshold",
  "pass@1",
  "pass@k",
  "mean_reward",
  "num_errors",
  "error_share",
  "error_reasons",
  "unsupported_tasks",
  "status_counts",
  "mean_turns",
  "mean_tool_calls",
  "mean_response_tokens",
  "mean_duration_s",
  "usage",
}


@pytest.fixture(scope="module")
def tok():
  return load_tokenizer("qwen3")


@pytest.fixture(scope="module")
def proc_tasks(tmp_path_factory):
  root = tmp_path_factory.mktemp("proc_tasks")
  for name in FAMILIES:
    registry.write(name, 0, 0, root / name)
  return root


def _cfg(tasks_dir, out, harness="bash_tool", parallelism=2, request_timeout_s=600.0, **kw):
  """An EvalConfig; the harness goes into `episode`, the threads and timeout into `worker`."""
  kw.setdefault("runner", RunnerConfig(memory_mb=2048))
  episode = kw.get("episode", EpisodeConfig(family="qwen3"))
  kw["episode"] = dataclasses.replace(episode, harness=harness)
  kw["worker"] = WorkerConfig(
    max_parallel_episodes=parallelism, request_timeout_s=request_timeout_s
  )
  return E.EvalConfig(tasks_dir=str(tasks_dir), output_dir=str(out), **kw)


def _check_schema(results, out: pathlib.Path):
  assert results["schema_version"] == E.SCHEMA_VERSION
  assert set(results["aggregate"]) == AGG_KEYS
  assert set(results["aggregate"]["pass@1"]) == {"mean", "stderr"}
  for rec in results["trials"]:
    for key, typ in TRIAL_KEYS.items():
      assert isinstance(rec[key], typ), (key, rec)
    assert rec["error"] is None or isinstance(rec["error"], str)
  for row in results["categories"].values():
    assert set(row) == {"num_tasks", "num_trials", "pass@1", "stderr", "mean_reward"}
  on_disk = json.loads((out / "results.json").read_text())
  assert on_disk == json.loads(json.dumps(results))
  lines = (out / "trials.jsonl").read_text().splitlines()
  assert sorted(json.loads(line)["task"] for line in lines) == sorted(
    r["task"] for r in results["trials"]
  )
  png = (out / "pass_at_1.png").read_bytes()
  assert png.startswith(PNG_MAGIC)
  from matplotlib import image

  assert image.imread(str(out / "pass_at_1.png")).ndim == 3
  table = (out / "categories.txt").read_text()
  for cat in results["categories"]:
    assert cat in table


# --- live: reference policies on procedural tasks -------------------------------------------------


@pytest.mark.parametrize(
  "harness",
  ["bash_tool", pytest.param("terminus", marks=pytest.mark.slow)],  # 13 s: slow suite
)
def test_oracle_scores_one_and_noop_zero(harness, proc_tasks, tmp_path, tok):
  root = require_base_rootfs()
  if harness == "terminus" and not (root / "usr" / "bin" / "tmux").exists():
    pytest.skip(f"tmux is not in the base rootfs {root} (sandbox/packages.txt)")
  oracle = E.evaluate(
    _cfg(proc_tasks, tmp_path / "oracle", policy="oracle", harness=harness, parallelism=2),
    tokenizer=tok,
  )
  _check_schema(oracle, tmp_path / "oracle")
  agg = oracle["aggregate"]
  assert agg["num_errors"] == 0, [r["error"] for r in oracle["trials"]]
  assert agg["num_tasks"] == len(FAMILIES) and agg["num_trials"] == len(FAMILIES)
  assert agg["pass@1"] == {"mean": 1.0, "stderr": 0.0}
  assert agg["status_counts"] == {"submitted": len(FAMILIES)}
  assert all(r["tool_calls"] >= 1 and r["response_tokens"] > 0 for r in oracle["trials"])
  assert len(oracle["categories"]) == len(FAMILIES)

  noop = E.evaluate(
    _cfg(
      proc_tasks, tmp_path / "noop", policy="noop", harness=harness, runs_per_task=2, parallelism=2
    ),
    tokenizer=tok,
  )
  _check_schema(noop, tmp_path / "noop")
  agg = noop["aggregate"]
  assert agg["num_errors"] == 0 and agg["num_trials"] == 2 * len(FAMILIES)
  assert agg["pass@1"] == {"mean": 0.0, "stderr": 0.0} and agg["pass@k"] == {"2": 0.0}
  assert all(r["tool_calls"] == 0 and r["reward_reason"] == "ok" for r in noop["trials"])
  assert sorted({r["run"] for r in noop["trials"]}) == [0, 1]


def _tb1_task(root: pathlib.Path) -> pathlib.Path:
  d = root / "tb1-greeting"
  (d / "tests").mkdir(parents=True)
  (d / "task.yaml").write_text(
    textwrap.dedent("""\
      instruction: Write the line 'hello from tb1' to /app/greeting.txt.
      difficulty: easy
      category: file-operations
      tags: [bash]
      parser_name: pytest
      max_agent_timeout_sec: 60
      max_test_timeout_sec: 60
      """)
  )
  (d / "Dockerfile").write_text(
    "FROM ghcr.io/laude-institute/t-bench/ubuntu-24-04:latest\nWORKDIR /app\n"
  )
  (d / "run-tests.sh").write_text(
    "#!/bin/bash\npip install pytest\nuv run pytest $TEST_DIR/test_outputs.py -rA\n"
  )
  (d / "tests" / "test_outputs.py").write_text(
    "from pathlib import Path\n\ndef test_greeting():\n"
    "  assert Path('/app/greeting.txt').read_text() == 'hello from tb1\\n'\n"
  )
  (d / "solution.sh").write_text("#!/bin/bash\necho 'hello from tb1' > /app/greeting.txt\n")
  return d


def test_tb1_and_tb2_tasks_in_one_directory(tmp_path, tok):
  require_base_rootfs()
  tasks = tmp_path / "mixed"
  _tb1_task(tasks)
  registry.write("csv_aggregate", 1, 0, tasks / "nested" / "csv")
  assert [loader.task_format(d) for d in loader.find_task_dirs(tasks)] == ["tb2", "tb1"]
  oracle = E.evaluate(
    _cfg(tasks, tmp_path / "o", policy="oracle", harness="mini_swe"), tokenizer=tok
  )
  _check_schema(oracle, tmp_path / "o")
  assert oracle["aggregate"]["pass@1"]["mean"] == 1.0, oracle["trials"]
  assert set(oracle["categories"]) == {"file-operations", "data_processing"}
  assert (tmp_path / "o" / "converted" / "tb1-greeting" / "task.toml").is_file()
  noop = E.evaluate(
    _cfg(tasks, tmp_path / "n", policy="noop", harness="mini_swe", plot=False), tokenizer=tok
  )
  assert noop["aggregate"]["pass@1"]["mean"] == 0.0 and noop["aggregate"]["num_errors"] == 0
  assert not (tmp_path / "n" / "pass_at_1.png").exists()


@pytest.mark.slow  # 11 s; the CLI's failing path stays
def test_cli(proc_tasks, tmp_path):
  require_base_rootfs()
  out = tmp_path / "cli"
  cmd = [
    sys.executable,
    str(REPO / "launch" / "eval.py"),
    f"--config={REPO}/configs/eval_oracle.py",
    f"--config.tasks_dir={proc_tasks / 'fix_permissions'}",
    f"--config.output_dir={out}",
    "--config.runs_per_task=2",
    "--config.episode.harness=mini_swe",
  ]
  proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "pass@1 = 1.0000 +- 0.0000 (1 tasks x 2 runs)" in proc.stdout
  assert "system_administration" in proc.stdout
  results = json.loads((out / "results.json").read_text())
  assert results["config"]["episode"]["harness"] == "mini_swe"
  assert results["aggregate"]["pass@k"] == {"2": 1.0}


def test_trial_errors_are_recorded_not_hidden(tmp_path, tok):
  require_base_rootfs()
  tasks = tmp_path / "t"
  task = registry.write("csv_aggregate", 2, 0, tasks / "csv")
  (task.path / "solution" / "solve.sh").unlink()  # the oracle has nothing to run
  res = E.evaluate(_cfg(tasks, tmp_path / "o", policy="oracle"), tokenizer=tok)
  rec = res["trials"][0]
  assert rec["status"] == "error" and "solve.sh is missing" in rec["error"]
  assert res["aggregate"]["num_errors"] == 1 and res["aggregate"]["num_trials"] == 0
  assert res["aggregate"]["pass@1"] == {"mean": None, "stderr": None}  # not a 0: nothing scored
  assert "ERRORED: 1 of 1 trial(s), not scored" in E.summary_text(res)
  # Nothing listens on the port: the server error is recorded per trial, not turned into a 0.
  import socket

  with socket.socket() as sock:
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
  res = E.evaluate(
    _cfg(
      tasks,
      tmp_path / "s",
      policy="server",
      address=f"127.0.0.1:{port}",
      request_timeout_s=2.0,
      plot=False,
    ),
    tokenizer=tok,
  )
  rec = res["trials"][0]
  assert rec["status"] == "error" and "ServerUnavailableError" in rec["error"], rec
  assert res["aggregate"]["num_errors"] == 1


def _without_oracle(tasks: pathlib.Path, name: str, seed: int):
  """A procedural task whose solve.sh is gone: its oracle trials error (a setup failure)."""
  task = registry.write("csv_aggregate", seed, 0, tasks / name)
  (task.path / "solution" / "solve.sh").unlink()
  return task


def test_pass_at_1_is_over_scored_trials_and_errored_ones_are_listed(tmp_path, tok):
  """Issue 47: an errored trial used to count as a 0 in pass@1 and as a one-line warning."""
  require_base_rootfs()
  tasks = tmp_path / "t"
  registry.write("csv_aggregate", 2, 0, tasks / "good")
  bad = _without_oracle(tasks, "bad", 3)
  res = E.evaluate(_cfg(tasks, tmp_path / "o", policy="oracle", plot=False), tokenizer=tok)
  agg = res["aggregate"]
  assert agg["pass@1"] == {"mean": 1.0, "stderr": 0.0}  # the good task only
  assert (agg["num_tasks"], agg["num_trials"], agg["num_errors"]) == (1, 1, 1)
  assert agg["error_share"] == 0.5 and bad.name not in res["tasks"]
  (reason,) = agg["error_reasons"]
  assert reason["trials"] == 1 and "solve.sh is missing" in reason["reason"]
  text = E.summary_text(res)
  assert "ERRORED: 1 of 2 trial(s)" in text and f"1 x {reason['reason']}" in text
  with pytest.raises(UserError, match=r"1 of 2 trials errored \(50% > max_error_share=10%\)"):
    E.check_measured(res)
  E.check_measured({**res, "config": {**res["config"], "max_error_share": 1.0}})


def test_cli_fails_when_no_trial_was_scored(tmp_path):
  """Issue 47: every trial errored, and the command printed pass@1 = 0.0000 and exited 0."""
  require_base_rootfs()
  _without_oracle(tmp_path / "t", "bad", 3)
  cmd = [
    sys.executable,
    str(REPO / "launch" / "eval.py"),
    f"--config={REPO}/configs/eval_oracle.py",
    f"--config.tasks_dir={tmp_path / 't'}",
    f"--config.output_dir={tmp_path / 'o'}",
    "--config.runs_per_task=2",
  ]
  proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
  assert proc.returncode == 2, proc.stderr[-3000:]
  assert (
    "error: no trial was scored (2 of 2 errored; most frequent: ValueError: task" in proc.stderr
  )
  assert "solve.sh is missing" in proc.stderr and "Traceback" not in proc.stderr
  assert "pass@1 =" not in proc.stdout and "pass@1: not measured" in proc.stdout
  results = json.loads((tmp_path / "o" / "results.json").read_text())  # kept for inspection
  assert results["aggregate"]["pass@1"]["mean"] is None


def test_a_second_run_does_not_overwrite_the_first(proc_tasks, tmp_path, tok):
  """Issue 47: a second eval into the same output_dir silently replaced the first's results."""
  require_base_rootfs()
  out = tmp_path / "o"
  cfg = _cfg(proc_tasks / "fix_permissions", out, policy="oracle", plot=False)
  first = E.evaluate(cfg, tokenizer=tok)
  kept = (out / "results.json").read_bytes()
  second = E.evaluate(cfg, tokenizer=tok)
  assert first["config"]["output_dir"] == str(out)
  assert second["config"]["output_dir"] == f"{out}-2"
  assert (out / "results.json").read_bytes() == kept
  assert (
    json.loads(pathlib.Path(f"{out}-2/results.json").read_text())["started_at"]
    == (second["started_at"])
  )
  third = E.evaluate(dataclasses.replace(cfg, overwrite=True), tokenizer=tok)
  assert third["config"]["output_dir"] == str(out) and not pathlib.Path(f"{out}-3").exists()
  assert json.loads((out / "results.json").read_text())["started_at"] == third["started_at"]


def test_unsupported_tasks_are_reported_not_scored(tmp_path, tok):
  """A multi-service compose task raises TaskUnsupportedError in the runner: its trials get
  status "unsupported", and it is left out of pass@1 instead of counting as a failure."""
  require_base_rootfs()
  tasks = tmp_path / "t"
  registry.write("csv_aggregate", 2, 0, tasks / "csv")
  pod = registry.write("csv_aggregate", 3, 0, tasks / "pod")
  toml = pod.path / "task.toml"
  toml.write_text(
    toml.read_text().replace("[metadata]\n", '[metadata]\ncompose_services = ["app", "db"]\n', 1)
  )
  res = E.evaluate(_cfg(tasks, tmp_path / "o", policy="oracle"), tokenizer=tok)
  by_task = {r["task"]: r for r in res["trials"]}
  assert by_task[pod.name]["status"] == "unsupported"
  assert "2 services" in by_task[pod.name]["error"]
  agg = res["aggregate"]
  assert agg["unsupported_tasks"] == [pod.name] and agg["num_tasks"] == 1
  assert agg["pass@1"]["mean"] == 1.0 and agg["num_errors"] == 0
  assert agg["status_counts"]["unsupported"] == 1
  assert "1 task(s) unsupported here" in E.summary_text(res)


# --- no sandbox: discovery, config, aggregation
# ------------------------------------------------------


def test_find_task_dirs_and_errors(tmp_path, proc_tasks):
  assert [d.name for d in loader.find_task_dirs(proc_tasks)] == sorted(FAMILIES)
  assert loader.find_task_dirs(proc_tasks / "csv_aggregate") == [proc_tasks / "csv_aggregate"]
  (tmp_path / "empty" / "sub").mkdir(parents=True)
  with pytest.raises(FileNotFoundError, match="no task directories"):
    loader.find_task_dirs(tmp_path / "empty")
  with pytest.raises(FileNotFoundError, match="not a directory"):
    loader.find_task_dirs(tmp_path / "missing")
  tasks = loader.load_tasks(proc_tasks, tmp_path / "conv", max_tasks=2)
  assert [t.name for t in tasks] == ["csv_aggregate-d0-s0", "find_large_files-d0-s0"]
  assert E.category(tasks[0]) == "data_processing"


@pytest.mark.parametrize(
  "kw,match",
  [
    (dict(policy="human"), "policy='human'"),
    (dict(episode=EpisodeConfig(harness="swe")), "episode.harness='swe'"),
    (dict(runs_per_task=0), "runs_per_task=0"),
    (dict(policy="server"), "needs `address`"),
  ],
)
def test_config_errors(kw, match):
  base = dict(tasks_dir="/x", output_dir="/y")
  with pytest.raises(ValueError, match=match):
    E.EvalConfig(**{**base, **kw})


def test_missing_dirs_are_named(tmp_path):
  with pytest.raises(ValueError, match="output_dir='': both must be set"):
    E.evaluate(E.EvalConfig(tasks_dir=str(tmp_path)))


@pytest.mark.parametrize("path", sorted(REPO.glob("configs/eval_*.py")), ids=lambda p: p.name)
def test_config_files_build(path):
  from tmax_jax import jobs
  from tmax_jax.config_dict import from_config_dict, load_config_file

  cd = load_config_file(path)
  if jobs.job_of(cd)[1] is not E.EvalConfig:  # eval_aime.py: launch/math_eval.py's job
    pytest.skip(f"{path.name} is the {jobs.job_of(cd)[0]} job's config (tests/test_configs.py)")
  cfg = from_config_dict(E.EvalConfig, cd)
  assert cfg.policy in E.POLICIES and cfg.episode.harness in harnesses.names()


def _rec(task, cat, run, reward, **kw):
  return {
    "task": task,
    "category": cat,
    "run": run,
    "reward": reward,
    "passed": reward >= 1.0,
    "status": "submitted",
    "turns": 2,
    "tool_calls": 1,
    "response_tokens": 10,
    "duration_s": 1.0,
    **kw,
  }


def test_aggregate_maths():
  cfg = E.EvalConfig(tasks_dir="/x", output_dir="/y", runs_per_task=4, pass_ks=(1, 2, 4))
  rewards = {"a": [1, 0, 0, 0], "b": [1, 1, 1, 0], "c": [0, 0, 0, 0]}
  cats = {"a": "x", "b": "x", "c": "y"}
  recs = [_rec(t, cats[t], i, float(r)) for t, rs in rewards.items() for i, r in enumerate(rs)]
  s = E.aggregate(recs, cfg)
  rates = [0.25, 0.75, 0.0]
  mean = sum(rates) / 3
  std = math.sqrt(sum((r - mean) ** 2 for r in rates) / 2)
  assert s["aggregate"]["pass@1"]["mean"] == pytest.approx(mean)
  assert s["aggregate"]["pass@1"]["stderr"] == pytest.approx(std / math.sqrt(3))
  # unbiased pass@2 from n=4: 1 - C(n-c, 2) / C(4, 2)
  p2 = [1 - math.comb(4 - c, 2) / math.comb(4, 2) for c in (1, 3, 0)]
  assert s["aggregate"]["pass@k"]["2"] == pytest.approx(sum(p2) / 3)
  assert s["aggregate"]["pass@k"]["4"] == pytest.approx(2 / 3)
  assert s["categories"]["x"]["pass@1"] == pytest.approx(0.5)
  assert s["categories"]["x"]["stderr"] == pytest.approx(math.sqrt(0.125) / math.sqrt(2))
  assert s["categories"]["y"] == {
    "num_tasks": 1,
    "num_trials": 4,
    "pass@1": 0.0,
    "stderr": 0.0,
    "mean_reward": 0.0,
  }
  assert s["tasks"]["b"]["num_passed"] == 3
  table = E.category_table(s)
  assert table.splitlines()[2].split()[:4] == ["x", "2", "8", "0.500"]
  assert table.splitlines()[-1].split()[0] == "all"


def test_errored_trials_are_left_out_of_every_score():
  cfg = E.EvalConfig(tasks_dir="/x", output_dir="/y", runs_per_task=2, pass_ks=(1, 2))
  lost = "sandbox_lost: the shell died"
  recs = [
    _rec("a", "x", 0, 1.0),
    _rec("a", "x", 1, 0.0, status="error", error=f"InfrastructureError: {lost}"),
    _rec("b", "x", 0, 0.0, status="build_failed", reward_reason="build_failed: no apt"),
    _rec("b", "x", 1, 0.0, status="build_failed", reward_reason="build_failed: no apt"),
    _rec("c", "y", 0, 0.0, status="no_episode", reward_reason="sandbox_start: no rootfs"),
    _rec("c", "y", 1, 0.0),
  ]
  agg = E.aggregate(recs, cfg)["aggregate"]
  assert agg["pass@1"]["mean"] == 0.5 and agg["mean_reward"] == 0.5  # a: 1/1, c: 0/1
  assert (agg["num_tasks"], agg["num_trials"], agg["num_errors"]) == (2, 2, 4)
  assert agg["pass@k"] == {} and agg["error_share"] == 4 / 6  # a task has 1 scored trial
  assert agg["error_reasons"] == [
    {"reason": "build_failed: no apt", "trials": 2},
    {"reason": f"InfrastructureError: {lost}", "trials": 1},
    {"reason": "sandbox_start: no rootfs", "trials": 1},
  ]
  summary = E.aggregate(recs[1:3], cfg)  # nothing scored
  assert summary["aggregate"]["pass@1"] == {"mean": None, "stderr": None}
  assert summary["aggregate"]["mean_reward"] is None and summary["tasks"] == {}
  results = {**summary, "config": {"output_dir": "/y", "max_error_share": 1.0}}
  assert "pass@1: not measured" in E.summary_text(results)
  assert E.category_table(summary).splitlines()[-1].split()[1:] == ["0", "0", "-", "-", "-"]
  with pytest.raises(UserError, match=r"no trial was scored \(2 of 2 errored; most frequent"):
    E.check_measured(results)


def test_plot_is_png(tmp_path):
  cfg = E.EvalConfig(tasks_dir="/x", output_dir="/y", runs_per_task=2)
  recs = [
    _rec("a", "x", 0, 1.0),
    _rec("a", "x", 1, 0.0),
    _rec("b", "y", 0, 1.0),
    _rec("b", "y", 1, 1.0),
  ]
  path = tmp_path / "p.png"
  E.plot_categories(E.aggregate(recs, cfg), path, "t")
  from matplotlib import image

  assert path.read_bytes().startswith(PNG_MAGIC)
  assert image.imread(str(path)).shape[2] in (3, 4)


# --- slow: a served (tiny, random) model through the real gRPC server
# --------------------------------


@pytest.mark.slow
def test_served_model_policy(tmp_path, tok):
  require_base_rootfs()
  from tmax_jax.agents.episode import EpisodeConfig
  from tmax_jax.loop.config import ModelSpec, ServingConfig

  tasks = tmp_path / "t"
  registry.write("csv_aggregate", 3, 0, tasks / "csv")
  model = ModelSpec(
    preset="qwen3-0.6b",
    overrides=dict(
      vocab_size=151936,
      hidden_size=32,
      intermediate_size=64,
      num_hidden_layers=1,
      num_attention_heads=2,
      num_key_value_heads=2,
      head_dim=16,
    ),
  )
  cfg = _cfg(
    tasks,
    tmp_path / "o",
    policy="server",
    harness="bash_tool",
    model=model,
    serving=ServingConfig(
      replicas=2,
      tensor=2,
      engine=EngineConfig(max_concurrent_decodes=2, max_len=1024, max_prefill_length=1024),
    ),
    episode=EpisodeConfig(max_turns=2, turn_max_tokens=8),
    runs_per_task=2,
    parallelism=2,
    request_timeout_s=300.0,
  )
  res = E.evaluate(cfg, tokenizer=tok)
  _check_schema(res, tmp_path / "o")
  assert res["aggregate"]["num_errors"] == 0, [r["error"] for r in res["trials"]]
  for rec in res["trials"]:  # random weights: no valid call, but real tokens came back
    assert rec["status"] == "max_turns" and rec["turns"] == 2 and rec["reward"] == 0.0
    assert 2 <= rec["response_tokens"] <= 16
