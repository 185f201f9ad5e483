"""tasks/tmax15k.py: the TMAX-15K release layout (as the public repository publishes it: the
Hugging Face dataset's data/train-00000-of-00001.parquet with rl_data/upload_to_hf.py's columns and
tasks.zip of the pipeline's task folders) loads as TB2 tasks through tasks/sources.py, from each of
its shapes, on a two-task fixture of that shape built here; the converted tasks are valid TB2
directories whose Dockerfile the sandbox translation takes; mistakes name the row and the file."""

import json
import os
import stat
import zipfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tmax_jax.tasks import environment, loader, sources, tmax15k
from tmax_jax.tasks import format as fmt
from tmax_jax.tasks.sources import TaskSource

HOST = "/gpfs/scrubbed/tmax/rl_data/output/tasks_v2"  # where the pipeline ran: absent here
PNG = b"\x89PNG\r\n\x1a\nnot really an image"
TEST_FINAL = "def test_sum():\n  assert open('/home/user/sum.txt').read().strip() == '3'\n"

LEGACY = {
  "name": "task_000001_aaaa1111",
  "domain": "data_processing",
  "skill_type": "Data Processing",
  "primitive_skills": ["csv parsing", "awk"],
  "task_complexity": "short",
  "command_complexity": "bash-only",
  "scenario": "A data engineer checks a CSV export.",
  "description": "Sum the second column of /home/user/data/input.csv into /home/user/sum.txt.",
  "truth": "3",
  "language": "Bash",
}
LEGACY_DEF = """Bootstrap: docker
From: ubuntu:22.04

%post
    apt-get update && apt-get install -y python3 python3-pytest
    mkdir -p /home/user/data
    printf 'a,1\\nb,2\\n' > /home/user/data/input.csv

%environment
    export LC_ALL=C.UTF-8
    APP_HOME=/home/user

%runscript
    exec bash
"""
FIXTURED = {
  "name": "task_000002_bbbb2222",
  "domain": "security",
  "skill_type": "Forensics",
  "primitive_skills": ["ocr"],
  "task_complexity": "intricate",
  "command_complexity": "bash+code",
  "scenario": "An incident responder reads a scanned note.",
  "description": "Read the code in /home/user/scan.png and run /opt/tools/run.sh with it.",
  "truth": "1234",
  "base_image": "intricate",
}
FIXTURED_DEF = f"""Bootstrap: localimage
From: /gpfs/scrubbed/tmax/rl_data/containers/base_intricate.sif

%files
    {HOST}/task_000002_bbbb2222/fixtures/scan.png /home/user/scan.png
    {HOST}/task_000002_bbbb2222/fixtures/tools /opt/tools

%post
    chmod 644 /home/user/scan.png
"""
FOLDERS = ((LEGACY, LEGACY_DEF), (FIXTURED, FIXTURED_DEF))


def _folder(root, meta, definition):
  d = root / meta["name"]
  (d / "solutions").mkdir(parents=True)
  (d / "task.json").write_text(json.dumps(meta))
  (d / "container.def").write_text(definition)
  (d / "test_final_state.py").write_text(TEST_FINAL)
  (d / "test_initial_state.py").write_text("def test_start():\n  pass\n")
  if "base_image" in meta:
    (d / "fixtures" / "tools").mkdir(parents=True)
    (d / "fixtures" / "scan.png").write_bytes(PNG)
    (d / "fixtures" / "tools" / "run.sh").write_text("#!/bin/sh\necho ok\n")
    (d / "fixtures" / "tools" / "run.sh").chmod(0o755)
    (d / "fixtures" / "tools" / "README").write_text("tools\n")
  return d


def _row(d):
  """The parquet row rl_data/upload_to_hf.py's build_parquet writes for a task folder."""
  meta = json.loads((d / "task.json").read_text())
  return {
    "task_id": meta["name"],
    **{k: meta.get(k, "") for k in ("domain", "skill_type")},
    "primitive_skills": json.dumps(meta["primitive_skills"]),
    **{k: meta.get(k, "") for k in ("task_complexity", "command_complexity", "scenario")},
    "description": meta["description"],
    "truth": meta["truth"],
    "test_initial_state": (d / "test_initial_state.py").read_text(),
    "test_final_state": (d / "test_final_state.py").read_text(),
    "container_def": (d / "container.def").read_text(),
  }


