"""The persistent-shell protocol and bounded output capture, shared by every backend.

A long-lived `bash` inside the sandbox reads one request line per command from its stdin pipe:
`__tmax_run <id> <timeout>`. The command text itself is a file in the control dir (<ctl>, the
sandbox's /tmp/.tmax, also visible on the host), so no quoting is involved. For each request the
shell starts `setsid bash child.sh` (its own session and process group, stdin /dev/null), which
restores the previous state (variables, exported env, functions, aliases, cwd), sources the command
and, on exit, saves the new state. Because the command runs in a child, a timeout kills the child's
whole session without touching the shell, and `exit` in a command does not end the session. A
watchdog subshell sleeps on a FIFO (`read -t`, no extra process) and kills the session on timeout or
when the host writes `cancel <id>` into the FIFO (output limit). The shell then prints
`<token> <id> <exit code> <reason>` on a line of its own; the host reads the pipe until that line,
keeping only a bounded head and tail of the output.
"""

from __future__ import annotations

import os
import select
import time

# Variables bash manages itself or that must not leak from one command into the next.
_SKIP_VARS = (
  "BASH BASHOPTS BASHPID BASH_ALIASES BASH_ARGC BASH_ARGV BASH_ARGV0 BASH_CMDS BASH_COMMAND "
  "BASH_LINENO BASH_SOURCE BASH_SUBSHELL BASH_VERSINFO BASH_VERSION BASH_EXECUTION_STRING "
  "BASH_LOADABLES_PATH COLUMNS COMP_WORDBREAKS DIRSTACK EPOCHREALTIME EPOCHSECONDS EUID "
  "FUNCNAME GROUPS HISTCMD HOSTNAME HOSTTYPE IFS LINENO LINES MACHTYPE OLDPWD OPTERR OPTIND "
  "OSTYPE PIPESTATUS PPID PS4 PWD RANDOM SECONDS SHELLOPTS SHLVL SRANDOM UID _"
)

CHILD_SCRIPT = r"""# tmax child: $1 = state to restore, $2 = command file, $3 = state to write
__tmax_save() {
  local __n
  {
    for __n in $(compgen -v); do
      case " __SKIP__ " in *" $__n "*) continue;; esac
      case $__n in __tmax*|BASH_REMATCH) continue;; esac
      [[ ${!__n@a} == *r* ]] && continue
      declare -p "$__n" 2>/dev/null
    done
    declare -f
    alias -p
    printf 'cd -- %q 2>/dev/null\n' "$PWD"
  } > "$__tmax_out" 2>/dev/null
}
__tmax_out=$3
shopt -s expand_aliases
[[ -f $1 ]] && source "$1" >/dev/null 2>&1
trap __tmax_save EXIT
source "$2"
""".replace("__SKIP__", _SKIP_VARS)

SHELL_SCRIPT = r"""# tmax persistent shell ($__tmax_ctl and $__tmax_token are set by the host first)
exec 2>/dev/null 7<>"$__tmax_ctl/fifo"
__tmax_state=""
if command -v setsid >/dev/null; then __tmax_setsid=setsid; else __tmax_setsid=""; set -m; fi
__tmax_kill() {
  kill -KILL -- "-$1" "$1" 2>/dev/null
  command -v pkill >/dev/null && pkill -KILL -s "$1" 2>/dev/null
}
__tmax_watch() {  # $1 id, $2 pid, $3 timeout (s): sleeps on the FIFO; kills on timeout or cancel
  local now=${EPOCHREALTIME/./} left line
  local end=$(( now + $3 * 1000000 ))
  while :; do
    now=${EPOCHREALTIME/./}; left=$(( end - now ))
    if (( left <= 0 )); then printf timeout > "$__tmax_ctl/why.$1"; break; fi
    if read -r -t "$(( left / 1000000 )).$(printf %06d $(( left % 1000000 )))" -u 7 line; then
      [[ $line == "cancel $1" ]] && { printf cancel > "$__tmax_ctl/why.$1"; break; }
    fi
  done
  __tmax_kill "$2"
}
__tmax_run() {  # $1 id, $2 timeout (s)
  local id=$1 rc why=""
  $__tmax_setsid bash --noprofile --norc "$__tmax_ctl/child.sh" "$__tmax_state" "$__tmax_ctl/cmd.$id" \
    "$__tmax_ctl/state.$id" </dev/null >&1 2>&1 &
  local pid=$!
  __tmax_watch "$id" "$pid" "$2" >/dev/null &  # must not hold the output pipe open
  local wpid=$!
  wait "$pid"; rc=$?
  kill -KILL "$wpid" 2>/dev/null; wait "$wpid" 2>/dev/null
  [[ -f $__tmax_ctl/why.$id ]] && read -r why < "$__tmax_ctl/why.$id"
  if [[ -z $why && -f $__tmax_ctl/state.$id ]]; then __tmax_state=$__tmax_ctl/state.$id; fi
  printf '\n%s %s %s %s\n' "$__tmax_token" "$id" "$rc" "${why:-done}"
}
__tmax_restore() { [[ -f $1 ]] && __tmax_state=$1; }
printf '%s ready\n' "$__tmax_token"
"""  # noqa: E501 (embedded script, kept verbatim)


