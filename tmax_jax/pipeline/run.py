"""The pipeline run: every task flows through its stages on its own, bounded per resource.

An asyncio loop drives one coroutine per task; blocking work runs in a thread pool. Writer calls
hold one of `workers` slots; builds, validations and calibration episodes hold one of
`sandbox_workers` slots (the sandbox pool), so the writer's latency and the CPU-bound sandbox
work overlap. After every stage the task's state file is replaced (state.py), so a killed run
loses only the stages in flight. An endpoint that refuses us (wrong key, URL or model) stops the
run at once; one that still fails after the client's backoff stops it after
`max_endpoint_failures` consecutive tasks; both leave their tasks as "error", which the next run
(--resume) redoes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import pathlib
import sys
from collections.abc import Callable

from tmax_jax import cli
from tmax_jax.agents import harnesses
from tmax_jax.errors import UserError
from tmax_jax.models import registry
from tmax_jax.pipeline import publish, stages
from tmax_jax.pipeline.config import PipelineConfig
from tmax_jax.pipeline.state import DONE, ERROR, Store, first_open
from tmax_jax.tasks.generator.axes import default_taxonomy, load_taxonomy, sample_axes
from tmax_jax.tasks.generator.llm import ChatClient, EndpointError

EXIT_OK, EXIT_UNUSABLE, EXIT_STOPPED = 0, 2, 3


class Pipeline:
  """One invocation over the tasks start..start+n-1: their states, the slots, the breaker."""

  def __init__(self, cfg: PipelineConfig, store: Store, run: int):
    self.cfg, self.store, self.run_id = cfg, store, run
    self.stages = cfg.stages()
    self.sandbox_workers = cfg.sandbox_workers or os.cpu_count() or 1
    self.ctx = stages.Context(cfg, store, ChatClient(cfg.writer))
    self.taxonomy = load_taxonomy(cfg.taxonomy) if cfg.taxonomy else default_taxonomy()
    self.stop_reason = ""
    self._failures = 0
    self.bars: dict = {}  # stage -> its progress bar (cli.progress)

  # ------------------------------------------------------------------------------------------
  # the endpoint breaker

  def _endpoint_outcome(self, record: dict) -> None:
    if record["category"] != "endpoint":
      if record["status"] != ERROR:
        self._failures = 0
      return
    self._failures += 1
    if record.get("fatal") or self._failures >= self.cfg.max_endpoint_failures:
      self.stop_reason = self.stop_reason or (
        f"endpoint unusable ({self._failures} consecutive task(s) failed on it): {record['reason']}"
      )

  # ------------------------------------------------------------------------------------------
  # one task

  def _new_state(self, index: int) -> dict:
    sample = sample_axes(self.cfg.seed, index, self.taxonomy)
    return {"id": sample.id, "index": index, "sample": sample.to_json(), "stages": {}}

  def load_state(self, index: int) -> dict:
    task_id = sample_axes(self.cfg.seed, index, self.taxonomy).id
    return self.store.load(task_id) or self._new_state(index)

  async def _stage(self, stage: str, state: dict) -> dict | None:
    """The stage's record (None: the run stopped while the task waited for a slot)."""
    loop = asyncio.get_running_loop()
    if stage == "calibrate":
      start = loop.time()
      try:
        result = await self.calibrator(state, lambda: self.store.save(state))
      except Exception as err:  # kept as the task's error record
        result = stages.crashed(err)
      return result.record(self.run_id, loop.time() - start)
    fn = getattr(stages, stage)
    sem = {"write": self.llm_slots, "decontaminate": self.cpu_slots}.get(stage, self.sandbox_slots)
    async with sem:
      if self.stop_reason:
        return None
      return await loop.run_in_executor(self.pool, stages.timed, fn, self.ctx, state, self.run_id)

  async def run_task(self, state: dict) -> None:
    """The task's open stages in order, until one rejects it, errs or the run stops."""
    while not self.stop_reason:
      stage = first_open(state, self.stages)
      if stage is None:
        return
      record = await self._stage(stage, state)
      if record is None:
        return
      state["stages"][stage] = record
      self.store.save(state)
      if stage in ("write", "calibrate"):
        self._endpoint_outcome(record)
      self.bars[stage].update(1)
      if record["status"] != DONE:
        self._drop_from_bars(stage)
        return

  def _drop_from_bars(self, stage: str) -> None:
    for later in self.stages[self.stages.index(stage) + 1 :]:
      self.bars[later].total -= 1
      self.bars[later].refresh()

  # ------------------------------------------------------------------------------------------
  # the run

  def _open_bars(self, states: list[dict]) -> None:
    for pos, stage in enumerate(self.stages):
      todo = sum(publish.needs(s, stage) for s in states)
      self.bars[stage] = cli.progress(
        total=todo, desc=f"{stage:>13}", unit="task", position=pos, disable=not self.cfg.progress
      )

  async def main(self, states: list[dict]) -> None:
    self.llm_slots = asyncio.Semaphore(self.cfg.workers)
    self.sandbox_slots = asyncio.Semaphore(self.sandbox_workers)
    self.cpu_slots = asyncio.Semaphore(os.cpu_count() or 1)
    threads = self.cfg.workers + self.sandbox_workers + (os.cpu_count() or 1)
    self.pool = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="pipeline")
    self.calibrator = None
    if "calibrate" in self.stages and any(publish.needs(s, "calibrate") for s in states):
      # jax, transformers and the tokenizer load only when a task still needs calibrating
      from tmax_jax.pipeline.calibrate import Calibrator  # noqa: PLC0415  (jax: calibration only)

      self.calibrator = Calibrator(self.cfg, self.store, self.sandbox_slots, self.sandbox_workers)
    self._open_bars(states)
    try:
      await asyncio.gather(*(self.run_task(s) for s in states if not publish.is_rejected(s)))
    finally:
      for bar in self.bars.values():
        bar.close()
      if self.calibrator is not None:
        await self.calibrator.aclose()
      self.pool.shutdown(wait=True)


