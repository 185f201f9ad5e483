"""Terminus-2 JSON actions: keystrokes for a tmux pane.

    {"analysis": str, "plan": str,
     "commands": [{"keystrokes": str, "duration": float}, ...], "task_complete": bool}

The first balanced JSON object of the reply (after its reasoning) is parsed; text around it, a
missing duration, or a command that does not end in a newline before the next one are warnings
(sent back with the next observation); a missing required field or bad JSON is a FormatError.
Durations default to 1.0 s and are capped at 60 s. With `task_complete` true, command errors only
warn, as in Terminus-2. The harness ends the episode after two task_complete replies in a row.
"""

import dataclasses
import json

from tmax_jax.formats.common import FormatError, strip_reasoning

DEFAULT_DURATION_S = 1.0
MAX_DURATION_S = 60.0
REQUIRED_FIELDS = ("analysis", "plan", "commands")
TERMINUS_EXAMPLE = (
  '{"analysis": "what the screen shows", "plan": "what to do next", '
  '"commands": [{"keystrokes": "ls -la\\n", "duration": 0.1}], '
  '"task_complete": false}'
)


@dataclasses.dataclass(frozen=True)
class TerminusCommand:
  keystrokes: str
  duration: float


@dataclasses.dataclass(frozen=True)
class TerminusAction:
  analysis: str
  plan: str
  commands: tuple
  task_complete: bool
  warnings: tuple = ()

  def warning_text(self) -> str:
    """Prefix for the next observation ('' when there is nothing to warn about)."""
    if not self.warnings:
      return ""
    return "Previous response had warnings:\n" + "\n".join(f"- {w}" for w in self.warnings) + "\n\n"


def _first_object_span(text: str):
  """(start, end) of the first balanced {...} outside JSON strings, or None."""
  depth, start, in_string, escaped = 0, -1, False, False
  for i, ch in enumerate(text):
    if in_string:
      if escaped:
        escaped = False
      elif ch == "\\":
        escaped = True
      elif ch == '"':
        in_string = False
    elif ch == '"':
      in_string = True
    elif ch == "{":
      start = i if depth == 0 else start
      depth += 1
    elif ch == "}" and depth > 0:
      depth -= 1
      if depth == 0:
        return start, i + 1
  return None


def _error(reason: str) -> FormatError:
  feedback = (
    f"Previous response had parsing errors:\nERROR: {reason}\n\nPlease fix this and "
    f"reply with one JSON object like:\n{TERMINUS_EXAMPLE}"
  )
  return FormatError(reason, feedback)


def _as_bool(value) -> bool:
  if isinstance(value, str):
    return value.strip().lower() in ("true", "1", "yes")
  return bool(value)


def _parse_command(i: int, item, is_last: bool, warnings: list) -> TerminusCommand:
  if not isinstance(item, dict):
    raise _error(f"command {i + 1} must be an object")
  keys = item.get("keystrokes")
  if not isinstance(keys, str):
    raise _error(f"command {i + 1} needs a string 'keystrokes' field")
  duration = item.get("duration")
  if isinstance(duration, bool) or not isinstance(duration, (int, float)):
    warnings.append(f"command {i + 1}: missing or invalid duration, using {DEFAULT_DURATION_S}")
    duration = DEFAULT_DURATION_S
  if duration > MAX_DURATION_S:
    warnings.append(f"command {i + 1}: duration {duration} capped at {MAX_DURATION_S}")
  unknown = sorted(set(item) - {"keystrokes", "duration"})
  if unknown:
    warnings.append(f"command {i + 1}: unknown fields {unknown}")
  if not is_last and not keys.endswith("\n"):
    warnings.append(
      f"command {i + 1} should end with a newline when another command follows; "
      "otherwise both run together on one line"
    )
  return TerminusCommand(keys, float(min(max(duration, 0.0), MAX_DURATION_S)))


def parse_terminus(text: str) -> TerminusAction:
  """Parses a Terminus-2 reply; FormatError (feedback = the parse error message) when invalid."""
  action = strip_reasoning(text)
  span = _first_object_span(action)
  if span is None:
    raise _error("no JSON object found in the response")
  warnings = []
  if action[: span[0]].strip():
    warnings.append("extra text before the JSON object")
  if action[span[1] :].strip():
    warnings.append("extra text after the JSON object")
  try:
    data = json.loads(action[span[0] : span[1]])
  except json.JSONDecodeError as e:
    raise _error(f"invalid JSON: {e.msg} at char {e.pos}") from e
  missing = [f for f in REQUIRED_FIELDS if f not in data]
  if missing:
    raise _error(f"missing required fields: {', '.join(missing)}")
  if not isinstance(data["commands"], list):
    raise _error("field 'commands' must be an array")
  done = _as_bool(data.get("task_complete", False))
  try:
    commands = tuple(
      _parse_command(i, c, i == len(data["commands"]) - 1, warnings)
      for i, c in enumerate(data["commands"])
    )
  except FormatError as e:
    if not done:
      raise
    warnings.append(e.reason)
    commands = ()
  return TerminusAction(str(data["analysis"]), str(data["plan"]), commands, done, tuple(warnings))
