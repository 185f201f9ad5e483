"""Harness message formats: parsing model replies and rendering observations (no model, no sandbox).

- tool_calls: the recipe's `bash` tool, in the syntax the tokenizer spec names (Hermes JSON, XML)
- text_modes: mini-SWE-agent fenced ```bash blocks; Endless Terminals <command>/<action>
- terminus:   Terminus-2 JSON keystroke actions
- observation: head+tail truncation, `(exit_code=N)`, Terminus byte cap
- tokens:     token-in/token-out continuation ids and the per-token loss mask
Every parser raises `FormatError` whose `.feedback` is the text to send back to the model.

The face (`__all__`, checked by tests/test_faces.py): outside `tmax_jax.formats`, import the names
below from here; tool_calls is also a public module (the OpenAI API renders calls with it).
"""

from tmax_jax.formats.common import (
  SUBMIT_COMMAND,
  SUBMIT_MARKER,
  THINK_CLOSE,
  THINK_OPEN,
  FormatError,
  is_submit_command,
  is_submit_output,
  strip_reasoning,
)
from tmax_jax.formats.observation import (
  format_endless_observation,
  format_observation,
  format_timeout,
  limit_output_bytes,
  truncate_head_tail,
)
from tmax_jax.formats.terminus import TerminusAction, TerminusCommand, parse_terminus
from tmax_jax.formats.text_modes import EndlessAction, parse_endless, parse_fenced_bash
from tmax_jax.formats.tokens import (
  TokenTrajectory,
  assistant_text,
  continuation_ids,
  continuation_text,
  encode,
  prompt_ids,
  tool_observation_ids,
  user_observation_ids,
)
from tmax_jax.formats.tool_calls import (
  BASH_TOOL,
  bash_call_message,
  parse_bash_call,
  parse_hermes_call,
  parse_xml_call,
  tool_call_format,
)

__all__ = [
  "BASH_TOOL",
  "EndlessAction",
  "FormatError",
  "SUBMIT_COMMAND",
  "SUBMIT_MARKER",
  "TerminusAction",
  "TerminusCommand",
  "TokenTrajectory",
  "assistant_text",
  "bash_call_message",
  "continuation_ids",
  "continuation_text",
  "format_endless_observation",
  "format_observation",
  "format_timeout",
  "is_submit_command",
  "is_submit_output",
  "limit_output_bytes",
  "parse_bash_call",
  "parse_endless",
  "parse_fenced_bash",
  "parse_hermes_call",
  "parse_terminus",
  "parse_xml_call",
  "prompt_ids",
  "strip_reasoning",
  "tool_observation_ids",
  "tool_call_format",
  "truncate_head_tail",
  "user_observation_ids",
  "THINK_CLOSE",
  "THINK_OPEN",
  "encode",
  "tool_calls",  # public module: the bash tool's call syntaxes
]
