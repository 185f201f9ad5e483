"""Before a job builds anything: the inputs its config names exist and parse.

A typo'd checkpoint path, an empty checkpoint directory or one whose config.json is not JSON, a
task source holding a malformed task (a directory, a published set, a corrupt parquet), a missing
or malformed trajectories JSONL, a misspelt harness or procedural family, or a server address
where nothing listens then fails in seconds with the config field's dotted path
(errors.ConfigError / UserError, reported by tmax_jax.cli in a few lines) instead of after the
model was built, compiled and served. (Misspelt dtypes and other enums are rejected by the config
dataclasses themselves.) The job's own loading still validates everything again; this only moves
the common failures to the front.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import pathlib
from collections.abc import Iterator
from typing import Any

from tmax_jax import cli
from tmax_jax.agents import harnesses, oracle_data
from tmax_jax.errors import ConfigError, UserError
from tmax_jax.tasks import loader, sources

HF_CONFIG = "config.json"
HF_WEIGHTS = ("*.safetensors", "model.safetensors.index.json")


def check_inputs(cfg: Any, root: str = "config") -> None:
  """Checks every input the job config `cfg` (nested dataclasses or a ConfigDict) names:
  `model.checkpoint` (an HF checkpoint directory; config.json alone with `model.random`),
  `tasks.source` and `tasks_dir` (task sources whose tasks all parse), `tasks.families`
  (procedural family names), `harness` (a registered harness), `trajectories` (a JSONL of
  records), `address` (a server that accepts connections, checked last: every local check runs
  first)."""
  addresses = []
  fields = list(_fields(cfg, root))
  values = {path: value for path, _, value in fields}
  for path, name, value in fields:
    if name == "families" and path.endswith("tasks.families") and isinstance(value, (list, tuple)):
      check_families(path, value)
    if not isinstance(value, str) or not value:
      continue
    if name == "checkpoint" and path.endswith("model.checkpoint"):
      # model.random: only the architecture (config.json) is read
      weights = not values.get(path.removesuffix("checkpoint") + "random", False)
      check_hf_checkpoint(path, value, weights)
    elif name in ("source", "tasks_dir") and _is_task_field(path):
      check_tasks_dir(path, value)
    elif name == "harness":
      check_harness(path, value)
    elif name == "trajectories":  # with the job's row length (SFTConfig.seq_len) when it has one
      seq_len = values.get(path.removesuffix("trajectories") + "seq_len", 0)
      check_trajectories(path, value, seq_len if isinstance(seq_len, int) else 0)
    elif name == "problems" and path == f"{root}.problems":
      check_problems(path, value, cfg)
    elif name == "address":
      addresses.append((path, value))
  for path, value in addresses:
    cli.check_reachable(path, value)


def _is_task_field(path: str) -> bool:
  return path.endswith("tasks.source") or path.endswith("tasks_dir")


def _fields(cfg: Any, path: str) -> Iterator[tuple[str, str, Any]]:
  """(dotted path, name, value) of every leaf of a dataclass or ConfigDict tree."""
  if dataclasses.is_dataclass(cfg):
    items = [(f.name, getattr(cfg, f.name)) for f in dataclasses.fields(cfg)]
  else:
    items = list(cfg.items())
  for name, value in items:
    if dataclasses.is_dataclass(value) or hasattr(value, "items"):
      yield from _fields(value, f"{path}.{name}")
    else:
      yield f"{path}.{name}", name, value


def check_hf_checkpoint(field: str, directory: str | os.PathLike, weights: bool = True) -> None:
  """`directory` is a Hugging Face checkpoint: a config.json holding a JSON object, and
  (`weights`) safetensors weights."""
  d = pathlib.Path(directory)
  if not d.is_dir():
    raise ConfigError(f"{field}={directory}: no such directory (expected an HF checkpoint)")
  if not (d / HF_CONFIG).is_file():
    raise ConfigError(
      f"{field}={directory}: no {HF_CONFIG} (expected an HF checkpoint directory: config.json "
      "and *.safetensors, as save_pretrained and our exports write)"
    )
  try:
    hf_config = json.loads((d / HF_CONFIG).read_text(encoding="utf-8"))
  except (UnicodeDecodeError, json.JSONDecodeError) as e:
    raise ConfigError(f"{field}={directory}: {HF_CONFIG} is not JSON ({e})") from None
  if not isinstance(hf_config, dict):
    raise ConfigError(f"{field}={directory}: {HF_CONFIG} is not a JSON object")
  if weights and not any(any(d.glob(pattern)) for pattern in HF_WEIGHTS):
    raise ConfigError(f"{field}={directory}: no *.safetensors weights next to its {HF_CONFIG}")


def check_tasks_dir(field: str, source: str | os.PathLike) -> None:
  """A task source (tasks/sources.py) exists and its tasks parse: every task of a directory, the
  tasks a published set lists, every row of a parquet (extracted into the cache, where the job
  finds it again)."""
  try:
    if sources.source_kind(source) == "directory":
      for task_dir in loader.find_task_dirs(source):
        loader.load_task_dir(task_dir)
    else:
      sources.load_tasks(source)
  except (UserError, FileNotFoundError) as e:
    raise UserError(f"{field}: {e}") from e


def check_trajectories(field: str, path: str | os.PathLike, seq_len: int = 0) -> None:
  """`path` is a JSONL of SFT records (oracle_data.read_jsonl: tokens and loss_mask on every
  line, each fitting a row of `seq_len` tokens when > 0), read before the model loads rather than
  after."""
  if not pathlib.Path(path).is_file():
    raise ConfigError(f"{field}={path}: no such file (expected a JSONL of trajectories)")
  try:
    oracle_data.read_jsonl(path, seq_len)
  except UserError as e:
    raise ConfigError(f"{field}: {e}") from e


def check_problems(field: str, path: str, cfg: Any) -> None:
  """The math evaluation's problem file loads (loop/math_eval/problems.py: every row, and the
  integer answers AIME's config asks for)."""
  from tmax_jax.loop.math_eval import Fields, load_problems  # noqa: PLC0415

  fields = getattr(cfg, "fields", None)
  integer = getattr(cfg, "integer_answers", False)
  load_problems(
    path, fields if isinstance(fields, Fields) else Fields(), integer_answers=integer, what=field
  )


def check_harness(field: str, name: str) -> None:
  """`name` is a registered harness (agents/harnesses.py)."""
  if name not in harnesses.names():
    raise ConfigError(f"{field}={name!r}: no such harness{_hint(name, harnesses.names())}")


def check_families(field: str, names: tuple[str, ...] | list[str]) -> None:
  """Every name is a procedural task family (tasks/procedural/registry.py)."""
  # the procedural library (~20 modules) loads only for configs that name families
  from tmax_jax.tasks.procedural import registry as procedural  # noqa: PLC0415

  for name in names:
    if name not in procedural.FAMILIES:
      raise ConfigError(
        f"{field}: no procedural family {name!r}{_hint(name, procedural.FAMILIES)} "
        "(python3 -m tmax_jax.tasks.procedural.cli --list lists them)"
      )


def _hint(name: str, known) -> str:
  close = difflib.get_close_matches(name, list(known), n=1)
  suggestion = f" (did you mean {close[0]!r}?)" if close else ""
  return f"{suggestion}; expected one of {sorted(known)}" if len(known) <= 8 else suggestion
