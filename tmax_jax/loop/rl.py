"""The RL loop: async group rollouts on sandboxed tasks -> DPPO step -> weight sync, repeated.

Placement (loop/placement.py): the trainer runs on `cfg.mesh` over the devices the serving
placement leaves it (all of them when colocated); every process runs its own in-process JetStream
server (gRPC on loopback) on its own serving devices, and its own share of the episodes, each in a
sandbox on its host. Rollouts run on the asyncio loop and in episode threads while the trainer's
step runs in an executor thread, so generation for later batches overlaps training (bounded by
`rollout.async_steps`). Each process packs the rows of its own groups; the global batch is
assembled on the trainer mesh with jax.make_array_from_process_local_data. After each step the new
params are resharded device to device into each server (loop/weight_sync.py, in an executor
thread) with version = step; every sampled token carries the version that produced it.
Checkpoints (Orbax, written by every process) hold the train state and the exact data position
(loop/task_stream.py); a restarted run resumes from the latest one, also on another mesh or process
count. Process 0 writes metrics and the HF export. `deterministic` orders the batches so that a
resumed run reproduces the uninterrupted one; `record_dir` / `replay_dir` store and replay batches.

With `serving.address` the server is a separately launched one (launch/serve.py; one process): the
loop pushes its weights there through UpdateWeights at the start and after every step. If that
server dies and comes back, requests it cut are lost (their groups are dropped and counted as
`rollout/groups_dropped_server`), the client pushes the current policy to the new instance once
(`on_restart`, never while a step holds the state) and rollouts go on; `server_restarts` counts
them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import pathlib
import time

import jax
import numpy as np
import tqdm

from tmax_jax import sharding
from tmax_jax.agents import batching
from tmax_jax.agents.episode import stop_token_ids
from tmax_jax.agents.rollout import GroupScheduler, NoUsableGroups
from tmax_jax.agents.worker import EpisodeWorker
from tmax_jax.inference.client import ClientConfig, RolloutClient, check_top_logprobs
from tmax_jax.loop import common, replay, task_stream
from tmax_jax.loop import placement as placement_lib
from tmax_jax.loop.config import RLConfig
from tmax_jax.loop.weight_sync import WeightSync, served_target
from tmax_jax.models import registry
from tmax_jax.tokenizers.builder import load_tokenizer, tokenizer_dir
from tmax_jax.train import distributed
from tmax_jax.train.checkpoint import Checkpointer, model_metadata
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


@dataclasses.dataclass
class _Job:
  """What every step needs: config, placement, trainer, state, position, outputs."""

  cfg: RLConfig
  place: placement_lib.Placement
  model_cfg: object
  trainer: Trainer
  state: object
  checkpointer: Checkpointer
  position: task_stream.Position
  writer: MetricsWriter
  history: list = dataclasses.field(default_factory=list)


def _local_rollout(cfg: RLConfig):
  """This process's share of each batch: prompts_per_batch / processes groups."""
  n = jax.process_count()
  if cfg.rollout.prompts_per_batch % n:
    raise ValueError(
      f"rollout.prompts_per_batch={cfg.rollout.prompts_per_batch} must be a "
      f"multiple of the {n} processes (each runs its share of the groups)"
    )
  return dataclasses.replace(cfg.rollout, prompts_per_batch=cfg.rollout.prompts_per_batch // n)


def _train(job: _Job, step: int, local, extra: dict) -> dict:
  """Records and trains on this process's rows of step `step + 1` (None: every process skips)."""
  cfg = job.cfg
  if cfg.record_dir:
    replay.record(cfg.record_dir, step + 1, local, jax.process_index(), jax.process_count())
  if local is None:
    return {"skipped": 1.0, "skip_reason": "no_usable_groups", **extra}
  job.state, m = job.trainer.step(job.state, local)
  return {**m, **extra}


def _finish_step(job: _Job, step: int, m: dict, consumed: list[int]) -> None:
  """Data position over all processes, metrics (process 0), checkpoint (every process)."""
  every = distributed.allgather_json(sorted(consumed))
  job.position = job.position.merged(i for part in every for i in part)
  m["data/consumed"] = float(job.position.count)
  job.writer.write(step + 1, m)
  job.history.append({"step": step + 1, **m})
  job.checkpointer.save(step + 1, job.state, job.position.to_json())


def _rollout_metrics(groups, stats: dict, version: int, rollout_s: float) -> dict:
  """This step's rollout metrics over every process (means of means; counters summed)."""
  every = distributed.allgather_json({"m": batching.rollout_metrics(groups), "stats": stats})
  out = {}
  for key in sorted({k for e in every for k in e["m"]}):
    out[key] = float(np.mean([e["m"][key] for e in every if key in e["m"]]))
  for key in sorted({k for e in every for k in e["stats"]}):
    out[f"rollout/{key}"] = float(sum(e["stats"].get(key, 0) for e in every))
  return {**out, "rollout_wait_s": rollout_s, "policy_version": version}


async def _start_server(job: _Job):
  """-> (in-process server on this process's serving mesh, its WeightSync), or (None, None) when
  the rollouts go to an external server (`serving.address`). The server starts on the current
  policy (a copy: the trainer donates the state's buffers), as version 0."""
  cfg = job.cfg
  if cfg.serving.address:
    return None, None
  served_cfg = common.served_config(job.model_cfg, cfg.serving)
  serving = cfg.serving
  if cfg.deterministic:  # a prefix served from the cache differs from a recomputed one in the
    # last bit, a restarted server starts with an empty cache, and a request's numbers must not
    # depend on which others share its prefill and decode steps
    serving = dataclasses.replace(serving, prefix_cache=False, batch_invariant=True)
  sync = WeightSync(job.place.trainer_mesh, served_target(served_cfg, job.place.server_mesh))
  served = await asyncio.get_running_loop().run_in_executor(None, sync, job.state.params)
  server = common.start_serving(
    served_cfg,
    served,
    serving,
    stop_token_ids(cfg.episode),
    cfg.worker.top_logprobs,
    mesh=job.place.server_mesh,
  )
  return server, sync


async def _rl_async(job: _Job, start_step: int) -> None:
  cfg, loop = job.cfg, asyncio.get_running_loop()
  tokenizer = load_tokenizer(cfg.episode.family)
  train_tasks, _ = common.load_tasks(cfg.tasks)
  server, sync = await _start_server(job)
  version = start_step  # the policy version the server holds
  steps = asyncio.Lock()  # a trainer step donates the state: no push reads it meanwhile

  async def push(v: int) -> None:  # the current policy to the server, as version v
    if sync is None:
      await client.update_weights(job.state.params, version=v)
    else:
      served = await loop.run_in_executor(None, sync, job.state.params)
      await loop.run_in_executor(None, server.driver.update_weights, served, v)

  async def resync() -> None:  # a restarted external server boots on other weights
    async with steps:
      await client.update_weights(job.state.params, version=version)

  client_cfg = ClientConfig(max_attempts=cfg.serving.max_attempts, backoff_max_s=2.0)
  async with RolloutClient(
    cfg.serving.address or server.address, client_cfg, on_restart=resync
  ) as client:
    status = await client.wait_until_ready(timeout_s=cfg.worker.request_timeout_s)
    check_top_logprobs(status, cfg.worker.top_logprobs, client.address)
    if sync is None:
      await client.update_weights(job.state.params, version=start_step)
    elif start_step:  # the server started on the restored policy as version 0: tag it
      await push(start_step)
    worker = EpisodeWorker.served(
      client,
      tokenizer,
      cfg.episode,
      common.runner_config(cfg.sandbox_backend, cfg.sandbox_memory_mb),
      cfg.worker,
    )
    stream = task_stream.stream(
      train_tasks, cfg.tasks.seed, job.position, jax.process_index(), jax.process_count()
    )
    rollout = _local_rollout(cfg)
    sched = GroupScheduler(stream, worker, rollout, indexed=True, ordered=cfg.deterministic)
    rows = rollout.prompts_per_batch * rollout.group_size  # fixed: the step compiles once
    try:
      for step in tqdm.trange(
        start_step,
        cfg.steps,
        desc="rl",
        initial=start_step,
        total=cfg.steps,
        disable=jax.process_index() != 0,
      ):
        t0 = time.perf_counter()
        try:
          groups = await sched.next_batch(trainer_version=version)
        except NoUsableGroups as err:  # no learning signal in reach: count it, keep the policy
          log.warning("step %d: %s", step + 1, err)
          groups = []
        consumed, sched.consumed = sched.consumed, []
        extra = _rollout_metrics(groups, dict(sched.stats), version, time.perf_counter() - t0)
        # every process trains or every process skips: the step is a collective
        ready = all(distributed.allgather_json(bool(groups)))
        local = None
        if ready:
          trajs = batching.to_trajectories(groups, cfg.advantage)
          local = job.trainer.make_batch(trajs, cfg.seq_len, num_rows=rows, pack_rows=False)
        async with steps:
          m = await loop.run_in_executor(None, _train, job, step, local, extra)
          if ready:
            version = step + 1
            await push(version)
            m["policy_version"] = version
        m["server_restarts"] = float(client.restarts)
        _finish_step(job, step, m, consumed)
    finally:
      await sched.close()
      await worker.aclose()
      if server is not None:
        server.stop()


def _replay(job: _Job, start_step: int) -> None:
  """Trains on the recorded batches of steps start_step+1..steps (no server, no rollouts)."""
  for step in tqdm.trange(
    start_step,
    job.cfg.steps,
    desc="rl replay",
    initial=start_step,
    total=job.cfg.steps,
    disable=jax.process_index() != 0,
  ):
    batch = replay.load(job.cfg.replay_dir, step + 1)
    local = None if batch is None else distributed.local_rows(batch)
    _finish_step(job, step, _train(job, step, local, {}), [])


def _setup(
  cfg: RLConfig, model_cfg, params
) -> tuple[RLConfig, placement_lib.Placement, object, Trainer, object]:
  if cfg.serving.address and jax.process_count() > 1:
    raise ValueError(
      f"serving.address={cfg.serving.address!r} with {jax.process_count()} "
      "processes: a multi-process run serves in process (one replica per process)"
    )
  if cfg.train.packing.enabled and jax.process_count() > 1:
    raise ValueError(
      "train.packing with several processes: each process packs its own rows "
      "into its own number of micro-batches, and the step is a collective; use "
      "fixed rows (train.packing.tokens_per_micro_batch=0) in multi-process runs"
    )
  place = placement_lib.resolve(cfg.mesh, cfg.serving)
  if not cfg.train.packing.enabled:  # packed micro-batches are sized for the mesh already
    placement_lib.check_batch(
      place.trainer_mesh,
      cfg.rollout.prompts_per_batch * cfg.rollout.group_size,
      cfg.train.micro_batches,
      "rollout.prompts_per_batch x rollout.group_size",
    )
  log.info(
    "trainer mesh %s; server mesh %s (%s)",
    placement_lib.describe(place.trainer_mesh),
    placement_lib.describe(place.server_mesh),
    place.placement,
  )
  if params is None:
    model_cfg, params = common.load_policy(cfg.model, cfg.episode.family, mesh=place.trainer_mesh)
  else:
    params = jax.device_put(params, sharding.param_shardings(model_cfg, place.trainer_mesh))
  ckpt = dataclasses.replace(
    cfg.train.checkpoint, directory=cfg.train.checkpoint.directory_for(cfg.output_dir)
  )
  train = dataclasses.replace(cfg.train.for_run(cfg.steps), checkpoint=ckpt)
  cfg = dataclasses.replace(cfg, train=train)
  trainer = Trainer(registry.build_model(model_cfg), model_cfg, cfg.train, place.trainer_mesh)
  return cfg, place, model_cfg, trainer, trainer.init_state(params)


def run_rl(cfg: RLConfig, *, model_cfg=None, params=None) -> RLResult:
  """Runs (or resumes) the RL job described by `cfg` from `params` (default: cfg.model); returns
  the final params and metrics. Every process of a multi-process run calls this."""
  out = pathlib.Path(cfg.output_dir)
  out.mkdir(parents=True, exist_ok=True)
  cfg, place, model_cfg, trainer, state = _setup(cfg, model_cfg, params)
  checkpointer = Checkpointer(cfg.train.checkpoint, model_metadata(model_cfg, cfg.episode.family))
  start_step, position = 0, task_stream.Position()
  if checkpointer.latest_step() is not None:
    state, data, start_step = checkpointer.restore(state)
    position = task_stream.Position.from_json(data)
    log.info("resumed from step %d (%d prompts consumed)", start_step, position.count)
  with MetricsWriter(str(out / "metrics.jsonl"), str(out / "tb")) as writer:
    job = _Job(cfg, place, model_cfg, trainer, state, checkpointer, position, writer)
    if start_step >= cfg.steps:
      log.info("the checkpoint is at step %d of %d: nothing to run", start_step, cfg.steps)
    elif cfg.replay_dir:
      _replay(job, start_step)
    else:
      asyncio.run(_rl_async(job, start_step))
  if checkpointer.latest_step() != cfg.steps:
    checkpointer.save(cfg.steps, job.state, job.position.to_json(), force=True)
  checkpointer.close()
  export = cfg.export_dir or str(out / "hf")
  from tmax_jax.models import hf_io  # pylint: disable=import-outside-toplevel

  hf_io.save_pretrained(
    export,
    job.state.params,
    model_cfg,
    tokenizer_dir=tokenizer_dir(cfg.episode.family),
    overwrite=True,
  )
  return RLResult(cfg.steps, job.state.params, model_cfg, export, job.history)
