"""Aggregation and report: pass@1 +- stderr, pass@k, per-category and per-task blocks, the text
table and the CLI summary (results.json schema in loop/evaluate/__init__.py)."""

from __future__ import annotations

import dataclasses
import json
import math
from collections import Counter, defaultdict
from collections.abc import Sequence

from tmax_jax.loop.evaluate.config import EvalConfig
from tmax_jax.tasks.difficulty import pass_at_k

SCHEMA_VERSION = 1
UNSUPPORTED = "unsupported"  # trial status of a task the sandbox backends cannot run


def mean_stderr(values: Sequence[float]) -> tuple[float, float]:
  """Mean and standard error (sample std / sqrt(n); 0 for n < 2)."""
  n = len(values)
  if n == 0:
    return 0.0, 0.0
  mean = sum(values) / n
  if n < 2:
    return mean, 0.0
  var = sum((v - mean) ** 2 for v in values) / (n - 1)
  return mean, math.sqrt(var / n)


def _mean(records, key) -> float:
  return sum(r[key] for r in records) / len(records) if records else 0.0


def _task_rows(records: Sequence[dict], ks: Sequence[int]) -> dict:
  by_task = defaultdict(list)
  for r in records:
    by_task[r["task"]].append(r)
  tasks = {}
  for name, recs in sorted(by_task.items()):
    n, c = len(recs), sum(r["passed"] for r in recs)
    row = {
      "category": recs[0]["category"],
      "num_trials": n,
      "num_passed": c,
      "mean_reward": _mean(recs, "reward"),
      "pass@1": c / n,
    }
    row.update({f"pass@{k}": pass_at_k(n, c, k) for k in ks if 1 < k <= n})
    tasks[name] = row
  return tasks


def _category_rows(tasks: dict) -> dict:
  categories = {}
  for cat in sorted({t["category"] for t in tasks.values()}):
    rows = [t for t in tasks.values() if t["category"] == cat]
    cm, ce = mean_stderr([t["pass@1"] for t in rows])
    categories[cat] = {
      "num_tasks": len(rows),
      "num_trials": sum(t["num_trials"] for t in rows),
      "pass@1": cm,
      "stderr": ce,
      "mean_reward": sum(t["mean_reward"] for t in rows) / len(rows),
    }
  return categories


def aggregate(records: Sequence[dict], cfg: EvalConfig) -> dict:
  """The aggregate, per-category and per-task blocks of results.json."""
  ks = sorted({k for k in cfg.pass_ks if k >= 1})
  unsupported = sorted({r["task"] for r in records if r["status"] == UNSUPPORTED})
  scored = [r for r in records if r["task"] not in unsupported]
  tasks = _task_rows(scored, ks)
  mean, err = mean_stderr([t["pass@1"] for t in tasks.values()])
  n_min = min((t["num_trials"] for t in tasks.values()), default=0)
  pass_k = {
    str(k): sum(t[f"pass@{k}"] for t in tasks.values()) / len(tasks) for k in ks if 1 < k <= n_min
  }
  agg = {
    "num_tasks": len(tasks),
    "num_trials": len(scored),
    "runs_per_task": cfg.runs_per_task,
    "pass_threshold": cfg.pass_threshold,
    "pass@1": {"mean": mean, "stderr": err},
    "pass@k": pass_k,
    "mean_reward": _mean(scored, "reward"),
    "num_errors": sum(r["status"] == "error" for r in scored),
    "unsupported_tasks": unsupported,
    "status_counts": dict(Counter(r["status"] for r in records)),
    "mean_turns": _mean(scored, "turns"),
    "mean_tool_calls": _mean(scored, "tool_calls"),
    "mean_response_tokens": _mean(scored, "response_tokens"),
    "mean_duration_s": _mean(scored, "duration_s"),
  }
  return {"aggregate": agg, "categories": _category_rows(tasks), "tasks": tasks}


def category_table(summary: dict) -> str:
  """A fixed-width text table: one row per category and an `all` row."""
  head = f"{'category':<28} {'tasks':>5} {'trials':>6} {'pass@1':>7} {'stderr':>7} {'reward':>7}"
  lines = [head, "-" * len(head)]
  for cat, row in summary["categories"].items():
    lines.append(
      f"{cat[:28]:<28} {row['num_tasks']:>5} {row['num_trials']:>6} "
      f"{row['pass@1']:>7.3f} {row['stderr']:>7.3f} {row['mean_reward']:>7.3f}"
    )
  agg = summary["aggregate"]
  lines += [
    "-" * len(head),
    f"{'all':<28} {agg['num_tasks']:>5} {agg['num_trials']:>6} "
    f"{agg['pass@1']['mean']:>7.3f} {agg['pass@1']['stderr']:>7.3f} "
    f"{agg['mean_reward']:>7.3f}",
  ]
  return "\n".join(lines) + "\n"


def summary_text(results: dict) -> str:
  """What the CLI prints: the table, pass@1 +- stderr, pass@k, errors."""
  agg = results["aggregate"]
  lines = [
    category_table(results).rstrip("\n"),
    f"pass@1 = {agg['pass@1']['mean']:.4f} +- {agg['pass@1']['stderr']:.4f} "
    f"({agg['num_tasks']} tasks x {agg['runs_per_task']} runs)",
  ]
  lines += [f"pass@{k} = {v:.4f}" for k, v in agg["pass@k"].items()]
  if agg["unsupported_tasks"]:
    lines.append(
      f"NOTE: {len(agg['unsupported_tasks'])} task(s) unsupported here, left out of "
      f"pass@1: {', '.join(agg['unsupported_tasks'])} (see trials.jsonl `error`)"
    )
  if agg["num_errors"]:
    lines.append(
      f"WARNING: {agg['num_errors']} trial(s) raised errors (scored 0); see trials.jsonl `error`"
    )
  return "\n".join(lines) + "\n"


def config_dict(cfg: EvalConfig) -> dict:
  return json.loads(json.dumps(dataclasses.asdict(cfg), default=str))
