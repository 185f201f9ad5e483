"""Terminal-Bench 1 task directory -> TB2/Harbor Task.

TB1 layout: task.yaml, Dockerfile (+ docker-compose.yaml, other build-context files), run-tests.sh,
tests/ (test_outputs.py ...), solution.sh or solution.yaml. Mapping (shared/docs/formats.md):
  task.yaml instruction (or descriptions[key=base])   -> instruction.md
  max_agent_timeout_sec (360) / max_test_timeout_sec (60) -> agent / verifier timeout_sec
  difficulty, category, tags, parser_name, ...         -> [metadata]; tags also -> task.keywords
  Dockerfile and the rest of the build context         -> environment/ (same relative paths)
  tests/* + run-tests.sh                               -> tests/ + a generated test.sh that runs
        run-tests.sh, parses pytest's -rA summary and writes reward.txt (1 iff every test PASSED)
  solution.sh / solution.yaml                          -> solution/solve.sh (run with bash, as
        TB1's oracle does: a solution.sh whose #! line is not a plain bash one gets #!/bin/bash)
  docker-compose.yaml                                -> the main service's `environment:` into
        [environment] env (T_BENCH_* variables substituted; tasks/compose.py); several services
        -> also metadata compose_services, and the runner starts them as a podman pod
        (the file stays in environment/)
run-tests.sh runs unmodified: it downloads uv/pytest at grading time, which the task images
serve offline (uv and a pytest wheelhouse in every image, the uv installer URL from a local copy,
apt-get update/install of present packages succeed; sandbox/offline/).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import shlex
from typing import Any

import yaml

from tmax_jax.tasks import compose
from tmax_jax.tasks.environment import dockerfile_instructions
from tmax_jax.tasks.format import (
  AgentConfig,
  Task,
  TaskConfig,
  TaskFormatError,
  TaskInfo,
  VerifierConfig,
  _read_tree,
  validate_task,
)

DEFAULT_AGENT_TIMEOUT = 360.0
_BASH_SHEBANG = re.compile(rb"#!\s*(/bin/bash|/usr/bin/bash|/usr/bin/env\s+bash)")
DEFAULT_TEST_TIMEOUT = 60.0
_NOT_CONTEXT = {"task.yaml", "run-tests.sh", "solution.sh", "solution.yaml", "tests"}
_METADATA_KEYS = (
  "difficulty",
  "category",
  "tags",
  "parser_name",
  "run_tests_in_same_shell",
  "expert_time_estimate_min",
  "junior_time_estimate_min",
  "author_name",
  "author_email",
)

TEST_SH = """#!/bin/bash
# Converted from Terminal-Bench 1 by tmax_jax.tasks.tb1: run run-tests.sh, then TB1's {parser}
# parser (tb1_reward.py) over its output.
mkdir -p /logs/verifier
export TEST_DIR=/tests PYTHONNOUSERSITE=1  # nothing the agent put in ~/.local is imported
cd {workdir} 2>/dev/null || true
bash /tests/run-tests.sh > /logs/verifier/pytest-output.txt 2>&1
cat /logs/verifier/pytest-output.txt
python3 -I /tests/tb1_reward.py /logs/verifier/pytest-output.txt /logs/verifier/reward.txt {parser}
"""

PARSERS = ("pytest", "swebench")  # TB1's parser_name values this converter scores

REWARD_PY = r'''"""Terminal-Bench 1's parsers over run-tests.sh's output: tb1_reward.py OUTPUT REWARD [PARSER].
Writes 1 to REWARD iff the task is resolved: every test the parser finds passed, at least one.
pytest (default): only the text after the first "short test summary info" header counts; a line
"STATUS name" (STATUS may end in ":"; "FAILED x - reason" is test x) with PASSED, SKIPPED or XFAIL
passes (TB1 counts all three as passed), FAILED, ERROR or XPASS fails; no header: not resolved.
swebench: the text between the first "SWEBench results starts here" and the last "SWEBench results
ends here" must be exactly PASSED."""
import re
import sys

text = open(sys.argv[1], errors="replace").read()
parser = sys.argv[3] if len(sys.argv) > 3 else "pytest"
status = {}
if parser == "swebench":
  start, end = "SWEBench results starts here", "SWEBench results ends here"
  if start in text and end in text:
    block = text.split(start, 1)[-1].rsplit(end, 1)[0].strip()
    status["tests"] = "PASSED" if block == "PASSED" else "FAILED"
  else:
    print("no 'SWEBench results starts here/ends here' markers in the test output")
