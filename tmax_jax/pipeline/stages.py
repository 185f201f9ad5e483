"""The per-task stages that run in worker threads: write, build, validate, decontaminate.

Each takes the task's state and returns a StageResult; none raises for a property of the task
(that is a rejection with its reason and category) and only an unusable endpoint is an "error".
Calibration (calibrate.py) is the asynchronous stage.
"""

from __future__ import annotations

import dataclasses
import pathlib
import time
from collections.abc import Mapping
from typing import Any

from tmax_jax.pipeline.config import PipelineConfig
from tmax_jax.pipeline.state import DONE, ERROR, REJECTED, Store
from tmax_jax.sandbox import SandboxError
from tmax_jax.sandbox.images.dockerfile import DockerfileError
from tmax_jax.tasks import difficulty, runner
from tmax_jax.tasks.format import TaskFormatError, load_task, write_task
from tmax_jax.tasks.generator import llm
from tmax_jax.tasks.generator import pipeline as generator
from tmax_jax.tasks.generator.axes import AxisSample


@dataclasses.dataclass
class StageResult:
  status: str  # done | rejected | error
  reason: str = ""
  category: str = ""  # a short class of the reason, for the per-axis table
  data: dict = dataclasses.field(default_factory=dict)

  def record(self, run: int, seconds: float) -> dict:
    return {
      "status": self.status,
      "reason": self.reason,
      "category": self.category,
      "seconds": round(seconds, 3),
      "run": run,
      **self.data,
    }


def done(**data) -> StageResult:
  return StageResult(DONE, data=data)


def rejected(reason: str, category: str, **data) -> StageResult:
  return StageResult(REJECTED, reason, category, data)


def endpoint_error(err: llm.EndpointError) -> StageResult:
  return StageResult(ERROR, str(err), "endpoint", {"fatal": err.fatal})


@dataclasses.dataclass
class Context:
  """What the stages share: the config, the state store, the writer client, benchmark indexes."""

  cfg: PipelineConfig
  store: Store
  client: llm.ChatClient
  benchmarks: Mapping[str, difficulty.BenchmarkIndex] = dataclasses.field(default_factory=dict)


def sample_of(state: Mapping[str, Any]) -> AxisSample:
  s = dict(state["sample"])
  return AxisSample(**{**s, "primitive_skills": tuple(s["primitive_skills"])})


def load(ctx: Context, state: Mapping[str, Any]):
  return load_task(ctx.store.task_dir(state["id"]))


def write(ctx: Context, state: dict) -> StageResult:
  """The writer model's task (retries feed the parse error back), written to work/<id>/task
  under a unique name <sample id>-<slug>."""
  sample = sample_of(state)

  def parse(reply: str):
    task, smoke = llm.parse_task_reply(reply, sample)
    return task, smoke, llm.extract_json(reply)["instruction"]

  try:
    (task, smoke, template), attempts = generator.ask_until_parsed(
      ctx.client, llm.render_prompt(sample), parse, ctx.cfg.generation.max_attempts
    )
  except llm.EndpointError as err:
    return endpoint_error(err)
  except (llm.ReplyError, llm.ChatError) as err:
    return rejected(f"{type(err).__name__}: {err}", "reply")
  name = f"{sample.id}-{task.config.task.name}"
  config = dataclasses.replace(task.config, task=dataclasses.replace(task.config.task, name=name))
  try:
    write_task(
      dataclasses.replace(task, config=config), ctx.store.task_dir(sample.id), overwrite=True
    )
  except TaskFormatError as err:
    return rejected(f"task: {err}", "format")
  return done(name=name, attempts=attempts, smoke=smoke, instruction_template=template)


def build(ctx: Context, state: dict) -> StageResult:
  """Builds the task's image(s) (cached layers; a compose task's services too) without
  starting a sandbox; the validate stage's trial reuses them."""
  task, logs = load(ctx, state), {}
  cfg = ctx.cfg.generation.runner
  try:
    comp = runner.trial_compose(task, cfg)
    if comp:
      runner.pod_trial_spec(task, comp, cfg, logs)
    else:
      runner.task_spec(task, cfg, logs)
  except runner.TaskUnsupportedError as err:
    return rejected(f"unsupported here: {err}", "unsupported")
  except (SandboxError, DockerfileError, TaskFormatError) as err:
    return rejected(f"build failed: {str(err)[-1500:]}", "build_failed")
  return done(environment=logs.get("environment.txt", "")[-2000:])


_VALIDATE_CATEGORIES = (
  ("fixture", "fixture"),
  ("smoke test", "smoke"),
  ("unsupported", "unsupported"),
  ("oracle", "oracle"),
)


def validate(ctx: Context, state: dict) -> StageResult:
  """The sampled fixture is there, the smoke test passes and the oracle scores 1 in a fresh
  sandbox; with noop_check, doing nothing must not pass the verifier."""
  task, sample = load(ctx, state), sample_of(state)
  smoke = state["stages"]["write"]["smoke"]
  reason, reward = generator.build_and_check(task, smoke, ctx.cfg.generation, sample.fixture)
  if reason is not None:
    category = next((c for key, c in _VALIDATE_CATEGORIES if key in reason), "oracle")
    return rejected(reason, category, oracle_reward=reward)
  if ctx.cfg.noop_check:
    try:
      noop = runner.run_noop(task, ctx.cfg.generation.runner)
    except runner.RewardError as err:
      return rejected(f"no-op run: {err}", "verifier")
    if noop.reward >= 1.0:
      return rejected("the verifier passes when the agent does nothing", "noop_passes")
  return done(oracle_reward=reward)


def decontaminate(ctx: Context, state: dict) -> StageResult:
  """Rejects a task whose instruction shares a 13-gram with a benchmark task."""
  text = (ctx.store.task_dir(state["id"]) / "instruction.md").read_text(encoding="utf-8")
  hits = {}
  for name, index in ctx.benchmarks.items():
    report = difficulty.check_contamination(text, index, state["id"])
    if report.contaminated:
      hits[name] = {
        "overlapping_ngrams": report.overlapping_ngrams,
        "benchmark_tasks": list(report.benchmark_tasks),
      }
  if hits:
    where = "; ".join(f"{b}: {', '.join(h['benchmark_tasks'][:5])}" for b, h in hits.items())
    return rejected(f"13-gram overlap with {where}", "contaminated", overlaps=hits)
  return done(checked=sorted(ctx.benchmarks))


def crashed(err: Exception) -> StageResult:
  """An unexpected exception in a stage: recorded as an error (the run goes on, exits 3, and a
  resumed run retries the stage) with the exception as the reason."""
  return StageResult(ERROR, f"{type(err).__name__}: {err}", "exception")


def timed(fn, ctx: Context, state: dict, run: int) -> dict:
  """Runs a stage and returns its record."""
  start = time.monotonic()
  try:
    result = fn(ctx, state)
  except Exception as err:  # kept as the task's error record
    result = crashed(err)
  return result.record(run, time.monotonic() - start)


def benchmark_indexes(dirs) -> dict[str, difficulty.BenchmarkIndex]:
  """{name: 13-gram index} per benchmark directory (name = its directory name, made unique)."""
  out: dict[str, difficulty.BenchmarkIndex] = {}
  for d in dirs:
    name = pathlib.Path(d).resolve().name
    while name in out:
      name += "_"
    out[name] = difficulty.BenchmarkIndex.build(d)
  return out
