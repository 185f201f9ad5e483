"""The runner in real sandboxes: for each verifier kind the oracle scores 1, doing nothing scores 0
and a plausible wrong solution scores 0; a verifier that writes no reward is RewardMissingError;
reward.json is preferred; a failing environment build, a sandbox failure, a sandbox killed under
the trial and a broken verifier are infrastructure failures of their kind, never a reward."""

import contextlib
import dataclasses
import os
import signal
import textwrap

import pytest

from tests.conftest import require_base_rootfs
from tmax_jax.sandbox.api import SandboxError
from tmax_jax.tasks import verifiers as V
from tmax_jax.tasks.format import Task, TaskConfig, write_task
from tmax_jax.tasks.runner import (
  INFRA_FAILURES,
  RewardFormatError,
  RewardMissingError,
  RunnerConfig,
  run_noop,
  run_oracle,
  run_script,
  run_trial,
)


@pytest.fixture(scope="module")
def cfg():
  require_base_rootfs()
  return RunnerConfig(memory_mb=2048, min_verifier_timeout_s=0)  # the tasks' own timeouts


def _task(tests, solve, seeds=None, **toml):
  from tmax_jax.tasks.format import AgentConfig, VerifierConfig

  config = TaskConfig(agent=AgentConfig(timeout_sec=120), verifier=VerifierConfig(timeout_sec=120))
  env = {f"seeds/{k}": v.encode() for k, v in (seeds or {}).items()}
  return Task(
    "solve it",
    config,
    environment=env,
    tests=tests,
    solution={"solve.sh": ("#!/bin/bash\n" + solve).encode()},
  )


SALES = "region,amount\nwest,10\neast,5\nwest,7\nnorth,1\neast,2\n"
SORT_PY = "import sys\nprint(' '.join(sorted(sys.stdin.read().split(), key=int)))\n"
REF = "def reference(data):\n  return ' '.join(sorted(data.split(), key=int)) + '\\n'\n"
FILTER = (
  "import sys\nd = sys.stdin.read().lower()\n"
  "sys.exit(1 if any(k in d for k in ('drop table', '<script', '../')) else 0)\n"
)
SERVICE = textwrap.dedent("""\
  import http.server, json, socketserver, threading
  class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
      b = json.dumps({"status": "ok"}).encode()
      self.send_response(200); self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
    def log_message(self, *a): pass
  class T(socketserver.StreamRequestHandler):
    def handle(self):
      self.wfile.write(b"PONG\\n" if self.rfile.readline().strip() == b"PING" else b"ERR\\n")
  socketserver.TCPServer.allow_reuse_address = True
  threading.Thread(target=socketserver.TCPServer(("127.0.0.1", 9100), T).serve_forever, daemon=True).start()
  http.server.HTTPServer(("127.0.0.1", 8180), H).serve_forever()
""")  # noqa: E501 (embedded script, kept verbatim)


def _write(name, content):
  return f"cat > /workspace/{name} <<'PYEOF'\n{content}PYEOF\n"


