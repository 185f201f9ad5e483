"""Running the trials: every (task, run) through the shared episode worker, one record each, its
artifacts (the verifier's files, the packages; tasks/artifacts.py) in a directory beside it."""

from __future__ import annotations

import asyncio
import json
import pathlib
import re
from collections.abc import Callable, Sequence
from typing import Any

from tmax_jax import cli, json_io
from tmax_jax.agents.worker import EpisodeWorker, Trial
from tmax_jax.loop.evaluate.config import EvalConfig
from tmax_jax.loop.evaluate.report import ERRORED, UNSUPPORTED
from tmax_jax.sandbox.images import base_images
from tmax_jax.tasks import artifacts as artifacts_lib
from tmax_jax.tasks.format import Task
from tmax_jax.tasks.runner import BUILD_FAILED, TaskUnsupportedError

UNCATEGORIZED = "uncategorized"
TRIALS_DIR = "trials"  # <output_dir>/trials/<task>/<run>/: each trial's artifacts


def category(task: Task) -> str:
  value = task.config.metadata.get("category")
  return str(value) if value else UNCATEGORIZED


def trial_record(task: Task, run: int, trial: Trial, pass_threshold: float) -> dict:
  """One results.json trial record (schema in loop/evaluate/__init__.py)."""
  rec: dict[str, Any] = {
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
    "verifier_dir": None,
    "packages": None,
  }
  ep = trial.episode
  if ep is None and trial.reason.startswith(BUILD_FAILED):
    # the environment did not build; a known deviation of the stand-in base may be why
    rec.update(status=BUILD_FAILED, deviations=list(base_images.deviation_ids(trial.reason)))
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


def trial_dir(task: Task, run: int) -> str:
  """The trial's artifact directory, relative to the output directory (the task's name with any
  character a path must not hold as "_")."""
  name = re.sub(r"[^A-Za-z0-9._-]", "_", task.name or "task").lstrip(".") or "task"
  return f"{TRIALS_DIR}/{name}/{run}"


def write_artifacts(out: pathlib.Path, task: Task, run: int, artifacts) -> dict:
  """Writes a trial's artifacts (each atomically) under out/trial_dir -> the record's
  verifier_dir and packages ({stage: path}), relative to `out`, None where the trial has none."""
  rel = trial_dir(task, run)
  for name, text in artifacts.items():
    json_io.write_text_atomic(out / rel / name, [text])
  verifier = artifacts_lib.VERIFIER_ARTIFACTS
  ran = any(name.startswith(f"{verifier}/") for name in artifacts)
  stages = {
    "start": artifacts_lib.PACKAGES_START,
    "after_tests": artifacts_lib.PACKAGES_AFTER_TESTS,
  }
  packages = {stage: f"{rel}/{file}" for stage, file in stages.items() if file in artifacts}
  return {"verifier_dir": f"{rel}/{verifier}" if ran else None, "packages": packages or None}


async def run_trials(
  tasks: Sequence[Task],
  worker: EpisodeWorker,
  cfg: EvalConfig,
  jsonl_path: pathlib.Path,
  usage: Callable[[Task, int], dict] | None = None,
) -> list[dict]:
  """Every (task, run) at once (the worker runs `parallelism` of them); records are appended to
  `jsonl_path` as they finish and returned sorted by (task, run), each trial's artifacts written
  under trial_dir in jsonl_path's directory first. `usage(task, run)`: the trial's `usage`
  record (policy=endpoint), else None."""
  out = jsonl_path.parent

  async def one(task: Task, run: int) -> dict:
    trial = await worker.trial(task, 0, run)
    rec = trial_record(task, run, trial, cfg.pass_threshold)
    if trial.artifacts:
      rec.update(await asyncio.to_thread(write_artifacts, out, task, run, trial.artifacts))
    rec["usage"] = usage(task, run) if usage is not None else None
    return rec

  jobs = [one(t, r) for t in tasks for r in range(cfg.runs_per_task)]
  records = []
  with (
    open(jsonl_path, "w", encoding="utf-8") as log,
    cli.progress(total=len(jobs), desc="eval", unit="trial") as bar,
  ):
    for fut in asyncio.as_completed(jobs):
      rec = await fut
      records.append(rec)
      log.write(json.dumps(rec) + "\n")
      log.flush()
      scored = [r for r in records if r["status"] not in (*ERRORED, UNSUPPORTED)]
      passed = sum(r["passed"] for r in scored)
      bar.set_postfix(
        pass_rate=f"{passed / len(scored):.3f}" if scored else "-",  # over scored trials only
        errors=sum(r["status"] in ERRORED for r in records),
      )
      bar.update(1)
  records.sort(key=lambda r: (r["task"], r["run"]))
  return records
