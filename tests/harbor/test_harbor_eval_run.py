"""launch/harbor_eval.py's run (tmax_jax/harbor/run.py) when it fails (issue 47 point 3): the task
views it wrote (<jobs_dir>/<job_name>.tasks) and the directories it made are removed (they were
left behind); the job's server takes free ports of its own. Harbor itself is not needed."""

import os
import pathlib
import subprocess
import sys

import pytest

from tests.harbor.harbor_helpers import write_tasks
from tmax_jax.errors import UserError
from tmax_jax.harbor.run import HarborEvalConfig, run_harbor_eval
from tmax_jax.inference.openai_api import OpenAIConfig
from tmax_jax.loop import serve
from tmax_jax.loop.config import ServeConfig, ServingConfig

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
  """Tasks our writer made: Harbor needs views of them (org/name, author tables)."""
  return write_tasks(tmp_path_factory.mktemp("tasks"), levels=(0,))


def _fail_to_serve(monkeypatch, views: pathlib.Path) -> list:
  served = []

  def refuse(cfg):
    assert (views / "line_tool-d0-s0" / "task.toml").is_file()  # written before the server
    served.append(cfg)
    raise UserError("the model does not serve")

  monkeypatch.setattr(serve, "start_from_config", refuse)
  return served


def test_a_failed_run_leaves_no_task_views(tmp_path, tasks, monkeypatch):
  jobs = tmp_path / "runs" / "harbor"
  served = _fail_to_serve(monkeypatch, jobs / "j.tasks")
  cfg = HarborEvalConfig(tasks=str(tasks), jobs_dir=str(jobs), job_name="j")
  model = ServeConfig(serving=ServingConfig(port=9000), openai=OpenAIConfig(port=8000))
  with pytest.raises(UserError, match="does not serve"):
    run_harbor_eval(cfg, model)
  assert list(tmp_path.iterdir()) == []  # runs/harbor/j.tasks, runs/harbor and runs: all gone
  # the job's own server: free ports, whatever the serve config names
  assert (served[0].serving.port, served[0].openai.port) == (0, 0)


def test_a_failed_run_keeps_what_it_did_not_write(tmp_path, tasks, monkeypatch):
  jobs = tmp_path / "jobs"
  (jobs / "earlier").mkdir(parents=True)
  _fail_to_serve(monkeypatch, jobs / "j.tasks")
  with pytest.raises(UserError):
    run_harbor_eval(
      HarborEvalConfig(tasks=str(tasks), jobs_dir=str(jobs), job_name="j"), ServeConfig()
    )
  assert sorted(p.name for p in jobs.iterdir()) == ["earlier"]


@pytest.mark.slow
def test_the_launcher_fails_cleanly(tmp_path, tasks):
  """The issue's command: serve_tiny's vocabulary (256) cannot serve the OpenAI API; exit 2 and no
  runs/harbor/<time>.tasks left behind (~30 s: the model is built before the API refuses it)."""
  jobs = tmp_path / "runs" / "harbor"
  cmd = [
    sys.executable,
    "launch/harbor_eval.py",
    "--serve=configs/serve_tiny.py",
    "--config=configs/harbor_eval.py",
    f"--config.tasks={tasks}",
    f"--config.jobs_dir={jobs}",
  ]
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  run = subprocess.run(
    cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env, check=False
  )
  assert run.returncode == 2, run.stderr[-3000:]
  assert "error: the OpenAI API needs a model that covers" in run.stderr
  assert "Traceback" not in run.stderr
  assert list(tmp_path.iterdir()) == []
