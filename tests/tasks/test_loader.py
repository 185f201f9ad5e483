"""The one task-directory loader: TB2 as is, TB1 converted (in memory or written), the recursion
rules, and the errors that name the directory."""

import textwrap

import pytest

from tmax_jax.tasks import loader, sources
from tmax_jax.tasks.format import write_task
from tmax_jax.tasks.procedural import registry
from tmax_jax.tasks.sources import TaskSource


def _tb1(d):
  (d / "tests").mkdir(parents=True)
  (d / "task.yaml").write_text(
    textwrap.dedent("""\
      instruction: Write hi to /app/hi.txt.
      category: file-operations
      """)
  )
  (d / "Dockerfile").write_text("FROM ubuntu:24.04\nWORKDIR /app\n")
  (d / "run-tests.sh").write_text("#!/bin/bash\nuv run pytest $TEST_DIR/test_outputs.py -rA\n")
  (d / "tests" / "test_outputs.py").write_text("def test_hi():\n  assert True\n")
  (d / "solution.sh").write_text("#!/bin/bash\necho hi > /app/hi.txt\n")
  return d


@pytest.fixture()
def tree(tmp_path):
  root = tmp_path / "tasks"
  registry.write("csv_aggregate", 0, 0, root / "b_csv")
  registry.write("jq_inventory", 0, 0, root / "group" / "a_jq")
  _tb1(root / "tb1-hi")
  # not found: below a task (its own files), and inside a hidden directory
  write_task(registry.build_task("fix_permissions", 0, 0), root / "b_csv" / "tests" / "inner")
  registry.write("find_large_files", 0, 0, root / ".partial" / "x")
  return root


def test_recursion_rules_and_order(tree, tmp_path):
  dirs = loader.find_task_dirs(tree)
  assert [d.relative_to(tree).as_posix() for d in dirs] == ["b_csv", "group/a_jq", "tb1-hi"]
  assert [loader.task_format(d) for d in dirs] == ["tb2", "tb2", "tb1"]
  assert loader.find_task_dirs(tree / "tb1-hi") == [tree / "tb1-hi"]  # the root may be a task
  tasks = loader.load_tasks(tree)
  assert [t.name for t in tasks][:2] == ["csv_aggregate-d0-s0", "jq_inventory-d0-s0"]
  tb1 = tasks[2]
  assert tb1.path is None and "tb1_reward.py" in tb1.tests  # converted, kept in memory
  assert tb1.config.metadata["category"] == "file-operations"
  written = loader.load_tasks(tree, converted_dir=tmp_path / "conv", max_tasks=3)[2]
  assert written.path == tmp_path / "conv" / "tb1-hi" and (written.path / "task.toml").is_file()
  assert [t.name for t in loader.load_tasks(tree, max_tasks=1)] == ["csv_aggregate-d0-s0"]


def test_errors_name_the_directory(tmp_path):
  with pytest.raises(FileNotFoundError, match="not a directory"):
    loader.find_task_dirs(tmp_path / "missing")
  (tmp_path / "empty" / "sub").mkdir(parents=True)
  with pytest.raises(FileNotFoundError, match=r"empty: no task directories"):
    loader.load_tasks(tmp_path / "empty")
  with pytest.raises(FileNotFoundError, match="not a task directory"):
    loader.load_task_dir(tmp_path / "empty")
  registry.write("csv_aggregate", 0, 0, tmp_path / "dup" / "one")
  registry.write("csv_aggregate", 0, 0, tmp_path / "dup" / "two")
  with pytest.raises(ValueError, match=r"duplicate task names \['csv_aggregate-d0-s0'\]"):
    loader.load_tasks(tmp_path / "dup")


def test_rl_and_sft_task_source_uses_the_loader(tree):
  train, held_out = sources.load_split(TaskSource(source=str(tree), num_eval=1))
  assert [t.name for t in train] == ["csv_aggregate-d0-s0", "jq_inventory-d0-s0"]
  assert len(held_out) == 1 and held_out[0].path is None  # the TB1 task, converted
