"""The one step driver of RL, replay and SFT (levanter's Trainer.training_steps + hooks, as one
object): progress bar, metrics (JSONL + TensorBoard, process 0), the run's history, Orbax
checkpoints of the train state with the job's data position (every process), resume from the
latest one, the final checkpoint and the Hugging Face export.

  with StepDriver.open(out_dir, train_cfg.checkpoint, total, "rl") as steps:
    state, data = steps.resume(state)           # start at steps.start (0 without a checkpoint)
    for step in steps:                          # step = steps done so far; this one is step + 1
      state, metrics = ...
      steps.end_step(step, state, metrics, data_position)
    steps.finish(state, data_position)          # final checkpoint (forced)
  export_hf(dir, state.params, model_cfg, family)

A job's data position is whatever JSON it needs to continue exactly where the checkpoint's step
left off (RL: the consumed prompt indices; SFT: epoch and batch).
"""

from __future__ import annotations

import dataclasses
import logging
import pathlib
from collections.abc import Iterator
from typing import Any

import jax

from tmax_jax import cli
from tmax_jax.models import hf_io
from tmax_jax.tokenizers import tokenizer_dir
from tmax_jax.train import CheckpointConfig, MetricsWriter
from tmax_jax.train.checkpoint import Checkpointer
from tmax_jax.train.state import TrainState

log = logging.getLogger(__name__)


def checkpoint_config(ckpt: CheckpointConfig, out_dir: str) -> CheckpointConfig:
  """`ckpt` with its directory defaulting to <out_dir>/ckpt."""
  directory = ckpt.directory or str(pathlib.Path(out_dir) / "ckpt")
  return dataclasses.replace(ckpt, directory=directory)


@dataclasses.dataclass
class StepDriver:
  checkpointer: Checkpointer
  writer: MetricsWriter
  total: int
  desc: str
  start: int = 0
  history: list = dataclasses.field(default_factory=list)
  _bar: Any = None  # cli.progress's tqdm bar while iterating

  @classmethod
  def open(
    cls, out_dir: str, ckpt: CheckpointConfig, total: int, desc: str, metadata: dict | None = None
  ) -> StepDriver:
    """`metadata`: the checkpoint directory's (train.checkpoint.model_metadata: what the HF export
    of a kept step needs, tmax_jax.export)."""
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    checkpointer = Checkpointer(checkpoint_config(ckpt, out_dir), metadata)
    writer = MetricsWriter(str(out / "metrics.jsonl"), str(out / "tb"))
    return cls(checkpointer, writer, total, desc)

  def resume(self, state: TrainState) -> tuple[TrainState, dict | None]:
    """-> (state, data position) of the latest checkpoint, or (state, None) without one."""
    if self.checkpointer.latest_step() is None:
      return state, None
    state, data, self.start = self.checkpointer.restore(state)
    log.info("%s: resumed from step %d", self.desc, self.start)
    return state, data

  def __iter__(self) -> Iterator[int]:
    if self.start >= self.total:
      log.info(
        "%s: the checkpoint is at step %d of %d: nothing to run", self.desc, self.start, self.total
      )
    self._bar = cli.progress(
      range(self.start, self.total),
      desc=self.desc,
      initial=self.start,
      total=self.total,
      disable=jax.process_index() != 0,
    )
    yield from self._bar

  def end_step(self, step: int, state, metrics: dict, data: dict) -> None:
    """Step `step + 1` is done: its metrics, and a checkpoint when it is one's turn."""
    self.writer.write(step + 1, metrics)
    if self._bar is not None and "loss" in metrics:
      self._bar.set_postfix(loss=f"{float(metrics['loss']):.3f}", refresh=False)
    self.history.append({"step": step + 1, **metrics})
    self.checkpointer.save(step + 1, state, data)

  def finish(self, state, data: dict) -> None:
    """The final checkpoint (unless the last step already wrote it); waits for pending saves."""
    if self.checkpointer.latest_step() != self.total:
      self.checkpointer.save(self.total, state, data, force=True)
    self.checkpointer.wait()

  def close(self) -> None:
    self.checkpointer.close()
    self.writer.close()

  def __enter__(self) -> StepDriver:
    return self

  def __exit__(self, *exc) -> None:
    self.close()


def export_hf(export_dir: str, params, model_cfg, family: str) -> str:
  """The Hugging Face export (config, safetensors, the family's tokenizer files; atomic)."""
  return str(
    hf_io.save_pretrained(
      export_dir, params, model_cfg, tokenizer_dir=tokenizer_dir(family), overwrite=True
    )
  )
