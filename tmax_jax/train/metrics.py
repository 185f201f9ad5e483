"""Metrics writer: one JSON object per line (and TensorBoard scalars via tensorboardX).

Only process 0 writes in a multi-process run. Lines are flushed per step so a killed run keeps them.
"""

import json
import math
import os
import pathlib
import time
from collections.abc import Mapping

import jax


class MetricsWriter:
  """`write(step, {"loss": ..., ...})` appends {"step", "time", **metrics} to `jsonl_path`."""

  def __init__(self, jsonl_path: str, tensorboard_dir: str | None = None):
    self.enabled = jax.process_index() == 0
    self._file = None
    self._tb = None
    if not self.enabled:
      return
    path = pathlib.Path(jsonl_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115  (open until close())
    if tensorboard_dir:
      from tensorboardX import SummaryWriter  # noqa: PLC0415  (only when TensorBoard is on)

      self._tb = SummaryWriter(tensorboard_dir)

  def write(self, step: int, metrics: Mapping[str, object]) -> None:
    if not self.enabled:
      return
    row = {"step": int(step), "time": time.time()}
    for key, value in metrics.items():
      row[key] = _plain(value)
    assert self._file is not None  # opened in __init__ when enabled, until close()
    self._file.write(json.dumps(row) + "\n")
    self._file.flush()
    if self._tb is not None:
      for key, value in row.items():
        if key not in ("step", "time") and isinstance(value, (int, float)):
          self._tb.add_scalar(key, value, int(step))

  def close(self) -> None:
    if self._file is not None:
      self._file.close()
      self._file = None
    if self._tb is not None:
      self._tb.close()
      self._tb = None

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()


def _plain(value):
  """JSON-safe scalar: NaN/inf become strings (json.dumps would write invalid JSON)."""
  if hasattr(value, "item"):
    value = value.item()
  if isinstance(value, float) and not math.isfinite(value):
    return str(value)
  return value


def read_jsonl(path: str | os.PathLike) -> list[dict]:
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f if line.strip()]