KINDS = {
  "exact_text": (
    V.exact_text([{"path": "totals.txt", "expected": "east 7\nnorth 1\nwest 17\n"}]),
    "cd /workspace && tail -n +2 sales.csv | awk -F, '{s[$1]+=$2} END {for (r in s) print r, "
    "s[r]}' | sort > totals.txt\n",
    # no aggregation
    "cd /workspace && tail -n +2 sales.csv | awk -F, '{print $1, $2}' | sort > totals.txt\n",
    {"sales.csv": SALES},
  ),
  "metric_threshold": (
    V.metric_threshold(
      "accuracy", 0.9, predictions="pred.txt", reference=["odd", "even", "odd", "even", "even"]
    ),
    "cd /workspace && while read n; do if [ $((n % 2)) -eq 0 ]; then echo even; else echo odd; fi; "
    "done < nums.txt > pred.txt\n",
    # majority class: 0.6
    "cd /workspace && while read n; do echo even; done < nums.txt > pred.txt\n",
    {"nums.txt": "3\n8\n5\n2\n10\n"},
  ),
  "adversarial_corpus": (
    V.adversarial_corpus(
      "python3 filter.py",
      ["hello", "select 1", "a/b.txt"],
      ["1; DROP TABLE t", "<script>x</script>", "../../etc/passwd"],
    ),
    _write("filter.py", FILTER),
    _write("filter.py", FILTER.replace(", '../'", "")),  # misses path traversal
    None,
  ),
  "fuzz_equivalence": (
    V.fuzz_equivalence(
      "python3 sort.py",
      {"type": "ints", "min_len": 1, "max_len": 6, "lo": -99, "hi": 99},
      n=25,
      reference_code=REF,
    ),
    _write("sort.py", SORT_PY),
    _write("sort.py", SORT_PY.replace(", key=int", "")),  # lexicographic
    None,
  ),
  "multi_protocol": (
    V.multi_protocol(
      [
        {"protocol": "http", "port": 8180, "path": "/health", "expect_json": {"status": "ok"}},
        {"protocol": "tcp", "port": 9100, "send": "PING\n", "expect": "PONG\n"},
      ],
      startup_timeout_s=2,
    ),
    _write("service.py", SERVICE)
    + "cd /workspace && setsid nohup python3 service.py > /dev/null 2>&1 < /dev/null &\nsleep 1\n",
    _write("service.py", SERVICE.replace('b"PONG\\n" if', 'b"pong\\n" if'))
    # wrong case
    + "cd /workspace && setsid nohup python3 service.py > /dev/null 2>&1 < /dev/null &\nsleep 1\n",
    None,
  ),
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_oracle_noop_wrong(kind, cfg, tmp_path):
  tests, good, wrong, seeds = KINDS[kind]
  task = write_task(_task(tests, good, seeds), tmp_path / kind)
  oracle = run_oracle(task, cfg)
  assert (oracle.reward, oracle.reason) == (1.0, "ok"), oracle.logs
  assert oracle.rewards["passed"] == oracle.rewards["total"]
  noop = run_noop(task, cfg)
  assert (noop.reward, noop.reason) == (0.0, "ok"), noop.logs
  bad = run_script(task, "#!/bin/bash\n" + wrong, cfg)
  assert (bad.reward, bad.reason) == (0.0, "ok"), bad.logs
  assert (
    "FAIL" in bad.logs["test-stdout.txt"]
    or "differs" in bad.logs["test-stdout.txt"]
    or "should be" in bad.logs["test-stdout.txt"]
  ), bad.logs


def test_verifier_without_reward_is_an_error(cfg, tmp_path):
  task = write_task(
    _task({"test.sh": b"#!/bin/bash\necho ran the tests\n"}, "true\n"), tmp_path / "t"
  )
  with pytest.raises(RewardMissingError, match="missing") as e:
    run_oracle(task, cfg)
  assert "ran the tests" in e.value.logs["test-stdout.txt"]
  task = write_task(
    _task({"test.sh": b"#!/bin/bash\n: > /logs/verifier/reward.txt\n"}, "true\n"), tmp_path / "e"
  )
  with pytest.raises(RewardMissingError, match="empty"):
    run_oracle(task, cfg)


def test_a_broken_verifier_is_an_infrastructure_failure(cfg, tmp_path):
  for name, test_sh, error in (
    ("crash", "#!/bin/bash\necho testing\nkill -SEGV $$\n", RewardMissingError),
    ("garbage", "#!/bin/bash\necho 'pass!!' > /logs/verifier/reward.txt\n", RewardFormatError),
  ):
    task = write_task(_task({"test.sh": test_sh.encode()}, "true\n"), tmp_path / name)
    with pytest.raises(error) as e:
      run_oracle(task, cfg)
    assert e.value.kind == "verifier_error" and e.value.kind in INFRA_FAILURES


def test_a_sandbox_killed_under_the_trial_is_never_scored(cfg, tmp_path):
  """Every process of the sandbox SIGKILLed from the host after the agent acted: the verifier
  (which would pass) runs in a restarted sandbox or not at all; either way no reward."""
  task = write_task(
    _task({"test.sh": b"#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n"}, "true\n"),
    tmp_path / "k",
  )
  seen = {}

  def killer(sb):
    assert sb.run("echo alive").output.strip() == "alive" and not sb.lost()
    for pid in sb.cgroup.pids():
      with contextlib.suppress(ProcessLookupError):  # gone since the listing (its parent died)
        os.kill(pid, signal.SIGKILL)
    seen["name"] = sb.name

  res = run_trial(task, killer, cfg)
  assert (res.failure, res.reward, res.sandbox) == ("sandbox_lost", 0.0, seen["name"]), res
  assert res.reason.startswith("sandbox_lost: its bubblewrap anchor process ended"), res.reason
  assert run_trial(task, None, cfg).reward == 1.0  # the same task, not killed, passes


def test_reward_json_preferred_and_txt_clamped(cfg, tmp_path):
  sh = (
    "#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n"
    'echo \'{"reward": 0.5, "style": 2}\' > /logs/verifier/reward.json\n'
  )
  res = run_noop(write_task(_task({"test.sh": sh.encode()}, "true\n"), tmp_path / "j"), cfg)
  assert res.reward == 0.5 and res.rewards == {"reward": 0.5, "style": 2.0}
  res = run_noop(
    write_task(
      _task({"test.sh": b"echo 3 > /logs/verifier/reward.txt\n"}, "true\n"), tmp_path / "t"
    ),
    cfg,
  )
  assert res.reward == 1.0 and res.rewards == {"reward": 3.0}


def test_tests_uploaded_only_after_agent_and_solution_only_for_oracle(cfg, tmp_path):
  sh = (
    "#!/bin/bash\n"
    "if [ -e /workspace/saw_tests ] || [ -e /workspace/saw_solution ]; then echo 0; else echo 1; fi"
    " > /logs/verifier/reward.txt\n"
  )
  task = write_task(_task({"test.sh": sh.encode()}, "true\n"), tmp_path / "t")

  def peek(sb):
    return sb.run(
      "test -e /tests/test.sh && touch /workspace/saw_tests; "
      "test -e /solution/solve.sh && touch /workspace/saw_solution; true"
    )

  assert run_trial(task, peek, cfg).reward == 1.0


def test_build_failure_is_an_infrastructure_failure_with_reason(cfg, tmp_path):
  t = _task(V.exact_text([{"path": "x", "expected": "y"}]), "true\n")
  t = Task(
    t.instruction,
    t.config,
    environment={"Dockerfile": b"FROM debian\nRUN exit 7\n"},
    tests=t.tests,
    solution=t.solution,
  )
  res = run_oracle(write_task(t, tmp_path / "b"), cfg)
  assert res.failure == "build_failed" and res.reason.startswith("build_failed"), res


def test_sandbox_failure_is_an_infrastructure_failure_with_reason(cfg, tmp_path):
  task = write_task(_task(V.exact_text([{"path": "x", "expected": "y"}]), "true\n"), tmp_path / "s")

  def agent(sb):
    raise SandboxError("reset failed: the shell did not come back")

  res = run_trial(task, agent, cfg)
  assert res.failure == "sandbox_lost"
  assert res.reason == "sandbox_error: reset failed: the shell did not come back"


def test_tb1_converted_task_runs(cfg, tmp_path):
  from tmax_jax.tasks import tb1

  d = tmp_path / "tb1"
  (d / "tests").mkdir(parents=True)
  (d / "task.yaml").write_text("instruction: write hello\nmax_test_timeout_sec: 60\n")
  (d / "Dockerfile").write_text("FROM ubuntu\nWORKDIR /app\n")
  (d / "run-tests.sh").write_text(
    "#!/bin/bash\ncurl -LsSf https://astral.sh/uv/install.sh | sh\n"
    "uv run pytest $TEST_DIR/test_outputs.py -rA\n"
  )
  (d / "tests" / "test_outputs.py").write_text(
    "def test_hello():\n  assert open('/app/hello.txt').read() == 'hello\\n'\n"
  )
  (d / "solution.sh").write_text("#!/bin/bash\necho hello > /app/hello.txt\n")
  task = write_task(tb1.convert_tb1(d), tmp_path / "converted")
  assert run_oracle(task, cfg).reward == 1.0
  assert run_noop(task, cfg).reward == 0.0


def test_oracle_out_of_memory_is_zero_with_reason(tmp_path):
  require_base_rootfs()
  task = write_task(
    _task(
      {"test.sh": b"#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n"},
      "python3 -c 'x = bytearray(1 << 30); print(len(x))'\n",
    ),
    tmp_path / "m",
  )
  res = run_oracle(task, RunnerConfig(memory_mb=512))
  assert (res.reward, res.reason) == (0.0, "agent_oom"), res
  assert "MemoryError" in res.logs["oracle.txt"] or "memory" in res.logs["oracle.txt"].lower()
  assert (
    run_oracle(task, RunnerConfig(memory_mb=4096)).reward == 1.0
  )  # the same script fits in 4 GB (RLIMIT_AS)


def test_verifier_timeout_is_zero_with_reason(cfg, tmp_path):
  import dataclasses

  from tmax_jax.tasks.format import VerifierConfig

  t = _task({"test.sh": b"#!/bin/bash\nsleep 30\necho 1 > /logs/verifier/reward.txt\n"}, "true\n")
  t = dataclasses.replace(
    t, config=dataclasses.replace(t.config, verifier=VerifierConfig(timeout_sec=2))
  )
  res = run_noop(write_task(t, tmp_path / "v"), cfg)
  assert (res.reward, res.reason) == (0.0, "verifier_timeout"), res
  assert res.duration_s < 20


def test_reward_left_by_the_agent_does_not_count(cfg, tmp_path):
  task = write_task(_task({"test.sh": b"#!/bin/bash\necho checking\n"}, "true\n"), tmp_path / "h")

  def forge(sb):
    return sb.run(
      "echo 1 > /logs/verifier/reward.txt; echo '{\"reward\": 1}' > /logs/verifier/reward.json"
    )

  with pytest.raises(RewardMissingError):
    run_trial(task, forge, cfg)


def test_planted_usercustomize_cannot_hijack_the_checker(cfg, tmp_path):
  task = write_task(
    _task(V.exact_text([{"path": "answer.txt", "expected": "42"}]), "echo 42 > answer.txt\n"),
    tmp_path / "u",
  )
  plant = (
    "d=$(python3 -m site --user-site) && mkdir -p $d && printf '%s\\n' 'import os' "
    '\'open("/logs/verifier/reward.txt", "w").write("1")\' \'os._exit(0)\' > $d/usercustomize.py'
  )
  # the plant works on an ordinary python3 in the sandbox ...
  probe = {}

  def agent(sb):
    sb.run(plant)
    probe["out"] = sb.run(
      "python3 -c 'print(\"not reached\")'; cat /logs/verifier/reward.txt; rm "
      "/logs/verifier/reward.txt"
    ).output

  res = run_trial(task, agent, cfg)
  assert "not reached" not in probe["out"] and probe["out"].strip().endswith("1"), probe
  # ... but the checker runs isolated, so the task still scores 0
  assert res.reward == 0.0 and "reward 0 (0/1)" in res.logs["test-stdout.txt"], res


def test_the_task_runs_in_the_image_its_dockerfile_builds(cfg, tmp_path):
  """A root-only RUN (files outside the writable binds, a system package db edit) and ENV: only a
  real build gives the oracle what it needs, and the trial records the image it ran in."""
  task = _task(
    {
      "test.sh": b"#!/bin/bash\ncd /workspace && [ \"$(cat out.txt)\" = '42 yes' ] && "
      b"echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
    },
    'cd /workspace && echo "$(cat /opt/tool/answer) $FLAG" > out.txt\n',
  )
  task = dataclasses.replace(
    task,
    environment={
      "Dockerfile": b"FROM tmax-base:bookworm\nRUN mkdir -p /opt/tool && echo 42 > "
      b"/opt/tool/answer && chmod 700 /root\nENV FLAG=yes\nWORKDIR /workspace\n"
    },
  )
  task = write_task(task, tmp_path / "built")
  res = run_oracle(task, cfg)
  assert res.reward == 1.0, res.logs
  assert "FROM tmax-base:bookworm" in res.logs["environment.txt"]
  assert run_noop(task, cfg).reward == 0.0


def test_multi_service_compose_is_unsupported_not_zero(cfg, tmp_path):
  from tmax_jax.tasks.runner import TaskUnsupportedError

  task = _task({"test.sh": b"#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n"}, "true\n")
  task = dataclasses.replace(
    task, config=dataclasses.replace(task.config, metadata={"compose_services": ["client", "db"]})
  )
  with pytest.raises(TaskUnsupportedError, match="2 services.*client, db"):
    run_oracle(write_task(task, tmp_path / "compose"), cfg)
