"""Text-only action formats: mini-SWE-agent's fenced bash block and Endless Terminals' tags."""

import dataclasses
import re

from tmax_jax.formats.common import SUBMIT_COMMAND, FormatError, strip_reasoning

_FENCE = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)
_ANY_FENCE = re.compile(r"```")
MINI_SWE_EXAMPLE = "THOUGHT: <your reasoning>\n\n```bash\n<one command>\n```"


def parse_fenced_bash(text: str) -> str:
  """mini-SWE-agent text mode: the reply holds exactly one ```bash fenced block -> its body."""
  action = strip_reasoning(text)
  blocks = _FENCE.findall(action)
  if len(blocks) != 1:
    reason = (
      f"found {len(blocks)} bash blocks"
      if blocks or not _ANY_FENCE.search(action)
      else "found a code block that is not a closed ```bash block"
    )
    feedback = (
      f"Format error: {reason}. Please always provide EXACTLY ONE action in a "
      f"```bash code block.\nIf you want to end the task, run `{SUBMIT_COMMAND}` "
      f"without any other command.\nOtherwise format your response exactly as "
      f"follows:\n{MINI_SWE_EXAMPLE}"
    )
    raise FormatError(reason, feedback)
  if not blocks[0].strip():
    raise FormatError(
      "empty bash block",
      "Format error: the ```bash block is empty. Put "
      f"exactly one command in it, e.g.\n{MINI_SWE_EXAMPLE}",
    )
  return blocks[0]


@dataclasses.dataclass(frozen=True)
class EndlessAction:
  """One Endless-Terminals step: a command to run, or `done`."""

  command: str | None
  done: bool


_COMMAND = re.compile(r"<command>(.*?)</command>", re.DOTALL)
_ACTION = re.compile(r"<action>(.*?)</action>", re.DOTALL)
ENDLESS_EXAMPLE = (
  "<think>your reasoning</think>\n<command>ls -la</command>\n"
  "or, when the task is complete:\n<think>...</think>\n<action>done</action>"
)


def parse_endless(text: str) -> EndlessAction:
  """Endless Terminals: one <command>...</command> or <action>done</action> after </think>."""
  action = strip_reasoning(text)
  commands, actions = _COMMAND.findall(action), _ACTION.findall(action)
  reason = None
  if len(commands) + len(actions) != 1:
    reason = (
      f"found {len(commands)} <command> and {len(actions)} <action> tags; exactly one is allowed"
    )
  elif actions and actions[0].strip() != "done":
    reason = f"unknown action {actions[0].strip()!r}; the only action is `done`"
  elif commands and not commands[0].strip():
    reason = "the <command> tag is empty"
  if reason is not None:
    raise FormatError(reason, f"Format error: {reason}. Reply like this:\n{ENDLESS_EXAMPLE}")
  if actions:
    return EndlessAction(command=None, done=True)
  return EndlessAction(command=commands[0].strip(), done=False)
