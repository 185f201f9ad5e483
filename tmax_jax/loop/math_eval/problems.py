"""The problem file of the math evaluation: JSONL (one object a line) or a parquet table, one
problem a row with a problem text, a gold answer and optionally an id.

Field names are configurable (MathEvalConfig.problem_field / answer_field / id_field); a field is
found by its exact name, else by its only case-insensitive match (so AIME sets published with
`Problem` / `Answer` / `ID` columns load as they are). Without an id field a problem's id is its
1-based row number. Every error names the file, the row (JSONL: the line) and the field.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Iterator, Mapping
from typing import Any

from tmax_jax import json_io
from tmax_jax.errors import UserError
from tmax_jax.loop.math_eval import answers

SUFFIXES = (".jsonl", ".parquet")


@dataclasses.dataclass(frozen=True)
class Problem:
  id: str  # unique within the file
  problem: str  # the problem text put into the prompt template
  answer: str  # the gold answer as written (compared after answers.normalize)


@dataclasses.dataclass(frozen=True)
class Fields:
  """Which fields hold the problem, the answer and the id ("" = no id field: the row number)."""

  problem: str = "problem"  # the field holding the problem text
  answer: str = "answer"  # the field holding the gold answer
  id: str = "id"  # the field holding the problem's id ("" or absent: its row number)


def _rows(path: pathlib.Path) -> Iterator[tuple[str, Any]]:
  """(where, row) of every row: where = "path:line" (JSONL) or "path: row N" (parquet)."""
  if path.suffix == ".parquet":
    import pyarrow.parquet as pq  # noqa: PLC0415  (only for parquet files)

    try:
      table = pq.read_table(path)
    except Exception as err:  # noqa: BLE001  (pyarrow raises several types for a bad file)
      raise UserError(f"{path}: not a readable parquet file ({err})") from None
    for i, row in enumerate(table.to_pylist(), 1):
      yield f"{path}: row {i}", row
    return
  try:
    for no, row in json_io.read_objects(path):
      yield f"{path}:{no}", row
  except ValueError as err:
    raise UserError(str(err)) from None


def _field(row: Mapping[str, Any], name: str, where: str, required: bool = True) -> Any:
  if name in row:
    return row[name]
  matches = [k for k in row if isinstance(k, str) and k.lower() == name.lower()]
  if len(matches) == 1:
    return row[matches[0]]
  if not required:
    return None
  raise UserError(f"{where}: no field {name!r} (found {sorted(map(str, row))})")


def _text(value: Any, name: str, where: str) -> str:
  if isinstance(value, bool) or not isinstance(value, (str, int, float)):
    raise UserError(f"{where}: field {name!r}: expected a string or a number, got {value!r}")
  text = str(value).strip()
  if not text:
    raise UserError(f"{where}: field {name!r} is empty")
  return text


def _problem(i: int, row: Any, where: str, fields: Fields) -> Problem:
  if not isinstance(row, Mapping):
    raise UserError(f"{where}: expected an object with {fields.problem!r} and {fields.answer!r}")
  problem = _text(_field(row, fields.problem, where), fields.problem, where)
  answer = _text(_field(row, fields.answer, where), fields.answer, where)
  raw_id = _field(row, fields.id, where, required=False) if fields.id else None
  pid = str(i) if raw_id is None else _text(raw_id, fields.id, where)
  return Problem(id=pid, problem=problem, answer=answer)


def load_problems(
  path: str | os.PathLike,
  fields: Fields = Fields(),
  *,
  integer_answers: bool = False,
  max_problems: int = 0,
  what: str = "problems",
) -> list[Problem]:
  """The problems of `path` in file order (the first `max_problems`; 0 = all). `what` names the
  config field in errors. integer_answers: every gold answer must be an integer 0-999 (AIME)."""
  path = pathlib.Path(path)
  if not path.is_file():
    raise UserError(f"{what}={path}: no such file (expected a JSONL or parquet problem file)")
  if path.suffix not in SUFFIXES:
    raise UserError(f"{what}={path}: expected a file ending in one of {list(SUFFIXES)}")
  problems = []
  seen: dict[str, str] = {}  # id -> where it first appears
  for i, (where, row) in enumerate(_rows(path), 1):
    p = _problem(i, row, where, fields)
    if p.id in seen:
      raise UserError(f"{where}: id {p.id!r} repeats {seen[p.id]}")
    if integer_answers and not answers.is_aime_answer(p.answer):
      raise UserError(
        f"{where}: answer {p.answer!r} is not an integer 0-999 (integer_answers=True: AIME)"
      )
    seen[p.id] = where
    problems.append(p)
    if max_problems and len(problems) == max_problems:
      break
  if not problems:
    raise UserError(f"{what}={path}: no problems in the file")
  return problems
