"""Before a job builds anything: the inputs its config names exist and parse.

A typo'd checkpoint path, an empty checkpoint directory, a tasks directory holding a malformed
task, a missing trajectories file or a server address where nothing listens then fails in a second
with the config field's dotted path (errors.ConfigError / UserError, reported by tmax_jax.cli in a
few lines) instead of after the model was built, compiled and served. The job's own loading
still validates everything again; this only moves the common failures to the front.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Iterator
from typing import Any

from tmax_jax import cli
from tmax_jax.errors import ConfigError, UserError
from tmax_jax.tasks import loader, sources

HF_CONFIG = "config.json"
HF_WEIGHTS = ("*.safetensors", "model.safetensors.index.json")


def check_inputs(cfg: Any, root: str = "config") -> None:
  """Checks every input the job config `cfg` (nested dataclasses or a ConfigDict) names:
  `model.checkpoint` (an HF checkpoint directory), `tasks.source` and `tasks_dir` (task
  sources; a directory's tasks all parse), `trajectories` (a file), `address` (a server that accepts
  connections)."""
  for path, name, value in _fields(cfg, root):
    if not isinstance(value, str) or not value:
      continue
    if name == "checkpoint" and path.endswith("model.checkpoint"):
      check_hf_checkpoint(path, value)
    elif name in ("source", "tasks_dir") and _is_task_field(path):
      check_tasks_dir(path, value)
    elif name == "trajectories":
      if not pathlib.Path(value).is_file():
        raise ConfigError(f"{path}={value}: no such file (expected a JSONL of trajectories)")
    elif name == "address":
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


def check_hf_checkpoint(field: str, directory: str | os.PathLike) -> None:
  """`directory` is a Hugging Face checkpoint: config.json and safetensors weights."""
  d = pathlib.Path(directory)
  if not d.is_dir():
    raise ConfigError(f"{field}={directory}: no such directory (expected an HF checkpoint)")
  if not (d / HF_CONFIG).is_file():
    raise ConfigError(
      f"{field}={directory}: no {HF_CONFIG} (expected an HF checkpoint directory: config.json "
      "and *.safetensors, as save_pretrained and our exports write)"
    )
  if not any(any(d.glob(pattern)) for pattern in HF_WEIGHTS):
    raise ConfigError(f"{field}={directory}: no *.safetensors weights next to its {HF_CONFIG}")


def check_tasks_dir(field: str, source: str | os.PathLike) -> None:
  """A task source (tasks/sources.py) exists; every task of a task directory parses (a published
  set or a parquet is checked when the job loads it)."""
  try:
    if sources.source_kind(source) != "directory":
      return
    for task_dir in loader.find_task_dirs(source):
      loader.load_task_dir(task_dir)
  except (UserError, FileNotFoundError) as e:
    raise UserError(f"{field}: {e}") from e
