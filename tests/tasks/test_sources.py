"""tasks/sources.py: a task directory, a published pipeline set and the procedural parquet load the
same tasks through one loader; bad sources fail naming the file and field; the eval runner runs
from the parquet, and its results.json / trials.jsonl are what difficulty.load_rollouts reads."""

import gzip
import io
import json
import shutil
import tarfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import require_base_rootfs
from tmax_jax.tasks import difficulty, sources
from tmax_jax.tasks import format as fmt
from tmax_jax.tasks.procedural import cli
from tmax_jax.tasks.sources import TaskSource

FAMILIES = ["csv_aggregate", "find_large_files", "jq_inventory"]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
  root = tmp_path_factory.mktemp("sources")
  cli.generate(root / "dir", 3, seed=5, families=FAMILIES, progress=False)
  cli.generate(root / "tasks.parquet", 3, seed=5, families=FAMILIES, progress=False)
  published = root / "published"
  shutil.copytree(root / "dir", published / "tasks")
  names = sorted(p.name for p in (published / "tasks").iterdir())
  (published / sources.SET_FILE).write_text(
    json.dumps({"schema": sources.SET_SCHEMA, "tasks": [{"dir": f"tasks/{n}"} for n in names]})
  )
  return root


def _contents(task: fmt.Task):
  return (task.name, task.instruction, task.tests, task.solution, task.environment)


def test_three_kinds_load_the_same_tasks(written, tmp_path):
  assert sources.source_kind(written / "dir") == "directory"
  assert sources.source_kind(written / "published") == "set"
  assert sources.source_kind(written / "tasks.parquet") == "parquet"
  by_dir = sources.load_tasks(written / "dir")
  by_set = sources.load_tasks(written / "published")
  by_parquet = sources.load_tasks(written / "tasks.parquet", extract_dir=tmp_path / "x")
  assert len(by_dir) == 3 and all(t.path is not None for t in by_parquet)
  assert [_contents(t) for t in by_set] == [_contents(t) for t in by_dir]
  assert [_contents(t) for t in by_parquet] == [_contents(t) for t in by_dir]
  # extracted once: a second load reuses the complete extraction
  marker = (tmp_path / "x" / ".complete").stat().st_mtime_ns
  assert len(sources.load_tasks(written / "tasks.parquet", extract_dir=tmp_path / "x")) == 3
  assert (tmp_path / "x" / ".complete").stat().st_mtime_ns == marker
  assert len(sources.load_tasks(written / "published", max_tasks=2)) == 2


def test_jobs_split_any_source(written):
  train, held = sources.load_split(TaskSource(source=str(written / "tasks.parquet"), num_eval=1))
  assert len(train) == 2 and len(held) == 1
  train2, held2 = sources.load_split(TaskSource(source=str(written / "dir"), num_eval=1))
  assert [t.name for t in train2 + held2] == [t.name for t in train + held]
  proc_train, proc_held = sources.load_split(
    TaskSource(families=("write_word",), num_train=2, num_eval=1)
  )
  assert len(proc_train) == 2 and len(proc_held) == 1


def _parquet(path, rows):
  pq.write_table(pa.table(rows), path)
  return path


def _tarball(files: dict) -> bytes:
  buf = io.BytesIO()
  with tarfile.open(fileobj=buf, mode="w") as tf:
    for name, data in files.items():
      info = tarfile.TarInfo(name)
      info.size = len(data)
      tf.addfile(info, io.BytesIO(data))
  return gzip.compress(buf.getvalue())


def test_bad_sources_name_the_problem(written, tmp_path):
  with pytest.raises(FileNotFoundError, match="expected a task directory, a published set"):
    sources.load_tasks(tmp_path / "nope.parquet")
  bad_cols = _parquet(tmp_path / "cols.parquet", {"name": ["a"]})
  with pytest.raises(ValueError, match=r"columns \['path', 'task_binary'\] missing"):
    sources.load_tasks(bad_cols, extract_dir=tmp_path / "x1")
  not_tar = _parquet(tmp_path / "nt.parquet", {"path": ["a"], "task_binary": [b"garbage"]})
  with pytest.raises(ValueError, match=r"row 0 \('a'\): not a gzipped tar"):
    sources.load_tasks(not_tar, extract_dir=tmp_path / "x2")
  assert not (tmp_path / "x2").exists()  # nothing half-extracted left behind
  escape = _parquet(
    tmp_path / "esc.parquet",
    {"path": ["a"], "task_binary": [_tarball({"../../evil.txt": b"x"})]},
  )
  with pytest.raises(ValueError, match="unsafe tar member"):
    sources.load_tasks(escape, extract_dir=tmp_path / "x3")
  assert not (tmp_path / "evil.txt").exists()
  pub = tmp_path / "pub"
  shutil.copytree(written / "published", pub)
  doc = json.loads((pub / sources.SET_FILE).read_text())
  doc["tasks"].append({"dir": "tasks/missing"})
  (pub / sources.SET_FILE).write_text(json.dumps(doc))
  with pytest.raises(FileNotFoundError, match=r"tasks\[3\].dir 'tasks/missing'"):
    sources.load_tasks(pub)
  doc["schema"] = "other"
  (pub / sources.SET_FILE).write_text(json.dumps(doc))
  with pytest.raises(ValueError, match="schema: expected 'tmax-task-set/1'"):
    sources.load_tasks(pub)
  dup = tmp_path / "dup"
  shutil.copytree(written / "dir", dup / "a")
  shutil.copytree(written / "dir", dup / "b")
  with pytest.raises(ValueError, match="duplicate task names"):
    sources.load_tasks(dup)


def test_eval_runs_from_the_parquet_and_its_trials_are_rollouts(written, tmp_path):
  require_base_rootfs()
  from tmax_jax.loop import evaluate as E
  from tmax_jax.tasks.runner import RunnerConfig

  cfg = E.EvalConfig(
    tasks_dir=str(written / "tasks.parquet"),
    output_dir=str(tmp_path / "eval"),
    policy="oracle",
    runs_per_task=2,
    plot=False,
    runner=RunnerConfig(memory_mb=2048),
  )
  results = E.evaluate(cfg)
  assert results["aggregate"]["num_tasks"] == 3 and results["aggregate"]["pass@1"]["mean"] == 1.0
  for file in ("results.json", "trials.jsonl"):
    rollouts = difficulty.load_rollouts(tmp_path / "eval" / file)
    table = difficulty.per_task_pass_at_k(rollouts, ks=(1, 2))
    assert sorted(table) == sorted(r["task"] for r in results["trials"][::2])
    assert all(row["n"] == 2 and row["c"] == 2 and row["pass@2"] == 1.0 for row in table.values())
