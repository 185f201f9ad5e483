"""Aggregation and report of the math evaluation: per-problem pass@1 (c / n over its scored
samples) and unbiased pass@k, their mean over problems with the standard error, the CLI summary and
its verdict (results.json schema in loop/math_eval/__init__.py).

As in the terminal evaluation (loop/evaluate/report.py), only scored samples are measurements: a
sample that errored (the server was lost or refused the request, the prompt was over the cap) is
counted with its reason and left out, never scored 0. A sample that ran out of tokens before a
boxed answer IS scored (wrong): the model had its budget.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from tmax_jax.loop.evaluate import report as evaluate_report
from tmax_jax.loop.evaluate.report import mean_stderr
from tmax_jax.tasks.difficulty import pass_at_k

SCHEMA_VERSION = 1
SCORED, ERROR = "scored", "error"  # sample statuses
MAX_ERROR_REASONS = 3
MAX_REASON_CHARS = 300


def problem_summary(samples: Sequence[dict], ks: Sequence[int]) -> dict:
  """num_samples / num_correct over the scored samples, pass@1 (None when none was scored) and
  pass@k for each k in `ks` with 1 < k <= num_samples, num_errors."""
  scored = [s for s in samples if s["status"] == SCORED]
  n, c = len(scored), sum(s["correct"] for s in scored)
  row = {
    "num_samples": n,
    "num_correct": c,
    "num_errors": len(samples) - n,
    "pass@1": c / n if n else None,
  }
  row.update({f"pass@{k}": pass_at_k(n, c, k) for k in ks if 1 < k <= n})
  return row


def _reason(sample: dict) -> str:
  text = (sample.get("error") or "").strip()
  line = text.splitlines()[0] if text else "error"
  return line if len(line) <= MAX_REASON_CHARS else line[: MAX_REASON_CHARS - 3] + "..."


def aggregate(records: Sequence[dict], samples_per_problem: int, pass_ks: Sequence[int]) -> dict:
  """The aggregate block of results.json from the per-problem records (run.problem_record)."""
  ks = sorted({k for k in pass_ks if k > 1})
  rows = [r for r in records if r["num_samples"]]  # problems with a scored sample
  samples = [s for r in records for s in r["samples"]]
  scored = [s for s in samples if s["status"] == SCORED]
  errored = [s for s in samples if s["status"] != SCORED]
  mean, err = mean_stderr([r["pass@1"] for r in rows]) if rows else (None, None)
  n_min = min((r["num_samples"] for r in rows), default=0)
  n = len(scored)
  return {
    "num_problems": len(rows),
    "num_samples": n,
    "samples_per_problem": samples_per_problem,
    "pass@1": {"mean": mean, "stderr": err},
    "pass@k": {str(k): sum(r[f"pass@{k}"] for r in rows) / len(rows) for k in ks if k <= n_min},
    "unscored_problems": [r["id"] for r in records if not r["num_samples"]],
    "num_errors": len(errored),
    "error_share": len(errored) / len(samples) if samples else 0.0,
    "error_reasons": [
      {"reason": k, "samples": v}
      for k, v in Counter(_reason(s) for s in errored).most_common(MAX_ERROR_REASONS)
    ],
    "answered_share": sum(s["extracted"] is not None for s in scored) / n if n else None,
    "truncated_share": sum(s["finish_reason"] == "length" for s in scored) / n if n else None,
    "finish_reasons": dict(Counter(s["finish_reason"] for s in scored)),
    "mean_response_tokens": sum(s["response_tokens"] for s in scored) / n if n else None,
  }


def _share(value: float | None) -> str:
  return "-" if value is None else f"{value:.1%}"


def summary_text(results: dict) -> str:
  """What the CLI prints: pass@1 +- stderr, pass@k, answered / truncated shares, the errors."""
  agg = results["aggregate"]
  if agg["pass@1"]["mean"] is None:
    lines = ["pass@1: not measured (no sample was scored)"]
  else:
    lines = [
      f"pass@1 = {agg['pass@1']['mean']:.4f} +- {agg['pass@1']['stderr']:.4f} "
      f"({agg['num_problems']} problems x {agg['samples_per_problem']} samples)"
    ]
  lines += [f"pass@{k} = {v:.4f}" for k, v in agg["pass@k"].items()]
  lines.append(
    f"boxed answer found in {_share(agg['answered_share'])} of the scored samples; "
    f"{_share(agg['truncated_share'])} hit max_tokens"
  )
  if agg["num_errors"]:
    lines.append(
      f"ERRORED: {agg['num_errors']} of {agg['num_errors'] + agg['num_samples']} sample(s), not "
      "scored (left out of pass@1); see records.jsonl `error`. Most frequent reasons:"
    )
    lines += [f"  {e['samples']} x {e['reason']}" for e in agg["error_reasons"]]
  return "\n".join(lines) + "\n"


def check_measured(results: dict) -> None:
  """The terminal eval's rule (loop/evaluate/report.check_measured) over samples."""
  evaluate_report.check_measured(results, unit="sample", scored="num_samples")
