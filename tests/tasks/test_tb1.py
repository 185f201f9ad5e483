"""Terminal-Bench 1 -> TB2 conversion: fields, the unmodified test script, compose, solution.yaml,
reward parsing with a real pytest run, and precise errors."""

import subprocess
import sys
import textwrap

import pytest
import yaml

from tmax_jax.tasks import tb1
from tmax_jax.tasks.format import TaskFormatError, load_task, write_task

RUN_TESTS = textwrap.dedent("""\
  #!/bin/bash
  apt-get update
  apt-get install -y curl
  curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh
  source $HOME/.local/bin/env
  uv venv .tbench-testing
  uv pip install pytest==8.4.1
  uv run pytest $TEST_DIR/test_outputs.py -rA
""")


def _tb1_dir(root, solution="sh", **yaml_overrides):
  d = root / "hello-world"
  (d / "tests").mkdir(parents=True)
  cfg = {
    "instruction": "Create hello.txt containing Hello, world!",
    "author_name": "Ada",
    "author_email": "a@b.c",
    "difficulty": "easy",
    "category": "file-operations",
    "tags": ["file-operations", "bash"],
    "parser_name": "pytest",
    "max_agent_timeout_sec": 180,
    "max_test_timeout_sec": 30,
    "run_tests_in_same_shell": False,
    **yaml_overrides,
  }
  (d / "task.yaml").write_text(yaml.safe_dump(cfg))
  (d / "Dockerfile").write_text(
    "FROM ghcr.io/laude-institute/t-bench/ubuntu-24-04:latest\nWORKDIR /app\nCOPY data /app/data\n"
  )
  (d / "docker-compose.yaml").write_text("services: {client: {build: .}}\n")
  (d / "data").mkdir()
  (d / "data" / "seed.txt").write_text("seed\n")
  (d / "run-tests.sh").write_text(RUN_TESTS)
  (d / "tests" / "test_outputs.py").write_text(
    "from pathlib import Path\n\ndef test_hello():\n  assert "
    "Path('/app/hello.txt').read_text().strip() == 'Hello, world!'\n"
  )
  if solution == "sh":
    (d / "solution.sh").write_text("#!/bin/bash\necho 'Hello, world!' > hello.txt\n")
  elif solution == "yaml":
    (d / "solution.yaml").write_text(
      yaml.safe_dump(
        [
          {
            "command": "python3 -m http.server 8000",
            "min_timeout_sec": 2,
            "block": False,
            "append_enter": True,
          },
          {
            "command": "echo 'Hello, world!' > hello.txt",
            "min_timeout_sec": 0.1,
            "block": True,
            "append_enter": True,
          },
        ]
      )
    )
  return d


def test_convert_fields_and_layout(tmp_path):
  task = tb1.convert_tb1(_tb1_dir(tmp_path))
  c = task.config
  assert task.instruction == "Create hello.txt containing Hello, world!"
  assert c.task.name == "hello-world" and c.task.keywords == ("file-operations", "bash")
  assert c.task.authors == ("Ada <a@b.c>",)
  assert c.agent.timeout_sec == 180.0 and c.verifier.timeout_sec == 30.0
  assert c.metadata["difficulty"] == "easy" and c.metadata["source_format"] == "terminal-bench-1"
  assert sorted(task.environment) == ["Dockerfile", "data/seed.txt", "docker-compose.yaml"]
  assert sorted(task.tests) == ["run-tests.sh", "tb1_reward.py", "test.sh", "test_outputs.py"]
  assert task.solution["solve.sh"].startswith(b"#!/bin/bash\necho 'Hello")
  assert b"cd /app" in task.tests["test.sh"]
  assert task.tests["run-tests.sh"] == RUN_TESTS.encode()  # unmodified: images serve it offline
  out = write_task(task, tmp_path / "converted")
  again = load_task(out.path)
  assert again.config == task.config and again.tests == task.tests


def test_defaults_and_descriptions_form(tmp_path):
  d = _tb1_dir(tmp_path)
  cfg = yaml.safe_load((d / "task.yaml").read_text())
  for k in ("instruction", "max_agent_timeout_sec", "max_test_timeout_sec"):
    cfg.pop(k)
  cfg["descriptions"] = [{"key": "base", "description": "Old style."}]
  (d / "task.yaml").write_text(yaml.safe_dump(cfg))
  task = tb1.convert_tb1(d)
  assert task.instruction == "Old style."
  assert task.config.agent.timeout_sec == 360.0 and task.config.verifier.timeout_sec == 60.0


