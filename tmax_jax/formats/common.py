"""Pieces shared by every harness format: the format error, the submit sentinel, reasoning
stripping."""

SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
SUBMIT_COMMAND = f"echo {SUBMIT_MARKER}"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


class FormatError(ValueError):
  """A model reply that does not follow the harness format.

  `feedback` is the text the harness sends back to the model as the next observation; `str(e)`
  is a short reason for logs and metrics.
  """

  def __init__(self, reason: str, feedback: str):
    super().__init__(reason)
    self.reason = reason
    self.feedback = feedback


def strip_reasoning(text: str) -> str:
  """The part of a reply after its reasoning.

  Qwen replies (and Qwen3.5 prompts, which pre-fill `<think>\\n`) put the reasoning before the last
  `</think>`; actions written inside the reasoning are not actions. A reply that opens `<think>`
  and never closes it has no action part at all. When the prompt pre-fills `<think>\n` (Qwen3.5
  with thinking on), parse `"<think>\n" + completion` so that an unclosed reasoning block is
  recognised as one.
  """
  if THINK_CLOSE in text:
    return text.rsplit(THINK_CLOSE, 1)[1]
  if THINK_OPEN in text:
    return ""
  return text


def is_submit_command(command: str) -> bool:
  """True for exactly the submit command (surrounding whitespace ignored)."""
  return command.strip() == SUBMIT_COMMAND


def is_submit_output(output: str) -> bool:
  """mini-SWE-agent's rule: the command's output starts with the marker line."""
  lines = output.lstrip().splitlines()
  return bool(lines) and lines[0].strip() == SUBMIT_MARKER
