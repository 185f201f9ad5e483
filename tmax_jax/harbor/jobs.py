"""Running Harbor jobs from the project's Python and reading their results back.

`run_job` runs `harbor run` from the Harbor venv (venv.environ: podman pointed at the project's
storage, this checkout importable) on a task directory with any Harbor agent (terminus-2, oracle,
nop, installed agents) and any environment (a Harbor type or an import path such as
tmax_jax.harbor.environment:TmaxEnvironment). `outcomes` reads a job's per-task rewards, or the
error a trial ended with, keyed by task directory name. `export_eval` writes our evaluation results
as a Harbor job (export.py, run in the venv).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import subprocess
from collections.abc import Sequence

from tmax_jax import cli
from tmax_jax.errors import UserError
from tmax_jax.harbor import sandbox as harbor_sandbox
from tmax_jax.harbor import venv
from tmax_jax.tasks import format as fmt
from tmax_jax.tasks import sources

ENVIRONMENT = harbor_sandbox.PLUGIN


@dataclasses.dataclass(frozen=True)
class JobSpec:
  """One `harbor run`: tasks (a task dir or a dataset dir of them), agent, model, environment."""

  tasks: str
  agent: str = "oracle"
  environment: str = ENVIRONMENT  # a Harbor environment type (podman, docker, ...) or import path
  model: str = ""  # e.g. openai/<served name> for terminus-2 against our server
  base_url: str = ""  # the model's API base, e.g. http://127.0.0.1:8000/v1
  agent_kwargs: tuple[str, ...] = ()  # --ak key=value
  environment_kwargs: tuple[str, ...] = ()  # --ek key=value
  n_concurrent: int = 2
  n_attempts: int = 1
  delete: bool = False  # Harbor's --delete removes the task image after a trial (ours are shared)

  def args(self, jobs_dir: pathlib.Path, job_name: str) -> list[str]:
    env = ["--env", self.environment]
    args = ["run", "--path", self.tasks, "--agent", self.agent, *env, "--jobs-dir", str(jobs_dir)]
    args += ["--job-name", job_name, "-n", str(self.n_concurrent), "-k", str(self.n_attempts)]
    args += ["--yes", "--quiet", "--delete" if self.delete else "--no-delete"]
    if self.model:
      args += ["--model", self.model]
    if self.base_url:
      args += ["--base-url", self.base_url]
    for kv in self.agent_kwargs:
      args += ["--ak", kv]
    for kv in self.environment_kwargs:
      args += ["--ek", kv]
    return args


def harbor(args: Sequence[str], *, timeout_s: float, env: dict | None = None, log=None):
  """`harbor <args>` from the venv; output to `log` (a file) or captured. Raises RuntimeError when
  the venv is missing or the command fails."""
  reason = venv.unavailable()
  if reason:
    raise RuntimeError(f"Harbor is not installed: {reason}")
  res = subprocess.run(
    [str(venv.bin_path("harbor")), *args],
    env=venv.environ(env),
    stdout=log or subprocess.PIPE,
    stderr=subprocess.STDOUT,
    timeout=timeout_s,
    check=False,
  )
  if res.returncode != 0:
    tail = "" if log else res.stdout.decode(errors="replace")[-3000:]
    raise RuntimeError(f"harbor {' '.join(args[:1])} failed (exit {res.returncode}): {tail}")
  return res


def run_job(
  spec: JobSpec,
  jobs_dir: str | pathlib.Path,
  job_name: str,
  *,
  timeout_s: float = 3600,
  env: dict | None = None,
) -> pathlib.Path:
  """Runs the job; returns its directory (<jobs_dir>/<job_name>). The job's own output goes to
  <jobs_dir>/<job_name>.log."""
  jobs_dir = pathlib.Path(jobs_dir).resolve()
  jobs_dir.mkdir(parents=True, exist_ok=True)
  with open(jobs_dir / f"{job_name}.log", "wb") as log:
    harbor(spec.args(jobs_dir, job_name), timeout_s=timeout_s, env=env, log=log)
  job_dir = jobs_dir / job_name
  if not (job_dir / "result.json").is_file():
    raise RuntimeError(f"harbor run wrote no {job_dir}/result.json (log: {job_dir}.log)")
  return job_dir


@dataclasses.dataclass(frozen=True)
class Outcome:
  """A trial's reward, or (reward None) the error it ended with: "<ExceptionType>: <message>"."""

  reward: float | None
  error: str = ""


