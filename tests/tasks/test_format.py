"""TB2/Harbor task directories: round trip, every task.toml field, and precise errors."""

import os
import pathlib

import pytest

from tmax_jax.tasks import environment as envlib
from tmax_jax.tasks.format import (
  Task,
  TaskConfig,
  TaskFormatError,
  load_task,
  parse_size_mb,
  write_task,
)

FULL_TOML = """
schema_version = "1.1"
[task]
name = "fix-server"
description = "Fix it"
authors = ["Ada <ada@example.com>", {name = "Bob", email = "bob@example.com"}]
keywords = ["web", "http"]
[metadata]
difficulty = "hard"
category = "system_administration"
tags = ["nginx"]
expert_time_estimate_min = 30
[verifier]
timeout_sec = 120
env = {MODE = "strict", LEVEL = 3}
user = "root"
[agent]
timeout_sec = 900.5
user = "agent"
[environment]
build_timeout_sec = 300
docker_image = "ghcr.io/example/img:1"
cpus = 2
memory_mb = 4096
storage_mb = 20480
gpus = 0
allow_internet = false
env = {PATH_EXTRA = "/opt/bin"}
workdir = "/app"
healthcheck = {command = "curl -f localhost", interval_sec = 5}
future_field = "kept"
[solution]
env = {HINT = "1"}
"""


def _task_dir(
  root: pathlib.Path,
  toml: str = FULL_TOML,
  test_sh: str | None = "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
):
  d = root / "t"
  (d / "tests").mkdir(parents=True)
  (d / "solution").mkdir()
  (d / "environment" / "seeds").mkdir(parents=True)
  (d / "instruction.md").write_text("Do the thing.\n")
  (d / "task.toml").write_text(toml)
  if test_sh is not None:
    (d / "tests" / "test.sh").write_text(test_sh)
  (d / "solution" / "solve.sh").write_text("echo ok\n")
  (d / "environment" / "seeds" / "data.bin").write_bytes(bytes(range(256)))
  return d


def test_every_field_parsed(tmp_path):
  cfg = load_task(_task_dir(tmp_path)).config
  assert cfg.schema_version == "1.1"
  assert cfg.task.name == "fix-server" and cfg.task.keywords == ("web", "http")
  assert cfg.task.authors == ("Ada <ada@example.com>", "Bob bob@example.com")
  assert cfg.metadata["difficulty"] == "hard" and cfg.metadata["expert_time_estimate_min"] == 30
  assert cfg.verifier.timeout_sec == 120.0 and dict(cfg.verifier.env) == {
    "MODE": "strict",
    "LEVEL": "3",
  }
  assert (
    cfg.verifier.user == "root" and cfg.agent.user == "agent" and cfg.agent.timeout_sec == 900.5
  )
  e = cfg.environment
  assert (e.build_timeout_sec, e.docker_image, e.cpus, e.memory_mb, e.storage_mb, e.gpus) == (
    300.0,
    "ghcr.io/example/img:1",
    2.0,
    4096,
    20480,
    0,
  )
  assert (
    e.allow_internet is False and e.workdir == "/app" and dict(e.env) == {"PATH_EXTRA": "/opt/bin"}
  )
  assert e.healthcheck["command"] == "curl -f localhost"
  assert cfg.extra == {"environment.future_field": "kept"}
  assert dict(cfg.solution.env) == {"HINT": "1"}


def test_defaults_and_old_memory_forms(tmp_path):
  cfg = load_task(
    _task_dir(tmp_path, toml='version = "1.0"\n[environment]\nmemory = "2G"\nstorage = "10G"\n')
  ).config
  assert cfg.environment.memory_mb == 2048 and cfg.environment.storage_mb == 10240
  assert cfg.verifier.timeout_sec == 600.0 and cfg.agent.timeout_sec == 600.0
  assert parse_size_mb("512M", "f", "x") == 512 and parse_size_mb("1.5G", "f", "x") == 1536
  assert parse_size_mb("4GiB", "f", "x") == 4096 and parse_size_mb(300, "f", "x") == 300
  with pytest.raises(TaskFormatError, match="memory_mb.*'2 gigs'"):
    parse_size_mb("2 gigs", "task.toml", "environment.memory_mb")


def test_round_trip_is_exact(tmp_path):
  task = load_task(_task_dir(tmp_path))
  out = write_task(task, tmp_path / "copy")
  again = load_task(out.path)
  assert again.config == task.config
  assert again.instruction == task.instruction
  assert (
    again.environment == task.environment
    and again.tests == task.tests
    and again.solution == task.solution
  )
  assert os.access(out.path / "tests" / "test.sh", os.X_OK) and os.access(
    out.path / "solution" / "solve.sh", os.X_OK
  )
  assert not os.access(out.path / "environment" / "seeds" / "data.bin", os.X_OK)


def test_write_is_atomic_and_refuses_overwrite(tmp_path):
  task = Task("x", TaskConfig(), tests={"test.sh": b"exit 0\n"})
  write_task(task, tmp_path / "a")
  with pytest.raises(FileExistsError):
    write_task(task, tmp_path / "a")
  bad = Task("x", TaskConfig(), tests={})  # invalid: nothing must appear on disk
  with pytest.raises(TaskFormatError):
    write_task(bad, tmp_path / "b")
  assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]
  write_task(
    Task("y", TaskConfig(), tests={"test.sh": b"exit 1\n"}), tmp_path / "a", overwrite=True
  )
  assert (tmp_path / "a" / "instruction.md").read_text() == "y"
  assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]


