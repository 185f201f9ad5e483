"""What every backend shares: host dirs, the persistent shell, exec, file transfer, limits, cleanup.

A backend implements four hooks: `_start_anchor()` (a long-lived process that owns the sandbox's
namespaces/container), `_stop_anchor()`, `_enter(argv, root)` (the host argv that runs `argv` inside
the running sandbox as the sandbox user, with limits applied) and optionally `_limit_stats()`.
The writable places inside are binds of host dirs (workdir, /tmp, /logs, /tests, /solution,
/home/agent), so most uploads/downloads are host copies; anything else goes through `tar` in the
sandbox.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import pathlib
import posixpath
import re
import secrets
import shlex
import shutil
import stat
import subprocess
import tarfile
import threading
import time

from tmax_jax.sandbox import runtime, shell
from tmax_jax.sandbox.api import CommandResult, EnvironmentSpec, Limits, Sandbox, SandboxError

SANDBOX_UID = 1000
HOME = "/home/agent"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
START_TIMEOUT_S = 60.0
HOST_GRACE_S = 10.0  # the in-sandbox watchdog kills first; the host steps in only if the shell hangs
_OOM_RE = re.compile(rb"MemoryError|Cannot allocate memory|std::bad_alloc|out of memory|Out of memory")
_LIMIT_RE = re.compile(rb"No space left on device|File too large|Disk quota exceeded|File size limit exceeded")
_FORK_RE = re.compile(rb"fork: (retry: )?Resource temporarily unavailable|Cannot fork|can't fork")
_counter = itertools.count()
_close_lock = threading.Lock()


def validate_spec(spec: EnvironmentSpec) -> None:
  """Raises SandboxError naming the malformed field and what was expected."""
  def bad(field, expected, got):
    raise SandboxError(f"malformed EnvironmentSpec.{field}: expected {expected}, got {got!r}")
  if not isinstance(spec, EnvironmentSpec):
    bad("<spec>", "an EnvironmentSpec", spec)
  if not isinstance(spec.image, str) or not spec.image:
    bad("image", "a non-empty str (rootfs dir, podman image or .sif)", spec.image)
  if not isinstance(spec.workdir, str) or not spec.workdir.startswith("/") or posixpath.normpath(spec.workdir) in (
      "/", "/tmp", "/logs", "/proc", "/dev", "/usr", "/etc", "/bin"):
    bad("workdir", "an absolute path that is not / or a system dir", spec.workdir)
  for i, entry in enumerate(spec.files):
    if not (isinstance(entry, tuple) and len(entry) == 2 and all(isinstance(x, str) for x in entry)
            and entry[1].startswith("/")):
      bad(f"files[{i}]", "(host path, absolute sandbox path)", entry)
    if not os.path.exists(entry[0]):
      bad(f"files[{i}]", "an existing host path", entry[0])
  for i, cmd in enumerate(spec.setup_commands):
    if not isinstance(cmd, str):
      bad(f"setup_commands[{i}]", "a str", cmd)
  for i, entry in enumerate(spec.env):
    if not (isinstance(entry, tuple) and len(entry) == 2 and all(isinstance(x, str) for x in entry)
            and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", entry[0])):
      bad(f"env[{i}]", "(NAME, value) with a shell-variable NAME", entry)
  lim = spec.limits
  if not isinstance(lim, Limits):
    bad("limits", "a Limits", lim)
  for field in ("memory_mb", "max_processes", "max_file_mb", "disk_mb"):
    value = getattr(lim, field)
    if not isinstance(value, int) or value <= 0:
      bad(f"limits.{field}", "a positive int", value)
  if lim.cpu_seconds is not None and (not isinstance(lim.cpu_seconds, int) or lim.cpu_seconds <= 0):
    bad("limits.cpu_seconds", "None or a positive int", lim.cpu_seconds)


class SandboxBase(Sandbox):
  """A started sandbox; see the module docstring for the backend hooks."""

  backend = "base"

  def __init__(self, spec: EnvironmentSpec):
    validate_spec(spec)
    self.spec = spec
    self.name = f"{runtime.owner_tag()}-{next(_counter)}"
    self._lock = threading.RLock()
    self._closed = False
    self._proc: subprocess.Popen | None = None  # the persistent shell
    self._reader: shell.SentinelReader | None = None
    self._token = secrets.token_hex(12).encode()
    self._ids = itertools.count(1)
    self._state: str = ""
    self.cgroup: runtime.Cgroup | None = None
    self.root = runtime.process_root() / self.name
    runtime.register(self)
    try:
      self._prepare_host()
      self._start_anchor()
      self._start_shell()
      self._seed()
    except BaseException:
      self.close()
      raise

  # -------------------------------------------------------------------------------- host side
  @property
  def host_uid(self) -> int:
    return SANDBOX_UID

  def _prepare_host(self) -> None:
    self.root.mkdir(parents=True)
    if os.geteuid() == 0:  # a size-limited tmpfs: the disk limit for everything the sandbox writes
      # (where mounting is not allowed, only the per-file limit applies)
      subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.spec.limits.disk_mb}m,mode=0755",
                      "tmax-sbx", str(self.root)], check=False, capture_output=True)
    logs = self.root / "logs"
    if self.spec.logs_dir:  # the trial dir, bind-mounted where the unprivileged sandbox uid can reach it
      trial = pathlib.Path(self.spec.logs_dir)
      trial.mkdir(parents=True, exist_ok=True)
      if os.geteuid() == 0:
        logs.mkdir()
        subprocess.run(["mount", "--bind", str(trial), str(logs)], check=True, capture_output=True)
      else:
        logs = trial
    self.binds = {  # sandbox path -> host dir
        posixpath.normpath(self.spec.workdir): self.root / "workspace", "/tmp": self.root / "tmp",
        "/logs": logs, "/tests": self.root / "tests", "/solution": self.root / "solution",
        HOME: self.root / "home"}
    for host in self.binds.values():
      host.mkdir(parents=True, exist_ok=True)
    for sub in ("agent", "verifier", "artifacts"):
      (logs / sub).mkdir(exist_ok=True)
    for path in [*self.binds.values(), *(logs / s for s in ("agent", "verifier", "artifacts"))]:
      self._chown_tree(path)
    (self.root / "tmp").chmod(0o1777)
    # Control dir: sticky and owned by us, so the sandbox user can add its state/pid files but
    # cannot replace the protocol scripts.
    self.ctl = self.root / "tmp" / ".tmax"
    self.ctl.mkdir()
    self.ctl.chmod(0o1777)
    os.mkfifo(self.ctl / "fifo", 0o600)
    os.chmod(self.ctl / "fifo", 0o666)
    (self.ctl / "child.sh").write_text(shell.CHILD_SCRIPT)
    (self.ctl / "shell.sh").write_text(shell.SHELL_SCRIPT)
    if runtime.cgroups_available():
      try:
        self.cgroup = runtime.Cgroup(self.name, self.spec.limits.memory_mb, self.spec.limits.max_processes)
      except OSError:  # cgroup v1 present but not usable: rlimits only
        self.cgroup = None

  def _chown_tree(self, path: pathlib.Path) -> None:
    if os.geteuid() != 0:
      return
    for p in [path, *path.rglob("*")]:
      os.lchown(p, self.host_uid, self.host_uid)

  def _env(self) -> dict[str, str]:
    env = {"PATH": DEFAULT_PATH, "HOME": HOME, "USER": "agent", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
           "TERM": "dumb", "PAGER": "cat", "GIT_PAGER": "cat", "DEBIAN_FRONTEND": "noninteractive",
           "PYTHONUNBUFFERED": "1"}
    env.update(dict(self.spec.env))
    return env

  def _inner(self, argv: list[str]) -> list[str]:
    """argv wrapped to start in the workdir with exactly the sandbox env (nothing from the host)."""
    return ["/usr/bin/env", "-i", *(f"{k}={v}" for k, v in self._env().items()), "/bin/sh", "-c",
            'cd "$0" 2>/dev/null; exec "$@"', self.spec.workdir, *argv]

  def _prlimit(self) -> list[str]:
    lim = self.spec.limits
    argv = ["prlimit", f"--as={lim.memory_mb << 20}", f"--fsize={lim.max_file_mb << 20}", "--core=0"]
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

  # ---------------------------------------------------------------------------- backend hooks
  def _start_anchor(self) -> None:
    raise NotImplementedError

  def _stop_anchor(self) -> None:
    raise NotImplementedError

  def _enter(self, argv: list[str], *, root: bool = False) -> list[str]:
    raise NotImplementedError

  def _limit_stats(self) -> dict[str, int]:
    return self.cgroup.stats() if self.cgroup else {"oom_kill": 0, "pids_max_hits": 0}

  # ------------------------------------------------------------------------------ the shell
  def _start_shell(self) -> None:
    argv = self._enter(self._inner(["bash", "--noprofile", "--norc"]))
    self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    self._reader = shell.SentinelReader(self._proc.stdout.fileno(), self._token)
    # The token travels over the pipe only (never in a file the sandbox user can read).
    self._send(f"__tmax_ctl=/tmp/.tmax; __tmax_token={self._token.decode()}; . /tmp/.tmax/shell.sh\n")
    if self._state:
      self._send(f"__tmax_restore {shlex.quote(self._state)}\n")
    if not self._reader.read_line_with(self._token + b" ready", time.monotonic() + START_TIMEOUT_S):
      code = self._proc.poll()
      raise SandboxError(f"{self.backend} sandbox {self.name}: the shell did not start "
                         f"(exit {code}); image {self.spec.image!r}")

  def _send(self, text: str) -> None:
    try:
      self._proc.stdin.write(text.encode())
      self._proc.stdin.flush()
    except (BrokenPipeError, OSError, AttributeError) as err:
      raise SandboxError(f"{self.backend} sandbox {self.name}: the shell is gone ({err})") from err

  def _cancel(self, cmd_id: int) -> None:
    with contextlib.suppress(OSError):
      fd = os.open(self.ctl / "fifo", os.O_WRONLY | os.O_NONBLOCK)
      try:
        os.write(fd, f"cancel {cmd_id}\n".encode())
      finally:
        os.close(fd)

  def _stop_shell(self) -> None:
    proc, self._proc = self._proc, None
    if proc is None:
      return
    with contextlib.suppress(OSError):
      proc.stdin.close()
    with contextlib.suppress(ProcessLookupError, PermissionError):
      os.killpg(proc.pid, 9)
    with contextlib.suppress(subprocess.TimeoutExpired):
      proc.wait(timeout=5)
    with contextlib.suppress(OSError):
      proc.stdout.close()

  def _hard_restart(self) -> None:
    """Kills every process of the sandbox and starts the anchor and shell again (files are kept)."""
    if self._closed:
      raise SandboxError(f"{self.backend} sandbox {self.name} is closed")
    self._stop_shell()
    self._stop_anchor()
    if self.cgroup:
      self.cgroup.kill_all()
    self._start_anchor()
    self._start_shell()

  def run(self, command: str, *, timeout_s: float = 120.0, max_output_chars: int = 10_000) -> CommandResult:
    with self._lock:
      if self._closed:
        raise SandboxError(f"{self.backend} sandbox {self.name} is closed")
      if self._proc is None or self._proc.poll() is not None:
        self._hard_restart()
      return self._run_locked(command, timeout_s, max_output_chars)

  def _run_locked(self, command: str, timeout_s: float, max_chars: int) -> CommandResult:
    cmd_id = next(self._ids)
    start = time.monotonic()
    (self.ctl / f"cmd.{cmd_id}").write_text(command + "\n")
    before = self._limit_stats()
    capture = shell.OutputCapture(4 * max_chars)
    timeout = max(1, int(round(timeout_s)))
    self._send(f"__tmax_run {cmd_id} {timeout}\n")
    kind, rc, why = self._reader.read_until(
        cmd_id, capture, start + timeout + HOST_GRACE_S, on_limit=lambda: self._cancel(cmd_id),
        limit_bytes=self.spec.limits.max_output_mb << 20)
    for f in ("cmd", "why"):
      with contextlib.suppress(OSError):
        (self.ctl / f"{f}.{cmd_id}").unlink()
    if kind == "done" and why == "done" and (self.ctl / f"state.{cmd_id}").exists():
      self._drop_state(self._state)
      self._state = f"/tmp/.tmax/state.{cmd_id}"
    else:  # a killed command's state is partial: the previous one stays
      self._drop_state(f"/tmp/.tmax/state.{cmd_id}")
    if self._closed:
      return CommandResult(capture.text(max_chars) + "\n[the sandbox was closed while the command ran]", None,
                           "crashed", time.monotonic() - start)
    status, note = self._classify(kind, rc, why, before, capture)
    if status == "limit_reset" or kind in ("eof", "deadline"):
      self._hard_restart()  # restores the last good state (cwd, env) into the new shell
      status = "limit" if status == "limit_reset" else status
    output = capture.text(max_chars)
    if note:
      output = output + ("\n" if output and not output.endswith("\n") else "") + note
    killed = kind != "done" or why != "done" or status in ("timeout", "output_limit", "crashed") or (
        status in ("oom", "limit") and rc is not None and rc > 128)
    return CommandResult(output, None if killed else rc, status, time.monotonic() - start)

  def _drop_state(self, state: str) -> None:
    if state:
      with contextlib.suppress(OSError):
        (self.ctl / posixpath.basename(state)).unlink()

  def _classify(self, kind, rc, why, before, capture) -> tuple[str, str]:
    after = self._limit_stats()
    tail = bytes(capture.tail[-4096:]) or bytes(capture.head[-4096:])
    lim = self.spec.limits
    if kind == "eof":
      return "crashed", "[the sandbox shell died; the sandbox was restarted (files kept, env restored)]"
    if kind == "deadline":
      return "timeout", ("[command timed out and the shell did not respond; every sandbox process "
                         "was killed and the shell restarted (files kept, env restored)]")
    if after["oom_kill"] > before["oom_kill"] or (rc not in (0, None) and _OOM_RE.search(tail)):
      return "oom", f"[out of memory: the sandbox memory limit is {lim.memory_mb} MB]"
    if why == "cancel":
      return "output_limit", (f"[output limit: the command wrote more than {lim.max_output_mb} MB "
                              "and was killed with its process tree]")
    if after["pids_max_hits"] > before["pids_max_hits"] or _FORK_RE.search(bytes(capture.head) + tail):
      return "limit_reset", (f"[process limit ({lim.max_processes}) reached: every sandbox process was "
                             "killed and the shell restarted (files kept, env restored)]")
    if why == "timeout":
      return "timeout", "[command timed out; it was killed with its whole process tree]"
    if rc in (128 + 25, 128 + 24) or (rc not in (0, None) and _LIMIT_RE.search(tail)):
      return "limit", (f"[resource limit: files <= {lim.max_file_mb} MB, disk {lim.disk_mb} MB, "
                       f"{lim.max_processes} processes, cpu {lim.cpu_seconds or 'unlimited'} s]")
    return "ok", ""

  # ------------------------------------------------------------------------------ fresh processes
  def exec(self, argv: list[str], *, timeout_s: float = 600.0, max_output_chars: int = 10_000) -> CommandResult:
    if self._closed:
      raise SandboxError(f"{self.backend} sandbox {self.name} is closed")
    if not argv or not all(isinstance(a, str) for a in argv):
      raise SandboxError(f"exec needs a non-empty list of str, got {argv!r}")
    timeout = max(1, int(round(timeout_s)))
    pid_file = f"/tmp/.tmax/exec.{next(self._ids)}"
    # timeout makes its own process group (pid = pgid, in the pid file), so the host can kill the
    # tree from inside: killing the host-side podman/apptainer client does not stop it.
    inner = ["sh", "-c", 'echo $$ > "$0"; t=$1; shift; exec timeout -s KILL "$t" "$@"', pid_file, str(timeout), *argv]
    try:
      return self._exec_host(self._enter(self._inner(inner)), timeout + HOST_GRACE_S, max_output_chars,
                             kill_file=pid_file)
    finally:
      with contextlib.suppress(OSError):
        (self.ctl / posixpath.basename(pid_file)).unlink()

  def _kill_from_pid_file(self, pid_file: str) -> None:
    with contextlib.suppress(OSError, ValueError, subprocess.TimeoutExpired, SandboxError):
      pid = int((self.ctl / posixpath.basename(pid_file)).read_text().split()[0])
      subprocess.run(self._enter(["kill", "-KILL", "--", f"-{pid}"]), capture_output=True, timeout=30, check=False)

  def _exec_host(self, host_argv, deadline_s, max_chars, stdin_data: bytes | None = None,
                 stdout_file=None, kill_file: str | None = None) -> CommandResult:
    start = time.monotonic()
    before = self._limit_stats()
    proc = subprocess.Popen(host_argv, stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
                            stdout=stdout_file or subprocess.PIPE,
                            stderr=subprocess.STDOUT if stdout_file is None else subprocess.PIPE,
                            start_new_session=True)
    if stdin_data is not None:
      threading.Thread(target=_feed, args=(proc.stdin, stdin_data), daemon=True).start()
    capture = shell.OutputCapture(4 * max_chars)
    out = proc.stdout if stdout_file is None else proc.stderr
    reader = shell.SentinelReader(out.fileno(), b"\0never\0")
    kind, _, _ = reader.read_until(0, capture, start + deadline_s, limit_bytes=self.spec.limits.max_output_mb << 20,
                                   on_limit=lambda: True)
    if kind in ("deadline", "limit"):
      if kill_file:
        self._kill_from_pid_file(kill_file)
      _killpg(proc)
    out.close()  # a writer still inside the sandbox gets SIGPIPE
    rc = proc.wait()
    if rc == 128 + 9 or rc == -9:  # timeout -s KILL or our kill
      rc = None
    status, note = self._classify("done", rc, "timeout" if kind == "deadline" or (
        rc is None and time.monotonic() - start >= deadline_s - HOST_GRACE_S) else "done", before, capture)
    if capture.total > (self.spec.limits.max_output_mb << 20):
      status, note = "output_limit", f"[output limit: more than {self.spec.limits.max_output_mb} MB]"
    status = "limit" if status == "limit_reset" else status
    if rc is None and status == "ok":
      status, note = "crashed", "[process killed]"
    text = capture.text(max_chars) + (("\n" + note) if note else "")
    return CommandResult(text, rc if status in ("ok", "limit", "oom") else None, status, time.monotonic() - start)

  # ------------------------------------------------------------------------------ files
  def _host_path(self, sandbox_path: str) -> pathlib.Path | None:
    """The host path behind `sandbox_path` when it lies in a bind and resolves inside it."""
    path = posixpath.normpath(sandbox_path)
    for target, host in sorted(self.binds.items(), key=lambda kv: -len(kv[0])):
      if path == target or path.startswith(target + "/"):
        candidate = host / posixpath.relpath(path, target)
        real = pathlib.Path(os.path.realpath(candidate))
        host_real = pathlib.Path(os.path.realpath(host))
        if real == host_real or real.is_relative_to(host_real):
          return candidate if not candidate.is_symlink() else None
        return None
    return None

  def upload(self, host_path, sandbox_path: str) -> None:
    src = pathlib.Path(host_path)
    if not src.exists():
      raise SandboxError(f"upload: host path {src} does not exist")
    if not sandbox_path.startswith("/"):
      sandbox_path = posixpath.join(self.spec.workdir, sandbox_path)
    dest = self._host_path(sandbox_path)
    if dest is not None:
      if src.is_dir():
        shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True)
      else:
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest)
      self._chown_tree(dest)
      parent = dest.parent
      while parent != self.root and self.root in parent.parents:
        os.lchown(parent, self.host_uid, self.host_uid) if os.geteuid() == 0 else None
        parent = parent.parent
      return
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
      tar.add(src, arcname=posixpath.basename(sandbox_path.rstrip("/")))
    parent = posixpath.dirname(sandbox_path.rstrip("/")) or "/"
    argv = self._enter(self._inner(["sh", "-c", 'mkdir -p "$0" && tar -x --no-same-owner -C "$0"', parent]))
    res = self._exec_host(argv, 300, 2000, stdin_data=buf.getvalue())
    if res.exit_code != 0:
      raise SandboxError(f"upload of {src} to {sandbox_path} failed: {res.output.strip()}")

  def download(self, sandbox_path: str, host_path) -> None:
    dest = pathlib.Path(host_path)
    if not sandbox_path.startswith("/"):
      sandbox_path = posixpath.join(self.spec.workdir, sandbox_path)
    src = self._host_path(sandbox_path)
    if src is not None and src.exists():
      if src.is_dir():
        shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True)
      else:
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest, follow_symlinks=False)
      return
    if src is not None:
      raise SandboxError(f"download: {sandbox_path} does not exist in the sandbox")
    parent, name = posixpath.split(posixpath.normpath(sandbox_path))
    argv = self._enter(self._inner(["tar", "-c", "-C", parent or "/", name]))
    with open_tmp(dest) as (tmp_tar, fh):
      res = self._exec_host(argv, 300, 2000, stdout_file=fh)
      if res.exit_code != 0:
        raise SandboxError(f"download of {sandbox_path} failed: {res.output.strip() or 'no such file'}")
      _extract(tmp_tar, name, dest)

  # ------------------------------------------------------------------------------ lifecycle
  def _seed(self) -> None:
    for host, target in self.spec.files:
      self.upload(host, target)
    for i, cmd in enumerate(self.spec.setup_commands):
      res = self.run(cmd, timeout_s=900)
      if res.status != "ok" or res.exit_code != 0:
        raise SandboxError(f"EnvironmentSpec.setup_commands[{i}] failed ({res.status}, exit "
                           f"{res.exit_code}): {cmd!r}\n{res.output[-2000:]}")
    if self.spec.setup_commands:  # setup's cwd/env changes do not leak into the agent's session
      self.run(f"cd {shlex.quote(self.spec.workdir)}", timeout_s=30)

  def reset(self) -> None:
    """Kills every sandbox process and starts a fresh shell (cwd = workdir, env = spec.env);
    files are kept."""
    with self._lock:
      if self._closed:
        raise SandboxError(f"{self.backend} sandbox {self.name} is closed")
      self._drop_state(self._state)
      self._state = ""
      self._hard_restart()

  def close(self) -> None:
    """Does not wait for a running command: killing the shell and anchor ends it."""
    with _close_lock:
      if self._closed:
        return
      self._closed = True
    with contextlib.suppress(Exception):
      self._stop_shell()
    with contextlib.suppress(Exception):
      self._stop_anchor()
    if self.cgroup:
      self.cgroup.remove()
    try:
      runtime.remove_tree(self.root)
    finally:
      runtime.unregister(self)


def _feed(pipe, data: bytes) -> None:
  with contextlib.suppress(OSError):
    pipe.write(data)
  with contextlib.suppress(OSError):
    pipe.close()


def _killpg(proc: subprocess.Popen) -> None:
  with contextlib.suppress(ProcessLookupError, PermissionError):
    os.killpg(proc.pid, 9)


@contextlib.contextmanager
def open_tmp(dest: pathlib.Path):
  dest.parent.mkdir(parents=True, exist_ok=True)
  tmp = dest.parent / f".{dest.name}.tmax-download.tar"
  try:
    with open(tmp, "wb") as fh:
      yield tmp, fh
  finally:
    with contextlib.suppress(OSError):
      tmp.unlink()


def _extract(tar_path: pathlib.Path, name: str, dest: pathlib.Path) -> None:
  """Extracts member `name` (file or dir) of a sandbox tar to `dest`, refusing links out and devices."""
  with tarfile.open(tar_path) as tar:
    staging = dest.parent / f".{dest.name}.tmax-staging"
    shutil.rmtree(staging, ignore_errors=True)
    tar.extractall(staging, filter="data")
    got = staging / name
    if got.is_dir():
      shutil.copytree(got, dest, symlinks=True, dirs_exist_ok=True)
    else:
      shutil.copyfile(got, dest, follow_symlinks=False)
    shutil.rmtree(staging, ignore_errors=True)
