"""Reproducible environments (issue 45 point 9): every eval trial keeps its verifier's files and
the packages its sandbox resolved (at its start and after the tests) beside its record, the record
names them, RunnerConfig.packages_before reaches test.sh as UV_EXCLUDE_NEWER and
PIP_UPLOADED_PRIOR_TO, and a trial outside evaluation (RL) keeps nothing. Live tests run fixture
tasks in real sandboxes (skipped, with the reason, without a base rootfs)."""

import dataclasses
import json
import pathlib

import pytest

from tests.conftest import require_base_rootfs
from tmax_jax.agents.episode import EpisodeConfig
from tmax_jax.agents.worker import Trial, WorkerConfig
from tmax_jax.loop import evaluate as E
from tmax_jax.loop.evaluate import trials as eval_trials
from tmax_jax.tasks import artifacts as A
from tmax_jax.tasks.format import TaskInfo, load_task
from tmax_jax.tasks.runner import RunnerConfig, packages_cutoff, run_oracle, verifier_env
from tmax_jax.tokenizers import load_tokenizer

CUTOFF = "2025-11-07T00:00:00Z"
TASK_TOML = """\
schema_version = "1.0"

[metadata]
category = "env_records"

[verifier]
timeout_sec = 120.0
{env}
[agent]
timeout_sec = 120.0

[environment]
docker_image = "tmax-base:bookworm"
workdir = "/workspace"
"""
# Echoes the cutoff, checks that the base's pip (23.0.1: no --uploaded-prior-to, added in pip
# 26.0) tolerates its variable, writes reports next to the reward and registers a package
# (pip freeze lists it after the tests only).
TEST_SH = """\
#!/bin/bash
echo "UV_EXCLUDE_NEWER=$UV_EXCLUDE_NEWER"
echo "PIP_UPLOADED_PRIOR_TO=$PIP_UPLOADED_PRIOR_TO"
python3 -m pip install --no-index --break-system-packages pytest && echo "pip install: ok"
mkdir -p /logs/verifier/reports
echo '{"results": {"summary": {"tests": 1, "passed": 1}}}' > /logs/verifier/ctrf.json
echo '<testsuite tests="1"/>' > /logs/verifier/reports/junit.xml
site=$(python3 -m site --user-site)  # the sandbox user's: the image is read-only
mkdir -p "$site/tmaxprobe-1.0.dist-info"
printf 'Metadata-Version: 2.1\\nName: tmaxprobe\\nVersion: 1.0\\n' \\
  > "$site/tmaxprobe-1.0.dist-info/METADATA"
"""


def _task(root: pathlib.Path, name: str, reward: str, env: str = "") -> pathlib.Path:
  d = root / name
  for sub in ("environment", "solution", "tests"):
    (d / sub).mkdir(parents=True)
  (d / "task.toml").write_text(TASK_TOML.format(env=env))
  (d / "instruction.md").write_text("Write the word done to /workspace/answer.txt.\n")
  (d / "environment" / "Dockerfile").write_text("FROM tmax-base:bookworm\nWORKDIR /workspace\n")
  (d / "solution" / "solve.sh").write_text("#!/bin/bash\necho done > /workspace/answer.txt\n")
  (d / "tests" / "test.sh").write_text(TEST_SH + reward)
  return d


PASS = "grep -qx done /workspace/answer.txt && echo 1 > /logs/verifier/reward.txt\n"
NO_REWARD = "echo 'the tests crashed before writing a reward'\n"


# --- offline: the cutoff, the caps, the record ----------------------------------------------------


def test_packages_cutoff_is_utc_rfc3339():
  assert packages_cutoff("2025-11-07") == CUTOFF
  assert packages_cutoff("2025-11-07T02:00:00+02:00") == CUTOFF
  assert packages_cutoff("2025-11-07T00:00:00Z") == CUTOFF
  with pytest.raises(ValueError, match="packages_before='last year'"):
    RunnerConfig(packages_before="last year")


def test_verifier_env_task_wins(tmp_path):
  plain = load_task(_task(tmp_path, "plain", PASS))
  assert verifier_env(plain, RunnerConfig()) == {}
  cfg = RunnerConfig(packages_before="2025-11-07")
  assert verifier_env(plain, cfg) == {"UV_EXCLUDE_NEWER": CUTOFF, "PIP_UPLOADED_PRIOR_TO": CUTOFF}
  own = load_task(
    _task(tmp_path, "own", PASS, env='\n[verifier.env]\nUV_EXCLUDE_NEWER = "2024-01-01"\n')
  )
  assert verifier_env(own, cfg)["UV_EXCLUDE_NEWER"] == "2024-01-01"


def test_packages_before_release_dates_each_task_by_its_benchmark(tmp_path):
  cfg = RunnerConfig(packages_before="release")
  tb2 = load_task(_task(tmp_path, "tb2", PASS))
  assert verifier_env(tb2, cfg)["UV_EXCLUDE_NEWER"] == "2025-11-01T00:00:00Z"
  tb1 = dataclasses.replace(
    tb2,
    config=dataclasses.replace(tb2.config, metadata={"source_format": "terminal-bench-1"}),
  )
  assert verifier_env(tb1, cfg) == {
    "UV_EXCLUDE_NEWER": "2025-05-01T00:00:00Z",
    "PIP_UPLOADED_PRIOR_TO": "2025-05-01T00:00:00Z",
  }


