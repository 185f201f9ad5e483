"""Running the trials: every (task, run) through the shared episode worker, one record each."""

from __future__ import annotations

import asyncio
import json
import pathlib
from collections.abc import Sequence

from tqdm import tqdm

from tmax_jax.agents.worker import EpisodeWorker, Trial
from tmax_jax.loop.evaluate.config import EvalConfig
from tmax_jax.sandbox import bases
from tmax_jax.tasks.format import Task
from tmax_jax.tasks.runner import BUILD_FAILED, TaskUnsupportedError

UNCATEGORIZED = "uncategorized"


def category(task: Task) -> str:
  value = task.config.metadata.get("category")
  return str(value) if value else UNCATEGORIZED


def trial_record(task: Task, run: int, trial: Trial, pass_threshold: float) -> dict:
  """One results.json trial record (schema in loop/evaluate/__init__.py)."""
  rec = {
    "task": task.name,
    "category": category(task),
    "run": run,
    "reward": float(trial.reward),
    "passed": False,
    "reward_reason": trial.reason,
    "status": "no_episode",
    "turns": 0,
    "tool_calls": 0,
    "format_errors": 0,
    "response_tokens": 0,
    "duration_s": round(trial.duration_s, 3),
    "error": None,
    "deviations": [],
  }
  ep = trial.episode
  if ep is None and trial.reason.startswith(BUILD_FAILED):
    # the environment did not build; a known deviation of the stand-in base may be why
    rec.update(status=BUILD_FAILED, deviations=list(bases.deviation_ids(trial.reason)))
  if trial.error is not None:
    # a task the sandboxes cannot run (e.g. multi-service compose) is reported, not scored
    status = "unsupported" if isinstance(trial.error, TaskUnsupportedError) else "error"
    rec.update(
      status=status,
      error=f"{type(trial.error).__name__}: {trial.error}",
      reward=0.0,
      reward_reason=status,
    )
  elif ep is not None:
    rec["status"] = ep.status
  if ep is not None:
    rec.update(
      turns=ep.num_turns,
      tool_calls=ep.num_tool_calls,
      format_errors=ep.num_format_errors,
      response_tokens=ep.trajectory.num_generated,
    )
  rec["passed"] = rec["reward"] >= pass_threshold
  return rec


async def run_trials(
  tasks: Sequence[Task], worker: EpisodeWorker, cfg: EvalConfig, jsonl_path: pathlib.Path
) -> list[dict]:
  """Every (task, run) at once (the worker runs `parallelism` of them); records are appended to
  `jsonl_path` as they finish and returned sorted by (task, run)."""

  async def one(task: Task, run: int) -> dict:
    return trial_record(task, run, await worker.trial(task, 0, run), cfg.pass_threshold)

  jobs = [one(t, r) for t in tasks for r in range(cfg.runs_per_task)]
  records = []
  with (
    open(jsonl_path, "w", encoding="utf-8") as log,
    tqdm(total=len(jobs), desc="eval", unit="trial") as bar,
  ):
    for fut in asyncio.as_completed(jobs):
      rec = await fut
      records.append(rec)
      log.write(json.dumps(rec) + "\n")
      log.flush()
      passed = sum(r["passed"] for r in records)
      bar.set_postfix(
        pass_rate=f"{passed / len(records):.3f}",
        errors=sum(r["status"] == "error" for r in records),
      )
      bar.update(1)
  records.sort(key=lambda r: (r["task"], r["run"]))
  return records