def _zip(folders, path, prefix="tasks/"):
  with zipfile.ZipFile(path, "w") as zf:
    for d in folders:
      for p in sorted(d.rglob("*")):
        if p.is_file():
          info = zipfile.ZipInfo(prefix + p.relative_to(d.parent).as_posix())
          info.external_attr = (stat.S_IFREG | stat.S_IMODE(p.stat().st_mode)) << 16
          zf.writestr(info, p.read_bytes())


@pytest.fixture()
def release(tmp_path, monkeypatch):
  """(the dataset directory, the unzipped task folders); the cache under tmp_path."""
  monkeypatch.setenv("TMAX_JAX_CACHE", str(tmp_path / "cache"))
  folders = [_folder(tmp_path / "corpus", m, d) for m, d in FOLDERS]
  root = tmp_path / "TMax-15K"
  (root / "data").mkdir(parents=True)
  table = pa.Table.from_pylist([_row(d) for d in folders])
  assert table.column_names == list(tmax15k.RELEASE_COLUMNS)
  pq.write_table(table, root / "data" / "train-00000-of-00001.parquet")
  _zip(folders, root / "tasks.zip")
  (root / "README.md").write_text("TMax 15k\n")
  return root, tmp_path / "corpus"


def _contents(task):
  return (task.name, task.instruction, dict(task.config.metadata), task.environment, task.tests)


def test_release_loads_as_tb2_tasks(release):
  root, _ = release
  assert sources.source_kind(root) == "tmax15k"
  legacy, fixtured = sources.load_tasks(root)
  assert [legacy.name, fixtured.name] == ["task_000001_aaaa1111", "task_000002_bbbb2222"]
  assert legacy.instruction == LEGACY["description"]
  assert legacy.tests["test_final_state.py"].decode() == TEST_FINAL
  assert b"pytest test_final_state.py" in legacy.tests["test.sh"]
  assert dict(legacy.config.metadata) == {
    "source": "tmax15k",
    "category": "data_processing",
    "domain": "data_processing",
    "skill_type": "Data Processing",
    "task_complexity": "short",
    "command_complexity": "bash-only",
    "primitive_skills": ["csv parsing", "awk"],
  }
  assert (legacy.config.agent.timeout_sec, legacy.config.verifier.timeout_sec) == (600.0, 120.0)
  assert legacy.environment["Dockerfile"].decode().splitlines() == [
    "FROM ubuntu:22.04",
    "",
    "ENV DEBIAN_FRONTEND=noninteractive",
    "ENV LC_ALL=C.UTF-8",
    "ENV APP_HOME=/home/user",
    "COPY post_install.sh /tmp/post_install.sh",
    "RUN bash /tmp/post_install.sh",
  ]
  assert b"printf 'a,1\\nb,2\\n'" in legacy.environment["post_install.sh"]
  # the fixtures of %files come from tasks.zip (host paths of the pipeline mapped to the folder)
  docker = fixtured.environment["Dockerfile"].decode()
  assert docker.startswith("FROM ubuntu:22.04\n")  # a local base SIF: the default image
  assert "COPY _fixtures/home/user/scan.png /home/user/scan.png" in docker
  assert "COPY _fixtures/opt/tools /opt/tools" in docker
  assert fixtured.environment["_fixtures/home/user/scan.png"] == PNG
  assert "environment/_fixtures/opt/tools/run.sh" in fixtured.executables
  assert fixtured.config.metadata["apptainer_from"].endswith("base_intricate.sif")
  assert fixtured.config.metadata["category"] == "security"


