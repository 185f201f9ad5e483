"""SFT on trajectories (cross-entropy on assistant tokens only), on the trainer's machinery.

Data: a JSONL of token trajectories, or oracle trajectories made by running the tasks' solve.sh
through the harness in real sandboxes (agents/oracle_data.py; written to <output_dir>/records.jsonl
so a resumed run trains on the very same records). Trajectories are packed into rows of `seq_len`
(segment ids keep them apart), shuffled per epoch with the run's seed. The trainer runs on
`cfg.mesh` over every device; in a multi-process run each process builds the same global batch and
feeds its own rows of it. Progress, metrics, checkpoints (with the data position: epoch and batch)
and the HF export are the shared step driver's (loop/steps.py), so a killed run resumes exactly.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import pathlib
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np

from tmax_jax.agents import oracle_data
from tmax_jax.loop import placement
from tmax_jax.loop.config import SFTConfig, with_family
from tmax_jax.loop.policy import load_policy
from tmax_jax.loop.steps import StepDriver, export_hf
from tmax_jax.models import ModelConfig, registry
from tmax_jax.tasks import sources
from tmax_jax.tokenizers import load_tokenizer
from tmax_jax.train import batch as batch_lib
from tmax_jax.train import distributed
from tmax_jax.train.checkpoint import model_metadata
from tmax_jax.train.step import Trainer

log = logging.getLogger(__name__)

RECORDS_FILE = "records.jsonl"  # the oracle records a run trained on, kept for its resume


@dataclasses.dataclass
class SFTResult:
  params: Any  # the trained param tree
  model_cfg: ModelConfig
  records: list[dict]
  metrics: list[dict]
  export_dir: str


def sft_records(cfg: SFTConfig, tokenizer) -> list[dict]:
  """The trajectories to train on: the JSONL, the records an earlier attempt of this run made, or
  oracle runs of the train tasks (then written to <output_dir>/records.jsonl)."""
  if cfg.trajectories:
    return oracle_data.read_jsonl(cfg.trajectories, cfg.seq_len)
  kept = pathlib.Path(cfg.output_dir) / RECORDS_FILE
  if kept.exists():
    return oracle_data.read_jsonl(kept, cfg.seq_len)
  train_tasks, _ = sources.load_split(cfg.tasks)
  records = oracle_data.oracle_records(train_tasks, tokenizer, cfg.episode, cfg.runner)
  failed = [r["task"] for r in records if r["reward"] < 1.0]
  if failed:
    log.warning(
      "%d oracle trajectories did not pass their verifier (kept, as in the recipe): %s",
      len(failed),
      failed[:5],
    )
  if jax.process_index() == 0:
    oracle_data.write_jsonl(records, kept)
  return records


def check_rows(records: list[dict], seq_len: int, source: str) -> None:
  """Every record fits one row of `seq_len` tokens (oracle_data.check_fits), before any step."""
  for i, r in enumerate(records, 1):
    task = f" (task {r['task']})" if "task" in r else ""
    oracle_data.check_fits(len(r["tokens"]), seq_len, f"{source}: record {i}{task}")


def epoch_batches(records: list[dict], cfg: SFTConfig, epoch: int, trainer: Trainer) -> Iterator:
  """The batches of one epoch shuffled with (train.seed, epoch), train.global_batch trajectories
  each (packed [rows, seq_len], or packed micro-batches with `train.packing`)."""
  rows = cfg.train.global_batch
  order = np.random.default_rng(cfg.train.seed + epoch).permutation(len(records))
  trajs = [
    batch_lib.Trajectory(
      tokens=records[i]["tokens"], loss_mask=np.asarray(records[i]["loss_mask"], np.float32)
    )
    for i in order
  ]
  for start in range(0, len(trajs), rows):
    yield trainer.make_batch(
      trajs[start : start + rows], cfg.seq_len, num_rows=rows, pack_rows=True
    )


def total_steps(cfg: SFTConfig, num_records: int) -> int:
  """The run's optimizer steps: `steps`, else train.epochs x ceil(records / train.global_batch)."""
  return cfg.steps or cfg.train.epochs * math.ceil(num_records / cfg.train.global_batch)


def _batches_from(records, cfg: SFTConfig, trainer: Trainer, data: dict) -> Iterator:
  """(batch, data position after it) from the position `data` ({"epoch", "batch"}) on, forever."""
  epoch, skip = data["epoch"], data["batch"]
  while True:
    for i, batch in enumerate(epoch_batches(records, cfg, epoch, trainer)):
      if i >= skip:
        yield batch, {"epoch": epoch, "batch": i + 1}
    epoch, skip = epoch + 1, 0


def run_sft(cfg: SFTConfig, *, model_cfg=None, params=None, records=None) -> SFTResult:
  """Trains `params` (default: cfg.model) on the SFT trajectories, or resumes the run from its
  latest checkpoint; exports to export_dir (default <output_dir>/hf)."""
  if records is None and cfg.trajectories:  # the data is checked before the model loads
    records = oracle_data.read_jsonl(cfg.trajectories, cfg.seq_len)
  elif records is not None:
    check_rows(records, cfg.seq_len, "the SFT records")
  mesh = placement.trainer_only(cfg.mesh)
  if not cfg.train.packing.enabled:  # packed micro-batches are sized for the mesh already
    placement.check_batch(
      mesh, cfg.train.global_batch, cfg.train.micro_batches, "train.global_batch"
    )
  log.info("SFT trainer mesh: %s", placement.describe(mesh))
  if params is None:
    model_cfg, params, episode = load_policy(cfg.model, cfg.episode, mesh=mesh)
  else:
    params = jax.device_put(params, registry.param_shardings(model_cfg, mesh))
    episode = with_family(cfg.episode, model_cfg.model_type)
  cfg = dataclasses.replace(cfg, episode=episode)
  pathlib.Path(cfg.output_dir).mkdir(parents=True, exist_ok=True)
  if records is None:  # oracle trajectories (made now, or kept by an earlier attempt)
    records = sft_records(cfg, load_tokenizer(episode.family))
    check_rows(records, cfg.seq_len, str(pathlib.Path(cfg.output_dir) / RECORDS_FILE))
  if not records:
    raise ValueError("SFT: no trajectories to train on")
  total = total_steps(cfg, len(records))
  trainer = Trainer(registry.build_model(model_cfg), model_cfg, cfg.train.for_run(total), mesh)
  state = trainer.init_state(params)
  meta = model_metadata(model_cfg, episode.family)
  with StepDriver.open(cfg.output_dir, cfg.train.checkpoint, total, "sft", meta) as steps:
    state, data = steps.resume(state)
    data = data or {"epoch": 0, "batch": 0}
    batches = _batches_from(records, cfg, trainer, data)
    for step in steps:
      batch, data = next(batches)
      state, m = trainer.step(state, distributed.local_rows(batch))
      steps.end_step(step, state, {**m, "data/epoch": float(data["epoch"])}, data)
    steps.finish(state, data)
    history = steps.history
  export = export_hf(
    cfg.export_dir or f"{cfg.output_dir}/hf", state.params, model_cfg, episode.family
  )
  return SFTResult(state.params, model_cfg, records, history, export)
