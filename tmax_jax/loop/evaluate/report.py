"""Aggregation and report: pass@1 +- stderr, pass@k, per-category and per-task blocks, the text
table, the CLI summary and its verdict (results.json schema in loop/evaluate/__init__.py).

Only scored trials are measurements (docs/design/episodes.md "Scoring"): a trial that errored
(ERRORED: the
sandbox never started, the environment did not build, something raised: a lost server, a prompt the
server refuses, a broken verifier) is counted and its reasons listed, never scored 0. With no
scored trial there is no pass@1 (None), and `check_measured` fails the command.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from tmax_jax.errors import UserError
from tmax_jax.loop.evaluate.config import EvalConfig
from tmax_jax.tasks.difficulty import pass_at_k

SCHEMA_VERSION = 1
UNSUPPORTED = "unsupported"  # trial status of a task the sandbox backends cannot run
# Trial statuses of a trial the infrastructure or the setup failed: no verdict on the policy.
ERRORED = ("error", "no_episode", "build_failed")
MAX_ERROR_REASONS = 3  # distinct reasons of errored trials kept in the aggregate
MAX_REASON_CHARS = 300
USAGE_COUNTS = ("requests", "prompt_tokens", "completion_tokens")  # a trial's usage, with cost_usd


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
  ran = [r for r in records if r["task"] not in unsupported]
  errored = [r for r in ran if r["status"] in ERRORED]
  scored = [r for r in ran if r["status"] not in ERRORED]
  tasks = _task_rows(scored, ks)
  mean, err = mean_stderr([t["pass@1"] for t in tasks.values()]) if tasks else (None, None)
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
    "mean_reward": _mean(scored, "reward") if scored else None,
    "num_errors": len(errored),
    "error_share": len(errored) / len(ran) if ran else 0.0,
    "error_reasons": error_reasons(errored),
    "unsupported_tasks": unsupported,
    "status_counts": dict(Counter(r["status"] for r in records)),
    "mean_turns": _mean(scored, "turns"),
    "mean_tool_calls": _mean(scored, "tool_calls"),
    "mean_response_tokens": _mean(scored, "response_tokens"),
    "mean_duration_s": _mean(scored, "duration_s"),
    "usage": total_usage(records),
  }
  return {"aggregate": agg, "categories": _category_rows(tasks), "tasks": tasks}


def total_usage(records: Sequence[dict]) -> dict | None:
  """The trials' `usage` added up, errored trials included (their tokens were paid for); None
  when no trial has one (policies other than `endpoint`). cost_usd: None when unpriced."""
  used = [r["usage"] for r in records if r.get("usage") is not None]  # older records: none
  if not used:
    return None
  total = {k: sum(u[k] for u in used) for k in USAGE_COUNTS}
  costs = [u["cost_usd"] for u in used if u["cost_usd"] is not None]
  total["cost_usd"] = round(sum(costs), 6) if costs else None
  return total


def error_reasons(records: Sequence[dict]) -> list[dict]:
  """The most frequent reasons of errored trials (the first one first on a tie), with counts."""
  counts = Counter(_reason(r) for r in records)
  return [{"reason": k, "trials": n} for k, n in counts.most_common(MAX_ERROR_REASONS)]


def _reason(record: dict) -> str:
  text = record.get("error") or record.get("reward_reason") or record["status"]
  line = text.strip().splitlines()[0] if text.strip() else record["status"]
  return line if len(line) <= MAX_REASON_CHARS else line[: MAX_REASON_CHARS - 3] + "..."


def _rate(value: float | None) -> str:
  return f"{value:>7.3f}" if value is not None else f"{'-':>7}"


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
    f"{_rate(agg['pass@1']['mean'])} {_rate(agg['pass@1']['stderr'])} "
    f"{_rate(agg['mean_reward'])}",
  ]
  return "\n".join(lines) + "\n"


def summary_text(results: dict) -> str:
  """What the CLI prints: the table, pass@1 +- stderr, pass@k, the errored trials."""
  agg = results["aggregate"]
  lines = [category_table(results).rstrip("\n")]
  if agg["pass@1"]["mean"] is None:
    lines.append("pass@1: not measured (no trial was scored)")
  else:
    lines.append(
      f"pass@1 = {agg['pass@1']['mean']:.4f} +- {agg['pass@1']['stderr']:.4f} "
      f"({agg['num_tasks']} tasks x {agg['runs_per_task']} runs)"
    )
  lines += [f"pass@{k} = {v:.4f}" for k, v in agg["pass@k"].items()]
  if agg["unsupported_tasks"]:
    lines.append(
      f"NOTE: {len(agg['unsupported_tasks'])} task(s) unsupported here, left out of "
      f"pass@1: {', '.join(agg['unsupported_tasks'])} (see trials.jsonl `error`)"
    )
  if agg["num_errors"]:
    lines.append(
      f"ERRORED: {agg['num_errors']} of {agg['num_errors'] + agg['num_trials']} trial(s), not "
      "scored (left out of pass@1); see trials.jsonl `error`. Most frequent reasons:"
    )
    lines += [f"  {e['trials']} x {e['reason']}" for e in agg["error_reasons"]]
  if agg["usage"] is not None:
    u = agg["usage"]
    cost = "" if u["cost_usd"] is None else f", ${u['cost_usd']:.4f}"
    lines.append(
      f"usage: {u['requests']} requests, {u['prompt_tokens']} prompt + "
      f"{u['completion_tokens']} completion tokens{cost}"
    )
  return "\n".join(lines) + "\n"


def check_measured(results: dict, unit: str = "trial", scored: str = "num_trials") -> None:
  """UserError (the launchers: `error: ...`, exit 2) unless `results` measured the policy: no
  scored `unit` (trial, sample), or more errored ones than the config's max_error_share (the
  scored ones may be a biased subset), is no measurement, whatever pass@1 would say."""
  agg, cfg = results["aggregate"], results["config"]
  ran = agg["num_errors"] + agg[scored]
  first = f"; most frequent: {agg['error_reasons'][0]['reason']}" if agg["error_reasons"] else ""
  where = f"results: {cfg['output_dir']}/results.json"
  if agg["pass@1"]["mean"] is None:
    raise UserError(f"no {unit} was scored ({agg['num_errors']} of {ran} errored{first})\n{where}")
  if agg["error_share"] > cfg["max_error_share"]:
    raise UserError(
      f"{agg['num_errors']} of {ran} {unit}s errored ({agg['error_share']:.0%} > "
      f"max_error_share={cfg['max_error_share']:.0%}): pass@1 is over the {agg[scored]} "
      f"scored ones only{first}\n{where} (--config.max_error_share=1 accepts it)"
    )


def config_dict(cfg: Any) -> dict:
  """An evaluation job's config dataclass (EvalConfig, MathEvalConfig) as plain JSON values."""
  return json.loads(json.dumps(dataclasses.asdict(cfg), default=str))