class OutputCapture:
  """Keeps the first and last `keep` bytes of a stream and counts the rest (bounded memory)."""

  def __init__(self, keep: int):
    self.keep = keep
    self.head = bytearray()
    self.tail = bytearray()
    self.total = 0

  def add(self, data: bytes) -> None:
    self.total += len(data)
    room = self.keep - len(self.head)
    if room > 0:
      self.head += data[:room]
      data = data[room:]
    if data:
      self.tail += data
      if len(self.tail) > 2 * self.keep:
        del self.tail[: -self.keep]

  def text(self, max_chars: int) -> str:
    """Decoded (errors="replace") and head+tail truncated to `max_chars` with a note."""
    tail = bytes(self.tail[-self.keep :])
    dropped = self.total - len(self.head) - len(tail)
    if dropped == 0:
      return truncate(bytes(self.head + tail).decode("utf-8", errors="replace"), max_chars)
    head_s = bytes(self.head).decode("utf-8", errors="replace")
    tail_s = tail.decode("utf-8", errors="replace")
    half = max_chars // 2
    return (
      head_s[:half] + f"\n[... output truncated: {self.total} bytes in total, showing the first "
      f"{min(half, len(head_s))} and last {min(half, len(tail_s))} characters ...]\n"
      + tail_s[-half:]
    )


def truncate(text: str, max_chars: int) -> str:
  """Head+tail truncation to `max_chars` characters with a note saying how much was cut."""
  if len(text) <= max_chars:
    return text
  half = max_chars // 2
  return (
    text[:half] + f"\n[... output truncated: {len(text)} characters in total, showing the first "
    f"{half} and last {half} characters ...]\n" + text[-half:]
  )


class SentinelReader:
  """Reads a shell's stdout until `<token> <id> <rc> <why>\\n`, bounded in memory and time."""

  def __init__(self, fd: int, token: bytes):
    self.fd = fd
    self.token = token
    self.pending = b""  # bytes read past a sentinel (background output), given to the next read

  def read_until(
    self,
    cmd_id: int,
    capture: OutputCapture,
    deadline: float,
    on_limit=None,
    limit_bytes: int | None = None,
    alive=None,
  ) -> tuple[str, int | None, str]:
    """-> ("done", rc, why) | ("eof", None, "") | ("deadline", None, "") | ("limit", None, "").
    alive(): checked while no output arrives; False reads as "eof" (the sandbox died, but a
    host-side process that holds the pipe, e.g. nsenter stopped with its stopped child, keeps it
    open)."""
    marker = b"\n" + self.token + b" " + str(cmd_id).encode() + b" "
    window, self.pending = self.pending, b""
    limited = False
    while True:
      idx = window.find(marker)
      if idx >= 0:
        end = window.find(b"\n", idx + len(marker))
        if end >= 0:
          capture.add(window[:idx])
          rc_s, _, why = window[idx + len(marker) : end].decode(errors="replace").partition(" ")
          self.pending = window[end + 1 :]
          return "done", int(rc_s), why.strip()
      else:  # everything but a possible partial marker at the end is output
        safe = len(window) - (len(marker) - 1)
        if safe > 0:
          capture.add(window[:safe])
          window = window[safe:]
      if on_limit and not limited and limit_bytes is not None and capture.total > limit_bytes:
        limited = True
        if on_limit():  # True: stop reading now (the caller closes the pipe)
          return "limit", None, ""
      left = deadline - time.monotonic()
      if left <= 0:
        return "deadline", None, ""
      try:
        ready, _, _ = select.select([self.fd], [], [], min(left, 1.0))
        chunk = os.read(self.fd, 1 << 20) if ready else None
      except (OSError, ValueError):  # the pipe was closed under us (sandbox closed)
        chunk = b""
      if chunk is not None:
        if not chunk:
          capture.add(window)
          return "eof", None, ""
        window += chunk
      elif alive is not None and not alive():
        capture.add(window)
        return "eof", None, ""

  def read_line_with(self, needle: bytes, deadline: float) -> bool:
    """Reads until a line containing `needle` (start-up handshake); False on EOF or deadline."""
    buf = self.pending
    while needle not in buf:
      left = deadline - time.monotonic()
      if left <= 0:
        return False
      ready, _, _ = select.select([self.fd], [], [], min(left, 1.0))
      if ready:
        chunk = os.read(self.fd, 1 << 16)
        if not chunk:
          return False
        buf = (buf + chunk)[-(1 << 16) :]
    self.pending = (
      buf[buf.index(needle) + len(needle) :].split(b"\n", 1)[-1]
      if b"\n" in buf[buf.index(needle) :]
      else b""
    )
    return True
