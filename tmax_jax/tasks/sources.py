"""One task source for every job: RL, SFT and evaluation read tasks through `load_tasks` /
`load_split`, whatever holds them.

A source is a path:
- a task directory: TB2/Harbor tasks as they are, TB1 tasks converted (tasks/loader.py rules);
- a published pipeline set: a directory with `set.json` (written by `tasks.pipeline` publish),
  whose `tasks` list names the task directories in order; a listed directory that is missing is an
  error (nothing is silently dropped);
- a parquet of task tarballs (`*.parquet`, columns `path` and `task_binary` = a gzipped tar of a
  task directory): the procedural library's output (`tasks.procedural.cli --out x.parquet`) and
  the OpenThoughts-Agent RL layout. Each tarball is extracted once into
  `<cache>/task_sources/<sha256 of the file>/` (atomic rename; extraction uses tarfile's "data"
  filter, so no member can escape that directory) and loaded from there;
- the TMAX-15K release (tasks/tmax15k.py): its Hugging Face dataset directory (data/*.parquet with
  the release's columns, tasks.zip), that parquet itself, or a directory of its task folders
  (task.json + container.def); each task converted to TB2 as the public Harbor conversion does.
Without a path, jobs use procedural families built in memory (`procedural_tasks`).
Task names must be unique within a source: they key trials, groups and sampling seeds.
"""

from __future__ import annotations

import collections
import dataclasses
import gzip
import hashlib
import io
import json
import os
import pathlib
import shutil
import tarfile
import tempfile
from collections.abc import Sequence

from tmax_jax.errors import UserError
from tmax_jax.sandbox.images import base_rootfs
from tmax_jax.tasks import format as fmt
from tmax_jax.tasks import loader, tmax15k

SET_FILE = "set.json"
SET_SCHEMA = "tmax-task-set/1"
PARQUET_COLUMNS = ("path", "task_binary")


@dataclasses.dataclass(frozen=True)
class TaskSource:
  """A job's training / held-out tasks: `source` = a task directory (TB1/TB2), a published
  pipeline set or a task parquet, of which the last `num_eval` are held out. Without it,
  procedural tasks: `num_train` seeds from `seed` and `num_eval` held-out seeds after them, round
  robin over `families` (all families when empty) at `difficulty`."""

  source: str = ""  # a task directory, a published set or a .parquet; "" = procedural families
  families: tuple[str, ...] = ()  # procedural task families (all when empty)
  difficulty: int = 0  # procedural difficulty level
  num_train: int = 64  # procedural training tasks
  num_eval: int = 16  # held-out tasks (the last of a source, or procedural seeds after training)
  seed: int = 0  # first procedural seed; also the task stream's shuffle seed


def source_kind(source: str | os.PathLike) -> str:
  """'parquet', 'set' (a published pipeline set), 'tmax15k' (tasks/tmax15k.py) or 'directory';
  FileNotFoundError otherwise."""
  path = pathlib.Path(source)
  if path.is_file() and path.suffix == ".parquet":
    return "tmax15k" if tmax15k.is_release(path) else "parquet"
  if path.is_dir():
    if (path / SET_FILE).is_file():
      return "set"
    return "tmax15k" if tmax15k.is_release(path) else "directory"
  raise FileNotFoundError(
    f"task source {path}: expected a task directory, a published set (a directory with "
    f"{SET_FILE}), a .parquet of task tarballs or the TMAX-15K release"
  )


def _check_unique(tasks: list[fmt.Task], source) -> list[fmt.Task]:
  counts = collections.Counter(t.name for t in tasks)
  dup = sorted(n for n, c in counts.items() if c > 1)
  if dup:
    raise UserError(f"task source {source}: duplicate task names {dup}")
  return tasks


def load_set(directory: str | os.PathLike, max_tasks: int = 0) -> list[fmt.Task]:
  """The tasks a published set lists, in its order."""
  directory = pathlib.Path(directory)
  file = directory / SET_FILE
  try:
    doc = json.loads(file.read_text(encoding="utf-8"))
  except (OSError, json.JSONDecodeError) as err:
    raise UserError(f"{file}: not a readable JSON file ({err})") from None
  if not isinstance(doc, dict) or doc.get("schema") != SET_SCHEMA:
    raise UserError(f"{file}: schema: expected {SET_SCHEMA!r}, got {doc.get('schema')!r}")
  entries = doc.get("tasks")
  if not isinstance(entries, list) or not all(
    isinstance(e, dict) and isinstance(e.get("dir"), str) for e in entries
  ):
    raise UserError(f"{file}: tasks: expected a list of {{dir: str, ...}}")
  tasks = []
  for i, entry in enumerate(entries[: max_tasks or None]):
    task_dir = directory / entry["dir"]
    if not task_dir.is_dir():
      raise FileNotFoundError(f"{file}: tasks[{i}].dir {entry['dir']!r}: no such directory")
    tasks.append(loader.load_task_dir(task_dir))
  return tasks


def _cache_root() -> pathlib.Path:
  return base_rootfs.cache_dir() / "task_sources"


def _file_digest(path: pathlib.Path) -> str:
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  return digest.hexdigest()[:16]


