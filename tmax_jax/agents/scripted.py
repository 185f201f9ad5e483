"""Scripted policies: the oracle (a task's solve.sh as tool calls) and the do-nothing policy.

They answer `generate(token_ids, max_tokens)` like the inference server does, with the canonical
assistant tokens the chat template renders for a bash call, so the same harness loop
(`episode.run_episode`) runs them in a real sandbox. Uses: SFT data from oracle trajectories (the
model learns the harness format), and the eval runner's reference policies (oracle pass@1 = 1,
do-nothing = 0).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Sequence

from tmax_jax.agents import formats
from tmax_jax.agents.episode import EpisodeConfig
from tmax_jax.agents.formats.tokens import encode

_PROBE = [{"role": "user", "content": "q"}]


@dataclasses.dataclass
class ScriptedCompletion:
  token_ids: list[int]
  logprobs: list[float]
  versions: list[int]
  finish_reason: str = "stop"


def assistant_text(tokenizer, command: str, cfg: EpisodeConfig) -> str:
  """The assistant turn (up to and including <|im_end|>) that runs `command` in this harness."""
  kw = {} if cfg.enable_thinking is None else {"enable_thinking": cfg.enable_thinking}
  eos = tokenizer.eos_token
  if cfg.harness == "mini_swe":
    return f"THOUGHT: I run the next step.\n\n```bash\n{command}\n```{eos}"
  tools = [formats.BASH_TOOL]
  prompt = tokenizer.apply_chat_template(_PROBE, tools=tools, tokenize=False,
                                         add_generation_prompt=True, **kw)
  full = tokenizer.apply_chat_template(_PROBE + [formats.bash_call_message(command)], tools=tools,
                                       tokenize=False, **kw)
  if not full.startswith(prompt) or eos not in full[len(prompt):]:
    raise ValueError("the chat template renders an assistant tool call that does not extend its "
                     "generation prompt; cannot script canonical tool calls for it")
  text = full[len(prompt):]
  return text[:text.index(eos) + len(eos)]


def solution_commands(task) -> list[str]:
  """The oracle's commands: the solve.sh body as one shell command (heredocs stay intact).

  The shebang and leading `set -e`-style lines are dropped: they configure a script, and in the
  agent's persistent interactive shell `set -e` would end the session at the first failing command.
  """
  script = task.solution.get("solve.sh")
  if script is None:
    raise ValueError(f"task {task.name}: solution/solve.sh is missing; no oracle to script")
  lines = script.decode().splitlines()
  while lines and (lines[0].startswith("#!") or re.match(r"\s*set -[euxo]", lines[0])
                   or not lines[0].strip()):
    lines.pop(0)
  body = "\n".join(lines).strip()
  return [body] if body else []


class ScriptedPolicy:
  """Replies with the given commands in order, then submits."""

  def __init__(self, tokenizer, commands: Sequence[str], cfg: EpisodeConfig):
    replies = [*commands, formats.SUBMIT_COMMAND]
    self._replies = [encode(tokenizer, assistant_text(tokenizer, c, cfg)) for c in replies]
    self._turn = 0

  def __call__(self, token_ids: Sequence[int], max_tokens: int) -> ScriptedCompletion:
    ids = self._replies[min(self._turn, len(self._replies) - 1)]
    self._turn += 1
    finish = "stop" if len(ids) <= max_tokens else "length"
    ids = ids[:max_tokens]
    return ScriptedCompletion(list(ids), [0.0] * len(ids), [-1] * len(ids), finish)


def oracle_policy(tokenizer, task, cfg: EpisodeConfig) -> ScriptedPolicy:
  return ScriptedPolicy(tokenizer, solution_commands(task), cfg)


def noop_policy(tokenizer, cfg: EpisodeConfig) -> ScriptedPolicy:
  return ScriptedPolicy(tokenizer, [], cfg)
