"""The RL loop: async group rollouts on sandboxed tasks -> DPPO step -> weight push, repeated.

One process holds the trainer and an in-process JetStream server (gRPC on loopback). Rollouts run
on the asyncio loop and in episode threads while the trainer's step runs in an executor thread, so
generation for the next batches overlaps training (bounded by `rollout.async_steps`: groups with
tokens from a policy older than that are dropped). After each optimizer step the new params are
pushed to the server through its UpdateWeights RPC with version = step; every sampled token carries
the version that produced it. Checkpoints (Orbax) hold the train state and the data position; a
restarted run resumes from the latest one. At the end the policy is exported as an HF checkpoint.

With `serving.address` the server is a separately launched one (launch/serve.py): the loop pushes
its weights there at the start and after every step (per-tensor stream). If that server dies and
comes back, requests it cut are lost (their groups are dropped and counted as
`rollout/groups_dropped_server`), the client pushes the current policy to the new instance once
(`on_restart`, never while a step holds the state) and rollouts go on; `server_restarts` counts them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import pathlib
import time

import jax
import jax.numpy as jnp
import tqdm

from tmax_jax.agents import batching
from tmax_jax.agents.rollout import GroupScheduler, NoUsableGroups, cycle_tasks
from tmax_jax.agents.episode import stop_token_ids
from tmax_jax.agents.worker import EpisodeWorker
from tmax_jax.inference.client import ClientConfig, RolloutClient, check_top_logprobs
from tmax_jax.loop import common
from tmax_jax.loop.config import RLConfig
from tmax_jax.models import registry
from tmax_jax.tokenizers.builder import load_tokenizer, tokenizer_dir
from tmax_jax.train.checkpoint import Checkpointer
from tmax_jax.train.metrics import MetricsWriter
from tmax_jax.train.step import Trainer

log = logging.getLogger(__name__)


@dataclasses.dataclass
class RLResult:
  steps_done: int
  params: object
  model_cfg: object
  export_dir: str
  metrics: list[dict]


def _rows(cfg: RLConfig) -> int:
  """Fixed rows per optimizer batch (one trajectory per row) so the step compiles once; unused
  with `train.packing` (packed micro-batches compile once per bucket)."""
  return cfg.rollout.prompts_per_batch * cfg.rollout.group_size


def _skip_consumed(tasks, seed: int, consumed: int):
  """The task stream of the run, resumed after the groups already consumed."""
  return itertools.islice(cycle_tasks(tasks, seed), consumed, None)


async def _rl_async(cfg: RLConfig, model_cfg, state, checkpointer, start_step: int,
                    consumed: int, writer: MetricsWriter) -> tuple[object, list[dict], int]:
  tokenizer = load_tokenizer(cfg.episode.family)
  train_tasks, _ = common.load_tasks(cfg.tasks)
  # the server gets its own copy: the trainer donates (and so frees) the state's buffers
  server = None if cfg.serving.address else common.start_serving(
      model_cfg, jax.tree.map(jnp.copy, state.params), cfg.serving, stop_token_ids(cfg.episode),
      max_topk=cfg.worker.top_logprobs)
  trainer = Trainer(registry.build_model(model_cfg), model_cfg, cfg.train)
  history: list[dict] = []
  loop = asyncio.get_running_loop()
  version = start_step  # the policy version the server holds
  steps = asyncio.Lock()  # a trainer step donates `state`: no push reads it meanwhile

  async def resync() -> None:  # a restarted server boots on other weights: push the policy's
    async with steps:
      await client.update_weights(state.params, version=version)

  client_cfg = ClientConfig(max_attempts=cfg.serving.max_attempts, backoff_max_s=2.0)
  async with RolloutClient(cfg.serving.address or server.address, client_cfg,
                           on_restart=resync) as client:
    ready = await client.wait_until_ready(timeout_s=cfg.worker.request_timeout_s)
    check_top_logprobs(ready, cfg.worker.top_logprobs, client.address)
    if start_step or server is None:
      await client.update_weights(state.params, version=start_step)
    worker = EpisodeWorker.served(client, tokenizer, cfg.episode,
                           common.runner_config(cfg.sandbox_backend, cfg.sandbox_memory_mb),
                           cfg.worker)
    sched = GroupScheduler(_skip_consumed(train_tasks, cfg.tasks.seed, consumed), worker, cfg.rollout)
    try:
      for step in tqdm.trange(start_step, cfg.steps, desc="rl", initial=start_step, total=cfg.steps):
        t0 = time.perf_counter()
        try:
          groups = await sched.next_batch(trainer_version=version)
        except NoUsableGroups as err:  # no learning signal in reach: count it, keep the policy
          log.warning("step %d skipped: %s", step + 1, err)
          groups, m = [], {"skipped": 1.0, "skip_reason": "no_usable_groups"}
        rollout_s = time.perf_counter() - t0
        if groups:
          trajs = batching.to_trajectories(groups, cfg.advantage)
          batch = trainer.make_batch(trajs, cfg.seq_len, num_rows=_rows(cfg), pack_rows=False)
          async with steps:
            state, m = await loop.run_in_executor(None, trainer.step, state, batch)
            version = step + 1
            await client.update_weights(state.params, version=version)
        m.update(batching.rollout_metrics(groups))
        m.update({f"rollout/{k}": float(v) for k, v in sched.stats.items()})
        m.update(rollout_wait_s=rollout_s, policy_version=version,
                 server_restarts=float(client.restarts))
        writer.write(step + 1, m)
        history.append({"step": step + 1, **m})
        position = consumed + int(sched.stats["groups_generated"])
        checkpointer.save(step + 1, state, {"groups_consumed": position})
    finally:
      await sched.close()
      await worker.aclose()
      if server is not None:
        server.stop()
  return state, history, consumed + int(sched.stats["groups_generated"])


def run_rl(cfg: RLConfig, *, model_cfg=None, params=None) -> RLResult:
  """Runs (or resumes) the RL job described by `cfg` from `params` (default: cfg.model); returns
  the final params and metrics."""
  out = pathlib.Path(cfg.output_dir)
  out.mkdir(parents=True, exist_ok=True)
  if params is None:
    model_cfg, params = common.load_policy(cfg.model, cfg.episode.family)
  ckpt_cfg = dataclasses.replace(cfg.train.checkpoint,
                                 directory=cfg.train.checkpoint.directory or str(out / "ckpt"))
  trainer_cfg = dataclasses.replace(cfg.train, checkpoint=ckpt_cfg)
  cfg = dataclasses.replace(cfg, train=trainer_cfg)
  state = Trainer(registry.build_model(model_cfg), model_cfg, cfg.train).init_state(params)
  checkpointer = Checkpointer(ckpt_cfg)
  start_step, consumed = 0, 0
  if checkpointer.latest_step() is not None:
    state, data, start_step = checkpointer.restore(jax.eval_shape(lambda s: s, state))
    consumed = int(data.get("groups_consumed", 0))
    log.info("resumed from step %d (%d groups consumed)", start_step, consumed)
  with MetricsWriter(str(out / "metrics.jsonl"), str(out / "tb")) as writer:
    state, history, consumed = asyncio.run(
        _rl_async(cfg, model_cfg, state, checkpointer, start_step, consumed, writer))
  if checkpointer.latest_step() != cfg.steps:
    checkpointer.save(cfg.steps, state, {"groups_consumed": consumed}, force=True)
  checkpointer.close()
  export = cfg.export_dir or str(out / "hf")
  from tmax_jax.models import hf_io  # pylint: disable=import-outside-toplevel
  hf_io.save_pretrained(export, state.params, model_cfg, tokenizer_dir=tokenizer_dir(cfg.episode.family),
                        overwrite=True)
  return RLResult(cfg.steps, state.params, model_cfg, export, history)
