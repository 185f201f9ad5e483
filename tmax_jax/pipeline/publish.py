"""The publish step: the kept tasks as a task set every job reads (tasks/sources.py), the report
(kept / rejected with reasons per axis value, the domain balance score, decontamination) and the
calibration outputs.

<out>/published/             set.json (sources.SET_SCHEMA: the tasks in order, their axes and
                             calibration) + tasks/<name>/ (replaced atomically on every publish)
<out>/report.json            the report (with calibration: the set's pass@1 / pass@8 against the
                             recipe's target and calibration's cost, set_target.py); <out>/table.txt
                             the printed table
<out>/rejected.jsonl         every rejected task: id, stage, category, reason, axes
<out>/calibration/           calibration.json (per task rounds, per knob setting, histograms of
                             pass@1 before/after), pass_at_1.png, rollouts.jsonl (every round's
                             trial records), final_rollouts.jsonl (the published tasks' last round:
                             what tasks/difficulty.load_rollouts reads)
"""

from __future__ import annotations

import collections
import itertools
import os
import pathlib
import shutil
import tempfile
from collections.abc import Mapping, Sequence

from tmax_jax import json_io
from tmax_jax.pipeline import set_target
from tmax_jax.pipeline.config import PipelineConfig
from tmax_jax.pipeline.state import DONE, Store, now, outcome, rejection
from tmax_jax.tasks import sources, vocabulary
from tmax_jax.tasks.generator.axes import balance_score

TABLE_AXES = ("domain", "language", "task_complexity", "command_complexity", "fixture", "verifier")
BINS = 10  # pass@1 histogram bins over [0, 1]


def is_rejected(state: dict) -> bool:
  return rejection(state) is not None


def needs(state: dict, stage: str) -> bool:
  """The task is not rejected and `stage` has no done record yet."""
  return not is_rejected(state) and state["stages"].get(stage, {}).get("status") != DONE


def unfinished(states: Sequence[dict], stages: tuple[str, ...]) -> list[str]:
  return [s["id"] for s in states if outcome(s, stages) in ("error", "pending")]


def _axes_table(states: Sequence[dict], stages: tuple[str, ...]) -> dict:
  table: dict = {a: collections.defaultdict(collections.Counter) for a in TABLE_AXES}
  for s in states:
    result, rej = outcome(s, stages), rejection(s)
    for axis in TABLE_AXES:
      row = table[axis][str(s["sample"][axis])]
      row["requested"] += 1
      row[result] += 1
      if rej:
        row[f"{rej['stage']}:{rej['category']}"] += 1
  return {a: {v: dict(c) for v, c in sorted(rows.items())} for a, rows in table.items()}


def histogram(values: Sequence[float]) -> list[int]:
  counts = [0] * BINS
  for v in values:
    counts[min(BINS - 1, int(v * BINS))] += 1
  return counts


def _calibration(cfg: PipelineConfig, states: Sequence[dict], kept: Sequence[dict]) -> dict:
  k = cfg.calibration.k
  calibrated = [s for s in states if s.get("calibration", {}).get("rounds")]
  before = [s["calibration"]["rounds"][0]["pass@1"] for s in calibrated]
  after = [s["calibration"]["rounds"][-1]["pass@1"] for s in kept if "calibration" in s]
  per_knob: dict = collections.defaultdict(list)
  for s in calibrated:
    for r in s["calibration"]["rounds"]:
      per_knob[r["setting"]].append(r)
  mean = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
  return {
    "k": k,
    "band": list(cfg.calibration.band),
    "tasks": {
      s["id"]: [
        {key: v for key, v in r.items() if key != "trials"} for r in s["calibration"]["rounds"]
      ]
      for s in calibrated
    },
    "per_knob_setting": {
      setting: {
        "rounds": len(rs),
        "mean_pass@1": mean([r["pass@1"] for r in rs]),
        f"mean_pass@{k}": mean([r[f"pass@{k}"] for r in rs]),
      }
      for setting, rs in sorted(per_knob.items())
    },
    "histogram": {
      "bin_edges": [i / BINS for i in range(BINS + 1)],
      "before": histogram(before),
      "after": histogram(after),
      "mean_pass@1_before": mean(before),
      "mean_pass@1_after": mean(after),
      "note": "before: round 0 of every calibrated task; after: the last round of kept tasks",
    },
  }


def _plot(hist: Mapping, path: pathlib.Path, title: str) -> None:
  import matplotlib  # noqa: PLC0415  (not in the Harbor venv: only to plot)

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # noqa: PLC0415  (after the backend is set)

  edges, width = hist["bin_edges"], 0.4 / BINS
  centers = [(a + b) / 2 for a, b in itertools.pairwise(edges)]
  fig, ax = plt.subplots(figsize=(7, 4))
  ax.bar([c - width / 2 for c in centers], hist["before"], width, label="before (round 0)")
  ax.bar([c + width / 2 for c in centers], hist["after"], width, label="after (kept tasks)")
  ax.set_xlabel("per-task pass@1 of the reference policy")
  ax.set_ylabel("tasks")
  ax.set_title(title)
  ax.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


