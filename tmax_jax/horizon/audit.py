"""The pre-completed-work audit: independent runs looking for core work the environment already did.

Checks, each recorded with named evidence (AuditReport.to_json is stored with the task):
  oracle     the oracle, run in a fresh sandbox, scores 1 on every generation's tests (a child
             keeps and passes its ancestors' tests); its workdir is snapshotted before and after
  untouched  (a) the task's own tests fail on the untouched environment (for a child: its new
             generation's checks; the ancestors' checks are expected to pass there already)
  static     (c) the oracle's changes vs the environment (static.py: identical rewrites, Python
             functions that already have non-trivial bodies, line overlap of other code)
  probe      (b) k short, capped attempts of a probe agent through the harness must not pass
A task passes iff every check passes. The oracle check runs first; when it fails the others are
not run (their evidence would be meaningless) and the report says so.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import pathlib
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from tmax_jax.agents import EpisodeConfig, GenerateFn, scripted
from tmax_jax.agents import worker as worker_lib
from tmax_jax.horizon import compose, static
from tmax_jax.sandbox import Sandbox
from tmax_jax.tasks import format as fmt
from tmax_jax.tasks import runner

CHECKS = ("oracle", "untouched", "static", "probe")


@dataclasses.dataclass(frozen=True)
class Check:
  name: str
  passed: bool
  evidence: tuple[str, ...] = ()
  details: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class AuditReport:
  checks: tuple[Check, ...]

  @property
  def passed(self) -> bool:
    return all(c.passed for c in self.checks)

  def evidence(self) -> list[str]:
    """`<check>: <evidence>` for every failed check (what a rebuild prompt is told)."""
    return [f"{c.name}: {e}" for c in self.checks if not c.passed for e in c.evidence]

  def failed(self) -> list[str]:
    return [c.name for c in self.checks if not c.passed]

  def to_json(self) -> dict:
    return {
      "passed": self.passed,
      "checks": [
        {
          "name": c.name,
          "passed": c.passed,
          "evidence": list(c.evidence),
          "details": dict(c.details),
        }
        for c in self.checks
      ],
    }


@dataclasses.dataclass(frozen=True)
class AuditConfig:
  """k probe attempts under tight caps (short runs: a probe that passes found a shortcut)."""

  probe_attempts: int = 3
  probe_episode: EpisodeConfig = EpisodeConfig(
    family="qwen3",  # the probe's rendering (no model here)
    max_tool_calls=8,
    max_turns=12,
    turn_max_tokens=4096,
    max_response_tokens=32768,
    command_timeout_s=60.0,
    wall_time_s=600.0,
  )
  static: static.StaticConfig = static.StaticConfig()
  runner: runner.RunnerConfig = runner.RunnerConfig()


@dataclasses.dataclass(frozen=True)
class ProbeAttempt:
  """One probe run: `policy(tokenizer, episode_cfg)` makes a fresh generate function."""

  name: str
  policy: Callable[[Any, EpisodeConfig], GenerateFn]
  commands: tuple[str, ...] = ()  # scripted probes: what they run (evidence)


class Probe(Protocol):
  def attempts(self, task: fmt.Task, k: int) -> list[ProbeAttempt]: ...


# ----------------------------------------------------------------------------------------------
# probes

RUN_EXISTING = r"""cd /workspace
for f in $(find . -maxdepth 3 -type f \( -name '*.sh' -o -name 'Makefile' -o -name '*.py' \) \
    -not -path './.git/*' | sort); do
  case "$f" in
    */Makefile) (cd "$(dirname "$f")" && timeout 60 make) ;;
    *.sh) timeout 60 bash "$f" ;;
    *.py) grep -q '__main__' "$f" && timeout 60 python3 "$f" ;;
  esac
done < /dev/null; true"""

RESTORE_COPIES = r"""cd /workspace
for f in $(find . -type f \( -name '*.bak' -o -name '*.orig' -o -name '*~' -o -name '*.old' \
    -o -name '*.done' -o -name '*.ref' -o -name '*.solution' \) -not -path './.git/*' | sort); do
  cp -a "$f" "$(echo "$f" | sed -E 's/(\.bak|\.orig|~|\.old|\.done|\.ref|\.solution)$//')"