def test_every_shape_of_the_release_gives_the_same_tasks(release, tmp_path):
  root, corpus = release
  expected = [_contents(t) for t in sources.load_tasks(root)]
  parquet = root / "data" / "train-00000-of-00001.parquet"
  assert sources.source_kind(parquet) == "tmax15k"
  assert [_contents(t) for t in sources.load_tasks(parquet)] == expected
  assert sources.source_kind(corpus) == "tmax15k"  # the pipeline's folders (task.json)
  by_folder = [_contents(t) for t in sources.load_tasks(corpus)]
  language = {"language": "Bash"}  # task.json has it; the parquet has no language column
  assert by_folder == [
    (n, i, {**m, **language} if n == LEGACY["name"] else m, e, t) for n, i, m, e, t in expected
  ]
  unzipped = tmp_path / "unzipped"  # the dataset directory with tasks.zip already unzipped
  (unzipped / "data").mkdir(parents=True)
  os.link(parquet, unzipped / "data" / parquet.name)
  with zipfile.ZipFile(root / "tasks.zip") as zf:
    zf.extractall(unzipped)
  (unzipped / "tasks" / FIXTURED["name"] / "fixtures" / "tools" / "run.sh").chmod(0o755)
  assert [_contents(t) for t in sources.load_tasks(unzipped)] == expected
  assert len(sources.load_tasks(root, max_tasks=1)) == 1
  train, held = sources.load_split(TaskSource(source=str(root), num_eval=1))
  assert [t.name for t in train + held] == [e[0] for e in expected]


def test_converted_task_is_a_tb2_directory_the_sandbox_translates(release, tmp_path):
  root, _ = release
  for task in sources.load_tasks(root):
    written = fmt.write_task(task, tmp_path / "tb2" / task.name)
    again = loader.load_task_dir(written.path)
    assert _contents(again) == _contents(task)
    spec = environment.environment_spec(again, "tmax-base:bookworm")
    assert any("bash /tmp/post_install.sh" in c for c in spec.setup_commands)
    targets = {dst for _, dst in spec.files}
    assert "/tmp/post_install.sh" in targets
    if task.name == FIXTURED["name"]:
      assert {"/home/user/scan.png", "/opt/tools/run.sh", "/opt/tools/README"} <= targets
  assert loader.task_format(tmp_path / "tb2" / LEGACY["name"]) == "tb2"


def test_tasks_zip_is_extracted_once_and_only_when_a_fixture_needs_it(release, tmp_path):
  root, _ = release
  cache = tmp_path / "cache" / "task_sources"
  sources.load_tasks(root, max_tasks=1)  # the legacy task ships no %files
  assert not cache.exists()
  sources.load_tasks(root)
  (extracted,) = cache.iterdir()
  marker = (extracted / ".complete").stat().st_mtime_ns
  sources.load_tasks(root)
  assert (extracted / ".complete").stat().st_mtime_ns == marker


def test_mistakes_name_the_row_and_the_file(release, tmp_path):
  root, corpus = release
  (root / "tasks.zip").unlink()  # the parquet alone: the fixture has no folder
  with pytest.raises(fmt.TaskFormatError, match=r"row 1 \('task_000002_bbbb2222'\).*scan\.png"):
    sources.load_tasks(root)
  rows = [_row(corpus / m["name"]) for m, _ in FOLDERS]
  rows[0]["description"] = " "
  bad = tmp_path / "bad" / "data" / "train.parquet"
  bad.parent.mkdir(parents=True)
  pq.write_table(pa.Table.from_pylist(rows), bad)
  with pytest.raises(fmt.TaskFormatError, match=r"row 0 \('task_000001_aaaa1111'\): description"):
    sources.load_tasks(bad.parent.parent)
  evil = tmp_path / "evil"
  evil.mkdir()
  with zipfile.ZipFile(evil / "tasks.zip", "w") as zf:
    zf.writestr("../escape/task.json", "{}")
  with pytest.raises(ValueError, match=r"escapes the extraction directory"):
    sources.load_tasks(evil)
  assert not (tmp_path / "escape").exists()


def test_definition_parsing():
  header, sections = tmax15k.parse_definition(FIXTURED_DEF)
  assert header == {"bootstrap": "localimage", "from": header["from"]}
  assert tmax15k.definition_image(header) == tmax15k.DEFAULT_IMAGE
  assert tmax15k.definition_image({"bootstrap": "docker", "from": "docker://python:3.11"}) == (
    "python:3.11"
  )
  assert tmax15k.definition_image({}) == tmax15k.DEFAULT_IMAGE
  assert [d for _, d in tmax15k.files_pairs(sections["files"])] == [
    "/home/user/scan.png",
    "/opt/tools",
  ]
  assert tmax15k.environment_pairs("  export A=1\nB='x y'\n# c\n") == [("A", "1"), ("B", "'x y'")]
