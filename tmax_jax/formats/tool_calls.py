"""The recipe's native-tool harness: one `bash` tool with one `command` argument.

Each tokenizer spec names the syntax its chat template renders (TokenizerSpec.tool_call_format):
Qwen3 writes Hermes JSON calls, Qwen3.5 the XML format, both inside <tool_call> tags:

  Hermes (qwen3):   <tool_call>\\n{"name": "bash", "arguments": {"command": "ls"}}\\n</tool_call>
  XML (qwen3_5):    <tool_call>\\n<function=bash>\\n<parameter=command>\\nls\\n</parameter>\\n
                    </function>\\n</tool_call>

A reply must contain exactly one call after its reasoning; anything else is a FormatError whose
feedback shows the right syntax.
"""

import json
import re

from tmax_jax.formats.common import SUBMIT_COMMAND, FormatError, strip_reasoning
from tmax_jax.models import registry

TOOL_NAME = "bash"
ARG_NAME = "command"
BASH_TOOL = {
  "type": "function",
  "function": {
    "name": TOOL_NAME,
    "description": (
      "Execute a bash command in a persistent shell (the working directory and "
      "environment persist between calls). To finish the task, run "
      f"`{SUBMIT_COMMAND}`."
    ),
    "parameters": {
      "type": "object",
      "properties": {ARG_NAME: {"type": "string", "description": "The bash command to execute."}},
      "required": [ARG_NAME],
    },
  },
}

EXAMPLES = {
  "hermes": '<tool_call>\n{"name": "bash", "arguments": {"command": "ls -la"}}\n</tool_call>',
  "xml": (
    "<tool_call>\n<function=bash>\n<parameter=command>\nls -la\n</parameter>\n"
    "</function>\n</tool_call>"
  ),
}

_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_FUNCTION = re.compile(r"\s*<function=([^>\n]+)>(.*)</function>\s*", re.DOTALL)
_PARAM = re.compile(r"<parameter=([^>\n]+)>(.*?)</parameter>", re.DOTALL)


def _error(fmt: str, reason: str) -> FormatError:
  feedback = (
    f"Format error: {reason}.\nEvery reply must contain exactly one call of the `bash` "
    f"tool, written like this:\n{EXAMPLES[fmt]}\nTo finish the task, call it with "
    f"`{SUBMIT_COMMAND}`."
  )
  return FormatError(reason, feedback)


def _single_body(text: str, fmt: str) -> str:
  action = strip_reasoning(text)
  bodies = _CALL.findall(action)
  opened = action.count("<tool_call>")
  if not bodies:
    raise _error(
      fmt, "the tool call is not closed with </tool_call>" if opened else "no tool call found"
    )
  if len(bodies) > 1 or opened > 1:
    raise _error(fmt, f"found {max(len(bodies), opened)} tool calls; exactly one is allowed")
  return bodies[0]


def _check_call(fmt: str, name: str, args: dict) -> str:
  if name != TOOL_NAME:
    raise _error(fmt, f"unknown tool {name!r}; the only tool is `bash`")
  if set(args) != {ARG_NAME}:
    raise _error(fmt, f"the bash tool takes exactly one argument `command`, got {sorted(args)}")
  if not isinstance(args[ARG_NAME], str):
    raise _error(fmt, "the `command` argument must be a string")
  if not args[ARG_NAME].strip():
    raise _error(fmt, "the `command` argument is empty")
  return args[ARG_NAME]


def _hermes_call(body: str) -> tuple[str, dict]:
  """(name, arguments) of one Hermes JSON call body; FormatError otherwise."""
  try:
    call = json.loads(body)
  except json.JSONDecodeError as e:
    raise _error("hermes", f"the tool call is not valid JSON ({e.msg} at char {e.pos})") from e
  if not isinstance(call, dict) or not isinstance(call.get("name"), str):
    raise _error("hermes", 'the tool call must be a JSON object with "name" and "arguments"')
  args = call.get("arguments")
  if isinstance(args, str):  # some models emit the arguments as a JSON string
    try:
      args = json.loads(args)
    except json.JSONDecodeError as e:
      raise _error("hermes", '"arguments" is a string that is not JSON') from e
  if not isinstance(args, dict):
    raise _error("hermes", '"arguments" must be a JSON object like {"command": "..."}')
  return call["name"], args


