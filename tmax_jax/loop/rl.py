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
count. Process 0 writes metrics and the HF export; every process appends what happened to each
group it consumed to `<output_dir>/rollouts.jsonl` (rollout/GroupScheduler records: fate, scored
episodes, failures by kind) before the step's checkpoint. `deterministic` orders the batches so
that a resumed run reproduces the uninterrupted one; `record_dir` / `replay_dir` store and replay
batches.

Before its first rollout the run sweeps what killed runs' sandboxes left on this host (sandbox/
census.py, by the project's own markers) and closes its own sandboxes on SIGTERM / SIGHUP.

The server is a loop/policy_server.PolicyServer: in-process (above), or with `serving.address` a
separately launched one (launch/serve.py, or launch/router.py in front of replicas) that the loop
pushes its weights to through UpdateWeights at the start and after every step. A multi-process
run shares it: every process runs its own rollouts against it, and a push is one push per version
by process 0 (SharedExternalServer: every process helps gather the params to process 0's host,
then waits for the push's outcome). If that server dies and comes back, requests it cut are lost
(their groups are dropped and counted as `rollout/groups_dropped_server`), the client resyncs the
new instance once with the current policy (`on_restart`: single process, from the state, never
while a step holds it; multi-process, process 0 alone from its host copy of the last push while
the other processes wait for the server to report that version) and rollouts go on;
`server_restarts` counts them. In multi-process runs the step boundary's collectives run off the
asyncio loop, so that a process waiting there for the others keeps its rollouts and its resync
going. Progress, metrics, checkpoints, resume and the HF export are the shared step driver's
(loop/steps.py).

Concurrency domains: the asyncio loop (rollout scheduling, gRPC), executor threads (the trainer
step, weight pushes), the EpisodeWorker's thread pool (blocking sandbox I/O) and JetStream's own
threads (in-process server).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import pathlib
import time
from collections.abc import Sequence
from typing import Any

import grpc
import jax
import numpy as np

from tmax_jax.agents import GroupScheduler, NoUsableGroups
from tmax_jax.agents.worker import EpisodeWorker
from tmax_jax.errors import ConfigError
from tmax_jax.inference.client import ClientConfig, RolloutClient, RolloutError, check_top_logprobs
from tmax_jax.loop import placement as placement_lib
from tmax_jax.loop import replay, rollout_batch, task_stream
from tmax_jax.loop.config import RLConfig, with_family
from tmax_jax.loop.policy import load_policy
from tmax_jax.loop.policy_server import PolicyServer, open_server
from tmax_jax.loop.steps import StepDriver, export_hf
from tmax_jax.models import ModelConfig, registry
from tmax_jax.sandbox import census, runtime
from tmax_jax.tasks import sources
from tmax_jax.tokenizers import load_tokenizer
from tmax_jax.train import distributed
from tmax_jax.train.checkpoint import model_metadata
from tmax_jax.train.state import TrainState
from tmax_jax.train.step import Trainer

log = logging.getLogger(__name__)


@dataclasses.dataclass
class RLResult:
  steps_done: int
  params: Any  # the trained param tree
  model_cfg: ModelConfig
  export_dir: str
  metrics: list[dict]


@dataclasses.dataclass
class _Job:
  """What every step needs: config, placement, trainer, state, data position, step driver."""

  cfg: RLConfig
  place: placement_lib.Placement
  model_cfg: ModelConfig
  trainer: Trainer
  state: TrainState
  position: task_stream.Position
  steps: StepDriver


def _local_rollout(cfg: RLConfig):
  """This process's share of each batch: prompts_per_batch / processes groups."""
  n = jax.process_count()
  if cfg.rollout.prompts_per_batch % n:
    raise ConfigError(
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


def rollout_log(output_dir: str) -> pathlib.Path:
  """This process's rollout log (one JSON line per consumed group, with its step)."""
  n, i = jax.process_count(), jax.process_index()
  name = "rollouts.jsonl" if n == 1 else f"rollouts.process_{i}_of_{n}.jsonl"
  return pathlib.Path(output_dir) / name


def _finish_step(
  job: _Job, step: int, m: dict, consumed: list[int], records: Sequence[dict] = ()
) -> None:
  """Data position over all processes, the step's rollout records (before the checkpoint: a
  step whose records are written but not checkpointed is redone after a crash), then the
  driver's metrics and checkpoint."""
  every = distributed.allgather_json(sorted(consumed))
  job.position = job.position.merged(i for part in every for i in part)
  m["data/consumed"] = float(job.position.count)
  if records:
    lines = "".join(json.dumps({"step": step + 1, **r}) + "\n" for r in records)
    with open(rollout_log(job.cfg.output_dir), "a", encoding="utf-8") as f:
      f.write(lines)
  job.steps.end_step(step, job.state, m, job.position.to_json())


def _rollout_metrics(groups, stats: dict, version: int, rollout_s: float) -> dict:
  """This step's rollout metrics over every process (means of means; counters summed)."""
  every = distributed.allgather_json({"m": rollout_batch.rollout_metrics(groups), "stats": stats})
  out = {}
  for key in sorted({k for e in every for k in e["m"]}):
    out[key] = float(np.mean([e["m"][key] for e in every if key in e["m"]]))
  for key in sorted({k for e in every for k in e["stats"]}):
    out[f"rollout/{key}"] = float(sum(e["stats"].get(key, 0) for e in every))
  return {**out, "rollout_wait_s": rollout_s, "policy_version": version}


async def _collective(fn, *args):
  """fn(*args), a collective: in multi-process runs in an executor thread, so that this process's
  asyncio loop (its episodes, a restart's resync) goes on while it waits for the others (the
  resync of a shared server waits on process 0's loop); single process: inline, as before."""
  if jax.process_count() == 1:
    return fn(*args)
  return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


async def _open_server(job: _Job, version: int) -> PolicyServer:
  """The policy server, serving the current policy as `version` (a copy for an in-process one:
  the trainer donates the state's buffers)."""
  cfg = job.cfg
  engine = cfg.served_engine()
  client_cfg = ClientConfig(max_attempts=cfg.serving.max_attempts, backoff_max_s=2.0)
  return await open_server(
    job.model_cfg, job.state.params, version, cfg.serving, engine, job.place, client_cfg
  )


async def _rl_async(job: _Job) -> None:
  cfg, loop = job.cfg, asyncio.get_running_loop()
  tokenizer = load_tokenizer(cfg.episode.family)
  train_tasks, _ = sources.load_split(cfg.tasks)
  version = job.steps.start  # the policy version the server holds
  server = await _open_server(job, version)
  step_lock = asyncio.Lock()  # a trainer step donates the state: no push reads it meanwhile

  async def resync() -> None:  # a restarted external server boots on other weights
    if not server.resync_reads_params:
      await server.resync(None, version)
      return
    async with step_lock:
      await server.resync(job.state.params, version)

  client_cfg = ClientConfig(max_attempts=cfg.serving.max_attempts, backoff_max_s=2.0)
  worker_cfg = cfg.rollout_worker(jax.process_count())
  log.info(
    "rollouts: %d episodes in flight, %.0f s per model request",
    worker_cfg.max_parallel_episodes,
    worker_cfg.request_timeout_s,
  )
  async with RolloutClient(server.address, client_cfg, on_restart=resync) as client:
    status = await client.wait_until_ready(timeout_s=worker_cfg.request_timeout_s)
    check_top_logprobs(status, worker_cfg.top_logprobs, client.address)
    worker = EpisodeWorker.served(client, tokenizer, cfg.episode, cfg.runner, worker_cfg)
    stream = task_stream.stream(
      train_tasks, cfg.tasks.seed, job.position, jax.process_index(), jax.process_count()
    )
    rollout = _local_rollout(cfg)
    sched = GroupScheduler(stream, worker, rollout, indexed=True, ordered=cfg.deterministic)
    rows = rollout.prompts_per_batch * rollout.group_size  # fixed: the step compiles once
    watch = asyncio.create_task(server.watch(client))  # a shared server's restarts, seen idle
    hits = _PrefixHits()
    try:
      for step in job.steps:
        t0 = time.perf_counter()
        try:
          groups = await sched.next_batch(trainer_version=version)
        except NoUsableGroups as err:  # no learning signal in reach: count it, keep the policy
          log.warning("step %d: %s", step + 1, err)
          groups = []
        consumed, sched.consumed = sched.consumed, []
        records, sched.records = sched.records, []
        extra = await _collective(
          _rollout_metrics, groups, dict(sched.stats), version, time.perf_counter() - t0
        )
        # every process trains or every process skips: the step is a collective
        ready = all(await _collective(distributed.allgather_json, bool(groups)))
        local = None
        if ready:
          trajs = rollout_batch.to_trajectories(groups, cfg.train.loss.estimator)
          local = job.trainer.make_batch(trajs, cfg.seq_len, num_rows=rows, pack_rows=False)
        async with step_lock:
          m = await loop.run_in_executor(None, _train, job, step, local, extra)
          if ready:
            version = step + 1
            await server.push(job.state.params, version)
            m["policy_version"] = version
        m["server_restarts"] = float(client.restarts)
        m["prefix_hit_rate"] = await hits.step_rate(client)
        _finish_step(job, step, m, consumed, records)
    finally:
      watch.cancel()
      await sched.close()
      await worker.aclose()
      await server.stop()


def prefix_hit_rate(before: tuple[int, int], now: tuple[int, int]) -> float:
  """Of the prompt tokens a server took between two Status reads (cached_prompt_tokens,
  prefill_tokens), the share its prefix cache served; counters that went down are a restarted
  server's, counted from zero. 0 when it took none."""
  if now[0] < before[0] or now[1] < before[1]:
    before = (0, 0)
  cached, computed = now[0] - before[0], now[1] - before[1]
  return cached / (cached + computed) if cached + computed else 0.0


class _PrefixHits:
  """prefix_hit_rate over each step from the server's Status (behind a router: every replica's);
  NaN when the server did not answer (the next step's rate then covers both)."""

  def __init__(self):
    self._last = (0, 0)

  async def step_rate(self, client) -> float:
    try:
      st = await client.status()
    except (grpc.aio.AioRpcError, RolloutError):
      return float("nan")
    now = (st.cached_prompt_tokens, st.prefill_tokens)
    rate, self._last = prefix_hit_rate(self._last, now), now
    return rate


def _replay(job: _Job) -> None:
  """Trains on the recorded batches of the remaining steps (no server, no rollouts)."""
  for step in job.steps:
    batch = replay.load(job.cfg.replay_dir, step + 1)
    local = None if batch is None else distributed.local_rows(batch)
    _finish_step(job, step, _train(job, step, local, {}), [])


def _check_layout(cfg: RLConfig) -> placement_lib.Placement:
  if cfg.train.packing.enabled and jax.process_count() > 1:
    raise ConfigError(
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
    placement_lib.describe(place.serving_mesh()),
    place.placement,
  )
  return place


def run_rl(cfg: RLConfig, *, model_cfg=None, params=None) -> RLResult:
  """Runs (or resumes) the RL job described by `cfg` from `params` (default: cfg.model); returns
  the final params and metrics. Every process of a multi-process run calls this."""
  place = _check_layout(cfg)
  if params is None:
    model_cfg, params, episode = load_policy(cfg.model, cfg.episode, mesh=place.trainer_mesh)
    cfg = dataclasses.replace(cfg, episode=episode)
  else:
    params = jax.device_put(params, registry.param_shardings(model_cfg, place.trainer_mesh))
    cfg = dataclasses.replace(cfg, episode=with_family(cfg.episode, model_cfg.model_type))
  cfg = dataclasses.replace(cfg, train=cfg.train.for_run(cfg.steps))
  trainer = Trainer(registry.build_model(model_cfg), model_cfg, cfg.train, place.trainer_mesh)
  state = trainer.init_state(params)
  meta = model_metadata(model_cfg, cfg.episode.family)
  if not cfg.replay_dir:  # rollouts: reap a killed run's sandboxes, close ours on SIGTERM
    runtime.install_signal_handlers()
    swept = census.sweep()
    if swept:
      log.info("swept %d leftovers of dead runs' sandboxes: %s", len(swept), swept[:5])
  with StepDriver.open(cfg.output_dir, cfg.train.checkpoint, cfg.steps, "rl", meta) as steps:
    state, data = steps.resume(state)
    position = task_stream.Position.from_json(data) if data else task_stream.Position()
    job = _Job(cfg, place, model_cfg, trainer, state, position, steps)
    if steps.start < cfg.steps:
      if cfg.replay_dir:
        _replay(job)
      else:
        asyncio.run(_rl_async(job))
    steps.finish(job.state, job.position.to_json())
    history = steps.history
  export = export_hf(
    cfg.export_dir or f"{cfg.output_dir}/hf", job.state.params, model_cfg, cfg.episode.family
  )
  return RLResult(cfg.steps, job.state.params, model_cfg, export, history)