def test_verifier_files_are_capped(tmp_path, monkeypatch):
  monkeypatch.setattr(A, "ARTIFACT_BYTES", 10)
  monkeypatch.setattr(A, "ARTIFACT_FILES", 2)
  (tmp_path / "a.txt").write_text("0123456789abc")
  (tmp_path / "sub").mkdir()
  (tmp_path / "sub" / "b.xml").write_text("<x/>")
  (tmp_path / "z.json").write_text("{}")
  files = A.verifier_files(tmp_path)
  assert files == {
    "verifier/a.txt": "[tmax_jax: truncated to the last 10 of 13 bytes]\n3456789abc",
    "verifier/sub/b.xml": "<x/>",
    "verifier.skipped.txt": "z.json\n",
  }


def test_write_artifacts_and_record(tmp_path):
  task = load_task(_task(tmp_path / "tasks", "t", PASS))
  config = dataclasses.replace(task.config, task=TaskInfo(name="org/t"))  # a name that is no path
  task = dataclasses.replace(task, config=config)
  kept = {"verifier/test-stdout.txt": "out", A.PACKAGES_START: "# dpkg-query -W\n"}
  rec = eval_trials.trial_record(task, 3, Trial(None, artifacts=kept), 1.0)
  assert rec["verifier_dir"] is None and rec["packages"] is None  # set once written
  paths = eval_trials.write_artifacts(tmp_path / "out", task, 3, kept)
  assert paths == {
    "verifier_dir": "trials/org_t/3/verifier",
    "packages": {"start": "trials/org_t/3/packages.start.txt"},
  }
  assert (tmp_path / "out" / "trials/org_t/3/verifier/test-stdout.txt").read_text() == "out"
  assert sorted(p.name for p in (tmp_path / "out/trials/org_t/3").iterdir()) == [
    "packages.start.txt",
    "verifier",
  ]  # no temp file left behind
  assert eval_trials.write_artifacts(tmp_path / "out", task, 4, {}) == {
    "verifier_dir": None,
    "packages": None,
  }


# --- live: an evaluation's records and a trial outside evaluation ---------------------------------


def _read(out: pathlib.Path, rel: str) -> str:
  text = (out / rel).read_text()
  assert text.strip(), rel
  return text


def test_eval_keeps_verifier_files_and_packages(tmp_path):
  require_base_rootfs()
  tasks = tmp_path / "tasks"
  _task(tasks, "passes", PASS)
  _task(tasks, "no-reward", NO_REWARD)
  out = tmp_path / "out"
  cfg = E.EvalConfig(
    tasks_dir=str(tasks),
    output_dir=str(out),
    policy="oracle",
    episode=EpisodeConfig(family="qwen3", harness="bash_tool", wall_time_s=0.0),
    worker=WorkerConfig(max_parallel_episodes=2),
    runner=RunnerConfig(memory_mb=2048, min_verifier_timeout_s=0, packages_before="2025-11-07"),
    plot=False,
  )
  results = E.evaluate(cfg, tokenizer=load_tokenizer("qwen3"))
  recs = {r["task"]: r for r in results["trials"]}
  assert recs["passes"]["passed"], recs["passes"]
  assert recs["no-reward"]["status"] == "error"  # a verifier that wrote no reward: not scored

  for name, rec in recs.items():
    assert rec["verifier_dir"] == f"trials/{name}/0/verifier"
    assert rec["packages"] == {
      "start": f"trials/{name}/0/packages.start.txt",
      "after_tests": f"trials/{name}/0/packages.after_tests.txt",
    }
    stdout = _read(out, f"{rec['verifier_dir']}/test-stdout.txt")
    assert f"UV_EXCLUDE_NEWER={CUTOFF}" in stdout and f"PIP_UPLOADED_PRIOR_TO={CUTOFF}" in stdout
    assert "pip install: ok" in stdout, stdout  # the base's pip ignores the cutoff, no failure
    assert json.loads(_read(out, f"{rec['verifier_dir']}/ctrf.json"))["results"]
    assert "testsuite" in _read(out, f"{rec['verifier_dir']}/reports/junit.xml")
    start = _read(out, rec["packages"]["start"])
    after = _read(out, rec["packages"]["after_tests"])
    for listing in (start, after):
      assert "# dpkg-query -W\n" in listing and "# python3 -m pip freeze --all\n" in listing
      assert "\nbash\t" in listing and "\npytest==" in listing
    assert "tmaxprobe==1.0" in after and "tmaxprobe" not in start
  assert _read(out, "trials/passes/0/verifier/reward.txt").strip() == "1"
  assert "crashed before writing a reward" in _read(
    out, "trials/no-reward/0/verifier/test-stdout.txt"
  )
  on_disk = [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()]
  assert {r["task"]: r["verifier_dir"] for r in on_disk} == {
    n: r["verifier_dir"] for n, r in recs.items()
  }


def test_trial_outside_evaluation_keeps_nothing(tmp_path):
  require_base_rootfs()
  task = load_task(_task(tmp_path, "passes", PASS))
  res = run_oracle(task, RunnerConfig(memory_mb=2048, min_verifier_timeout_s=0))
  assert res.reward == 1.0 and res.artifacts == {}
  stdout = res.logs["test-stdout.txt"]
  assert "UV_EXCLUDE_NEWER=\n" in stdout  # no cutoff unless configured
  kept = run_oracle(task, RunnerConfig(memory_mb=2048, min_verifier_timeout_s=0), artifacts=True)
  assert kept.reward == 1.0
  assert set(kept.artifacts) >= {
    A.PACKAGES_START,
    A.PACKAGES_AFTER_TESTS,
    "verifier/test-stdout.txt",
    "verifier/reward.txt",
  }