def test_solution_yaml(tmp_path):
  task = tb1.convert_tb1(_tb1_dir(tmp_path, solution="yaml"))
  script = task.solution["solve.sh"].decode()
  assert "nohup bash -c 'python3 -m http.server 8000' > /dev/null 2>&1 &\nsleep 2\n" in script
  assert script.rstrip().endswith("echo 'Hello, world!' > hello.txt")
  proc = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
  assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
  "mutate,file,field",
  [
    (lambda d: (d / "task.yaml").unlink(), "task.yaml", "task.yaml"),
    (lambda d: (d / "task.yaml").write_text("a: [1"), "task.yaml", "yaml"),
    (lambda d: (d / "run-tests.sh").unlink(), "run-tests.sh", "run-tests.sh"),
    (lambda d: (d / "task.yaml").write_text("tags: [x]\n"), "task.yaml", "instruction"),
    (
      lambda d: (d / "task.yaml").write_text("instruction: x\nmax_test_timeout_sec: soon\n"),
      "task.yaml",
      "max_test_timeout_sec",
    ),
    (
      lambda d: (d / "solution.yaml").write_text(
        yaml.safe_dump([{"command": "C-c", "append_enter": False}])
      ),
      "solution.yaml",
      "[0].append_enter",
    ),
  ],
)
def test_precise_errors(tmp_path, mutate, file, field):
  d = _tb1_dir(tmp_path, solution="yaml" if "solution" in file else "sh")
  mutate(d)
  with pytest.raises(TaskFormatError) as e:
    tb1.convert_tb1(d)
  assert e.value.file == str(d / file) and e.value.field == field, str(e.value)


def _run_reward_script(tmp_path, test_source):
  """Runs real pytest -rA on a test file, then the converted reward script on its output."""
  (tmp_path / "test_x.py").write_text(test_source)
  proc = subprocess.run(
    [sys.executable, "-m", "pytest", str(tmp_path / "test_x.py"), "-rA", "-p", "no:cacheprovider"],
    capture_output=True,
    text=True,
    cwd=tmp_path,
  )
  (tmp_path / "out.txt").write_text(proc.stdout)
  (tmp_path / "tb1_reward.py").write_text(tb1.REWARD_PY)
  subprocess.run(
    [
      sys.executable,
      str(tmp_path / "tb1_reward.py"),
      str(tmp_path / "out.txt"),
      str(tmp_path / "reward.txt"),
    ],
    check=True,
    capture_output=True,
  )
  return (tmp_path / "reward.txt").read_text().strip()


def _reward_of_text(tmp_path, text, parser="pytest"):
  (tmp_path / "out.txt").write_text(text)
  (tmp_path / "tb1_reward.py").write_text(tb1.REWARD_PY)
  cmd = [sys.executable, str(tmp_path / "tb1_reward.py"), str(tmp_path / "out.txt")]
  subprocess.run([*cmd, str(tmp_path / "reward.txt"), parser], check=True, capture_output=True)
  return (tmp_path / "reward.txt").read_text().strip()


def test_reward_script_on_real_pytest_output(tmp_path):
  assert _run_reward_script(tmp_path, "def test_a():\n  pass\ndef test_b():\n  pass\n") == "1"
  assert _run_reward_script(tmp_path, "def test_a():\n  pass\ndef test_b():\n  assert 0\n") == "0"
  # TB1's parser counts SKIPPED and XFAIL as passed (PytestTestStatus.to_test_status), XPASS not
  skip = "import pytest\ndef test_a():\n  pytest.skip('x')\ndef test_b():\n  pass\n"
  assert _run_reward_script(tmp_path, skip) == "1"
  xfail = "import pytest\n@pytest.mark.xfail\ndef test_a():\n  assert 0\n"
  assert _run_reward_script(tmp_path, xfail) == "1"
  xpass = "import pytest\n@pytest.mark.xfail(strict=False)\ndef test_a():\n  pass\n"
  assert _run_reward_script(tmp_path, xpass) == "0"
  assert _run_reward_script(tmp_path, "x = 1\n") == "0"  # no tests collected is not resolved


