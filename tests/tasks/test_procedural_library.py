"""Procedural task library without sandboxes: coverage, determinism, task validity and the CLI."""

import collections
import gzip
import io
import json
import py_compile
import tarfile

import pyarrow.parquet as pq
import pytest

from tmax_jax.tasks import format as fmt
from tmax_jax.tasks import vocabulary
from tmax_jax.tasks.procedural import cli, core, registry


def test_at_least_40_families_cover_every_axis_value():
  fams = list(registry.FAMILIES.values())
  assert len(fams) >= 40
  assert {f.domain for f in fams} == set(vocabulary.DOMAINS)
  assert {f.verifier for f in fams} == set(vocabulary.VERIFIER_KINDS)
  assert {f.fixture for f in fams} == set(vocabulary.FIXTURE_NAMES)


def test_task_lengths_span_short_to_intricate():
  seen = {
    registry.build_spec(name, 0, level).complexity
    for name in registry.FAMILIES
    for level in core.LEVELS
  }
  assert {"short", "moderate", "complex", "intricate"} <= seen


@pytest.mark.parametrize("name", sorted(registry.FAMILIES))
def test_family_builds_valid_deterministic_tasks_at_every_level(name, tmp_path):
  for level in core.LEVELS:
    a = registry.build_task(name, 7, level)
    b = registry.build_task(name, 7, level)
    assert cli.task_tarball(a, "t") == cli.task_tarball(b, "t"), (
      f"{name} level {level} is not deterministic"
    )
    written = fmt.write_task(a, tmp_path / f"{name}-{level}")
    loaded = fmt.load_task(written.path)
    assert loaded.tests["test.sh"] == a.tests["test.sh"]
    assert loaded.config.metadata["family"] == name and loaded.config.metadata["level"] == level
    py_compile.compile(str(written.path / "tests" / "check.py"), doraise=True)
    spec = registry.build_spec(name, 7, level)
    assert spec.wrong.strip() and spec.wrong.strip() != spec.solve.strip()
    assert "/logs/verifier/reward.txt" in a.tests["test.sh"].decode()
  # the seed matters: another seed gives another task
  assert cli.task_tarball(registry.build_task(name, 7, 1), "t") != cli.task_tarball(
    registry.build_task(name, 8, 1), "t"
  )


def test_difficulty_levels_change_the_task_content():
  for name in registry.FAMILIES:
    specs = [registry.build_spec(name, 3, level) for level in core.LEVELS]
    contents = {
      json.dumps([sorted(s.files.items(), key=str), s.data, s.instruction, s.setup], default=repr)
      for s in specs
    }
    assert len(contents) == 3, f"{name}: the difficulty knob changes nothing"


def test_unknown_family_and_bad_level_are_clear_errors():
  with pytest.raises(KeyError, match="unknown procedural family 'nope'"):
    registry.build_task("nope", 0, 0)
  with pytest.raises(ValueError, match="difficulty must be one of"):
    registry.build_task("csv_aggregate", 0, 5)
  with pytest.raises(ValueError, match="solution must be one of"):
    registry.build_task("csv_aggregate", 0, 0, solution="maybe")


def test_plan_is_round_robin_over_families_and_levels():
  fams = list(registry.FAMILIES)
  plans = cli.plan(3 * len(fams), 5)
  assert collections.Counter(p.family for p in plans) == {f: 3 for f in fams}
  assert collections.Counter((p.family, p.level) for p in plans) == {
    (f, lvl): 1 for f in fams for lvl in core.LEVELS
  }
  assert len({p.seed for p in plans}) == len(plans)


def _tar_members(blob: bytes) -> dict[str, bytes]:
  with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob))) as tf:
    return {m.name: tf.extractfile(m).read() for m in tf.getmembers() if m.isfile()}


def test_cli_parquet_is_deterministic_and_holds_loadable_tasks(tmp_path):
  fams = ["csv_aggregate", "kv_service", "ocr_credentials"]
  a = cli.main(
    ["--n", "7", "--seed", "3", "--out", str(tmp_path / "a.parquet"), "--families", ",".join(fams)]
  )
  b = cli.main(
    ["--n", "7", "--seed", "3", "--out", str(tmp_path / "b.parquet"), "--families", ",".join(fams)]
  )
  assert a == b == 0
  ta, tb = pq.read_table(tmp_path / "a.parquet"), pq.read_table(tmp_path / "b.parquet")
  assert ta.column_names == ["path", "task_binary"] and ta.num_rows == 7
  assert ta.to_pydict() == tb.to_pydict()
  man = [
    json.loads(line) for line in (tmp_path / "a.parquet.manifest.jsonl").read_text().splitlines()
  ]
  assert [m["family"] for m in man] == [fams[i % 3] for i in range(7)]
  row = ta.to_pylist()[1]
  members = _tar_members(row["task_binary"])
  root = row["path"]
  assert {
    f"{root}/instruction.md",
    f"{root}/task.toml",
    f"{root}/tests/test.sh",
    f"{root}/solution/solve.sh",
    f"{root}/environment/Dockerfile",
  } <= set(members)
  with tarfile.open(fileobj=io.BytesIO(gzip.decompress(row["task_binary"]))) as tar:
    tar.extractall(tmp_path / "x", filter="data")
  task = fmt.load_task(tmp_path / "x" / root)
  assert task.config.metadata["family"] == "kv_service"
  assert (tmp_path / "x" / root / "tests" / "test.sh").stat().st_mode & 0o111


def test_cli_directory_output_and_refuses_to_overwrite(tmp_path):
  out = tmp_path / "tasks"
  assert (
    cli.main(
      ["--n", "4", "--seed", "1", "--out", str(out), "--families", "dedupe_files,sql_answer"]
    )
    == 0
  )
  names = sorted(p.name for p in out.iterdir())
  assert len(names) == 4 and names[0].startswith("000000-dedupe_files-d0-s1000000")
  for n in names:
    fmt.load_task(out / n)
  with pytest.raises(FileExistsError):
    cli.main(["--n", "1", "--seed", "1", "--out", str(out), "--families", "dedupe_files"])
  assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "temp dirs left behind"


def test_cli_replaces_an_existing_output_only_with_overwrite(tmp_path):
  out, parquet = tmp_path / "tasks", tmp_path / "t.parquet"
  for target in (out, parquet):
    args = ["--n", "2", "--seed", "1", "--out", str(target), "--families", "dedupe_files"]
    assert cli.main(args) == 0
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(FileExistsError, match="--overwrite"):
      cli.main(["--n", "3", *args[2:]])  # refused before any task is generated
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert cli.main(["--n", "3", *args[2:], "--overwrite"]) == 0
  assert len(list(out.iterdir())) == 3 and pq.read_table(parquet).num_rows == 3
  assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "temp dirs left behind"