def test_missing_test_sh(tmp_path):
  d = _task_dir(tmp_path, test_sh=None)
  with pytest.raises(TaskFormatError) as e:
    load_task(d)
  assert e.value.file == str(d / "tests" / "test.sh") and e.value.field == "tests/test.sh"
  assert "missing" in str(e.value)


def test_bad_toml_names_file_and_line(tmp_path):
  d = _task_dir(tmp_path, toml="[verifier]\ntimeout_sec = = 3\n")
  with pytest.raises(TaskFormatError) as e:
    load_task(d)
  assert e.value.file == str(d / "task.toml") and "line 2" in str(e.value)


@pytest.mark.parametrize(
  "toml,field",
  [
    ('[verifier]\ntimeout_sec = "fast"\n', "verifier.timeout_sec"),
    ("[agent]\ntimeout_sec = -1\n", "agent.timeout_sec"),
    ('[environment]\nallow_internet = "yes"\n', "environment.allow_internet"),
    ('[environment]\nmemory = "lots"\n', "environment.memory_mb"),
    ('[environment]\nworkdir = "app"\n', "environment.workdir"),
    ("[environment]\nenv = {A = [1]}\n", "environment.env.A"),
    ("[task]\nkeywords = [1]\n", "task.keywords[0]"),
    ('schema_version = "2.0"\n', "schema_version"),
    ("verifier = 3\n", "verifier"),
    ("[environment]\nhealthcheck = {interval = 1}\n", "environment.healthcheck"),
  ],
)
def test_bad_fields_are_named(tmp_path, toml, field):
  d = _task_dir(tmp_path, toml=toml)
  with pytest.raises(TaskFormatError) as e:
    load_task(d)
  assert e.value.field == field and e.value.file == str(d / "task.toml"), str(e.value)


def test_missing_files(tmp_path):
  d = _task_dir(tmp_path)
  (d / "task.toml").unlink()
  with pytest.raises(TaskFormatError, match="task.toml: file is missing"):
    load_task(d)
  (d / "instruction.md").unlink()
  with pytest.raises(TaskFormatError, match="instruction.md: file is missing"):
    load_task(d)
  with pytest.raises(TaskFormatError, match="not a directory"):
    load_task(tmp_path / "nope")


def test_solution_without_solve_sh(tmp_path):
  d = _task_dir(tmp_path)
  (d / "solution" / "solve.sh").rename(d / "solution" / "solve.py")
  with pytest.raises(TaskFormatError, match="solution/solve.sh"):
    load_task(d)


def test_environment_spec_from_dockerfile(tmp_path):
  d = _task_dir(tmp_path, toml='[environment]\nmemory_mb = 1024\nenv = {A = "1"}\n')
  env = d / "environment"
  (env / "app").mkdir()
  (env / "app" / "main.py").write_text("print(1)\n")
  (env / "conf.ini").write_text("[x]\n")
  (env / "Dockerfile").write_text(
    'FROM python:3.11\n# comment\nWORKDIR /srv\nENV B=2 C="x y"\nENV D 4\n'
    'COPY app/ /srv/app/\nCOPY conf.ini .\nRUN echo one && \\\n    echo two\nCMD ["python3"]\n'
  )
  spec = envlib.environment_spec(load_task(d), "/rootfs", memory_mb=None)
  assert spec.image == "/rootfs" and spec.workdir == "/srv" and spec.limits.memory_mb == 1024
  assert dict(spec.env) == {"A": "1", "B": "2", "C": "x y", "D": "4"}
  assert [dst for _, dst in spec.files] == [
    "/srv/data.bin",
    "/srv/app/main.py",
    "/srv/conf.ini",
  ]  # seeds first
  assert spec.setup_commands[0] == "mkdir -p /srv"
  assert (
    spec.setup_commands[1].endswith("echo one &&      echo two")
    and "cd /srv" in spec.setup_commands[1]
  )
  (env / "Dockerfile").write_text("FROM x\nCOPY missing.txt /a\n")
  with pytest.raises(TaskFormatError, match=r"line 2 \(COPY\).*missing.txt"):
    envlib.environment_spec(load_task(d), "/rootfs")
  (env / "Dockerfile").write_text("FROM x\nADD https://example.com/a.tgz /a\n")
  with pytest.raises(TaskFormatError, match="offline"):
    envlib.environment_spec(load_task(d), "/rootfs")


def test_environment_spec_seeds_without_dockerfile(tmp_path):
  d = _task_dir(tmp_path, toml="")
  spec = envlib.environment_spec(load_task(d), "/rootfs", memory_mb=4096)
  assert spec.workdir == "/workspace" and spec.limits.memory_mb == 4096
  assert [dst for _, dst in spec.files] == ["/workspace/data.bin"]
  assert spec.setup_commands == ()


def test_round_trip_nested_metadata_unknown_sections_and_dates(tmp_path):
  toml = (
    'version = "1.0"\ncreated = 2025-01-02T03:04:05Z\n[metadata]\ndifficulty = "medium"\n'
    'limits = {a = 1, b = [1.5, "x"]}\nsteps = [{name = "one", n = 1}]\nday = 2025-05-06\n'
    '[custom]\nflag = true\nquote = "a \\"b\\"\\n"\n'
  )
  task = load_task(_task_dir(tmp_path, toml=toml))
  assert task.config.extra["created"].year == 2025 and task.config.extra["custom"] == {
    "flag": True,
    "quote": 'a "b"\n',
  }
  again = load_task(write_task(task, tmp_path / "copy").path)
  assert again.config == task.config