def _write_calibration(cfg: PipelineConfig, out: pathlib.Path, states, kept) -> dict:
  report = _calibration(cfg, states, kept)
  cal = out / "calibration"
  json_io.write_json_atomic(cal / "calibration.json", report)
  rounds = [r for s in states for r in s.get("calibration", {}).get("rounds", [])]
  json_io.write_jsonl_atomic((t for r in rounds for t in r["trials"]), cal / "rollouts.jsonl")
  last = [s["calibration"]["rounds"][-1] for s in kept if s.get("calibration", {}).get("rounds")]
  json_io.write_jsonl_atomic((t for r in last for t in r["trials"]), cal / "final_rollouts.jsonl")
  _plot(report["histogram"], cal / "pass_at_1.png", f"calibration: pass@1 (k={cfg.calibration.k})")
  return {key: report[key] for key in ("k", "band", "per_knob_setting", "histogram")}


def _write_set(store: Store, kept: Sequence[dict]) -> pathlib.Path:
  """<out>/published: the kept tasks and set.json, swapped in atomically."""
  final = store.out / "published"
  tmp = pathlib.Path(tempfile.mkdtemp(prefix=".published.", dir=store.out))
  try:
    entries = []
    for s in kept:
      name = s["stages"]["write"]["name"]
      shutil.copytree(store.task_dir(s["id"]), tmp / "tasks" / name)
      cal = s["stages"].get("calibrate", {})
      entries.append(
        {
          "dir": f"tasks/{name}",
          "name": name,
          "sample": s["sample"],
          "calibration": {k: v for k, v in cal.items() if k == "setting" or k.startswith("pass@")}
          or None,
        }
      )
    doc = {"schema": sources.SET_SCHEMA, "created_at": now(), "tasks": entries}
    json_io.write_json_atomic(tmp / sources.SET_FILE, doc)
    if final.exists():
      old = store.out / f".published.old.{os.getpid()}"
      final.rename(old)
      os.replace(tmp, final)
      shutil.rmtree(old, ignore_errors=True)
    else:
      os.replace(tmp, final)
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  return final


def _select(cfg: PipelineConfig, store: Store, states, stages, run: int) -> dict | None:
  """The set-level selection afresh (set_target.py) -> the report's set section (None without
  calibration); every state whose selection record appears, changes or goes is saved."""
  had = {s["id"] for s in states if set_target.SELECT in s["stages"]}
  set_target.clear(states)
  section = None
  if "calibrate" in stages:
    kept = [s for s in states if outcome(s, stages) == "kept"]
    section = set_target.steer(cfg.calibration, states, kept, run)
  for s in states:
    if s["id"] in had or set_target.SELECT in s["stages"]:
      store.save(s)
  return section


def publish(cfg: PipelineConfig, store: Store, states, stages, benchmarks, run: int = 0) -> dict:
  """Selects the set (set_target.steer, with calibration), writes the published set and every
  report; returns the report. `run`: this invocation's id, on the selection's records."""
  set_section = _select(cfg, store, states, stages, run)
  kept = [s for s in states if outcome(s, stages) == "kept"]
  rejected = [s for s in states if is_rejected(s)]
  per_stage = {
    st: dict(collections.Counter(s["stages"][st]["status"] for s in states if st in s["stages"]))
    for st in stages
  }
  reasons = collections.Counter(f"{r['stage']}:{r['category']}" for r in map(rejection, rejected))
  report = {
    "requested": len(states),
    "kept": len(kept),
    "rejected": len(rejected),
    "unfinished": len(unfinished(states, stages)),
    "published": str(_write_set(store, kept)),
    "balance_score": balance_score((s["sample"]["domain"] for s in kept), len(vocabulary.DOMAINS)),
    "stages": per_stage,
    "rejections": dict(reasons.most_common()),
    "axes": _axes_table(states, stages),
    "decontamination": {
      "benchmarks": {name: idx.n_tasks for name, idx in benchmarks.items()},
      "contaminated": reasons.get("decontaminate:contaminated", 0),
    },
  }
  if "calibrate" in stages:
    report["calibration"] = _write_calibration(cfg, store.out, states, kept)
    done = set_target.calibrated(states)
    report["calibration"]["set"] = set_section
    report["calibration"]["cost"] = set_target.cost(done, len(kept))
  json_io.write_jsonl_atomic(
    ({"id": s["id"], **rejection(s), "sample": s["sample"]} for s in rejected),
    store.out / "rejected.jsonl",
  )
  json_io.write_json_atomic(store.out / "report.json", report)
  json_io.write_text_atomic(store.out / "table.txt", [table(report)])
  return report


def table(report: Mapping) -> str:
  """kept / rejected per axis value with the rejection reasons (stage:category x count)."""
  lines = [
    f"requested {report['requested']}  kept {report['kept']}  rejected {report['rejected']}  "
    f"unfinished {report['unfinished']}  domain balance exp(H)/N {report['balance_score']:.3f}"
  ]
  cal = report.get("calibration") or {}
  if cal.get("set"):
    lines += ["", *set_target.summary(cal["set"], cal["cost"])]
  for axis, rows in report["axes"].items():
    lines += ["", f"{axis:<26} {'req':>5} {'kept':>5} {'rej':>5}  rejection reasons"]
    for value, row in rows.items():
      why = ", ".join(
        f"{k} x{v}" for k, v in sorted(row.items(), key=lambda kv: -kv[1]) if ":" in k
      )
      lines.append(
        f"{value[:26]:<26} {row.get('requested', 0):>5} {row.get('kept', 0):>5} "
        f"{row.get('rejected', 0):>5}  {why}"
      )
  return "\n".join(lines) + "\n"