def outcomes(job_dir: str | pathlib.Path) -> dict[str, list[Outcome]]:
  """{task directory name: [Outcome per trial]} of a Harbor job."""
  out: dict[str, list[Outcome]] = {}
  for result_file in sorted(pathlib.Path(job_dir).glob("*/result.json")):
    result = json.loads(result_file.read_text())
    task = pathlib.Path(result["config"]["task"]["path"] or result["task_name"]).name
    rewards = (result.get("verifier_result") or {}).get("rewards")
    exc = result.get("exception_info")
    if exc:
      outcome = Outcome(None, f"{exc['exception_type']}: {exc['exception_message']}")
    else:
      outcome = Outcome(float(rewards.get("reward", next(iter(rewards.values())))))
    out.setdefault(task, []).append(outcome)
  return out


def export_eval(
  results_json: str | pathlib.Path, jobs_dir: str | pathlib.Path, job_name: str = ""
) -> pathlib.Path:
  """Writes an eval output's results.json as a Harbor job (export.py); returns its directory.
  The eval's tasks may come from any task source (tasks/sources.py): export.py reads task
  directories, so a parquet's are its extraction in the cache and tasks converted in memory (the
  TMAX-15K release) are written under <jobs_dir>/.tasks/ first."""
  reason = venv.unavailable()
  if reason:
    raise RuntimeError(f"Harbor is not installed: {reason}")
  tasks_dir = _task_directory(pathlib.Path(results_json), pathlib.Path(jobs_dir))
  argv = [str(results_json), str(jobs_dir), "--tasks_dir", str(tasks_dir)]
  argv += ["--job_name", job_name] if job_name else []
  res = subprocess.run(
    [str(venv.bin_path("python")), "-m", "tmax_jax.harbor.export", *argv],
    env=venv.environ(),
    capture_output=True,
    text=True,
    check=False,
  )
  if res.returncode == cli.EXIT_USER_ERROR and "error: " in res.stderr:
    raise UserError(res.stderr[res.stderr.index("error: ") + len("error: ") :].strip())
  if res.returncode != 0:
    raise RuntimeError(f"export of {results_json} failed: {(res.stdout + res.stderr)[-3000:]}")
  return pathlib.Path(res.stdout.strip().splitlines()[-1])


def _task_directory(results_json: pathlib.Path, jobs_dir: pathlib.Path) -> pathlib.Path:
  """A directory holding the task directories of the evaluation `results_json` describes."""
  try:
    results = json.loads(results_json.read_text(encoding="utf-8"))
  except (UnicodeDecodeError, json.JSONDecodeError) as e:
    raise UserError(f"{results_json}: not JSON ({e}); expected an eval's results.json") from None
  source = (results.get("config") or {}).get("tasks_dir") if isinstance(results, dict) else None
  if not source or not isinstance(results.get("trials"), list):
    raise UserError(
      f"{results_json}: no config.tasks_dir or trials; expected an eval's results.json "
      "(launch/eval.py writes it)"
    )
  try:
    kind = sources.source_kind(source)
  except FileNotFoundError as e:
    raise UserError(f"{results_json}: config.tasks_dir: {e}") from None
  if kind in ("directory", "set"):
    return pathlib.Path(source)
  if kind == "parquet":
    return sources.extract_parquet(source)
  out = jobs_dir / ".tasks" / pathlib.Path(source).name
  for task in sources.load_tasks(source):
    if not (out / task.name).is_dir():
      fmt.write_task(task, out / task.name)
  return out


def main(argv: list[str] | None = None) -> int:
  """`python3 -m tmax_jax.harbor.jobs RESULTS_JSON JOBS_DIR [--job_name N]`: export_eval."""
  p = cli.ArgumentParser(description="Our eval results.json as a Harbor job directory.")
  p.add_argument("results", type=pathlib.Path, help="our eval's results.json")
  p.add_argument("jobs_dir", type=pathlib.Path, help="Harbor's jobs dir to write the job into")
  p.add_argument("--job_name", default="", help="the job's name (default: the start time)")
  args = p.parse_args(argv)
  print(export_eval(args.results, args.jobs_dir, args.job_name))
  return 0


if __name__ == "__main__":
  cli.run(main)
