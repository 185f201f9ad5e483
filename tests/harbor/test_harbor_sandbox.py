"""HarborSandbox (RunnerConfig.backend "harbor:<type>") on our own bubblewrap sandbox behind
Harbor's environment API (the plugin, through the bridge process): the Sandbox contract the
harnesses and the runner rely on, and trials scored as with our backend."""

import pytest

from tests.conftest import require_base_rootfs
from tests.harbor.harbor_helpers import PLUGIN, require_harbor, write_tasks
from tmax_jax.harbor.sandbox import open_trial_sandbox
from tmax_jax.tasks import runner
from tmax_jax.tasks.format import load_task


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory):
  require_harbor()
  require_base_rootfs()
  return write_tasks(tmp_path_factory.mktemp("tasks"), levels=(0,))


@pytest.fixture(scope="module")
def sb(task_dir):
  task = load_task(next(task_dir.iterdir()))
  with open_trial_sandbox(task, runner.RunnerConfig(backend=PLUGIN, memory_mb=1024)) as sandbox:
    yield sandbox


def test_shell_state_persists_between_commands(sb):
  first = sb.run("cd /tmp && export FOO='a b' && f() { echo fn-$1; }; alias hi='echo hi'")
  assert (first.status, first.exit_code) == ("ok", 0)
  res = sb.run('echo "$FOO"; f 1; hi; pwd; exit 3')
  assert (res.output, res.exit_code, res.status) == ("a b\nfn-1\nhi\n/tmp\n", 3, "ok")
  assert sb.exec(["bash", "-c", 'echo "[$FOO]"; pwd']).output.startswith("[]\n")  # fresh process


def test_timeout_keeps_the_last_state(sb):
  sb.run("export KEEP=1")
  res = sb.run("export KEEP=2; sleep 30", timeout_s=1)
  assert res.status == "timeout" and res.exit_code is None
  assert "timed out" in res.output and res.duration_s < 15
  assert sb.run("echo $KEEP").output == "1\n"


def test_output_is_bounded_and_limits_are_classified(sb):
  res = sb.run("seq 1 100000", max_output_chars=400)
  assert res.output.startswith("1\n2\n") and res.output.rstrip().endswith("100000")
  assert "output truncated" in res.output and len(res.output) < 800
  oom = sb.run("python3 -c 'x = bytearray(3 << 30)'")
  assert oom.status == "oom" and "1024 MB" in oom.output
  assert sb.run("ulimit -f").output == f"{1024 * 1024}\n"  # max_file_mb, as a per-process rlimit


def test_files_round_trip_and_reset(sb, tmp_path):
  (tmp_path / "up" / "d").mkdir(parents=True)
  (tmp_path / "up" / "d" / "a.txt").write_text("A")
  sb.upload(tmp_path / "up", "/tmp/up")
  assert sb.run("cat /tmp/up/d/a.txt").output == "A"
  sb.run("echo B > /tmp/up/b.txt && export GONE=1 && (sleep 300 &)")
  sb.download("/tmp/up", tmp_path / "down")
  assert (tmp_path / "down" / "b.txt").read_text() == "B\n"
  sb.download("/tmp/up/b.txt", tmp_path / "b.txt")
  assert (tmp_path / "b.txt").read_text() == "B\n"
  sb.reset()
  # the sandbox user's sleeps (bubblewrap's lifetime watchdog sleeps there as another user)
  assert sb.run("echo [$GONE]; pgrep -c -u agent sleep || true").output == "[]\n0\n"


def test_warning_names_what_is_not_enforced(sb):
  assert "processes (512)" in sb.limit_warning and "not enforced" in sb.limit_warning
  assert sb.info["network"] == "no-network"


def test_trials_score_as_on_our_backend(task_dir, tmp_path):
  task = load_task(next(task_dir.iterdir()))
  cfg = runner.RunnerConfig(backend=PLUGIN)
  oracle, noop = runner.run_oracle(task, cfg), runner.run_noop(task, cfg)
  assert (oracle.reward, oracle.reason) == (1.0, "ok"), oracle.logs
  assert (noop.reward, noop.reason) == (0.0, "ok")
  assert (
    "Harbor tmax_jax.harbor.environment:TmaxEnvironment environment"
    in oracle.logs["environment.txt"]
  )
  broken = tmp_path / "broken"
  write_tasks(broken, levels=(1,))
  broken_task = load_task(next(broken.iterdir()))
  (broken_task.path / "environment" / "Dockerfile").write_text("FROM tmax-base:bookworm\nBOGUS x\n")
  ours = runner.run_noop(load_task(broken_task.path), runner.RunnerConfig(backend="bubblewrap"))
  theirs = runner.run_noop(load_task(broken_task.path), cfg)
  assert ours.reason.startswith("build_failed: ") and theirs.reason == ours.reason