def _read_parquet(path: pathlib.Path) -> tuple[list[str], list[bytes]]:
  import pyarrow as pa  # noqa: PLC0415  (not in the Harbor venv)
  import pyarrow.parquet as pq  # noqa: PLC0415

  try:
    table = pq.read_table(path)
  except (pa.ArrowException, OSError) as err:  # ArrowInvalid: not a parquet, or truncated
    detail = str(err).split("': ", 1)[-1].split(". ")[0]  # without pyarrow's repeat of the path
    raise UserError(f"{path}: not a readable parquet file ({detail})") from None
  missing = [c for c in PARQUET_COLUMNS if c not in table.column_names]
  if missing:
    raise UserError(
      f"{path}: columns {missing} missing; a task parquet has {list(PARQUET_COLUMNS)} "
      f"(found {table.column_names})"
    )
  return table.column("path").to_pylist(), table.column("task_binary").to_pylist()


def extract_parquet(
  path: str | os.PathLike, extract_dir: str | os.PathLike | None = None
) -> pathlib.Path:
  """Extracts every row's tarball into <extract_dir>/<row index>/ (once; reused when complete)
  and returns that directory. Default extract_dir: <cache>/task_sources/<file sha256>."""
  path = pathlib.Path(path)
  target = pathlib.Path(extract_dir) if extract_dir else _cache_root() / _file_digest(path)
  if (target / ".complete").is_file():
    return target
  names, blobs = _read_parquet(path)
  target.parent.mkdir(parents=True, exist_ok=True)
  tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
  try:
    for i, (name, blob) in enumerate(zip(names, blobs, strict=True)):
      if not isinstance(blob, bytes):
        raise UserError(f"{path}: row {i} ({name!r}): task_binary is not bytes")
      try:
        with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob)), mode="r:") as tf:
          tf.extractall(tmp / f"{i:07d}", filter="data")
      except tarfile.FilterError as err:
        raise UserError(f"{path}: row {i} ({name!r}): unsafe tar member ({err})") from None
      except (OSError, tarfile.TarError, EOFError) as err:
        raise UserError(f"{path}: row {i} ({name!r}): not a gzipped tar ({err})") from None
    (tmp / ".complete").write_text(json.dumps({"source": str(path), "rows": len(names)}))
    try:
      os.replace(tmp, target)
    except OSError:  # another process renamed its complete copy into place first
      if not (target / ".complete").is_file():
        raise
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  return target


def load_parquet(
  path: str | os.PathLike, max_tasks: int = 0, extract_dir: str | os.PathLike | None = None
) -> list[fmt.Task]:
  """The task of every row (its tarball holds one task directory), in row order."""
  root = extract_parquet(path, extract_dir)
  rows = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
  tasks = []
  for row in rows[: max_tasks or None]:
    found = loader.find_task_dirs(row)
    if len(found) != 1:
      raise UserError(f"{path}: row {int(row.name)}: expected one task directory, got {found}")
    tasks.append(loader.load_task_dir(found[0]))
  return tasks


def load_tasks(
  source: str | os.PathLike,
  *,
  converted_dir: str | os.PathLike | None = None,
  max_tasks: int = 0,
  extract_dir: str | os.PathLike | None = None,
) -> list[fmt.Task]:
  """Every task of `source` (the first `max_tasks`; 0 = all). converted_dir: where converted TB1
  tasks of a directory source are written (loader.load_tasks)."""
  kind = source_kind(source)
  if kind == "parquet":
    tasks = load_parquet(source, max_tasks, extract_dir)
  elif kind == "set":
    tasks = load_set(source, max_tasks)
  elif kind == "tmax15k":
    tasks = tmax15k.load_release(source, max_tasks)
  else:
    tasks = loader.load_tasks(source, converted_dir, max_tasks)
  return _check_unique(tasks, source)


def procedural_tasks(
  families: Sequence[str], difficulty: int, start: int, n: int
) -> list[fmt.Task]:
  """`n` procedural tasks with seeds start.. round robin over `families` (all when empty)."""
  # the procedural library (~20 modules) loads only for procedural sources
  from tmax_jax.tasks.procedural import registry  # noqa: PLC0415

  families = list(families) or sorted(registry.FAMILIES)
  return [registry.build_task(families[i % len(families)], start + i, difficulty) for i in range(n)]


def split_held_out(tasks: list[fmt.Task], num_eval: int) -> tuple[list, list]:
  """-> (train, held out): the last `num_eval` tasks are held out (at least one trains)."""
  n_eval = min(num_eval, len(tasks) - 1) if len(tasks) > 1 else 0
  return tasks[: len(tasks) - n_eval], tasks[len(tasks) - n_eval :]


def load_split(tasks: TaskSource) -> tuple[list, list]:
  """The (train, held-out) tasks of a job: `tasks.source` split by split_held_out, else
  procedural tasks (num_train seeds from `seed`, num_eval held-out seeds after them)."""
  if tasks.source:
    return split_held_out(load_tasks(tasks.source), tasks.num_eval)
  return (
    procedural_tasks(tasks.families, tasks.difficulty, tasks.seed, tasks.num_train),
    procedural_tasks(
      tasks.families, tasks.difficulty, tasks.seed + tasks.num_train, tasks.num_eval
    ),
  )
