"""JSON files: a JSON Lines reader whose errors name the file and line, and atomic writers."""

from __future__ import annotations

import json
import logging
import os
import pathlib
import threading
from collections.abc import Iterable, Iterator
from typing import Any

log = logging.getLogger(__name__)


class MalformedJSONError(ValueError):
  """A JSON Lines file has a line that is not JSON (the message names `path:line`). The entry
  points report it as a user error (tmax_jax/cli.py); it is no errors.UserError because json_io
  and errors are independent modules of the lowest import layer (pyproject.toml)."""


def read_objects(path: str | os.PathLike) -> Iterator[tuple[int, Any]]:
  """(line number, value) for every non-blank line; MalformedJSONError (a ValueError) names
  `path:line` when a line is not JSON or not UTF-8. Callers check the values' shape and name the
  line the same way."""
  with open(path, encoding="utf-8") as f:
    no = 0
    try:
      for no, line in enumerate(f, 1):
        if not line.strip():
          continue
        try:
          value = json.loads(line)
        except json.JSONDecodeError as err:
          raise MalformedJSONError(f"{path}:{no}: not JSON ({err.msg})") from None
        yield no, value
    except UnicodeDecodeError as err:
      raise MalformedJSONError(f"{path}:{no + 1}: not UTF-8 text ({err.reason})") from None


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


def claim_output_dir(
  out: str | os.PathLike, outputs: Iterable[str], overwrite: bool
) -> pathlib.Path:
  """Where a run writes: `out`, or when an earlier run left any of `outputs` there (even
  unfinished) the first free `<out>-2`, `-3`, ... (claimed by an atomic mkdir), so a run never
  replaces another's results unasked; `overwrite`: `out` with those outputs removed first (none
  of them can then pass for this run's)."""
  out, outputs = pathlib.Path(out), tuple(outputs)
  if overwrite:
    for name in outputs:
      (out / name).unlink(missing_ok=True)
  if overwrite or not any((out / name).exists() for name in outputs):
    out.mkdir(parents=True, exist_ok=True)
    return out
  n = 2
  while True:
    fresh = pathlib.Path(f"{out}-{n}")
    try:
      fresh.mkdir(parents=True)
    except FileExistsError:
      n += 1
      continue
    log.warning(
      "%s holds an earlier run's results: this run writes to %s (overwrite replaces them)",
      out,
      fresh,
    )
    return fresh
