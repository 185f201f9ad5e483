"""JSON files: a JSON Lines reader whose errors name the file and line, and atomic writers."""

from __future__ import annotations

import json
import os
import pathlib
import threading
from collections.abc import Iterable, Iterator
from typing import Any


def read_objects(path: str | os.PathLike) -> Iterator[tuple[int, Any]]:
  """(line number, value) for every non-blank line; a ValueError names `path:line` when a line
  is not JSON. Callers check the values' shape and name the line the same way."""
  with open(path, encoding="utf-8") as f:
    for no, line in enumerate(f, 1):
      if not line.strip():
        continue
      try:
        yield no, json.loads(line)
      except json.JSONDecodeError as err:
        raise ValueError(f"{path}:{no}: not JSON ({err.msg})") from None


def write_text_atomic(path: str | os.PathLike, chunks: Iterable[str]) -> pathlib.Path:
  """Writes `chunks` into a temp sibling and renames it into place when complete. The temp name
  is per process and thread: threads of one process may write the same path at once (the last
  rename wins, whole)."""
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
  with open(tmp, "w", encoding="utf-8") as f:
    f.writelines(chunks)
  os.replace(tmp, path)
  return path


def write_jsonl_atomic(records: Iterable[Any], path: str | os.PathLike) -> pathlib.Path:
  """One JSON value per line, atomically."""
  return write_text_atomic(path, (json.dumps(r) + "\n" for r in records))


def write_json_atomic(path: str | os.PathLike, data: Any, **dumps_kw) -> pathlib.Path:
  """One JSON document (indent 2 unless given), atomically."""
  return write_text_atomic(path, [json.dumps(data, **{"indent": 2, **dumps_kw})])
