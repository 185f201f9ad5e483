"""The pre-completed-work audit on hand-made tasks, in real sandboxes (bubblewrap, base rootfs):
a clean task passes; a task whose environment already holds the oracle's function or file is
flagged by the static check with evidence naming it; tests that pass untouched are flagged; a
shipped script that does the work is found by a probe attempt. (Clean tasks passing the audit
are also the whole offline build of test_horizon_e2e.py.)"""

import pytest

from tests.conftest import require_base_rootfs
from tmax_jax.horizon import audit, build, compose

STUB = '''import sys


def totals(path):
  """Sum of the numbers in the file, one per line."""
  raise NotImplementedError


if __name__ == "__main__":
  print(totals(sys.argv[1]))
'''
IMPL = STUB.replace(
  "  raise NotImplementedError\n",
  """  total = 0.0
  for line in open(path):
    if line.strip():
      total += float(line)
  return round(total, 2)
""",
)
CHECK = """import subprocess, sys
out = subprocess.run([sys.executable, "/workspace/calc.py", "/workspace/nums.txt"],
                     capture_output=True, text=True).stdout.strip()
if out != "7.75":
  sys.exit(f"calc.py printed {out!r}")
if open("/workspace/result.txt").read().strip() != "7.75":
  sys.exit("result.txt is wrong")
"""
SOLVE = (
  "#!/bin/bash\nset -e\ncd /workspace\ncat > calc.py <<'EOF'\n" + IMPL + "EOF\n"
  "python3 calc.py nums.txt > result.txt\n"
)
NUMS = b"1.5\n2.25\n4\n"


def _task(name, seeds, solve=SOLVE, check=CHECK):
  stage = compose.Stage(
    name=name,
    instruction="Implement totals() in /workspace/calc.py and write "
    "its result for nums.txt to /workspace/result.txt.",
    requirement=name,
    solve=solve,
    tests={"check.py": check.encode()},
    seeds={k: v if isinstance(v, bytes) else v.encode() for k, v in seeds.items()},
  )
  return compose.root_task(stage, compose.Lineage(name, name, 0, name, name))


@pytest.fixture(scope="module")
def auditor():
  require_base_rootfs()
  return build.make_auditor("shortcuts", "qwen3", audit.AuditConfig(probe_attempts=2), None)


def _by_name(report):
  return {c.name: c for c in report.checks}


@pytest.mark.slow
def test_clean_task_passes(auditor):
  report = auditor.audit(_task("clean", {"calc.py": STUB, "nums.txt": NUMS}))
  assert report.passed, report.to_json()
  checks = _by_name(report)
  assert checks["oracle"].details["rewards"] == {"reward": 1.0, "g0": 1.0}
  assert checks["untouched"].details["rewards"]["g0"] == 0.0
  assert [a["name"] for a in checks["probe"].details["attempts"]] == [
    "run_existing",
    "restore_copies",
  ]


def test_environment_with_the_oracles_function_is_flagged(auditor):
  predone = IMPL.replace("round(total, 2)", "round(total, 3)")  # only a constant left to change
  report = auditor.audit(_task("predone-fn", {"calc.py": predone, "nums.txt": NUMS}))
  checks = _by_name(report)
  assert not report.passed and report.failed() == ["static"], report.to_json()
  assert checks["static"].details["findings"][0]["symbol"] == "totals"
  assert "totals" in checks["static"].evidence[0] and "calc.py" in checks["static"].evidence[0]
  assert report.evidence()[0].startswith("static: totals")


@pytest.mark.slow
def test_environment_with_the_oracles_file_is_flagged(auditor):
  conf = "[server]\nport = 8080\nworkers = 4\nroot = /srv/www\n"
  solve = (
    "#!/bin/bash\nset -e\ncd /workspace\nmkdir -p etc\nprintf '%s' '"
    + conf
    + "' > etc/app.conf\necho ready > status.txt\n"
  )
  check = (
    "import sys\nif open('/workspace/etc/app.conf').read() != " + repr(conf) + ":\n"
    "  sys.exit('conf')\nif open('/workspace/status.txt').read() != 'ready\\n':\n"
    "  sys.exit('status')\n"
  )
  report = auditor.audit(_task("predone-file", {"etc/app.conf": conf}, solve, check))
  assert report.failed() == ["static"], report.to_json()
  finding = _by_name(report)["static"].details["findings"][0]
  assert finding["rule"] == "rewrite_same_content" and finding["path"] == "etc/app.conf"


def test_tests_passing_untouched_are_flagged(auditor):
  report = auditor.audit(
    _task("untouched", {"calc.py": IMPL, "nums.txt": NUMS, "result.txt": "7.75\n"})
  )
  checks = _by_name(report)
  assert not checks["untouched"].passed, report.to_json()
  assert "already pass on the untouched environment" in checks["untouched"].evidence[0]
  assert checks["untouched"].details["rewards"]["g0"] == 1.0


@pytest.mark.slow
def test_shipped_script_that_does_the_work_is_found_by_a_probe(auditor):
  helper = (
    "#!/bin/bash\ncd /workspace\ncat > calc.py <<'EOF'\n" + IMPL + "EOF\n"
    "python3 calc.py nums.txt > result.txt\n"
  )
  own = SOLVE.replace(
    "cat > calc.py <<'EOF'\n" + IMPL + "EOF\n",
    "python3 - <<'EOF'\nsrc = open('calc.py').read().replace('  raise "
    "NotImplementedError', '  return round(sum(float(l) for l in open(path) "
    "if l.strip()), 2)')\nopen('calc.py', 'w').write(src)\nEOF\n",
  )
  report = auditor.audit(
    _task("probe", {"calc.py": STUB, "nums.txt": NUMS, "tools/regen.sh": helper}, solve=own)
  )
  checks = _by_name(report)
  assert report.failed() == ["probe"], report.to_json()
  assert "run_existing" in checks["probe"].evidence[0]
  assert checks["probe"].details["attempts"][0]["reward"] == 1.0


@pytest.mark.slow
def test_a_failing_oracle_stops_the_audit(auditor):
  report = auditor.audit(
    _task("broken", {"calc.py": STUB, "nums.txt": NUMS}, solve="#!/bin/bash\nexit 0\n")
  )
  assert report.failed() == ["oracle", "untouched", "static", "probe"]
  assert "does not pass its own tests" in report.evidence()[0]
