"""The README's Harbor command against random weights (slow; issue 47 point 3):
launch/harbor_eval.py --serve=configs/serve_random.py runs Harbor's terminus-2 on a task with no
checkpoint. The replies of configs/serve_random.py end (terminus-2 sends no max_tokens and asks
again after a truncated reply, so plain random weights would never give it a turn back); every
request is answered and the trial is scored, not errored."""

import json
import pathlib
import shlex
import subprocess
import sys

import pytest

from tests.conftest import require_base_rootfs
from tests.harbor.harbor_helpers import require_harbor, write_tasks

pytestmark = pytest.mark.slow
ROOT = pathlib.Path(__file__).resolve().parents[2]
# the README's command, verbatim (TASKS filled in; the jobs go to a temporary dir here)
HARBOR = (
  "python3 launch/harbor_eval.py --serve=configs/serve_random.py --config=configs/harbor_eval.py "
  "--config.tasks=TASKS --config.agent_kwargs=\"('max_turns=2',)\""
)


def test_terminus2_against_random_weights(tmp_path):
  require_harbor()
  require_base_rootfs()
  tasks = write_tasks(tmp_path / "tasks", levels=(0,))
  jobs = tmp_path / "jobs"
  args = shlex.split(HARBOR.replace("TASKS", str(tasks)))[1:]
  cmd = [sys.executable, *args, f"--config.jobs_dir={jobs}", "--config.job_name=r"]
  run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1500, check=False)
  assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
  summary = json.loads(run.stdout.strip().splitlines()[-1])
  assert (summary["trials"], summary["errors"]) == (1, 0), summary
  (result_file,) = (jobs / "r").glob("*/result.json")
  result = json.loads(result_file.read_text())
  assert result["exception_info"] is None, result["exception_info"]
  assert result["verifier_result"]["rewards"] == {"reward": 0.0}
  agent = result["agent_result"]
  assert agent["metadata"]["n_episodes"] == 2
  assert len(agent["metadata"]["api_request_times_msec"]) == 2  # every request answered
  assert agent["n_output_tokens"] > 0
