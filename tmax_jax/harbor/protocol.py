"""What both sides of the Harbor bridge share (no Harbor import: this runs on Python 3.11 too).

The bridge (bridge.py, in the Harbor venv) and its client (sandbox.py, in the project's Python)
exchange one JSON object per line: a request {"id", "op", ...args} and its reply {"id", "ok": true,
...result} or {"id", "ok": false, "error": {"type", "message"}}. Ops: start, exec, upload_file,
upload_dir, download_file, download_dir, stop (bridge.OPS).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Any

NO_TIMEOUT_S = 24 * 3600.0  # Harbor's exec(timeout_sec=None); the trial's own timeouts bound it
MAX_OUTPUT_CHARS = 8_000_000  # Harbor reads whole tmux histories through exec: keep them whole
KILLED_RC = 128 + 9  # the exit code a killed command reports (SIGKILL), as Docker does


class BridgeError(RuntimeError):
  """The bridge answered a request with an error (type and message of the exception there)."""

  def __init__(self, kind: str, message: str):
    super().__init__(f"{kind}: {message}")
    self.kind, self.message = kind, message


def exec_script(command: str, workdir: str | None, env: Mapping[str, str] | None) -> str:
  """A bash script that runs `command` in `workdir` with `env` exported (Harbor exec semantics:
  cwd and env per call, nothing kept between calls)."""
  lines = [f"cd -- {shlex.quote(workdir)} || exit 1"] if workdir else []
  lines += [f"export {k}={shlex.quote(str(v))}" for k, v in (env or {}).items()]
  return "\n".join([*lines, command])


def return_code(result) -> int:
  """A CommandResult's exit code, or KILLED_RC when the command was killed (limits, timeout)."""
  return result.exit_code if result.exit_code is not None else KILLED_RC


def encode(message: Mapping[str, Any]) -> bytes:
  return (json.dumps(message, separators=(",", ":")) + "\n").encode()


def decode(line: bytes, where: str) -> dict:
  try:
    message = json.loads(line)
  except json.JSONDecodeError as err:
    raise BridgeError(
      "ProtocolError", f"{where}: not a JSON line ({err}): {line[:200]!r}"
    ) from None
  if not isinstance(message, dict):
    raise BridgeError("ProtocolError", f"{where}: expected a JSON object, got {line[:200]!r}")
  return message
