"""The pipeline's on-disk state: one JSON file per task, rewritten atomically after every stage.

<out>/pipeline.json   the run's settings (seed, taxonomy) and one entry per invocation (run id)
<out>/state/<id>.json {"id", "index", "sample", "stages": {stage: record}, "calibration": {...}}
<out>/work/<id>/task  the task as written (and, during calibration, with its current knob)
<out>/.lock           held (flock) while a run works on <out>

A stage record is {"status": "done" | "rejected" | "error", "reason", "category", "seconds",
"run", ...stage data}. A task is final when a stage rejected it or every stage of the run is done;
"error" (the endpoint failed, not the task) is redone by the next run, as is any stage that has no
record yet (a run killed mid-stage leaves none: the state file is replaced only when a stage ends).
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import pathlib
import shutil
from collections.abc import Iterator
from typing import Any

from tmax_jax import json_io

DONE, REJECTED, ERROR = "done", "rejected", "error"
PIPELINE_FILE = "pipeline.json"
IDENTITY = ("seed", "taxonomy")  # settings a resumed run must share with the first one


class StateError(RuntimeError):
  """The output directory cannot be used as asked (exists without --resume, another run holds
  it, or its settings differ from this run's)."""


def now() -> str:
  return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def first_open(state: dict, stages: tuple[str, ...]) -> str | None:
  """The first stage of `stages` without a done record (None: all done)."""
  for stage in stages:
    if state["stages"].get(stage, {}).get("status") != DONE:
      return stage
  return None


def outcome(state: dict, stages: tuple[str, ...]) -> str:
  """kept | rejected | error | pending for a run doing `stages`."""
  records = state["stages"]
  if any(r["status"] == REJECTED for r in records.values()):
    return "rejected"
  stage = first_open(state, stages)
  if stage is None:
    return "kept"
  return "error" if records.get(stage, {}).get("status") == ERROR else "pending"


def rejection(state: dict) -> dict | None:
  """The rejecting stage's record (with its stage name), if any."""
  for stage, rec in state["stages"].items():
    if rec["status"] == REJECTED:
      return {"stage": stage, **rec}
  return None


class Store:
  """The state files of one output directory."""

  def __init__(self, out: str | os.PathLike):
    self.out = pathlib.Path(out)
    self.state_dir = self.out / "state"
    self.work_dir = self.out / "work"
    self._lock_fh = None

  def task_dir(self, task_id: str) -> pathlib.Path:
    return self.work_dir / task_id / "task"

  def path(self, task_id: str) -> pathlib.Path:
    return self.state_dir / f"{task_id}.json"

  def load(self, task_id: str) -> dict | None:
    path = self.path(task_id)
    if not path.is_file():
      return None
    try:
      return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:  # cannot happen with atomic writes; say where if it does
      raise StateError(f"{path}: not JSON ({err}); delete it to redo that task") from None

  def save(self, state: dict) -> None:
    json_io.write_json_atomic(self.path(state["id"]), state, indent=1)

  @contextlib.contextmanager
  def locked(self) -> Iterator[None]:
    """Holds <out>/.lock for the run; a second run on the same directory fails at once."""
    self.out.mkdir(parents=True, exist_ok=True)
    with open(self.out / ".lock", "w") as fh:
      try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
      except BlockingIOError:
        raise StateError(f"{self.out}: another pipeline run is using it (.lock)") from None
      yield

  def begin_run(self, identity: dict[str, Any], resume: bool, argv: list[str]) -> int:
    """Records this invocation in pipeline.json -> its run id (1, 2, ...). A directory holding
    state needs `resume`, and then the same identity settings."""
    file = self.out / PIPELINE_FILE
    doc = json.loads(file.read_text()) if file.is_file() else None
    if doc is None and self.state_dir.is_dir() and any(self.state_dir.iterdir()):
      raise StateError(f"{self.out}: has task state but no {PIPELINE_FILE}")
    if doc is not None and not resume:
      raise StateError(f"{self.out}: holds a pipeline run; pass --resume to continue it")
    if doc is None:
      doc = {"identity": identity, "runs": []}
    for key in IDENTITY:
      if doc["identity"].get(key) != identity.get(key):
        raise StateError(
          f"{file}: {key}={doc['identity'].get(key)!r} but this run has {identity.get(key)!r}; "
          "a resumed run must use the same samples"
        )
    run = len(doc["runs"]) + 1
    doc["runs"].append({"run": run, "started_at": now(), "argv": argv})
    json_io.write_json_atomic(file, doc)
    self._sweep_temp()
    return run

  def _sweep_temp(self) -> None:
    """Undoes what a killed run left half-done: a task dir that write_task(overwrite) had moved
    aside (.task.old.PID) goes back when its replacement never arrived; temp files and dirs (a
    state file's .ID.json.tmp-*, write_task's .task.*) go."""
    works = [w for w in self.work_dir.iterdir() if w.is_dir()] if self.work_dir.is_dir() else []
    for work in works:
      aside = sorted(work.glob(".task.old.*"))
      if aside and not (work / "task").exists():
        aside.pop().rename(work / "task")
    states = [self.state_dir] if self.state_dir.is_dir() else []
    for directory in states + works:
      for p in directory.iterdir():
        if ".tmp-" in p.name or p.name.startswith(".task."):
          shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