def check_local(cfg: PipelineConfig) -> None:
  """What needs no endpoint, checked first (UserError naming the flag): the taxonomy file, the
  calibration's harness and tokenizer family, the benchmark directories."""
  if cfg.taxonomy:
    load_taxonomy(cfg.taxonomy)
  if "calibrate" in cfg.stages():
    if cfg.calibration.harness not in harnesses.names():
      raise UserError(
        f"--harness={cfg.calibration.harness}: no such harness; expected one of "
        f"{list(harnesses.names())}"
      )
    try:
      registry.tokenizer_spec(cfg.calibration.family)
    except UserError as e:
      raise UserError(f"--family={cfg.calibration.family}: {e}") from None
  for benchmark in cfg.benchmarks if "decontaminate" in cfg.stages() else ():
    if not pathlib.Path(benchmark).is_dir():
      raise UserError(f"--benchmark={benchmark}: no such directory (expected a TB1/TB2 task set)")


def preflight(cfg: PipelineConfig) -> None:
  """The writer (and the reference policy) must answer before any work starts."""
  ChatClient(cfg.writer).preflight()
  if "calibrate" in cfg.stages():
    ChatClient(cfg.policy_chat()).preflight()


def run(cfg: PipelineConfig, argv: list[str] | None = None, log: Callable = print) -> int:
  """Runs (or resumes) the pipeline -> exit status (0 done, 2 unusable endpoint, 3 stopped).
  A mistake that needs no endpoint to find (check_local) raises UserError."""
  check_local(cfg)
  store = Store(cfg.out)
  try:
    preflight(cfg)
  except EndpointError as err:
    log(f"error: {err}", file=sys.stderr)
    return EXIT_UNUSABLE
  with store.locked():
    identity = {"seed": cfg.seed, "taxonomy": cfg.taxonomy}
    run_id = store.begin_run(identity, cfg.resume, list(argv or []))
    pipe = Pipeline(cfg, store, run_id)
    if cfg.benchmarks and "decontaminate" in pipe.stages:
      pipe.ctx.benchmarks = stages.benchmark_indexes(cfg.benchmarks)
    states = [pipe.load_state(i) for i in range(cfg.start, cfg.start + cfg.n)]
    asyncio.run(pipe.main(states))
    report = None
    if cfg.until == "publish" and not pipe.stop_reason:
      report = publish.publish(cfg, store, states, pipe.stages, pipe.ctx.benchmarks, run_id)
      log(publish.table(report))
    unfinished = publish.unfinished(states, pipe.stages)
  if pipe.stop_reason:
    log(
      f"error: stopped: {pipe.stop_reason}; {len(unfinished)} task(s) unfinished, "
      "run again with --resume",
      file=sys.stderr,
    )
    return EXIT_STOPPED
  if unfinished:
    log(
      f"error: {len(unfinished)} task(s) failed (their state's error records say why: "
      f"{unfinished[:5]}); run again with --resume",
      file=sys.stderr,
    )
    return EXIT_STOPPED
  if report is not None:
    log(
      f"pipeline: published {report['kept']} of {report['requested']} tasks to "
      f"{report['published']}"
    )
  return EXIT_OK
