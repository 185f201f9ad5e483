"""Host processes of a sandbox (a mixin of SandboxBase): how commands are wrapped and started.

Every host-side process (anchor, shell, exec, tar) starts from `host_env()`, an explicit minimal
environment: the bwrap anchor becomes pid 1 of the sandbox and its /proc/1/environ is readable by
the sandbox user, so anything inherited from the launching shell (API keys) would leak. Inside,
`_inner` runs `env -i` with exactly the sandbox env (task ENV + what the harness sets).
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import subprocess
import threading
import time

from tmax_jax.sandbox import shell, status
from tmax_jax.sandbox.api import CommandResult, SandboxError

SANDBOX_UID = 1000
HOME = "/home/agent"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HOST_GRACE_S = 10.0  # the in-sandbox watchdog kills first; the host steps in if the shell hangs
_HOST_KEEP = ("PATH",)


def host_env(**extra: str) -> dict[str, str]:
  """The environment of every host-side sandbox process: PATH (to find bwrap/podman) + `extra`."""
  env = {k: os.environ[k] for k in _HOST_KEEP if k in os.environ}
  env.setdefault("PATH", DEFAULT_PATH)
  env["LANG"] = "C.UTF-8"
  env.update(extra)
  return env


class HostProcesses:
  """Command wrapping (`_inner`, `_prlimit`, `_in_cgroup`), `exec` and `_exec_host` for a sandbox
  with `spec`, `cgroup`, `ctl`, `_ids`, `_closed`, `_enter` and `_limit_stats`."""

  def _host_env(self) -> dict[str, str]:
    return host_env()

  def _env(self) -> dict[str, str]:
    env = {
      "PATH": DEFAULT_PATH,
      "HOME": HOME,
      "USER": "agent",
      "LANG": "C.UTF-8",
      "LC_ALL": "C.UTF-8",
      "TERM": "dumb",
      "PAGER": "cat",
      "GIT_PAGER": "cat",
      "DEBIAN_FRONTEND": "noninteractive",
      "PYTHONUNBUFFERED": "1",
    }
    env.update(dict(self.spec.env))
    return env

  def _inner(self, argv: list[str]) -> list[str]:
    """argv wrapped to start in the workdir with exactly the sandbox env (nothing from the host)."""
    return [
      "/usr/bin/env",
      "-i",
      *(f"{k}={v}" for k, v in self._env().items()),
      "/bin/sh",
      "-c",
      'cd "$0" 2>/dev/null; exec "$@"',
      self.spec.workdir,
      *argv,
    ]

  def _prlimit(self) -> list[str]:
    lim = self.spec.limits
    argv = [
      "prlimit",
      f"--as={lim.memory_mb << 20}",
      f"--fsize={lim.max_file_mb << 20}",
      "--core=0",
    ]
    if self.cgroup is None:  # else the pids cgroup limits (and counts) processes per sandbox
      argv.append(f"--nproc={lim.max_processes}")
    if lim.cpu_seconds:
      argv.append(f"--cpu={lim.cpu_seconds}")
    return [*argv, "--"]

  def _in_cgroup(self, argv: list[str]) -> list[str]:
    """argv started from inside this sandbox's cgroups (moved before exec, so no child escapes)."""
    if self.cgroup is None:
      return argv
    moves = "; ".join(f"echo $$ > {f}" for f in self.cgroup.procs_files())
    return ["/bin/sh", "-c", f'{moves}; exec "$@"', "tmax-cg", *argv]

  def exec(
    self, argv: list[str], *, timeout_s: float = 600.0, max_output_chars: int = 10_000
  ) -> CommandResult:
    if self._closed:
      raise SandboxError(f"{self.backend} sandbox {self.name} is closed")
    if not argv or not all(isinstance(a, str) for a in argv):
      raise SandboxError(f"exec needs a non-empty list of str, got {argv!r}")
    timeout = max(1, int(round(timeout_s)))
    pid_file = f"/tmp/.tmax/exec.{next(self._ids)}"
    # timeout makes its own process group (pid = pgid, in the pid file), so the host can kill the
    # tree from inside: killing the host-side podman/apptainer client does not stop it.
    inner = [
      "sh",
      "-c",
      'echo $$ > "$0"; t=$1; shift; exec timeout -s KILL "$t" "$@"',
      pid_file,
      str(timeout),
      *argv,
    ]
    try:
      return self._exec_host(
        self._enter(self._inner(inner)),
        timeout + HOST_GRACE_S,
        max_output_chars,
        kill_file=pid_file,
      )
    finally:
      with contextlib.suppress(OSError):
        (self.ctl / posixpath.basename(pid_file)).unlink()

  def _kill_from_pid_file(self, pid_file: str) -> None:
    with contextlib.suppress(OSError, ValueError, subprocess.TimeoutExpired, SandboxError):
      pid = int((self.ctl / posixpath.basename(pid_file)).read_text().split()[0])
      subprocess.run(
        self._enter(["kill", "-KILL", "--", f"-{pid}"]),
        capture_output=True,
        timeout=30,
        check=False,
        env=self._host_env(),
      )

  def _exec_host(
    self,
    host_argv,
    deadline_s,
    max_chars,
    stdin_data: bytes | None = None,
    stdout_file=None,
    kill_file: str | None = None,
  ) -> CommandResult:
    start = time.monotonic()
    before = self._limit_stats()
    proc = subprocess.Popen(
      host_argv,
      stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
      stdout=stdout_file or subprocess.PIPE,
      stderr=subprocess.STDOUT if stdout_file is None else subprocess.PIPE,
      start_new_session=True,
      env=self._host_env(),
    )
    if stdin_data is not None:
      threading.Thread(target=_feed, args=(proc.stdin, stdin_data), daemon=True).start()
    capture = shell.OutputCapture(4 * max_chars)
    out = proc.stdout if stdout_file is None else proc.stderr
    reader = shell.SentinelReader(out.fileno(), b"\0never\0")
    limit = self.spec.limits.max_output_mb << 20
    kind, _, _ = reader.read_until(
      0,
      capture,
      start + deadline_s,
      limit_bytes=limit,
      on_limit=lambda: True,
      alive=getattr(self, "_anchor_runs", None),
    )
    if kind in ("deadline", "limit"):
      if kill_file:
        self._kill_from_pid_file(kill_file)
      killpg(proc)
    out.close()  # a writer still inside the sandbox gets SIGPIPE
    try:
      rc = proc.wait(timeout=HOST_GRACE_S)
    except subprocess.TimeoutExpired:  # the sandbox died under a stopped host-side process
      killpg(proc)
      rc = proc.wait()
    if rc in (128 + 9, -9):  # timeout -s KILL or our kill
      rc = None
    timed_out = kind == "deadline" or (
      rc is None and time.monotonic() - start >= deadline_s - HOST_GRACE_S
    )
    ev = status.Evidence(
      "done",
      rc,
      "timeout" if timed_out else "done",
      before,
      self._limit_stats(),
      bytes(capture.head),
      bytes(capture.tail),
    )
    state, note = status.classify(ev, self.spec.limits)
    if capture.total > limit:
      state, note = "output_limit", f"[output limit: more than {self.spec.limits.max_output_mb} MB]"
    state = "limit" if state == "limit_reset" else state
    if rc is None and state == "ok":
      state, note = "crashed", "[process killed]"
    text = capture.text(max_chars) + (("\n" + note) if note else "")
    return CommandResult(
      text, rc if state in ("ok", "limit", "oom") else None, state, time.monotonic() - start
    )


def _feed(pipe, data: bytes) -> None:
  with contextlib.suppress(OSError):
    pipe.write(data)
  with contextlib.suppress(OSError):
    pipe.close()


def killpg(proc: subprocess.Popen) -> None:
  with contextlib.suppress(ProcessLookupError, PermissionError):
    os.killpg(proc.pid, 9)
