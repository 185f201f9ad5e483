"""What happened to a command: one pure function from the evidence to a status and a note.

The evidence is what the host saw (how reading ended, the exit code, why the in-sandbox watchdog
stopped the command), the limit counters before and after (cgroup OOM kills and pids-limit hits),
and the last bytes of output. No sandbox, process or file is touched here, so every rule has a
unit test (tests/sandbox/test_status.py).
"""

from __future__ import annotations

import dataclasses
import re

from tmax_jax.sandbox.api import Limits

OOM_RE = re.compile(
  rb"MemoryError|Cannot allocate memory|std::bad_alloc|out of memory|Out of memory"
)
LIMIT_RE = re.compile(
  rb"No space left on device|File too large|Disk quota exceeded|File size limit exceeded"
)
FORK_RE = re.compile(rb"fork: (retry: )?Resource temporarily unavailable|Cannot fork|can't fork")
NO_STATS = {"oom_kill": 0, "pids_max_hits": 0}


@dataclasses.dataclass(frozen=True)
class Evidence:
  """kind: how reading ended ("done", "eof" = the shell died, "deadline" = the host gave up);
  rc: exit code or None; why: the watchdog's reason ("done", "timeout", "cancel" = output
  limit); before/after: limit counters; head/tail: first/last output bytes."""

  kind: str
  rc: int | None
  why: str
  before: dict
  after: dict
  head: bytes = b""
  tail: bytes = b""


def classify(ev: Evidence, lim: Limits) -> tuple[str, str]:
  """-> (status, note). status is an api.CommandResult status, or "limit_reset" when a process
  limit was hit (the caller restarts the sandbox's processes and reports "limit")."""
  tail = ev.tail[-4096:] or ev.head[-4096:]
  failed = ev.rc not in (0, None)
  if ev.kind == "eof":
    return "crashed", (
      "[the sandbox shell died; the sandbox was restarted (files kept, env restored)]"
    )
  if ev.kind == "deadline":
    return "timeout", (
      "[command timed out and the shell did not respond; every sandbox process "
      "was killed and the shell restarted (files kept, env restored)]"
    )
  if ev.after["oom_kill"] > ev.before["oom_kill"] or (failed and OOM_RE.search(tail)):
    return "oom", f"[out of memory: the sandbox memory limit is {lim.memory_mb} MB]"
  if ev.why == "cancel":
    return "output_limit", (
      f"[output limit: the command wrote more than {lim.max_output_mb} MB "
      "and was killed with its process tree]"
    )
  if ev.after["pids_max_hits"] > ev.before["pids_max_hits"] or FORK_RE.search(ev.head + tail):
    return "limit_reset", (
      f"[process limit ({lim.max_processes}) reached: every sandbox process "
      "was killed and the shell restarted (files kept, env restored)]"
    )
  if ev.why == "timeout":
    return "timeout", "[command timed out; it was killed with its whole process tree]"
  if ev.rc in (128 + 25, 128 + 24) or (failed and LIMIT_RE.search(tail)):
    return "limit", (
      f"[resource limit: files <= {lim.max_file_mb} MB, disk {lim.disk_mb} MB, "
      f"{lim.max_processes} processes, cpu {lim.cpu_seconds or 'unlimited'} s]"
    )
  return "ok", ""


def was_killed(kind: str, why: str, status: str, rc: int | None) -> bool:
  """Whether a shell command's exit code is meaningless (it was killed, or never finished)."""
  return (
    kind != "done"
    or why != "done"
    or status in ("timeout", "output_limit", "crashed")
    or (status in ("oom", "limit") and rc is not None and rc > 128)
  )
