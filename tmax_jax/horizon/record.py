"""What a build leaves on disk, and reading it back.

  <out>/tasks/<id>/          accepted and rebuilt tasks (TB2 dirs) + horizon.json (the lineage, the
                             status and every audit round: verdict and evidence)
  <out>/build.jsonl          one line per finished node (accepted / rebuilt / rejected / skipped)
                             and per expanded parent; a rerun skips what is recorded (resume)
  <out>/lineage.json         the tree: every kept node with its parent id and children
  <out>/summary.json         counts and the rejection reasons (also printed as a table)
Task directories appear atomically (staging dir + rename): a killed build leaves none half-written.
"""

from __future__ import annotations

import collections
import json
import os
import pathlib
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tmax_jax import json_io
from tmax_jax.horizon import compose
from tmax_jax.tasks import format as fmt

RECORD_FILE = "horizon.json"
KEPT = ("accepted", "rebuilt")
STATUSES = KEPT + ("rejected", "skipped")


def task_dir(out: pathlib.Path, node_id: str) -> pathlib.Path:
  return out / "tasks" / node_id


def save_task(out: pathlib.Path, task: fmt.Task, record: Mapping[str, Any]) -> fmt.Task:
  """Writes the task and its horizon.json into <out>/tasks/<id>/ in one rename."""
  dest = task_dir(out, compose.lineage_of(task).id)
  dest.parent.mkdir(parents=True, exist_ok=True)
  staging = pathlib.Path(tempfile.mkdtemp(prefix=".staging-", dir=dest.parent))
  try:
    fmt.write_task(task, staging / "task")
    (staging / "task" / RECORD_FILE).write_text(json.dumps(record, indent=1))
    if dest.exists():
      shutil.rmtree(dest)
    (staging / "task").rename(dest)
  finally:
    shutil.rmtree(staging, ignore_errors=True)
  return fmt.load_task(dest)


def load_record(directory: str | os.PathLike) -> dict:
  path = pathlib.Path(directory) / RECORD_FILE
  try:
    return json.loads(path.read_text())
  except FileNotFoundError:
    raise FileNotFoundError(f"{path}: missing; not a task written by the horizon build") from None


class BuildLog:
  """Append-only JSONL of finished nodes; the resume state of a build."""

  def __init__(self, out: pathlib.Path):
    self.path = out / "build.jsonl"
    self.entries: list[dict] = []
    if self.path.exists():
      self.entries = [e for _, e in json_io.read_objects(self.path)]

  def append(self, entry: Mapping[str, Any]) -> None:
    self.entries.append(dict(entry))
    self.path.parent.mkdir(parents=True, exist_ok=True)
    with open(self.path, "a", encoding="utf-8") as f:
      f.write(json.dumps(entry) + "\n")
      f.flush()
      os.fsync(f.fileno())

  def nodes(self) -> dict[str, dict]:
    return {e["id"]: e for e in self.entries if e.get("event") == "node"}

  def expanded(self) -> set[str]:
    return {e["id"] for e in self.entries if e.get("event") == "expanded"}


def node_entry(line: compose.Lineage, status: str, reason: str, rounds: int) -> dict:
  return {
    "event": "node",
    "id": line.id,
    "parent": line.parent,
    "root": line.root,
    "generation": line.generation,
    "stage": line.stage,
    "requirement": line.requirement,
    "origin": line.origin,
    "status": status,
    "reason": reason,
    "rounds": rounds,
  }


def lineage_tree(entries: Iterable[Mapping[str, Any]]) -> dict:
  """{"nodes": {id: {parent, generation, stage, requirement, status, children}}, "roots": [...]}
  over the kept nodes; "depth" = the most generations in one chain, "branching" = the number of
  nodes with two or more children."""
  nodes = {
    e["id"]: {k: e[k] for k in ("parent", "root", "generation", "stage", "requirement", "status")}
    | {"children": []}
    for e in entries
    if e.get("event") == "node" and e["status"] in KEPT
  }
  for nid, n in nodes.items():
    if n["parent"] in nodes:
      nodes[n["parent"]]["children"].append(nid)
  depth = 1 + max((n["generation"] for n in nodes.values()), default=-1)
  return {
    "nodes": nodes,
    "roots": sorted(i for i, n in nodes.items() if not n["parent"]),
    "depth": depth,
    "branching": sum(len(n["children"]) >= 2 for n in nodes.values()),
  }


def chains(tree: Mapping[str, Any]) -> list[list[str]]:
  """Every root-to-leaf path of kept nodes (what a whole-chain trajectory runs)."""
  nodes, out = tree["nodes"], []

  def walk(nid, path):
    kids = sorted(nodes[nid]["children"])
    if not kids:
      out.append(path + [nid])
    for k in kids:
      walk(k, path + [nid])

  for r in tree["roots"]:
    walk(r, [])
  return out


def summary(entries: Sequence[Mapping[str, Any]]) -> dict:
  nodes = [e for e in entries if e.get("event") == "node"]
  counts = collections.Counter(e["status"] for e in nodes)
  reasons = collections.Counter(e["reason"] for e in nodes if e["status"] not in KEPT)
  by_gen = collections.defaultdict(collections.Counter)
  for e in nodes:
    by_gen[e["generation"]][e["status"]] += 1
  tree = lineage_tree(entries)
  return {
    "counts": {s: counts.get(s, 0) for s in STATUSES},
    "by_generation": {str(g): dict(c) for g, c in sorted(by_gen.items())},
    "reasons": dict(reasons.most_common()),
    "depth": tree["depth"],
    "branching_nodes": tree["branching"],
    "chains": len(chains(tree)),
  }


def summary_table(s: Mapping[str, Any]) -> str:
  rows = [("generation",) + STATUSES]
  for g, c in s["by_generation"].items():
    rows.append((g,) + tuple(str(c.get(k, 0)) for k in STATUSES))
  rows.append(("all",) + tuple(str(s["counts"][k]) for k in STATUSES))
  widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
  lines = ["  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)) for r in rows]
  lines.append(
    f"lineage: depth {s['depth']} generations, {s['branching_nodes']} branching "
    f"node(s), {s['chains']} chain(s)"
  )
  if s["reasons"]:
    lines.append("rejected / skipped because:")
    lines += [f"  {n} x {r}" for r, n in s["reasons"].items()]
  return "\n".join(lines)


write_json = json_io.write_json_atomic
