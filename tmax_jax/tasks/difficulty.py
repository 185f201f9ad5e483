"""Difficulty tools: per-task pass@k from rollouts, the soft filter, 13-gram decontamination.

Rollouts are the evaluation runner's trial records (loop/evaluate: {"task": str, "reward": float,
...}), read from its trials.jsonl or results.json ("trials"), or any iterable of such records; the
task pipeline's calibration writes the same records. A rollout passes when reward >=
pass_threshold (1.0: the recipe's binary reward). Trials with status "unsupported" (the sandbox
backend cannot run the task) are left out, as in the evaluation report.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

import yaml

from tmax_jax import cli, json_io
from tmax_jax.errors import UserError

NGRAM = 13
_WORD = re.compile(r"[a-z0-9]+")


# ----------------------------------------------------------------------------------------------
# pass@k


def pass_at_k(n: int, c: int, k: int) -> float:
  """Unbiased estimator 1 - C(n-c, k) / C(n, k) of P(at least one of k samples passes)
  from n rollouts of which c passed (Chen et al. 2021); needs k <= n."""
  if not 0 <= c <= n:
    raise ValueError(f"c: expected 0 <= c <= n={n}, got {c}")
  if not 1 <= k <= n:
    raise ValueError(f"k: expected 1 <= k <= n={n}, got {k}")
  if n - c < k:
    return 1.0
  # the product form avoids huge binomials: prod_{i=n-c+1..n} (1 - k/i)
  return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def _trial_records(path: str | os.PathLike) -> list[tuple[str, object]]:
  """(location, record) of a results.json ("trials") or a JSONL of records."""
  path = pathlib.Path(path)
  if path.suffix == ".json":
    try:
      doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
      raise UserError(f"{path}: not a readable JSON file ({err})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("trials"), list):
      raise UserError(f"{path}: expected a results.json with a 'trials' list")
    return [(f"{path}:trials[{i}]", rec) for i, rec in enumerate(doc["trials"])]
  return [(f"{path}:{no}", rec) for no, rec in json_io.read_objects(path)]


def load_rollouts(path: str | os.PathLike) -> list[dict]:
  """Trial records {task: str, reward: number, ...} from a trials JSONL or a results.json;
  unsupported trials are dropped."""
  out = []
  for where, rec in _trial_records(path):
    reward = rec.get("reward") if isinstance(rec, dict) else None
    if (
      not isinstance(rec, dict)
      or not isinstance(rec.get("task"), str)
      or isinstance(reward, bool)
      or not isinstance(reward, (int, float))
    ):
      raise UserError(
        f"{where}: expected a trial record {{task: str, reward: number}} (the evaluation "
        f"runner's schema), got {json.dumps(rec)[:200]}"
      )
    if rec.get("status") != "unsupported":
      out.append(rec)
  return out


def group_rewards(rollouts: Iterable[Mapping]) -> dict[str, list[float]]:
  groups: dict[str, list[float]] = defaultdict(list)
  for r in rollouts:
    groups[r["task"]].append(float(r["reward"]))
  return dict(groups)


def per_task_pass_at_k(
  rollouts: Iterable[Mapping] | Mapping[str, Sequence[float]],
  ks: Sequence[int] = (1, 8),
  pass_threshold: float = 1.0,
) -> dict[str, dict[str, float]]:
  """{task: {"n", "c", "pass@k" for each k <= n}}."""
  groups = rollouts if isinstance(rollouts, Mapping) else group_rewards(rollouts)
  out = {}
  for tid, rewards in groups.items():
    n, c = len(rewards), sum(r >= pass_threshold for r in rewards)
    row: dict[str, float] = {"n": n, "c": c}
    for k in ks:
      if k <= n:
        row[f"pass@{k}"] = pass_at_k(n, c, k)
    out[tid] = row
  return out


def mean_pass_at_k(table: Mapping[str, Mapping[str, float]], k: int) -> float:
  vals = [row[f"pass@{k}"] for row in table.values() if f"pass@{k}" in row]
  return sum(vals) / len(vals) if vals else math.nan


# ----------------------------------------------------------------------------------------------
# soft filter


@dataclasses.dataclass(frozen=True)
class SoftFilterResult:
  kept: tuple[str, ...]
  dropped: tuple[str, ...]  # tasks whose group had zero passes


def soft_filter(
  rollouts: Iterable[Mapping] | Mapping[str, Sequence[float]], pass_threshold: float = 1.0
) -> SoftFilterResult:
  """Drops every task with zero passes in its group of rollouts (the recipe's difficulty filter)."""
  groups = rollouts if isinstance(rollouts, Mapping) else group_rewards(rollouts)
  kept, dropped = [], []
  for tid in sorted(groups):
    (kept if any(r >= pass_threshold for r in groups[tid]) else dropped).append(tid)
  return SoftFilterResult(tuple(kept), tuple(dropped))


# ----------------------------------------------------------------------------------------------
# 13-gram decontamination


def ngrams(text: str, n: int = NGRAM) -> set[tuple[str, ...]]:
  """Word n-grams of lowercased alphanumeric tokens (punctuation and markup ignored)."""
  words = _WORD.findall(text.lower())
  return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def _task_texts(task_dir: pathlib.Path, include: Sequence[str]) -> str:
  parts = []
  if (task_dir / "instruction.md").is_file():
    parts.append((task_dir / "instruction.md").read_text(errors="replace"))
  elif (task_dir / "task.yaml").is_file():  # Terminal-Bench 1
    try:
      cfg = yaml.safe_load((task_dir / "task.yaml").read_text(errors="replace")) or {}
    except yaml.YAMLError:
      cfg = {}
    if isinstance(cfg, dict) and isinstance(cfg.get("instruction"), str):
      parts.append(cfg["instruction"])
  for pattern in include:
    for p in sorted(task_dir.glob(pattern)):
      if p.is_file():
        parts.append(p.read_text(errors="replace"))
  return "\n".join(parts)


def find_task_dirs(root: str | os.PathLike) -> list[pathlib.Path]:
  """Every directory under root holding instruction.md (TB2) or task.yaml (TB1)."""
  root = pathlib.Path(root)
  found = {p.parent for p in root.rglob("instruction.md")} | {
    p.parent for p in root.rglob("task.yaml")
  }
  return sorted(found)


@dataclasses.dataclass
class BenchmarkIndex:
  """13-gram -> benchmark task names."""

  grams: dict[tuple[str, ...], set[str]]
  n_tasks: int

  @classmethod
  def build(
    cls, benchmark_dir: str | os.PathLike, include: Sequence[str] = (), n: int = NGRAM
  ) -> BenchmarkIndex:
    grams: dict[tuple[str, ...], set[str]] = defaultdict(set)
    dirs = find_task_dirs(benchmark_dir)
    if not dirs:
      raise ValueError(f"{benchmark_dir}: no task directories (instruction.md or task.yaml) found")
    for d in dirs:
      for g in ngrams(_task_texts(d, include), n):
        grams[g].add(d.name)
    return cls(dict(grams), len(dirs))


@dataclasses.dataclass(frozen=True)
class Contamination:
  task: str
  overlapping_ngrams: int
  total_ngrams: int
  benchmark_tasks: tuple[str, ...]

  @property
  def contaminated(self) -> bool:
    return self.overlapping_ngrams > 0


def check_contamination(
  text: str, index: BenchmarkIndex, name: str = "", n: int = NGRAM
) -> Contamination:
  grams = ngrams(text, n)
  hits = [g for g in grams if g in index.grams]
  tasks = sorted({t for g in hits for t in index.grams[g]})
  return Contamination(name, len(hits), len(grams), tuple(tasks))


def decontaminate(
  task_dirs: Iterable[str | os.PathLike],
  benchmark_dir: str | os.PathLike,
  include: Sequence[str] = (),
  n: int = NGRAM,
) -> tuple[list[pathlib.Path], list[Contamination]]:
  """Splits task_dirs into (clean, contaminated reports): a task is contaminated when any of its
  13-grams (instruction, plus files matching `include` globs) appears in a benchmark task."""
  index = BenchmarkIndex.build(benchmark_dir, include, n)
  clean, dirty = [], []
  for d in map(pathlib.Path, task_dirs):
    report = check_contamination(_task_texts(d, include), index, d.name, n)
    (dirty.append(report) if report.contaminated else clean.append(d))
  return clean, dirty


def main(argv: Sequence[str] | None = None) -> int:
  """CLI: pass@k + soft filter from a rollouts JSONL, and/or decontamination of task dirs."""
  p = cli.ArgumentParser(description=cli.description(__doc__))
  p.add_argument(
    "--rollouts", help="trial records {task, reward}: an eval trials.jsonl or results.json"
  )
  p.add_argument("--k", type=int, nargs="+", default=[1, 8], help="the k of pass@k to report")
  p.add_argument("--tasks", help="a directory of task directories to decontaminate")
  p.add_argument("--benchmark", help="the benchmark task directory to decontaminate against")
  args = p.parse_args(argv)
  out: dict = {}
  if args.rollouts:
    rollouts = load_rollouts(args.rollouts)
    table = per_task_pass_at_k(rollouts, args.k)
    sf = soft_filter(group_rewards(rollouts))
    out["mean"] = {f"pass@{k}": mean_pass_at_k(table, k) for k in args.k}
    out["soft_filter"] = {"kept": len(sf.kept), "dropped": list(sf.dropped)}
    out["per_task"] = table
  if args.tasks and args.benchmark:
    clean, dirty = decontaminate(find_task_dirs(args.tasks), args.benchmark)
    out["decontamination"] = {
      "clean": len(clean),
      "contaminated": [dataclasses.asdict(c) for c in dirty],
    }
  print(json.dumps(out, indent=1))
  return 0


if __name__ == "__main__":
  cli.run(main)
