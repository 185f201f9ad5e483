"""Our evaluation results (loop/evaluate results.json) as a Harbor job directory.

Runs in the Harbor venv (`jobs.export_eval` starts it from the project's Python): every document is
built with Harbor's own models (JobConfig, JobResult, TrialConfig, TrialResult, VerifierResult) and
written the way Harbor's job writes it, so `harbor view`, the Hub uploader and anything reading
jobs/ take it as a job of theirs. Layout: <jobs_dir>/<job_name>/{config.json, result.json} and one
<task>__<run>/ per trial with result.json, config.json and verifier/reward.txt. Our trial fields
with no Harbor field (status, turns, tool calls, format errors, reward reason) go into
agent_result.metadata; an errored trial gets exception_info (its error text).

  <venv>/bin/python -m tmax_jax.harbor.export RESULTS JOBS_DIR [--job_name N] [--tasks_dir D]
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import pathlib
import uuid

from harbor.models.agent.context import AgentContext
from harbor.models.job.config import JobConfig
from harbor.models.job.result import JobResult, JobStats
from harbor.models.task.id import LocalTaskId
from harbor.models.trial.config import AgentConfig, EnvironmentConfig, TaskConfig, TrialConfig
from harbor.models.trial.result import AgentInfo, ExceptionInfo, ModelInfo, TrialResult
from harbor.models.verifier.result import VerifierResult

from tmax_jax import cli
from tmax_jax.errors import UserError
from tmax_jax.tasks import loader

METADATA = ("status", "reward_reason", "turns", "tool_calls", "format_errors", "category", "run")


def _checksum(task_dir: pathlib.Path) -> str:
  digest = hashlib.sha256()
  for path in sorted(p for p in task_dir.rglob("*") if p.is_file()):
    digest.update(str(path.relative_to(task_dir)).encode() + b"\0" + path.read_bytes())
  return digest.hexdigest()


def _agent(config: dict) -> tuple[AgentConfig, AgentInfo]:
  """Our policy x harness as a Harbor agent: name tmax_jax-<harness>, model = the policy."""
  policy = config.get("policy", "oracle")
  model = config.get("model") or {}
  model_name = model.get("checkpoint") or model.get("preset") or config.get("address") or ""
  model_name = model_name if policy == "server" else policy
  name = f"tmax_jax-{config.get('harness', 'bash_tool')}"
  return (
    AgentConfig(name=name, model_name=model_name),
    AgentInfo(name=name, version="1", model_info=ModelInfo(name=model_name, provider="tmax_jax")),
  )


def _environment(config: dict) -> EnvironmentConfig:
  """Our runner's sandbox as the Harbor environment that runs it (harbor/environment.py), or the
  Harbor environment type a harbor:<type> backend named."""
  backend = (config.get("runner") or {}).get("backend") or "bubblewrap"
  if backend.startswith("harbor:"):
    kind = backend.removeprefix("harbor:")
    return EnvironmentConfig(import_path=kind) if ":" in kind else EnvironmentConfig(type=kind)
  return EnvironmentConfig(
    import_path="tmax_jax.harbor.environment:TmaxEnvironment", kwargs={"backend": backend}
  )


def _trial(rec: dict, task_dir: pathlib.Path, job_dir: pathlib.Path, ctx: dict) -> TrialResult:
  name = f"{rec['task']}__{rec['run']}"
  finished = ctx["started"] + dt.timedelta(seconds=float(rec.get("duration_s") or 0.0))
  config = TrialConfig(
    task=TaskConfig(path=task_dir),
    trial_name=name,
    trials_dir=job_dir,
    agent=ctx["agent"],
    environment=ctx["environment"],
  )
  error = rec.get("error")
  return TrialResult(
    task_name=rec["task"],
    trial_name=name,
    trial_uri=(job_dir / name).resolve().as_uri(),
    task_id=LocalTaskId(path=task_dir),
    task_checksum=ctx["checksums"][rec["task"]],
    config=config,
    agent_info=ctx["info"],
    agent_result=AgentContext(
      n_output_tokens=int(rec.get("response_tokens") or 0),
      metadata={k: rec.get(k) for k in METADATA},
    ),
    verifier_result=None if error else VerifierResult(rewards={"reward": float(rec["reward"])}),
    exception_info=ExceptionInfo(
      exception_type=error.partition(":")[0] or "Error",
      exception_message=error.partition(": ")[2] or error,
      exception_traceback="",
      occurred_at=finished,
    )
    if error
    else None,
    started_at=ctx["started"],
    finished_at=finished,
  )


def export(
  results_path: pathlib.Path,
  jobs_dir: pathlib.Path,
  job_name: str = "",
  tasks_dir: pathlib.Path | None = None,
) -> pathlib.Path:
  """Writes the job directory; returns it. `tasks_dir`: where the tasks' directories are (default:
  the results' config.tasks_dir; jobs.export_eval passes a parquet's extraction). Raises UserError
  naming what is missing."""
  try:
    results = json.loads(results_path.read_text(encoding="utf-8"))
  except (UnicodeDecodeError, json.JSONDecodeError) as e:
    raise UserError(f"{results_path}: not JSON ({e}); expected an eval's results.json") from None
  config = results.get("config") or {}
  tasks_dir = tasks_dir or config.get("tasks_dir")
  if not tasks_dir or not pathlib.Path(tasks_dir).is_dir():
    raise UserError(f"{results_path}: config.tasks_dir {tasks_dir!r} is not a directory")
  tasks = {t.name: t.path for t in loader.load_tasks(tasks_dir)}
  missing = sorted({r["task"] for r in results["trials"]} - set(tasks))
  if missing:
    raise UserError(f"{results_path}: trials of tasks not under {tasks_dir}: {missing[:5]}")
  started = dt.datetime.fromisoformat(results["started_at"])
  job_name = job_name or started.strftime("%Y-%m-%d__%H-%M-%S")
  job_dir = jobs_dir / job_name
  agent, info = _agent(config)
  ctx = dict(
    started=started,
    agent=agent,
    info=info,
    environment=_environment(config),
    checksums={name: _checksum(path) for name, path in tasks.items()},
  )
  job_dir.mkdir(parents=True, exist_ok=True)
  trial_results = []
  for rec in results["trials"]:
    trial = _trial(rec, tasks[rec["task"]], job_dir, ctx)
    tdir = job_dir / trial.trial_name
    (tdir / "verifier").mkdir(parents=True, exist_ok=True)
    (tdir / "result.json").write_text(trial.model_dump_json(indent=4))
    (tdir / "config.json").write_text(trial.config.model_dump_json(indent=4))
    if trial.verifier_result is not None:
      (tdir / "verifier" / "reward.txt").write_text(f"{rec['reward']}\n")
    trial_results.append(trial)
  job_config = JobConfig(
    job_name=job_name,
    jobs_dir=jobs_dir,
    agents=[agent],
    environment=ctx["environment"],
    tasks=[TaskConfig(path=p) for p in sorted(set(tasks.values()))],
  )
  stats = JobStats.from_trial_results(trial_results, n_total_trials=len(trial_results))
  for evals in stats.evals.values():  # Harbor's default metric: the mean reward (errors = 0)
    evals.metrics = [{"mean": sum(r["reward"] for r in results["trials"]) / len(trial_results)}]
  job = JobResult(
    id=uuid.uuid4(),
    started_at=started,
    finished_at=dt.datetime.fromisoformat(results["finished_at"]),
    n_total_trials=len(trial_results),
    stats=stats,
  )
  (job_dir / "config.json").write_text(job_config.model_dump_json(indent=4))
  (job_dir / "result.json").write_text(job.model_dump_json(indent=4, exclude={"trial_results"}))
  return job_dir


def main(argv: list[str] | None = None) -> int:
  p = cli.ArgumentParser(description=cli.description(__doc__))
  p.add_argument("results", type=pathlib.Path, help="an eval output's results.json")
  p.add_argument("jobs_dir", type=pathlib.Path, help="Harbor's jobs dir to write the job into")
  p.add_argument("--job_name", default="", help="the job's name (default: the start time)")
  p.add_argument(
    "--tasks_dir",
    type=pathlib.Path,
    default=None,
    help="the tasks' directories (default: the results' config.tasks_dir)",
  )
  args = p.parse_args(argv)
  print(export(args.results, args.jobs_dir, args.job_name, args.tasks_dir))
  return 0


if __name__ == "__main__":
  cli.run(main)
