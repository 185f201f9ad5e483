"""Per-task agreement of Harbor's oracle / nop agents with our eval runner's oracle / no-op.

`compare(tasks, work, agents, environments)` runs our eval runner (bash-tool harness, bubblewrap)
and Harbor jobs on the same tasks through Harbor's own podman environment ("podman": our task
images pulled into podman, harbor/tasks.py) and our plugin environment ("plugin": our bubblewrap
sandbox behind Harbor's API), and returns one row per (task dir, agent) with each path's outcome:
the reward ("1.0", "0.0") or why there is none ("build_failed: <the builder's error>", the task's
paths written as <task>). Used by tests/harbor/test_agreement.py and bench/harbor_overhead.py.
"""

from __future__ import annotations

import pathlib
import re
from collections.abc import Sequence

from tmax_jax.harbor import jobs
from tmax_jax.harbor import tasks as harbor_tasks
from tmax_jax.loop.evaluate import EvalConfig, evaluate
from tmax_jax.tasks import loader

POLICIES = {"oracle": "oracle", "nop": "noop"}  # Harbor agent -> our eval policy
BUILD_ERRORS = ("DockerfileError", "SandboxError", "TaskFormatError")  # our runner's build_failed


def _normal(text: str, roots: Sequence[pathlib.Path]) -> str:
  for root in roots:
    text = re.sub(re.escape(str(root)) + r"/[^/\s]+", "<task>", text)
  return text


def ours(tasks: pathlib.Path, out: pathlib.Path, agent: str) -> dict[str, str]:
  """{task dir name: outcome} of our eval runner with the policy matching Harbor's `agent`."""
  names = {t.name: t.path.name for t in loader.load_tasks(tasks)}
  cfg = EvalConfig(tasks_dir=str(tasks), output_dir=str(out), policy=POLICIES[agent], plot=False)
  result = {}
  for rec in evaluate(cfg)["trials"]:
    reason = rec["reward_reason"]
    ok = rec["status"] not in ("error", "unsupported", "no_episode", "build_failed")
    result[names[rec["task"]]] = str(float(rec["reward"])) if ok else reason
  return result


def _harbor_outcome(outcome: jobs.Outcome) -> str:
  if outcome.reward is not None:
    return str(float(outcome.reward))
  kind, _, message = outcome.error.partition(": ")
  return f"build_failed: {message}" if kind in BUILD_ERRORS else outcome.error


def harbor(tasks: pathlib.Path, out: pathlib.Path, agent: str, environment: str) -> dict[str, str]:
  """{task dir name: outcome} of a Harbor job of `agent` on `environment` ("plugin"/"podman")."""
  podman = environment == "podman"
  source, result = harbor_tasks.runnable(tasks, out / "views", podman_images=podman)
  if any(p.is_dir() and not p.name.startswith(".") for p in source.iterdir()):
    spec = jobs.JobSpec(
      tasks=str(source),
      agent=agent,
      environment="podman" if podman else jobs.ENVIRONMENT,
      n_concurrent=4,
    )
    job = jobs.run_job(spec, out / "jobs", f"{agent}-{environment}")
    for key, trials in jobs.outcomes(job).items():
      result[key] = _harbor_outcome(trials[0])
  return result


def compare(
  tasks: str | pathlib.Path,
  work: str | pathlib.Path,
  agents: Sequence[str] = ("oracle", "nop"),
  environments: Sequence[str] = ("plugin", "podman"),
) -> dict[tuple[str, str], dict[str, str]]:
  """{(task dir name, agent): {"ours": outcome, <environment>: outcome, ...}}."""
  tasks, work = pathlib.Path(tasks).resolve(), pathlib.Path(work).resolve()
  table: dict[tuple[str, str], dict[str, str]] = {}
  for agent in agents:
    runs = {"ours": ours(tasks, work / f"ours-{agent}", agent)}
    for env in environments:
      runs[env] = harbor(tasks, work / f"{env}-{agent}", agent, env)
    roots = [tasks, *(work / f"{env}-{agent}" / "views" for env in environments)]
    for name in sorted(set().union(*runs.values())):
      table[(name, agent)] = {k: _normal(v.get(name, "missing"), roots) for k, v in runs.items()}
  return table


def markdown(table: dict[tuple[str, str], dict[str, str]]) -> str:
  """The table as Markdown rows (task, agent, one column per path)."""
  cols = list(next(iter(table.values())))
  lines = ["| task | agent | " + " | ".join(cols) + " |", "|---" * (len(cols) + 2) + "|"]
  for (task, agent), row in table.items():
    lines.append(f"| {task} | {agent} | " + " | ".join(row[c][:80] for c in cols) + " |")
  return "\n".join(lines)
