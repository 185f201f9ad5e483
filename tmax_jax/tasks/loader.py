"""The one task-directory loader: Terminal-Bench 2 / Harbor tasks as they are, TB1 tasks converted.

Every job reads task directories through it (via tasks/sources.py, which also reads published
pipeline sets and task parquets). Rules:
- a task directory holds `task.toml` (TB2/Harbor, loaded with tasks/format.load_task) or
  `task.yaml` (Terminal-Bench 1, converted with tasks/tb1.convert_tb1); task.toml wins when both
  exist;
- the root itself may be a task; otherwise its subdirectories are searched recursively, and the
  search does not descend into a task directory (a task's environment/ or tests/ may hold files
  with the same names);
- hidden directories (`.name`, e.g. a write_task temp dir or .git) are skipped;
- tasks are ordered by their path relative to the root; two tasks with the same name are an error
  (names key trials, groups and seeds);
- metadata written before the task vocabulary was shared is read in its current spelling
  (tasks/vocabulary.py ALIASES: a procedural task's `fixture = "multi_service"` loads as
  "multi_service_compose"; free-form tags and keywords are left as written);
- converted TB1 tasks are written under `converted_dir/<dir name>` when one is given (so a run
  leaves the converted files next to its results), else kept in memory (the runner writes a task
  to a temporary directory for each trial).
"""

from __future__ import annotations

import collections
import dataclasses
import os
import pathlib

from tmax_jax.tasks import format as fmt
from tmax_jax.tasks import tb1, vocabulary

TB2_FILE = fmt.CONFIG_FILE  # task.toml
TB1_FILE = "task.yaml"


def task_format(directory: str | os.PathLike) -> str | None:
  """'tb2' (task.toml), 'tb1' (task.yaml) or None."""
  directory = pathlib.Path(directory)
  if (directory / TB2_FILE).is_file():
    return "tb2"
  if (directory / TB1_FILE).is_file():
    return "tb1"
  return None


def find_task_dirs(root: str | os.PathLike) -> list[pathlib.Path]:
  """`root` itself when it is a task, else its task directories found by the rules above."""
  root = pathlib.Path(root)
  if not root.is_dir():
    raise FileNotFoundError(f"tasks directory {root}: not a directory")
  if task_format(root):
    return [root]
  found, stack = [], [root]
  while stack:
    for d in sorted(p for p in stack.pop().iterdir() if p.is_dir()):
      if d.name.startswith("."):
        continue
      (found.append(d) if task_format(d) else stack.append(d))
  if not found:
    raise FileNotFoundError(
      f"tasks directory {root}: no task directories (with {TB2_FILE} for "
      f"TB2 or {TB1_FILE} for Terminal-Bench 1) found"
    )
  return sorted(found)


def load_task_dir(
  directory: str | os.PathLike, converted_dir: str | os.PathLike | None = None
) -> fmt.Task:
  """One task directory -> Task (TB1 converted; written under converted_dir when given)."""
  directory = pathlib.Path(directory)
  kind = task_format(directory)
  if kind == "tb2":
    task = fmt.load_task(directory)
    metadata = vocabulary.canonical_metadata(task.config.metadata)
    if metadata is task.config.metadata:
      return task
    return dataclasses.replace(task, config=dataclasses.replace(task.config, metadata=metadata))
  if kind != "tb1":
    raise FileNotFoundError(f"{directory}: not a task directory (no {TB2_FILE} or {TB1_FILE})")
  task = tb1.convert_tb1(directory)
  if converted_dir is None:
    return task
  return fmt.write_task(task, pathlib.Path(converted_dir) / directory.name, overwrite=True)


def load_tasks(
  root: str | os.PathLike, converted_dir: str | os.PathLike | None = None, max_tasks: int = 0
) -> list[fmt.Task]:
  """Every task under `root` (the first `max_tasks` in order; 0 = all)."""
  tasks = [load_task_dir(d, converted_dir) for d in find_task_dirs(root)[: max_tasks or None]]
  counts = collections.Counter(t.name for t in tasks)
  dup = sorted(n for n, c in counts.items() if c > 1)
  if dup:
    raise ValueError(f"tasks directory {root}: duplicate task names {dup}")
  return tasks
