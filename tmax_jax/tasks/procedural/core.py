"""Shared pieces of the procedural task library: the family record, the task spec and its rendering.

A family is a pure function (rng, difficulty) -> TaskSpec. Rendering turns a spec into a TB2/Harbor
`Task` (tmax_jax.tasks.format) with:
  environment/seeds/...   copied into /workspace
  environment/setup.sh    run once as root at environment build time (compile, git init, ...)
  tests/test.sh           runs tests/check.py offline, writes 1 or 0 to /logs/verifier/reward.txt
  solution/solve.sh       the oracle
The family's plausible WRONG solution is kept on the spec (never written into the task by default)
so that acceptance tests can prove the hidden tests reject it.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import random
from collections.abc import Callable, Mapping
from typing import Any

from tmax_jax.tasks import vocabulary

LEVELS = (0, 1, 2)
DIFFICULTY_NAMES = ("easy", "medium", "hard")
WORKDIR = "/workspace"


@dataclasses.dataclass(frozen=True)
class TaskSpec:
  """Everything one generated task needs, as text/bytes.

  files: seed files relative to /workspace. check: Python source of the hidden checker body; it
  runs in /workspace after CHECK_PRELUDE (which defines DATA from `data`, fail(), sh(), ...), and
  the task passes iff it exits 0. test_files / solution_files: extra files next to check.py /
  solve.sh. complexity: a vocabulary.TASK_COMPLEXITIES value (how many commands a good agent needs).
  """

  instruction: str
  check: str
  solve: str
  wrong: str
  files: Mapping[str, bytes | str] = dataclasses.field(default_factory=dict)
  data: Any = None
  setup: str = ""
  test_files: Mapping[str, bytes | str] = dataclasses.field(default_factory=dict)
  solution_files: Mapping[str, bytes | str] = dataclasses.field(default_factory=dict)
  complexity: str = "short"
  language: str = "bash"
  verifier_timeout_sec: float = 300.0
  agent_timeout_sec: float = 1800.0

  def __post_init__(self):
    vocabulary.check("task_complexity", self.complexity, "procedural TaskSpec")


@dataclasses.dataclass(frozen=True)
class Family:
  """A parameterised task family; `build(rng, difficulty)` must be deterministic in its args."""

  name: str
  domain: str
  verifier: str
  fixture: str
  build: Callable[[random.Random, int], TaskSpec]
  skills: tuple[str, ...] = ()

  def __post_init__(self):
    for field in ("domain", "verifier", "fixture"):
      vocabulary.check(field, getattr(self, field), f"procedural family {self.name}")


def family_rng(name: str, seed: int, difficulty: int) -> random.Random:
  """A Random seeded from (family, seed, difficulty); str seeds hash with sha512, not hash()."""
  return random.Random(f"tmax-procedural:{name}:{seed}:{difficulty}")


CHECK_PRELUDE = '''\
# Hidden checker (generated). Exit status 0 = pass.
import base64, json, os, socket, subprocess, sys, time, urllib.error, urllib.request
DATA = json.loads(base64.b64decode(%r).decode())
os.chdir(%r)


def fail(msg):
  print("FAIL:", msg)
  sys.exit(1)


def sh(cmd, input=None, timeout=60, cwd=None):
  """Runs a shell command; returns (exit code, stdout text)."""
  try:
    p = subprocess.run(cmd, shell=True, input=input, capture_output=True, text=True,
                       timeout=timeout, cwd=cwd, errors="replace")
  except subprocess.TimeoutExpired:
    return 124, ""
  return p.returncode, p.stdout


def read(path):
  if not os.path.isfile(path):
    fail(f"{path} does not exist")
  with open(path, encoding="utf-8", errors="replace") as f:
    return f.read()


def lines(path):
  return [l.rstrip() for l in read(path).strip().splitlines() if l.strip()]


def load_module(path):
  """The agent's Python module at `path`; the check fails when it does not import."""
  import importlib.util
  spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
  mod = importlib.util.module_from_spec(spec)
  try:
    spec.loader.exec_module(mod)
  except Exception as e:
    fail(f"{os.path.basename(path)} does not import: {e}")
  return mod


def port_open(port):
  try:
    with socket.create_connection(("127.0.0.1", port), timeout=1):
      return True
  except OSError:
    return False


def ensure_services(ports, start="/workspace/start.sh"):
  """Services the agent should have left running; if not, start them once with start.sh."""
  if all(port_open(p) for p in ports):
    return
  if not os.path.isfile(start):
    fail(f"nothing listens on ports {ports} and there is no {start}")
  subprocess.Popen(["bash", start], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, start_new_session=True, cwd="/workspace")
  for _ in range(100):
    if all(port_open(p) for p in ports):
      return
    time.sleep(0.1)
  fail(f"nothing listens on ports {ports}")


def http(method, port, path, body=None, timeout=5):
  """Returns (status, body text); status -1 when the request itself failed."""
  req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method=method)
  try:
    with urllib.request.urlopen(req, timeout=timeout) as r:
      return r.status, r.read().decode(errors="replace")
  except urllib.error.HTTPError as e:
    return e.code, e.read().decode(errors="replace")
  except Exception as e:
    return -1, str(e)


def tcp(port, payload, timeout=5):
  """Sends one line, returns the first reply line (without newline) or None."""
  try:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
      s.sendall(payload.encode())
      buf = b""
      while b"\\n" not in buf:
        chunk = s.recv(4096)
        if not chunk:
          break
        buf += chunk
      return buf.split(b"\\n")[0].decode(errors="replace").rstrip("\\r")
  except OSError:
    return None

# ---- family-specific checks ----
'''

TEST_SH = """#!/bin/bash
# Hidden verifier: runs the offline checker and writes 1 (pass) or 0 (fail).
mkdir -p /logs/verifier
if timeout {timeout} python3 /tests/check.py; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""

DOCKERFILE = """FROM tmax-base:bookworm
WORKDIR /workspace
COPY seeds/ /workspace/
COPY setup.sh /tmp/setup.sh
RUN cd /workspace && bash /tmp/setup.sh && rm -f /tmp/setup.sh
"""


def render_check(spec: TaskSpec) -> str:
  payload = base64.b64encode(json.dumps(spec.data).encode()).decode()
  return CHECK_PRELUDE % (payload, WORKDIR) + spec.check.strip("\n") + "\n"


def bash_script(body: str) -> str:
  body = body.strip("\n")
  return "#!/bin/bash\nset -e\ncd /workspace\n" + body + "\n"


def _b(x: bytes | str) -> bytes:
  return x if isinstance(x, bytes) else x.encode()


def task_files(spec: TaskSpec, *, solve: str | None = None):
  """-> (environment, tests, solution) file dicts; `solve` overrides the oracle script body."""
  environment = {
    "Dockerfile": DOCKERFILE.encode(),
    "setup.sh": _b("#!/bin/bash\nset -e\ncd /workspace\n" + spec.setup.strip("\n") + "\n"),
  }
  for rel, data in spec.files.items():
    environment[f"seeds/{rel}"] = _b(data)
  if not spec.files:
    environment["seeds/.keep"] = b""
  tests = {
    "test.sh": TEST_SH.format(timeout=int(spec.verifier_timeout_sec) - 10).encode(),
    "check.py": render_check(spec).encode(),
  }
  tests.update({rel: _b(d) for rel, d in spec.test_files.items()})
  solution = {"solve.sh": bash_script(spec.solve if solve is None else solve).encode()}
  solution.update({rel: _b(d) for rel, d in spec.solution_files.items()})
  return environment, tests, solution