def test_reward_script_reads_only_the_summary_section(tmp_path):
  """As TB1's PytestParser: only the text after the first 'short test summary info' header
  counts, `FAILED x - reason` names test x, and output without that header is not resolved."""
  head = "=========================== short test summary info ============================\n"
  before = "FAILED this line is program output, not a result\nsome log\n"
  assert _reward_of_text(tmp_path, before + head + "PASSED t.py::test_a\n") == "1"
  failed = head + "PASSED t.py::test_a\nFAILED t.py::test_b - AssertionError: 1 - 2\n"
  assert _reward_of_text(tmp_path, failed) == "0"
  assert _reward_of_text(tmp_path, "PASSED t.py::test_a\n") == "0"  # no summary section
  assert _reward_of_text(tmp_path, head + "ERROR t.py - ImportError\n") == "0"
  assert _reward_of_text(tmp_path, head) == "0"  # a summary that lists nothing


@pytest.mark.parametrize("shebang", ["#!/bin/sh", "#!/bin/bash -e", "# no shebang line"])
def test_solution_sh_runs_with_bash_like_tb1(tmp_path, shebang):
  """TB1's oracle runs `bash /oracle/solution.sh`: the script's own #! line (here: sh, which has
  no [[ ]] or arrays, or bash -e, which would stop at `false`) must not change how it runs."""
  d = _tb1_dir(tmp_path)
  body = 'false\nif [[ -n x ]]; then arr=(a b); echo "${arr[1]}" > "$OUT"; fi\n'
  (d / "solution.sh").write_text(f"{shebang}\n{body}")
  task = write_task(tb1.convert_tb1(d), tmp_path / "converted")
  solve = task.path / "solution" / "solve.sh"
  out = tmp_path / "out.txt"
  proc = subprocess.run(
    [str(solve)], env={"OUT": str(out), "PATH": "/usr/bin:/bin"}, text=True, capture_output=True
  )
  assert proc.returncode == 0 and out.read_text() == "b\n", proc.stderr
  assert body in solve.read_text()  # the original script is kept, only a #! line is added
  (d / "solution.sh").write_text("#!/usr/bin/env bash\necho hi\n")
  assert tb1.convert_tb1(d).solution["solve.sh"] == b"#!/usr/bin/env bash\necho hi\n"


def test_compose_environment_and_multi_service(tmp_path):
  d = _tb1_dir(tmp_path)
  (d / "docker-compose.yaml").write_text(
    yaml.safe_dump(
      {
        "services": {
          "client": {
            "build": {"dockerfile": "Dockerfile"},
            "environment": ["TEST_DIR=${T_BENCH_TEST_DIR}", "LANG=C.UTF-8"],
          }
        }
      }
    )
  )
  task = tb1.convert_tb1(d)
  assert dict(task.config.environment.env) == {"TEST_DIR": "/tests", "LANG": "C.UTF-8"}
  assert "compose_services" not in task.config.metadata
  (d / "docker-compose.yaml").write_text(
    yaml.safe_dump({"services": {"client": {"build": "."}, "db": {"image": "postgres:16"}}})
  )
  task = tb1.convert_tb1(d)
  assert task.config.metadata["compose_services"] == ["client", "db"]


def test_swebench_parser(tmp_path):
  """parser_name: swebench (the SWE-bench Verified adapter's 500 TB1 tasks): resolved iff the text
  between TB1's SWEBench markers is exactly PASSED; a pytest summary elsewhere does not count."""
  d = _tb1_dir(tmp_path, parser_name="swebench")
  task = tb1.convert_tb1(d)
  assert task.tests["test.sh"].decode().rstrip().endswith("reward.txt swebench")
  start, end = "SWEBench results starts here", "SWEBench results ends here"
  pytest_pass = "===== short test summary info =====\nPASSED t.py::test_a\n"
  assert _reward_of_text(tmp_path, f"log\n{start}\nPASSED\n{end}\n", "swebench") == "1"
  assert _reward_of_text(tmp_path, f"{pytest_pass}{start}\nFAILED\n{end}\n", "swebench") == "0"
  assert _reward_of_text(tmp_path, pytest_pass, "swebench") == "0"  # no markers
  assert _reward_of_text(tmp_path, f"{start}\nPASSED\n", "swebench") == "0"
  assert b"reward.txt pytest" in tb1.convert_tb1(_tb1_dir(tmp_path / "p")).tests["test.sh"]
  (d / "task.yaml").write_text(yaml.safe_dump({"instruction": "x", "parser_name": "junit"}))
  with pytest.raises(TaskFormatError) as e:
    tb1.convert_tb1(d)
  assert e.value.field == "parser_name" and "junit" in str(e.value)
