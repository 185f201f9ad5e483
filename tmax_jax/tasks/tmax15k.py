"""The TMAX-15K release (the recipe's RL task set) as TB2 tasks.

The layout, as the public repository (hamishivi/tmax, rl_data/) describes and publishes it:
- the Hugging Face dataset (`allenai/TMax-15K`): `data/train-00000-of-00001.parquet`, one row per
  task with the columns rl_data/upload_to_hf.py writes (RELEASE_COLUMNS): task_id, domain,
  skill_type, primitive_skills (a JSON list as text), task_complexity, command_complexity,
  scenario, description (what the agent is told), truth, test_initial_state, test_final_state (the
  pytest verifier) and container_def (the Apptainer definition of the environment); next to it
  `tasks.zip`, the task folders;
- a task folder (`task_<n>_<hash>/`, the pipeline's output): task.json (the same fields),
  test_initial_state.py, test_final_state.py, container.def, fixtures/ (the files the definition's
  %files section ships: images, audio, binaries), solutions/ (not read here).
Any of these is a source: the dataset directory (its parquet rows, in order; fixtures from its
task folders: `tasks.zip`, extracted once into the cache, or the folders unzipped under it), the
parquet file itself (fixtures from task folders next to its data/ directory), or a directory of
task folders (their task.json, in name order).

Each task becomes a TB2 task the way the public Harbor conversion (rl_data/scripts/analyze/
convert_to_harbor.py) builds it: instruction.md = description; environment/Dockerfile = FROM the
definition's image, its %environment as ENV, its %files fixtures COPYed from
environment/_fixtures/, its %post run as post_install.sh; tests/test.sh runs pytest on
test_final_state.py and writes the reward; [agent] 600 s, [verifier] 120 s; metadata: the axes
(category = domain, source = "tmax15k"). A definition built from a local image (`Bootstrap:
localimage`, the pipeline's per-domain base SIFs) gets DEFAULT_IMAGE, its path kept in metadata
`apptainer_from`: the heavy stack of such a base (base_intricate) is not installed here. A task
whose %files names a fixture that no task folder holds is an error naming the task and the file.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import pathlib
import re
import shutil
import stat
import tempfile
import zipfile
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from tmax_jax.sandbox.images import base_rootfs
from tmax_jax.tasks import format as fmt
from tmax_jax.tasks import vocabulary

RELEASE_COLUMNS = (
  "task_id",
  "domain",
  "skill_type",
  "primitive_skills",
  "task_complexity",
  "command_complexity",
  "scenario",
  "description",
  "truth",
  "test_initial_state",
  "test_final_state",
  "container_def",
)
REQUIRED = ("task_id", "description", "test_final_state", "container_def")
ZIP_FILE = "tasks.zip"
TASK_JSON, DEF_FILE = "task.json", "container.def"
DEFAULT_IMAGE = "ubuntu:22.04"  # the pipeline's legacy base (a definition without a usable From:)
AGENT_TIMEOUT_S, VERIFIER_TIMEOUT_S = 600.0, 120.0  # the public Harbor conversion's
FIXTURES = "_fixtures"  # where %files sources go inside environment/
AXES = ("domain", "skill_type", "task_complexity", "command_complexity", "language")
TEST_SH = """#!/bin/bash
# TMAX-15K verifier: the task's pytest file; reward 1 when every test passes.
mkdir -p /logs/verifier
cd /tests
python3 -m pytest test_final_state.py -rA 2>&1 | tee /logs/verifier/test-stdout.txt
if [ "${PIPESTATUS[0]}" -eq 0 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
exit 0
"""


# --- the Apptainer definition ---------------------------------------------------------------


def parse_definition(text: str) -> tuple[dict[str, str], dict[str, str]]:
  """-> (header {key lowercased: value}, sections {name: body}) of an Apptainer definition."""
  header, sections, current = {}, {}, None
  for line in text.splitlines():
    m = re.match(r"^%(\w+)\b", line)
    if m:
      current = m.group(1).lower()
      sections[current] = ""
    elif current is not None:
      sections[current] += line + "\n"
    else:
      h = re.match(r"^\s*(\w+)\s*:\s*(.*?)\s*$", line)
      if h:
        header[h.group(1).lower()] = h.group(2)
  return header, sections


def definition_image(header: Mapping[str, str]) -> str:
  """The Docker image a definition bootstraps from; DEFAULT_IMAGE for a local image / none."""
  source = header.get("from", "")
  if header.get("bootstrap", "docker").lower() not in ("docker", "docker-daemon") or not source:
    return DEFAULT_IMAGE
  return source.removeprefix("docker://")


def environment_pairs(body: str) -> list[tuple[str, str]]:
  """(name, value) of each `export K=V` / `K=V` line of a %environment section."""
  pairs = []
  for line in body.splitlines():
    m = re.match(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$", line)
    if m:
      pairs.append((m.group(1), m.group(2).strip()))
  return pairs


def files_pairs(body: str) -> list[tuple[str, str]]:
  """(source, destination) of each %files line (one token: the same path inside)."""
  pairs = []
  for line in body.splitlines():
    parts = line.split()
    if parts and not parts[0].startswith("#"):
      pairs.append((parts[0], parts[1] if len(parts) > 1 else parts[0]))
  return pairs


# --- one task -----------------------------------------------------------------------------------


def _fixture_source(src: str, task_dir: pathlib.Path | None) -> pathlib.Path | None:
  """A %files source in the task folder: `.../fixtures/<rel>` (the pipeline writes host paths
  into the definition) -> <task folder>/fixtures/<rel>; a relative path -> under the folder;
  None when it is not there (or would leave the folder)."""
  if task_dir is None:
    return None
  if "/fixtures/" in src:
    local = task_dir / "fixtures" / src.split("/fixtures/", 1)[1]
  elif not src.startswith("/"):
    local = task_dir / src
  else:
    return None
  inside = local.resolve().is_relative_to(task_dir.resolve())
  return local if inside and local.exists() else None


def _stage(src: pathlib.Path, dest: str) -> tuple[dict[str, bytes], set[str]]:
  """Files of `src` (a file or a directory) under environment/_fixtures/<dest>."""
  rel = f"{FIXTURES}/{dest.lstrip('/')}"
  found = [(src, rel)] if src.is_file() else []
  if src.is_dir():
    found = [(p, f"{rel}/{p.relative_to(src).as_posix()}") for p in sorted(src.rglob("*"))]
  files, execs = {}, set()
  for path, name in found:
    if path.is_file():
      files[name] = path.read_bytes()
      if path.stat().st_mode & stat.S_IXUSR:
        execs.add(f"environment/{name}")
  return files, execs


def _environment(row: Mapping[str, Any], folder: Callable[[], pathlib.Path | None], where: str):
  """-> (environment files, executables, image, apptainer From) of a row's definition; `folder`
  gives the task folder (asked only when the definition ships %files)."""
  header, sections = parse_definition(row["container_def"])
  image = definition_image(header)
  lines = [f"FROM {image}", "", "ENV DEBIAN_FRONTEND=noninteractive"]
  lines += [f"ENV {k}={v}" for k, v in environment_pairs(sections.get("environment", ""))]
  files, execs = {}, set()
  for src, dest in files_pairs(sections.get("files", "")):
    local = _fixture_source(src, folder())
    if local is None:
      raise fmt.TaskFormatError(
        where,
        "container_def %files",
        f"fixture {src!r} is in no task folder (give the release with its {ZIP_FILE} or the "
        "task folders next to its data/)",
      )
    staged, staged_execs = _stage(local, dest)
    files.update(staged)
    execs |= staged_execs
    lines.append(f"COPY {FIXTURES}/{dest.lstrip('/')} {dest}")
  post = sections.get("post", "").strip()
  if post:
    files["post_install.sh"] = (post + "\n").encode()
    lines += ["COPY post_install.sh /tmp/post_install.sh", "RUN bash /tmp/post_install.sh"]
  files["Dockerfile"] = ("\n".join(lines) + "\n").encode()
  return files, execs, image, header.get("from", "")


def _skills(value: Any) -> list[str]:
  if isinstance(value, str):
    try:
      value = json.loads(value) if value.strip() else []
    except json.JSONDecodeError:
      value = [value]
  return [str(s) for s in value] if isinstance(value, (list, tuple)) else []


def task_from_row(
  row: Mapping[str, Any], where: str, folder: Callable[[], pathlib.Path | None] = lambda: None
) -> fmt.Task:
  """The TB2 task of one release row; `where` names it in errors; `folder()` gives its task folder
  (for the fixtures its definition ships), None when there is none."""
  for column in REQUIRED:
    if not isinstance(row.get(column), str) or not row[column].strip():
      raise fmt.TaskFormatError(where, column, "missing or empty")
  environment, execs, image, apptainer_from = _environment(row, folder, where)
  metadata = {"source": "tmax15k", "category": row.get("domain") or "uncategorized"}
  metadata.update({k: str(row[k]) for k in AXES if row.get(k)})
  skills = _skills(row.get("primitive_skills"))
  if skills:
    metadata["primitive_skills"] = skills
  if image == DEFAULT_IMAGE and apptainer_from and apptainer_from != DEFAULT_IMAGE:
    metadata["apptainer_from"] = apptainer_from
  config = fmt.TaskConfig(
    task=fmt.TaskInfo(name=row["task_id"].strip(), description=str(row.get("scenario") or "")),
    metadata=vocabulary.canonical_metadata(metadata),
    agent=fmt.AgentConfig(timeout_sec=AGENT_TIMEOUT_S),
    verifier=fmt.VerifierConfig(timeout_sec=VERIFIER_TIMEOUT_S),
  )
  task = fmt.Task(
    instruction=row["description"],
    config=config,
    environment=environment,
    tests={"test.sh": TEST_SH.encode(), "test_final_state.py": row["test_final_state"].encode()},
    executables=frozenset(execs),
  )
  fmt.validate_task(task, where)
  return task


# --- task folders ---------------------------------------------------------------------------


def row_from_folder(task_dir: pathlib.Path) -> dict[str, Any]:
  """A task folder read as a release row (task.json and the files next to it)."""
  file = task_dir / TASK_JSON
  try:
    meta = json.loads(file.read_text(encoding="utf-8"))
  except (OSError, json.JSONDecodeError) as err:
    raise fmt.TaskFormatError(file, TASK_JSON, f"not a readable JSON file ({err})") from None
  if not isinstance(meta, dict):
    raise fmt.TaskFormatError(file, TASK_JSON, "expected an object")

  def text(name: str) -> str:
    path = task_dir / name
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""

  row = {k: meta.get(k, "") for k in RELEASE_COLUMNS}
  row["task_id"] = meta.get("name") or task_dir.name
  row["test_final_state"] = text("test_final_state.py")
  row["test_initial_state"] = text("test_initial_state.py")
  row["container_def"] = text(DEF_FILE)
  row["language"] = meta.get("language", "")
  return row


def is_task_folder(d: pathlib.Path) -> bool:
  """A pipeline task folder: task.json and container.def (and no task.toml: not a TB2 task)."""
  return all((d / f).is_file() for f in (TASK_JSON, DEF_FILE)) and not (d / "task.toml").exists()


def task_folders(root: pathlib.Path) -> dict[str, pathlib.Path]:
  """{folder name: folder} of every task folder under `root`; the search does not descend into
  a task folder and skips hidden directories."""
  found, stack = {}, [root]
  while stack:
    for d in sorted(p for p in stack.pop().iterdir() if p.is_dir() and p.name[0] != "."):
      if is_task_folder(d):
        found.setdefault(d.name, d)
      else:
        stack.append(d)
  return found


def extract_zip(path: pathlib.Path) -> pathlib.Path:
  """`tasks.zip` extracted once into <cache>/task_sources/tmax15k-<sha256>/ (reused when
  complete); a member that would land outside it is an error. Unix modes are kept."""
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  target = base_rootfs.cache_dir() / "task_sources" / f"tmax15k-{digest.hexdigest()[:16]}"
  if (target / ".complete").is_file():
    return target
  target.parent.mkdir(parents=True, exist_ok=True)
  tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
  try:
    with zipfile.ZipFile(path) as zf:
      for info in zf.infolist():
        parts = pathlib.PurePosixPath(info.filename).parts
        if info.filename.startswith(("/", "\\")) or ".." in parts:
          raise ValueError(f"{path}: member {info.filename!r} escapes the extraction directory")
        out = pathlib.Path(zf.extract(info, tmp))
        mode = info.external_attr >> 16
        if mode and not info.is_dir():
          os.chmod(out, stat.S_IMODE(mode) | stat.S_IRUSR)
    (tmp / ".complete").write_text(json.dumps({"source": str(path)}))
    try:
      os.replace(tmp, target)
    except OSError:  # another process renamed its complete copy into place first
      if not (target / ".complete").is_file():
        raise
  except zipfile.BadZipFile as err:
    raise ValueError(f"{path}: not a zip file ({err})") from None
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  return target


# --- the release ------------------------------------------------------------------------------


def is_release_parquet(path: pathlib.Path) -> bool:
  """True for a parquet whose columns include the release's required ones."""
  import pyarrow.parquet as pq  # noqa: PLC0415  (not in the Harbor venv)

  try:
    names = set(pq.read_schema(path).names)
  except Exception:  # noqa: BLE001  (not a parquet: not a release either)
    return False
  return set(REQUIRED) <= names


def _parquets(directory: pathlib.Path) -> list[pathlib.Path]:
  data = directory / "data"
  found = sorted(data.glob("*.parquet")) if data.is_dir() else []
  return [p for p in found if is_release_parquet(p)]


def is_release(path: str | os.PathLike) -> bool:
  """A TMAX-15K source: a release parquet, a dataset directory (data/*.parquet with the release
  columns, or tasks.zip) or a directory of task folders (task.json)."""
  path = pathlib.Path(path)
  if path.is_file():
    return path.suffix == ".parquet" and is_release_parquet(path)
  if not path.is_dir():
    return False
  if (path / ZIP_FILE).is_file() or _parquets(path):
    return True
  return any(is_task_folder(d) for d in path.iterdir() if d.is_dir())


def _folders_of(root: pathlib.Path) -> dict[str, pathlib.Path]:
  """The task folders of a dataset directory: unzipped under it, else from its tasks.zip."""
  folders = task_folders(root)
  if not folders and (root / ZIP_FILE).is_file():
    folders = task_folders(extract_zip(root / ZIP_FILE))
  return folders


def _rows(path: pathlib.Path) -> Iterator[tuple[str, dict, Callable[[], pathlib.Path | None]]]:
  """(where, row, its task folder's lookup) of every task of a source, in release order. The
  folders are found (tasks.zip extracted) on the first lookup: a release whose definitions ship
  no %files never extracts it."""
  import pyarrow.parquet as pq  # noqa: PLC0415  (not in the Harbor venv)

  if path.is_file():
    parquets, root = [path], path.parent.parent if path.parent.name == "data" else path.parent
  else:
    parquets, root = _parquets(path), path
  folders = functools.cache(lambda: _folders_of(root))
  if not parquets:  # a directory of task folders
    for _, folder in sorted(folders().items()):
      yield str(folder), row_from_folder(folder), lambda folder=folder: folder
    return
  for file in parquets:
    for i, row in enumerate(pq.read_table(file).to_pylist()):
      name = str(row.get("task_id") or "").strip()
      yield f"{file}: row {i} ({name!r})", row, lambda name=name: folders().get(name)


def load_release(path: str | os.PathLike, max_tasks: int = 0) -> list[fmt.Task]:
  """Every task of a TMAX-15K source (the first `max_tasks`; 0 = all), in release order."""
  path = pathlib.Path(path)
  if not is_release(path):
    raise FileNotFoundError(
      f"{path}: not a TMAX-15K release (data/*.parquet with columns {list(REQUIRED)}, "
      f"{ZIP_FILE}, or task folders with {TASK_JSON})"
    )
  tasks = []
  for where, row, folder in _rows(path):
    tasks.append(task_from_row(row, where, folder))
    if max_tasks and len(tasks) == max_tasks:
      break
  if not tasks:
    raise ValueError(f"{path}: the TMAX-15K release holds no task")
  return tasks
