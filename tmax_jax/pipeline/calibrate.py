"""The calibrate stage: k episodes of a reference policy per task and round, pass@1 / pass@k, and
the verifier knob moved towards the target band for a bounded number of rounds.

The reference policy is any OpenAI-compatible chat endpoint (ours included): the harness renders
each turn with the chat template of `calibration.family` and horizon/teacher.ChatTeacher sends it
as chat messages (text mode), with a per-episode `seed` (horizon/teacher.EndpointPolicy:
agents/worker.episode_seed of the run seed, the task, the round and the episode). Episodes run
through agents/worker.EpisodeWorker, the path RL and evaluation use, and are recorded as the
evaluation runner's trial records (plus `round` and `setting`), so tasks/difficulty.load_rollouts
reads them.

The state holds the truth: `calibration.spec` (the current verifier spec) and `rounds` are saved
before the task directory is rewritten from them (knobs.render fills the instruction's
placeholders), so a run killed mid-round resumes at that round with the same knob.

Each trial record carries the endpoint's `usage` of its episode (requests, token counts, cost_usd
at the configured prices, as the evaluation runner's records do) and each round its sum, so the
report can state calibration's cost. The per-task band is this stage's only steering; the set's
pass@1 / pass@8 against the recipe's target, and the selection that moves the published set
toward it, are pipeline/set_target.py's (its docstring says why the set is steered there).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable

from tmax_jax.agents import EpisodeConfig
from tmax_jax.agents.worker import EpisodeWorker, WorkerConfig
from tmax_jax.horizon import EndpointPolicy
from tmax_jax.loop.evaluate import EndpointConfig, trial_record, usage_record
from tmax_jax.loop.evaluate.report import total_usage
from tmax_jax.pipeline.config import PipelineConfig
from tmax_jax.pipeline.stages import StageResult, done, endpoint_error, rejected
from tmax_jax.pipeline.state import Store
from tmax_jax.tasks import difficulty, runner
from tmax_jax.tasks.format import Task, load_task, write_task
from tmax_jax.tasks.generator.llm import ChatClient, EndpointError
from tmax_jax.tasks.verifiers import knobs
from tmax_jax.tokenizers import load_tokenizer

SPEC = "spec.json"


def spec_json(spec: dict) -> bytes:
  return json.dumps(spec, indent=1, sort_keys=True).encode()  # as verifiers.bundle writes it


def materialize(store: Store, task_id: str, spec: dict, template: str) -> Task:
  """The task directory with `spec` as its hidden spec and the instruction rendered from
  `template` for it (rewritten atomically only when something differs)."""
  task = load_task(store.task_dir(task_id))
  instruction = knobs.render(template, spec) if template else task.instruction
  if task.tests.get(SPEC) == spec_json(spec) and task.instruction == instruction:
    return task
  tests = {**task.tests, SPEC: spec_json(spec)}
  new = dataclasses.replace(task, instruction=instruction, tests=tests)
  return write_task(new, store.task_dir(task_id), overwrite=True)


def round_stats(records: list[dict], k: int) -> dict:
  n, c = len(records), sum(r["passed"] for r in records)
  stats = {"n": n, "c": c, "pass@1": c / n, f"pass@{k}": difficulty.pass_at_k(n, c, k)}
  return {**stats, "usage": total_usage(records)}


class Calibrator:
  """Calibrates one task at a time (many concurrently); `slots` bounds the sandboxes."""

  def __init__(self, cfg: PipelineConfig, store: Store, slots: asyncio.Semaphore, workers: int):
    c = cfg.calibration
    self.cfg, self.cal, self.store, self.slots = cfg, c, store, slots
    tokenizer = load_tokenizer(c.family)
    self.client = ChatClient(cfg.policy_chat())
    self.prices = EndpointConfig(
      price_per_mtok_in=c.price_per_mtok_in, price_per_mtok_out=c.price_per_mtok_out
    )
    self.policy = EndpointPolicy(self.client, tokenizer, c.seed, track_usage=True)
    episode = EpisodeConfig(
      harness=c.harness,
      family=c.family,
      max_tool_calls=c.max_tool_calls,
      command_timeout_s=c.command_timeout_s,
      turn_max_tokens=c.turn_max_tokens,
    )
    self.worker = EpisodeWorker(
      self.policy,
      tokenizer,
      episode,
      cfg.generation.runner,
      WorkerConfig(max_parallel_episodes=workers),
    )

  async def aclose(self) -> None:
    await self.worker.aclose()

  async def _play(self, task: Task, rnd: int, setting: str) -> list[dict] | StageResult:
    """k episodes -> their trial records, or the stage's end when they cannot count."""

    async def one(sample: int):
      async with self.slots:
        trial = await self.worker.trial(task, rnd, sample)
      return sample, trial, self.policy.usage(task.name, rnd, sample)

    records = []
    for sample, trial, usage in await asyncio.gather(*(one(s) for s in range(self.cal.k))):
      if isinstance(trial.error, EndpointError):
        return endpoint_error(trial.error)
      if isinstance(trial.error, runner.RewardError):
        return rejected(f"calibration episode: verifier: {trial.error}", "verifier")
      rec = trial_record(task, sample, trial, 1.0)
      usage = usage_record(usage, self.prices)
      records.append({**rec, "round": rnd, "setting": setting, "usage": usage})
    return records

  async def _oracle_ok(self, task: Task) -> bool:
    async with self.slots:
      res = await asyncio.to_thread(runner.run_oracle, task, self.cfg.generation.runner)
    return res.reason == "ok" and res.reward >= 1.0

  async def __call__(self, state: dict, save: Callable[[], None]) -> StageResult:
    cal, tid = self.cal, state["id"]
    template = state["stages"]["write"].get("instruction_template", "")
    if "calibration" not in state:
      spec = json.loads((self.store.task_dir(tid) / "tests" / SPEC).read_text())
      state["calibration"] = {"spec": spec, "rounds": [], "oracle_checked": True}
      save()
    info = state["calibration"]
    task = await asyncio.to_thread(materialize, self.store, tid, info["spec"], template)
    if not info["oracle_checked"]:
      if not await self._oracle_ok(task):
        return rejected(
          f"the knob move to {knobs.setting(info['spec'])} fails the oracle", "knob_breaks_oracle"
        )
      info["oracle_checked"] = True
      save()
    lo, hi = cal.band
    while True:
      setting = knobs.setting(info["spec"])
      records = await self._play(task, len(info["rounds"]), setting)
      if isinstance(records, StageResult):
        return records
      stats = {"round": len(info["rounds"]), "setting": setting, **round_stats(records, cal.k)}
      info["rounds"].append({**stats, "trials": records})
      save()
      p1 = stats["pass@1"]
      if lo <= p1 <= hi:
        return done(setting=setting, **{k: v for k, v in stats.items() if k.startswith("pass@")})
      direction, category = ("harder", "too_easy") if p1 > hi else ("easier", "too_hard")
      where = f"pass@1 {p1:.2f} {'above' if p1 > hi else 'below'} the band [{lo}, {hi}]"
      if len(info["rounds"]) > cal.max_rounds:
        return rejected(f"{where} after {cal.max_rounds} knob moves ({setting})", category)
      moved = knobs.move(info["spec"], direction, template)
      if moved is None:
        return rejected(f"{where}; the knob cannot move {direction} ({setting})", category)
      played = {r["setting"]: r["pass@1"] for r in info["rounds"]}
      if knobs.setting(moved) in played:  # the band lies between two neighbouring settings
        return rejected(
          f"{where}; no setting reaches the band ({setting}: {p1:.2f}, "
          f"{knobs.setting(moved)}: {played[knobs.setting(moved)]:.2f})",
          category,
        )
      info.update(spec=moved, oracle_checked=False)
      save()
      task = await asyncio.to_thread(materialize, self.store, tid, moved, template)
      if not await self._oracle_ok(task):
        return rejected(
          f"{where}; the move to {knobs.setting(moved)} fails the oracle", "knob_breaks_oracle"
        )
      info["oracle_checked"] = True
      save()
