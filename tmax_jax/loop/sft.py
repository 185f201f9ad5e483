"""SFT on trajectories (cross-entropy on assistant tokens only), on the trainer's machinery.

Data: a JSONL of token trajectories, or oracle trajectories made by running the tasks' solve.sh
through the harness in real sandboxes (agents/oracle_data.py). Trajectories are packed into rows of
`seq_len` (segment ids keep them apart), shuffled per epoch with the run's seed. The trainer runs
on `cfg.mesh` over every device; in a multi-process run each process builds the same global batch
and feeds its own rows of it.
"""

from __future__ import annotations

import dataclasses
import logging
import pathlib

import jax
import numpy as np
import tqdm

from tmax_jax import sharding
from tmax_jax.agents import oracle_data
from tmax_jax.loop import common, placement
from tmax_jax.loop.config import SFTConfig
from tmax_jax.models import registry
from tmax_jax.tokenizers.builder import load_tokenizer, tokenizer_dir
from tmax_jax.train import batch as batch_lib
from tmax_jax.train import distributed
from tmax_jax.train.metrics import MetricsWriter
from tmax_jax.train.step import Trainer

log = logging.getLogger(__name__)


@dataclasses.dataclass
class SFTResult:
  params: object
  model_cfg: object
  records: list[dict]
  metrics: list[dict]
  export_dir: str


def sft_records(cfg: SFTConfig, tokenizer) -> list[dict]:
  """The trajectories to train on (from the JSONL, or oracle runs of the train tasks)."""
  if cfg.trajectories:
    return oracle_data.read_jsonl(cfg.trajectories)
  train_tasks, _ = common.load_tasks(cfg.tasks)
  records = oracle_data.oracle_records(
    train_tasks, tokenizer, cfg.episode, common.runner_config(cfg.sandbox_backend, 4096)
  )
  failed = [r["task"] for r in records if r["reward"] < 1.0]
  if failed:
    log.warning(
      "%d oracle trajectories did not pass their verifier (kept, as in the recipe): %s",
      len(failed),
      failed[:5],
    )
  return records


def epoch_batches(records: list[dict], cfg: SFTConfig, rows: int, epoch: int, trainer: Trainer):
  """Yields the batches of one shuffled epoch, `rows` trajectories each (packed [rows, seq_len],
  or packed micro-batches with `train.packing`)."""
  order = np.random.default_rng(cfg.train.seed + epoch).permutation(len(records))
  trajs = [
    batch_lib.Trajectory(
      tokens=records[i]["tokens"], loss_mask=np.asarray(records[i]["loss_mask"], np.float32)
    )
    for i in order
  ]
  per_batch = max(1, rows)
  for start in range(0, len(trajs), per_batch):
    chunk = trajs[start : start + per_batch]
    yield trainer.make_batch(chunk, cfg.seq_len, num_rows=rows, pack_rows=True)


def run_sft(cfg: SFTConfig, *, model_cfg=None, params=None, records=None) -> SFTResult:
  """Trains `params` (default: cfg.model) on the SFT trajectories; exports when export_dir set."""
  out = pathlib.Path(cfg.output_dir)
  out.mkdir(parents=True, exist_ok=True)
  tokenizer = load_tokenizer(cfg.episode.family)
  mesh = placement.trainer_only(cfg.mesh)
  if not cfg.train.packing.enabled:  # packed micro-batches are sized for the mesh already
    placement.check_batch(
      mesh, cfg.train.global_batch, cfg.train.micro_batches, "train.global_batch"
    )
  log.info("SFT trainer mesh: %s", placement.describe(mesh))
  if params is None:
    model_cfg, params = common.load_policy(cfg.model, cfg.episode.family, mesh=mesh)
  else:
    params = jax.device_put(params, sharding.param_shardings(model_cfg, mesh))
  records = records if records is not None else sft_records(cfg, tokenizer)
  if not records:
    raise ValueError("SFT: no trajectories to train on")
  rows = cfg.train.global_batch
  total = cfg.train.sft_steps(len(records), cfg.steps)
  trainer = Trainer(registry.build_model(model_cfg), model_cfg, cfg.train.for_run(total), mesh)
  state, history = trainer.init_state(params), []
  with MetricsWriter(str(out / "metrics.jsonl"), str(out / "tb")) as writer:
    bar = tqdm.tqdm(total=total, desc="sft")
    epoch = 0
    while len(history) < total:
      for batch in epoch_batches(records, cfg, rows, epoch, trainer):
        state, m = trainer.step(state, distributed.local_rows(batch))
        history.append({"step": len(history) + 1, **m})
        writer.write(len(history), m)
        bar.update(1)
        bar.set_postfix(loss=f"{m['loss']:.3f}")
        if len(history) >= total:
          break
      epoch += 1
    bar.close()
  export = ""
  if cfg.export_dir:
    from tmax_jax.models import hf_io  # pylint: disable=import-outside-toplevel

    export = str(
      hf_io.save_pretrained(
        cfg.export_dir,
        state.params,
        model_cfg,
        tokenizer_dir=tokenizer_dir(cfg.episode.family),
        overwrite=True,
      )
    )
  return SFTResult(state.params, model_cfg, records, history, export)