def _param_value(raw: str) -> str:
  # The template writes "\n" + value + "\n" inside the tags; the value itself keeps its newlines.
  raw = raw[1:] if raw.startswith("\n") else raw
  return raw[:-1] if raw.endswith("\n") else raw


def _xml_call(body: str) -> tuple[str, dict]:
  """(name, {parameter: string value}) of one XML call body; FormatError otherwise."""
  match = _FUNCTION.fullmatch(body)
  if match is None:
    raise _error("xml", "the tool call must contain one <function=NAME>...</function> block")
  name, inner = match.group(1).strip(), match.group(2)
  params = _PARAM.findall(inner)
  if _PARAM.sub("", inner).strip():
    raise _error("xml", "text outside <parameter=...></parameter> inside <function=...>")
  args = {}
  for key, raw in params:
    if key.strip() in args:
      raise _error("xml", f"parameter {key.strip()!r} given twice")
    args[key.strip()] = _param_value(raw)
  return name, args


_CALL_PARSERS = {"hermes": _hermes_call, "xml": _xml_call}


def parse_hermes_call(text: str) -> str:
  """The command of the single Hermes JSON bash call in `text`; FormatError otherwise."""
  return _check_call("hermes", *_hermes_call(_single_body(text, "hermes")))


def parse_xml_call(text: str) -> str:
  """The command of the single XML (`<function=bash>`) call in `text`; FormatError otherwise."""
  return _check_call("xml", *_xml_call(_single_body(text, "xml")))


def parse_tool_calls(text: str, fmt: str) -> tuple[str, list[tuple[str, dict]]]:
  """Any number of calls of any tools (the OpenAI API's `tools`), in syntax `fmt` (a key of
  PARSERS): (the text outside the calls, stripped; [(name, arguments)]). `text` is the part after
  the reasoning. XML argument values stay strings (typing them needs the tool's schema). A
  malformed or unclosed call raises FormatError."""
  if fmt not in _CALL_PARSERS:
    raise ValueError(f"tool_call_format={fmt!r}; supported: {sorted(_CALL_PARSERS)}")
  bodies = _CALL.findall(text)
  if text.count("<tool_call>") != len(bodies):
    raise _error(fmt, "a tool call is not closed with </tool_call>")
  calls = [_CALL_PARSERS[fmt](body) for body in bodies]
  return _CALL.sub("", text).strip(), calls


PARSERS = {"hermes": parse_hermes_call, "xml": parse_xml_call}


def tool_call_format(family: str) -> str:
  """The tool-call syntax of tokenizer `family` (a key of PARSERS); ValueError if unknown."""
  try:
    fmt = registry.tokenizer_spec(family).tool_call_format
  except ValueError as e:
    raise ValueError(f"no tool-call format for family {family!r}: {e}") from e
  if fmt not in PARSERS:
    raise ValueError(
      f"tokenizer {family!r} declares tool_call_format={fmt!r}; supported: {sorted(PARSERS)}"
    )
  return fmt


def parse_bash_call(text: str, family: str) -> str:
  """The bash command of the single call in `text`, in tokenizer `family`'s tool-call syntax."""
  return PARSERS[tool_call_format(family)](text)


def bash_call_message(command: str, content: str = "", reasoning: str | None = None) -> dict:
  """An assistant message calling bash, in the form the chat templates render (e.g. for SFT)."""
  message = {
    "role": "assistant",
    "content": content,
    "tool_calls": [
      {"type": "function", "function": {"name": TOOL_NAME, "arguments": {ARG_NAME: command}}}
    ],
  }
  if reasoning is not None:
    message["reasoning_content"] = reasoning
  return message
