"""Observation text fed back to the model after a command.

Recipe harness: the command output truncated to its first 5,000 and last 5,000 characters with a
note in between, then `(exit_code=N)`. Endless Terminals wraps the same in its own sentence;
Terminus-2 caps new terminal output at 10,000 bytes, head and tail.
"""

HEAD_CHARS = 5000
TAIL_CHARS = 5000
TERMINUS_MAX_BYTES = 10000


def truncate_head_tail(text: str, head: int = HEAD_CHARS, tail: int = TAIL_CHARS) -> str:
  """`text` unchanged if it fits in head + tail characters, else head + note + tail."""
  if len(text) <= head + tail:
    return text
  elided = len(text) - head - tail
  note = (
    f"\n\n[... output truncated: {elided} characters elided out of {len(text)}; showing "
    f"the first {head} and the last {tail} characters ...]\n\n"
  )
  return text[:head] + note + text[len(text) - tail :]


def _with_exit_code(body: str, exit_code: int) -> str:
  if not body:
    return f"(exit_code={exit_code})"
  return body + ("" if body.endswith("\n") else "\n") + f"(exit_code={exit_code})"


def format_observation(
  output: str, exit_code: int, head: int = HEAD_CHARS, tail: int = TAIL_CHARS
) -> str:
  """The recipe's bash-tool observation: truncated output, then `(exit_code=N)` on its own line."""
  return _with_exit_code(truncate_head_tail(output, head, tail), int(exit_code))


def format_timeout(output: str, timeout_s: float, exit_code: int = 124) -> str:
  """Observation for a command killed by the per-command timeout (the shell survives)."""
  body = truncate_head_tail(output)
  note = f"The command timed out after {timeout_s:g} s and was interrupted."
  return _with_exit_code(f"{note}\n{body}" if body else note, exit_code)


def format_endless_observation(output: str, exit_code: int) -> str:
  """Endless Terminals: `Command executed successfully. Output: ...\\n\\n(exit_code=N)`."""
  return (
    f"Command executed successfully. Output: {truncate_head_tail(output)}\n\n"
    f"(exit_code={int(exit_code)})"
  )


def limit_output_bytes(text: str, max_bytes: int = TERMINUS_MAX_BYTES) -> str:
  """Terminus-2 cap: keep the first and last max_bytes/2 bytes (UTF-8) with a note between."""
  data = text.encode("utf-8")
  if len(data) <= max_bytes:
    return text
  half = max_bytes // 2
  head = data[:half].decode("utf-8", errors="ignore")
  tail = data[len(data) - half :].decode("utf-8", errors="ignore")
  omitted = len(data) - len(head.encode("utf-8")) - len(tail.encode("utf-8"))
  return (
    f"{head}\n[... output limited to {max_bytes} bytes; {omitted} interior bytes omitted "
    f"...]\n{tail}"
  )
