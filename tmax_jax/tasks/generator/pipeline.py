"""LLM task generation: axes -> prompt -> strict parse (retries) -> build -> smoke test -> keep.

A task is kept only if its environment builds in a sandbox, its smoke test command exits 0 there,
and the oracle run gets a readable reward (by default it must also be 1: a task whose own solution
fails teaches nothing). Kept tasks are moved atomically into <out>/<sample id>-<name>/; every
attempt is a line of <out>/generation.jsonl; the dataset summary reports the balance score.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

from tmax_jax import cli
from tmax_jax.sandbox import Sandbox
from tmax_jax.tasks import compose as compose_lib
from tmax_jax.tasks import runner
from tmax_jax.tasks.format import Task, TaskFormatError, write_task
from tmax_jax.tasks.generator import fixtures
from tmax_jax.tasks.generator.axes import AxisSample, balance_score
from tmax_jax.tasks.generator.llm import (
  ChatClient,
  ChatError,
  EndpointError,
  ReplyError,
  parse_task_reply,
  render_prompt,
)

FIX_PROMPT = (
  "Your reply could not be used: {error}\n"
  "Reply again with only the corrected JSON object, following the schema exactly."
)


T = TypeVar("T")


class SmokeTestError(RuntimeError):
  """The smoke test command failed in the freshly built environment."""


@dataclasses.dataclass(frozen=True)
class GenerationConfig:
  max_attempts: int = 3  # model calls per sample (the first try plus retries on malformed output)
  require_oracle_pass: bool = True
  smoke_timeout_s: float = 120.0
  runner: runner.RunnerConfig = runner.RunnerConfig()


@dataclasses.dataclass(frozen=True)
class GenerationResult:
  sample_id: str
  status: str  # "kept" | "rejected"
  reason: str
  attempts: int
  task_dir: str | None = None
  oracle_reward: float | None = None
  seconds: float = 0.0


def ask_until_parsed(
  client: ChatClient, messages: list[dict[str, str]], parse: Callable[[str], T], max_attempts: int
) -> tuple[T, int]:
  """Calls the model until `parse(reply)` succeeds -> (parsed, attempts). A ReplyError is fed back
  to the model as the next user turn; raises the last ReplyError (or ChatError) after
  `max_attempts`. An EndpointError (the client already retried with backoff) is raised at once:
  it says nothing about this task."""
  last: Exception | None = None
  for attempt in range(1, max_attempts + 1):
    try:
      reply = client.complete(messages)
    except EndpointError:
      raise
    except ChatError as err:
      last = err
      continue
    try:
      return parse(reply), attempt
    except ReplyError as err:
      last = err
      messages = messages + [
        {"role": "assistant", "content": reply},
        {"role": "user", "content": FIX_PROMPT.format(error=err)},
      ]
  assert last is not None
  raise type(last)(f"after {max_attempts} attempts: {last}")


def ask_for_task(client: ChatClient, sample: AxisSample, max_attempts: int):
  """Calls the model until a reply parses -> (task, smoke command, attempts)."""
  (task, smoke), attempts = ask_until_parsed(
    client, render_prompt(sample), lambda r: parse_task_reply(r, sample), max_attempts
  )
  return task, smoke, attempts


class FixtureError(SmokeTestError):
  """The sampled fixture is not in the freshly built environment."""


def fixture_problem(task: Task, fixture: str | None) -> str | None:
  """The static part of the fixture check: a multi_service_compose task must define services."""
  if fixture == "multi_service_compose" and len(compose_lib.service_names(task)) < 2:
    return (
      "fixture multi_service_compose: expected environment/docker-compose.yaml with at least "
      "two services"
    )
  return None


def _smoke(command: str, timeout_s: float, fixture: str | None = None, workdir: str = ""):
  def run(sb: Sandbox) -> None:
    probe = fixtures.probe_command(fixture, workdir) if fixture else None
    if probe is not None and sb.run(probe, timeout_s=timeout_s).exit_code != 0:
      raise FixtureError(fixtures.probe_failure(fixture, workdir))
    res = sb.run(command, timeout_s=timeout_s)
    if res.exit_code != 0:
      raise SmokeTestError(
        f"smoke test `{command}` exited {res.exit_code} ({res.status}): {res.output[-500:]}"
      )

  return run


def build_and_check(
  task, smoke: str, config: GenerationConfig, fixture: str | None = None
) -> tuple[str | None, float | None]:
  """Fixture check + smoke test + oracle + verifier in a sandbox -> (rejection reason or None,
  oracle reward). `fixture`: the sampled fixture kind to look for (None: no check)."""
  problem = fixture_problem(task, fixture)
  if problem:
    return problem, None
  workdir = task.config.environment.workdir or runner.envlib.DEFAULT_WORKDIR
  try:
    res = runner.run_trial(
      task,
      None,
      config.runner,
      solution=dict(task.solution),
      before=_smoke(smoke, config.smoke_timeout_s, fixture, workdir),
    )
  except SmokeTestError as err:
    return str(err), None
  except runner.TaskUnsupportedError as err:
    return f"unsupported here: {err}", None
  except runner.RewardError as err:
    return f"smoke test: {err}", None
  if res.reason != "ok":
    return f"oracle run: {res.reason}", res.reward
  if config.require_oracle_pass and res.reward < 1.0:
    return f"oracle scored {res.reward:g}, not 1", res.reward
  return None, res.reward


def generate_task(
  sample: AxisSample,
  client: ChatClient,
  out_dir: str | pathlib.Path,
  config: GenerationConfig = GenerationConfig(),
) -> GenerationResult:
  """One sample end to end; the task directory appears in out_dir only if it is kept."""
  start, out = time.monotonic(), pathlib.Path(out_dir)
  out.mkdir(parents=True, exist_ok=True)

  def done(status, reason, attempts, task_dir=None, reward=None):
    r = GenerationResult(
      sample.id, status, reason, attempts, task_dir, reward, round(time.monotonic() - start, 3)
    )
    with open(out / "generation.jsonl", "a", encoding="utf-8") as f:
      f.write(json.dumps(dataclasses.asdict(r)) + "\n")
    return r

  try:
    task, smoke, attempts = ask_for_task(client, sample, config.max_attempts)
  except EndpointError:
    raise  # not this sample's fault: the caller stops the run
  except (ReplyError, ChatError) as err:
    return done("rejected", f"{type(err).__name__}: {err}", config.max_attempts)
  staging = pathlib.Path(tempfile.mkdtemp(prefix=".staging-", dir=out))
  try:
    try:
      written = write_task(task, staging / "task")
    except TaskFormatError as err:
      return done("rejected", f"task: {err}", attempts)
    reason, reward = build_and_check(written, smoke, config, sample.fixture)
    if reason is not None:
      return done("rejected", reason, attempts, reward=reward)
    final = out / f"{sample.id}-{task.config.task.name}"
    if final.exists():
      shutil.rmtree(final)
    (staging / "task").rename(final)
    return done("kept", "ok", attempts, str(final), reward)
  finally:
    shutil.rmtree(staging, ignore_errors=True)


def generate_dataset(
  samples: Iterable[AxisSample],
  client: ChatClient,
  out_dir: str | pathlib.Path,
  config: GenerationConfig = GenerationConfig(),
  n_domains: int = 9,
) -> dict:
  """Generates every sample; returns kept/rejected counts and the balance score of the kept set."""
  samples = list(samples)
  results = [
    generate_task(s, client, out_dir, config)
    for s in cli.progress(samples, desc="tasks", unit="task")
  ]
  kept = [r for r in results if r.status == "kept"]
  by_id = {s.id: s for s in samples}
  domains = [by_id[r.sample_id].domain for r in kept]
  summary = {
    "requested": len(results),
    "kept": len(kept),
    "rejected": len(results) - len(kept),
    "balance_score": round(balance_score(domains, n_domains), 6) if domains else 0.0,
  }
  (pathlib.Path(out_dir) / "summary.json").write_text(json.dumps(summary, indent=1))
  return summary