done
[ -d .git ] && { git stash pop || git checkout -- . ; } ; true"""


@dataclasses.dataclass(frozen=True)
class ShortcutProbe:
  """Scripted probes that try the cheap ways to pass, each through the harness:
  rerun_parent_oracle (children: is the new requirement already met by repeating the parent's
  work?), run_existing (does running what the environment ships solve it?) and restore_copies
  (are finished versions lying around as backups or in git?)."""

  def attempts(self, task: fmt.Task, k: int) -> list[ProbeAttempt]:
    strategies = []
    n = compose.generations(task) - 1
    parent_solve = task.environment.get(f"stages/g{n - 1}/solution/solve.sh") if n else None
    if parent_solve is not None:
      parent = fmt.Task(
        instruction="-", config=fmt.TaskConfig(), solution={"solve.sh": parent_solve}
      )
      strategies.append(("rerun_parent_oracle", tuple(scripted.solution_commands(parent))))
    strategies += [("run_existing", (RUN_EXISTING,)), ("restore_copies", (RESTORE_COPIES,))]
    return [ProbeAttempt(name, _scripted(cmds), cmds) for name, cmds in strategies[:k]]


def _scripted(commands: Sequence[str]):
  return lambda tokenizer, cfg: scripted.ScriptedPolicy(tokenizer, commands, cfg)


@dataclasses.dataclass(frozen=True)
class EndpointProbe:
  """k attempts of an OpenAI-compatible endpoint (teacher.ChatTeacher) under the probe caps."""

  client: Any  # generator.llm.ChatClient

  def attempts(self, task: fmt.Task, k: int) -> list[ProbeAttempt]:
    from tmax_jax.horizon import teacher  # noqa: PLC0415  (openai: endpoint probe only)

    return [
      ProbeAttempt(f"endpoint_{i}", lambda tok, cfg: teacher.ChatTeacher(self.client, tok))
      for i in range(k)
    ]


# ----------------------------------------------------------------------------------------------
# the runs


def _snapshot(sb: Sandbox, workdir: str, tag: str, limit: int, into: dict) -> None:
  path = f"/tmp/.horizon_snapshot_{tag}.json"
  res = sb.exec(["python3", "-c", static.SNAPSHOT_PY, workdir, path, str(limit)], timeout_s=300)
  if res.exit_code != 0:
    raise RuntimeError(f"workdir snapshot failed ({res.status}): {res.output[-500:]}")
  with tempfile.TemporaryDirectory(prefix="tmax_horizon_") as tmp:
    sb.download(path, pathlib.Path(tmp) / "s.json")
    into[tag] = json.loads((pathlib.Path(tmp) / "s.json").read_text())
  sb.exec(["rm", "-f", path], timeout_s=30)


def run_trials(
  policy,
  tokenizer,
  episode_cfg: EpisodeConfig,
  runner_cfg: runner.RunnerConfig,
  jobs: Sequence[tuple[fmt.Task, int]],
  parallel: int = 1,
) -> list[worker_lib.Trial]:
  """Scored episodes of (task, sample) jobs through the one scored-episode path
  (agents/worker.EpisodeWorker; `policy` is a provider with generate_fn(task, group, sample))."""

  async def main():
    worker = worker_lib.EpisodeWorker(
      policy,
      tokenizer,
      episode_cfg,
      runner_cfg,
      worker_lib.WorkerConfig(max_parallel_episodes=parallel),
    )
    try:
      return list(await asyncio.gather(*(worker.trial(t, 0, s) for t, s in jobs)))
    finally:
      await worker.aclose()

  return asyncio.run(main())


@dataclasses.dataclass(frozen=True)
class _Attempts:
  """The probe attempts of one task as a policy provider (sample i = attempt i)."""

  attempts: tuple[ProbeAttempt, ...]
  tokenizer: Any
  cfg: EpisodeConfig

  def generate_fn(self, task, group: int, sample: int) -> GenerateFn:
    del task, group
    return self.attempts[sample].policy(self.tokenizer, self.cfg)


def _tail(res: runner.RunResult, n: int = 1500) -> str:
  return res.logs.get("test-stdout.txt", "")[-n:]


class Auditor:
  """Runs the four checks of one task in fresh sandboxes (real runner, real harness)."""

  def __init__(self, tokenizer, probe: Probe, config: AuditConfig = AuditConfig()):
    self.tokenizer, self.probe, self.config = tokenizer, probe, config

  def audit(self, task: fmt.Task) -> AuditReport:
    snaps: dict[str, dict] = {}
    oracle = self._oracle(task, snaps)
    if not oracle.passed:
      skipped = [Check(n, False, ("not run: the oracle check failed",)) for n in CHECKS[1:]]
      return AuditReport((oracle, *skipped))
    findings = static.static_audit(snaps["before"], snaps["after"], self.config.static)
    static_check = Check(
      "static",
      not findings,
      tuple(f.evidence for f in findings),
      {"findings": [f.to_json() for f in findings]},
    )
    return AuditReport((oracle, self._untouched(task), static_check, self._probes(task)))

  def _oracle(self, task: fmt.Task, snaps: dict) -> Check:
    workdir = task.config.environment.workdir or compose.WORKDIR
    limit = self.config.static.max_text_bytes
    try:
      res = runner.run_trial(
        task,
        lambda sb: _snapshot(sb, workdir, "after", limit, snaps),
        self.config.runner,
        solution=dict(task.solution),
        before=lambda sb: _snapshot(sb, workdir, "before", limit, snaps),
      )
    except runner.RewardError as err:
      return Check("oracle", False, (f"the verifier wrote no readable reward: {err}",))
    details = {"rewards": dict(res.rewards), "reason": res.reason}
    if res.reward < 1.0 or "before" not in snaps or "after" not in snaps:
      why = res.reason if res.reason != "ok" else f"reward.json {dict(res.rewards)}"
      return Check(
        "oracle",
        False,
        (f"the oracle does not pass its own tests ({why}); test output: {_tail(res)}",),
        details,
      )
    return Check("oracle", True, (), details)

  def _untouched(self, task: fmt.Task) -> Check:
    gen = f"g{compose.generations(task) - 1}"
    try:
      res = runner.run_noop(task, self.config.runner)
    except runner.RewardError as err:
      return Check("untouched", False, (f"the verifier wrote no readable reward: {err}",))
    own = res.rewards.get(gen, res.reward)
    details = {"rewards": dict(res.rewards), "reason": res.reason}
    if own >= 1.0 or res.reward >= 1.0:
      return Check(
        "untouched",
        False,
        (
          f"the tests already pass on the untouched environment (reward.json "
          f"{dict(res.rewards)}): the environment contains the work the task asks for",
        ),
        details,
      )
    return Check("untouched", True, (), details)

  def _probes(self, task: fmt.Task) -> Check:
    attempts = tuple(self.probe.attempts(task, self.config.probe_attempts))
    provider = _Attempts(attempts, self.tokenizer, self.config.probe_episode)
    trials = run_trials(
      provider,
      self.tokenizer,
      self.config.probe_episode,
      self.config.runner,
      [(task, i) for i in range(len(attempts))],
    )
    runs, evidence = [], []
    for attempt, trial in zip(attempts, trials, strict=True):
      ep = trial.episode
      run = {
        "name": attempt.name,
        "reward": trial.reward,
        "reason": f"error: {trial.error}" if trial.error else trial.reason,
        "status": ep.status if ep else "no_episode",
        "tool_calls": ep.num_tool_calls if ep else 0,
      }
      runs.append(run)
      if trial.error is None and trial.reward >= 1.0:
        what = f" running {attempt.commands[0][:160]!r}" if attempt.commands else ""
        evidence.append(
          f"probe attempt {attempt.name} passed the tests in {run['tool_calls']} "
          f"tool call(s){what}: the task can be solved without its core work"
        )
    return Check("probe", not evidence, tuple(evidence), {"attempts": runs})
