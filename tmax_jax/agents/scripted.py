"""Scripted policies: the oracle (a task's solve.sh) and the do-nothing policy, in any harness.

A scripted policy answers `generate(token_ids, max_tokens)` like the inference server does, with
the canonical assistant tokens the harness renders (harnesses.Harness.script_step/submit_text), so
the harness loop runs it in a real sandbox exactly as it runs a model. Uses: SFT data from oracle
trajectories (the model learns the harness format), the evaluation runner's reference policies
(oracle pass@1 = 1, do-nothing = 0), and tests. `ScriptedProvider` is the policy provider
(`generate_fn(task, group, sample)`) for agents/worker.EpisodeWorker, like worker.ServerPolicy.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from tmax_jax.agents import harnesses
from tmax_jax.agents.episode import EpisodeConfig
from tmax_jax.formats import encode


@dataclasses.dataclass
class ScriptedCompletion:
  token_ids: list[int]
  logprobs: list[float]
  versions: list[int]
  finish_reason: str = "stop"


def _completion(ids: list[int], max_tokens: int) -> ScriptedCompletion:
  finish = "stop" if len(ids) <= max_tokens else "length"
  ids = list(ids[:max_tokens])
  return ScriptedCompletion(ids, [0.0] * len(ids), [-1] * len(ids), finish)


class Replies:
  """Replies with fixed texts in order (the last one repeats), each closed by end of turn."""

  def __init__(self, tokenizer, texts: Sequence[str]):
    self._ids = [encode(tokenizer, t + tokenizer.eos_token) for t in texts]
    self._turn = 0

  def __call__(self, token_ids: Sequence[int], max_tokens: int) -> ScriptedCompletion:
    ids = self._ids[min(self._turn, len(self._ids) - 1)]
    self._turn += 1
    return _completion(ids, max_tokens)


class ScriptedPolicy:
  """Runs shell scripts one by one through the harness, then submits (the submit reply repeats,
  so a harness that asks for confirmation gets it).

  When the harness's step has a done mark (Terminus: keystrokes return before the command ends),
  the policy answers with the step's wait reply, reading each new observation, until the mark
  shows up or `max_waits` waits were spent.
  """

  def __init__(
    self,
    tokenizer,
    scripts: Sequence[str],
    cfg: EpisodeConfig,
    wait_s: float = 0.5,
    max_waits: int = 240,
  ):
    harness = harnesses.get(cfg.harness)
    self._tok, self._max_waits = tokenizer, max_waits
    self._steps = [harness.script_step(tokenizer, s, i, cfg, wait_s) for i, s in enumerate(scripts)]
    self._submit = self._encode(harness.submit_text(tokenizer, cfg))
    self._step, self._waits, self._seen, self._waiting = 0, 0, 0, None

  def _encode(self, text: str) -> list[int]:
    return encode(self._tok, text + self._tok.eos_token)

  def _still_running(self, token_ids: Sequence[int]) -> bool:
    """The last step printed no done mark yet in the observations since the last reply."""
    if self._waiting is None or self._waits >= self._max_waits:
      return False
    return self._waiting.done_mark not in self._tok.decode(list(token_ids[self._seen :]))

  def __call__(self, token_ids: Sequence[int], max_tokens: int) -> ScriptedCompletion:
    if self._still_running(token_ids):
      self._waits += 1
      ids = self._encode(self._waiting.wait_text)
    elif self._step < len(self._steps):
      step = self._steps[self._step]
      self._step, self._waits = self._step + 1, 0
      self._waiting = step if step.done_mark else None
      ids = self._encode(step.text)
    else:
      self._waiting, ids = None, self._submit
    self._seen = len(token_ids) + len(ids)
    return _completion(ids, max_tokens)


def solution_commands(task) -> list[str]:
  """The oracle's commands: the solve.sh body as one shell command (heredocs stay intact).

  The shebang and leading `set -e`-style lines are dropped: they configure a script, and in the
  agent's persistent interactive shell `set -e` would end the session at the first failing command.
  """
  script = task.solution.get("solve.sh")
  if script is None:
    raise ValueError(f"task {task.name}: solution/solve.sh is missing; no oracle to script")
  lines = script.decode().splitlines()
  while lines and (
    lines[0].startswith("#!") or re.match(r"\s*set -[euxo]", lines[0]) or not lines[0].strip()
  ):
    lines.pop(0)
  body = "\n".join(lines).strip()
  return [body] if body else []


def oracle_policy(tokenizer, task, cfg: EpisodeConfig, wait_s: float = 0.5) -> ScriptedPolicy:
  """The task's solve.sh through the harness, then submit."""
  return ScriptedPolicy(tokenizer, solution_commands(task), cfg, wait_s)


def noop_policy(tokenizer, cfg: EpisodeConfig, wait_s: float = 0.5) -> ScriptedPolicy:
  """Submits without acting."""
  return ScriptedPolicy(tokenizer, [], cfg, wait_s)


SCRIPTS = {"oracle": solution_commands, "noop": lambda task: []}


@dataclasses.dataclass(frozen=True)
class ScriptedProvider:
  """Policy provider for EpisodeWorker: a fresh scripted policy per episode; `kind` oracle (the
  task's solve.sh) or noop (submit at once)."""

  tokenizer: object
  cfg: EpisodeConfig
  kind: str = "oracle"
  wait_s: float = 0.5

  def __post_init__(self):
    if self.kind not in SCRIPTS:
      raise ValueError(f"scripted policy kind={self.kind!r}; expected one of {sorted(SCRIPTS)}")

  def generate_fn(self, task, group: int, sample: int) -> ScriptedPolicy:
    del group, sample
    return ScriptedPolicy(self.tokenizer, SCRIPTS[self.kind](task), self.cfg, self.wait_s)