else:
  parts = re.split(r"=+\s*short test summary info\s*=+", text, maxsplit=1, flags=re.IGNORECASE)
  for line in parts[1].splitlines() if len(parts) == 2 else []:
    if line.startswith("FAILED") and " - " in line:
      line = " - ".join(line.split(" - ")[:-1])
    fields = line.split(maxsplit=1)
    if len(fields) < 2:
      continue
    word, name = fields[0].strip().strip(":"), fields[1].strip().split("::", 1)[-1]
    if word in ("PASSED", "FAILED", "SKIPPED", "XFAIL", "XPASS", "ERROR") and name:
      status[name] = word
  if len(parts) < 2:
    print("no 'short test summary info' section in the test output")
ok = bool(status) and all(s in ("PASSED", "SKIPPED", "XFAIL") for s in status.values())
for name, s in sorted(status.items()):
  print(f"{s} {name}")
open(sys.argv[2], "w").write("1\n" if ok else "0\n")
'''  # noqa: E501 (embedded script, kept verbatim)


def _tb1_error(path: pathlib.Path, field: str, problem: str) -> TaskFormatError:
  return TaskFormatError(path, field, problem)


def solution_yaml_to_script(entries: Any, file: pathlib.Path) -> str:
  """solution.yaml ([{command, min_timeout_sec, block, append_enter}]) -> a bash script.
  Non-blocking entries run in the background, then the script waits min_timeout_sec."""
  if not isinstance(entries, list):
    raise _tb1_error(
      file, "solution.yaml", f"expected a list of commands, got {type(entries).__name__}"
    )
  lines = ["#!/bin/bash", "# Converted from solution.yaml by tmax_jax.tasks.tb1"]
  for i, e in enumerate(entries):
    if not isinstance(e, dict) or not isinstance(e.get("command"), str):
      raise _tb1_error(file, f"[{i}].command", f"expected a string command, got {e!r}")
    if e.get("append_enter", True) is False:
      raise _tb1_error(
        file, f"[{i}].append_enter", "raw keystrokes without Enter cannot become a script line"
      )
    cmd = e["command"].rstrip("\n")
    wait = float(e.get("min_timeout_sec", 0) or 0)
    if e.get("block", True) is False:
      lines.append(f"nohup bash -c {shlex.quote(cmd)} > /dev/null 2>&1 &")
    else:
      lines.append(cmd)
    if wait > 0 and e.get("block", True) is False:
      lines.append(f"sleep {wait:g}")
  return "\n".join(lines) + "\n"


def bash_script(script: bytes) -> bytes:
  """solution.sh -> solve.sh that runs as TB1 runs it: its oracle types `bash solution.sh`, so the
  script's own #! line (sh, bash -e, none) is ignored. A flagless bash #! line is kept as it is;
  any other first line gets `#!/bin/bash` above it (the old one becomes a comment)."""
  first = script.split(b"\n", 1)[0].rstrip()
  return script if _BASH_SHEBANG.fullmatch(first) else b"#!/bin/bash\n" + script


def _compose(path: pathlib.Path) -> tuple[dict[str, str], list[str]]:
  """(environment of the main service, service names) of a TB1 docker-compose.yaml."""
  if not path.is_file():
    return {}, []
  comp = compose.load_compose(path)
  return dict(comp.service(comp.main).environment), comp.names


def _instruction(cfg: dict, file: pathlib.Path) -> str:
  if isinstance(cfg.get("instruction"), str):
    return cfg["instruction"]
  for d in cfg.get("descriptions") or []:  # early TB1: [{key: base, description: ...}]
    if isinstance(d, dict) and d.get("key") == "base" and isinstance(d.get("description"), str):
      return d["description"]
  raise _tb1_error(file, "instruction", "missing (expected a string, or descriptions[key=base])")


def _timeout(cfg: dict, key: str, default: float, file: pathlib.Path) -> float:
  v = cfg.get(key, default)
  if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
    raise _tb1_error(file, key, f"expected a positive number of seconds, got {v!r}")
  return float(v)


def _workdir(src: pathlib.Path) -> str:
  workdir = "/"
  dockerfile = src / "Dockerfile"
  if dockerfile.is_file():
    for _, ins, args in dockerfile_instructions(
      dockerfile.read_text(encoding="utf-8"), str(dockerfile)
    ):
      if ins == "WORKDIR":
        workdir = args if args.startswith("/") else os.path.join(workdir, args)
  return workdir


def convert_tb1(src: str | os.PathLike, name: str | None = None) -> Task:
  """Reads a TB1 task directory and returns the equivalent TB2 Task (write it with write_task)."""
  src = pathlib.Path(src)
  yaml_path = src / "task.yaml"
  try:
    cfg = yaml.safe_load(yaml_path.read_text(encoding="utf-8"))
  except FileNotFoundError:
    raise _tb1_error(yaml_path, "task.yaml", "file is missing") from None
  except yaml.YAMLError as err:
    raise _tb1_error(yaml_path, "yaml", f"not valid YAML: {err}") from None
  if not isinstance(cfg, dict):
    raise _tb1_error(yaml_path, "task.yaml", "expected a mapping at the top level")
  run_tests = src / "run-tests.sh"
  if not run_tests.is_file():
    raise _tb1_error(run_tests, "run-tests.sh", "file is missing (the TB1 test entrypoint)")

  tags = cfg.get("tags") or []
  authors = tuple(
    f"{cfg['author_name']} <{cfg.get('author_email', '')}>".replace(" <>", "")
    for _ in [0]
    if cfg.get("author_name")
  )
  metadata = {k: cfg[k] for k in _METADATA_KEYS if cfg.get(k) is not None}
  metadata["source_format"] = "terminal-bench-1"
  config = TaskConfig(
    task=TaskInfo(name=name or src.name, authors=authors, keywords=tuple(str(t) for t in tags)),
    metadata=metadata,
    agent=AgentConfig(
      timeout_sec=_timeout(cfg, "max_agent_timeout_sec", DEFAULT_AGENT_TIMEOUT, yaml_path)
    ),
    verifier=VerifierConfig(
      timeout_sec=_timeout(cfg, "max_test_timeout_sec", DEFAULT_TEST_TIMEOUT, yaml_path)
    ),
  )

  env, services = _compose(src / "docker-compose.yaml")
  if env:
    config = dataclasses.replace(
      config, environment=dataclasses.replace(config.environment, env=env)
    )
  if len(services) > 1:
    config = dataclasses.replace(
      config, metadata={**config.metadata, "compose_services": list(services)}
    )
  environment, execs = {}, set()
  for p in sorted(src.rglob("*")):
    rel = p.relative_to(src)
    if p.is_file() and rel.parts[0] not in _NOT_CONTEXT:
      environment[rel.as_posix()] = p.read_bytes()
      if os.access(p, os.X_OK):
        execs.add(f"environment/{rel.as_posix()}")
  tests, test_execs = _read_tree(src / "tests", "tests")
  execs |= test_execs
  if "test.sh" in tests:
    raise _tb1_error(
      src / "tests" / "test.sh", "tests/test.sh", "clashes with the generated TB2 entrypoint"
    )
  tests["run-tests.sh"] = run_tests.read_bytes()
  parser = cfg.get("parser_name", "pytest")
  if parser not in PARSERS:
    raise _tb1_error(
      yaml_path,
      "parser_name",
      f"expected one of {', '.join(PARSERS)} (TB1 parsers), got {parser!r}",
    )
  test_sh = TEST_SH.format(workdir=shlex.quote(_workdir(src)), parser=parser)
  tests["test.sh"] = test_sh.encode()
  tests["tb1_reward.py"] = REWARD_PY.encode()

  solution = {}
  if (src / "solution.sh").is_file():
    solution["solve.sh"] = bash_script((src / "solution.sh").read_bytes())
  elif (src / "solution.yaml").is_file():
    sol_path = src / "solution.yaml"
    try:
      entries = yaml.safe_load(sol_path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
      raise _tb1_error(sol_path, "yaml", f"not valid YAML: {err}") from None
    solution["solve.sh"] = solution_yaml_to_script(entries, sol_path).encode()
  task = Task(
    instruction=_instruction(cfg, yaml_path),
    config=config,
    environment=environment,
    tests=tests,
    solution=solution,
    executables=frozenset(execs),
  )
  validate_task(task, src)
  return task
