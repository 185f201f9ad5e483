"""What every backend shares: host dirs, the persistent shell, limits, lifecycle.

A backend implements four hooks: `_start_anchor()` (a long-lived process that owns the sandbox's
namespaces/container and enforces its hard lifetime, `lifetime_left()`), `_stop_anchor()`,
`_enter(argv, root)` (the host argv that runs `argv` inside the running sandbox as the sandbox
user, with limits applied) and optionally `_limit_stats()` and `_anchor_exit()` (why the anchor is
gone, "" while it runs).

A sandbox that stops working under its user (the shell or the anchor dies, the host gives up on
an unresponsive shell, the lifetime runs out) is restarted with its files kept, and `lost()` says
why from then on: what ran in it was cut short by the infrastructure (tasks/runner.py never scores
such a trial). A restart the sandbox asks for itself (`reset()`, a process-limit hit) is not a
loss.
The seams live in their own modules: `status` (what happened to a command, a pure function),
`transfer` (upload/download), `host` (how host-side processes are wrapped and started).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pathlib
import posixpath
import re
import secrets
import shlex
import subprocess
import threading
import time
import warnings
from typing import NoReturn

from tmax_jax.sandbox import cgroups, runtime, shell, status
from tmax_jax.sandbox.api import CommandResult, EnvironmentSpec, Limits, Sandbox, SandboxError
from tmax_jax.sandbox.host import DEFAULT_PATH, HOME, HOST_GRACE_S, SANDBOX_UID, HostProcesses
from tmax_jax.sandbox.images import layers
from tmax_jax.sandbox.images.image import Image, is_image_file
from tmax_jax.sandbox.transfer import FileTransfer

__all__ = ["DEFAULT_PATH", "HOME", "HOST_GRACE_S", "SANDBOX_UID", "SandboxBase", "validate_spec"]
START_TIMEOUT_S = 60.0
# How reading a command's output ended -> why the sandbox counts as lost (a process-limit reset,
# which the sandbox does itself, is not a loss)
_LOST_BY_KIND = {
  "eof": "its shell died under a command",
  "deadline": "its shell stopped answering (no sentinel by the command's timeout + grace)",
}
_counter = itertools.count()
_close_lock = threading.Lock()


def _bad(field: str, expected: str, got: object) -> NoReturn:
  raise SandboxError(f"malformed EnvironmentSpec.{field}: expected {expected}, got {got!r}")


def validate_spec(spec: EnvironmentSpec) -> None:
  """Raises SandboxError naming the malformed field and what was expected."""
  if not isinstance(spec, EnvironmentSpec):
    _bad("<spec>", "an EnvironmentSpec", spec)
  if not isinstance(spec.image, str) or not spec.image:
    _bad("image", "a non-empty str (rootfs dir, podman image or .sif)", spec.image)
  if (
    not isinstance(spec.workdir, str)
    or not spec.workdir.startswith("/")
    or posixpath.normpath(spec.workdir)
    in ("/", "/tmp", "/logs", "/proc", "/dev", "/usr", "/etc", "/bin")
  ):
    _bad("workdir", "an absolute path that is not / or a system dir", spec.workdir)
  for i, entry in enumerate(spec.files):
    if not (
      isinstance(entry, tuple)
      and len(entry) == 2
      and all(isinstance(x, str) for x in entry)
      and entry[1].startswith("/")
    ):
      _bad(f"files[{i}]", "(host path, absolute sandbox path)", entry)
    if not os.path.exists(entry[0]):
      _bad(f"files[{i}]", "an existing host path", entry[0])
  for i, cmd in enumerate(spec.setup_commands):
    if not isinstance(cmd, str):
      _bad(f"setup_commands[{i}]", "a str", cmd)
  for i, entry in enumerate(spec.env):
    if not (
      isinstance(entry, tuple)
      and len(entry) == 2
      and all(isinstance(x, str) for x in entry)
      and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", entry[0])
    ):
      _bad(f"env[{i}]", "(NAME, value) with a shell-variable NAME", entry)
  _validate_limits(spec.limits)


def _validate_limits(lim: Limits) -> None:
  if not isinstance(lim, Limits):
    _bad("limits", "a Limits", lim)
  for field in ("memory_mb", "max_processes", "max_file_mb", "disk_mb", "lifetime_s"):
    value = getattr(lim, field)
    if not isinstance(value, int) or value <= 0:
      _bad(f"limits.{field}", "a positive int", value)
  if lim.cpu_seconds is not None and (not isinstance(lim.cpu_seconds, int) or lim.cpu_seconds <= 0):
    _bad("limits.cpu_seconds", "None or a positive int", lim.cpu_seconds)


class _ShellGone(SandboxError):
  """The shell's stdin is closed: it died (or was killed from the host) after the last check."""


class SandboxBase(HostProcesses, FileTransfer, Sandbox):
  """A started sandbox; see the module docstring for the backend hooks."""

  backend = "base"
  writable_image_root = False  # the image mount gets a (sandbox-tmpfs) upper dir

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
    self.cgroup: cgroups.Cgroup | None = None
    self.limit_warning: str | None = None
    self._born = time.monotonic()  # the hard lifetime (Limits.lifetime_s) counts from here
    self._lost = ""
    self.root = runtime.process_root() / self.name
    with runtime.starting():  # close_all waits for this to finish or tear down
      runtime.register(self)
      try:
        for step in (self._prepare_host, self._start_anchor, self._start_shell, self._seed):
          step()
          if self._closed:  # closed by another thread while starting (its process is ending)
            raise SandboxError(f"{self.backend} sandbox {self.name} was closed while it started")
      except BaseException:
        if self._closed:  # close() ran before some of it existed: take down what came after
          self._teardown()
        else:
          self.close()
        raise

  # -------------------------------------------------------------------------------- host side
  @property
  def host_uid(self) -> int:
    return SANDBOX_UID

  def _prepare_host(self) -> None:
    self.root.mkdir()  # not parents: a process root that close_all removed stays removed
    if os.geteuid() == 0:  # a size-limited tmpfs: the disk limit for everything the sandbox writes
      # (where mounting is not allowed, only the per-file limit applies)
      subprocess.run(
        [
          "mount",
          "-t",
          "tmpfs",
          "-o",
          f"size={self.spec.limits.disk_mb}m,mode=0755",
          "tmax-sbx",
          str(self.root),
        ],
        check=False,
        capture_output=True,
      )
    logs = self.root / "logs"
    if (
      self.spec.logs_dir
    ):  # the trial dir, bind-mounted where the unprivileged sandbox uid can reach it
      trial = pathlib.Path(self.spec.logs_dir)
      trial.mkdir(parents=True, exist_ok=True)
      if os.geteuid() == 0:
        logs.mkdir()
        subprocess.run(["mount", "--bind", str(trial), str(logs)], check=True, capture_output=True)
      else:
        logs = trial
    self.binds = {  # sandbox path -> host dir
      posixpath.normpath(self.spec.workdir): self.root / "workspace",
      "/tmp": self.root / "tmp",
      "/logs": logs,
      "/tests": self.root / "tests",
      "/solution": self.root / "solution",
      HOME: self.root / "home",
    }
    self.binds.update(self._extra_binds())
    for host in self.binds.values():
      host.mkdir(parents=True, exist_ok=True)
    self._mount_image()
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
    self._make_cgroup()

  def _extra_binds(self) -> dict[str, pathlib.Path]:
    """More writable dirs {sandbox path: host dir under self.root} (a pod's shared volumes)."""
    return {}

  def _make_cgroup(self) -> None:
    """This sandbox's cgroup, or (no usable hierarchy) an error / a warning per enforce_limits."""
    lim = self.spec.limits
    host = cgroups.detect()
    reason = host.reason
    if host.version:
      try:
        self.cgroup = cgroups.Cgroup(host, self.name, lim.memory_mb, lim.max_processes, lim.cpus)
        return
      except OSError as err:
        reason = f"creating a cgroup v{host.version} under {host.parents[0]} failed: {err}"
    self._limits_unenforced(reason)

  def _limits_unenforced(self, reason: str) -> None:
    message = (
      f"{self.backend} sandbox limits cannot be enforced per sandbox ({reason}); "
      "memory and processes are limited per process (rlimits) only"
    )
    if self.spec.limits.enforce_limits:
      raise SandboxError(message + "; set Limits(enforce_limits=False) to run anyway")
    self.limit_warning = message
    warnings.warn(message, RuntimeWarning, stacklevel=4)

  def _mount_image(self) -> None:
    """A built image (images/builder.py, spec.image = its .json): its layers mounted read-only at
    <root>/rootfs, and what it holds in the bound dirs (workdir, /tmp, home, /tests, /solution)
    copied into them, since the binds would hide it."""
    self.image_root: pathlib.Path | None = None
    if not is_image_file(self.spec.image):
      return
    image = Image.load(self.spec.image)
    self.image_root = self.root / "rootfs"
    upper = self.root / "rootfs.upper" if self.writable_image_root else None
    layers.mount_image(pathlib.Path(image.base), list(image.layers), self.image_root, upper)
    for target, host in self.binds.items():
      src = self.image_root / target.lstrip("/")
      if target != "/logs" and src.is_dir() and not src.is_symlink() and any(src.iterdir()):
        res = subprocess.run(
          ["cp", "-a", f"{src}/.", f"{host}/"], capture_output=True, text=True, check=False
        )
        if res.returncode != 0:
          raise SandboxError(f"seeding {target} from the image failed: {res.stderr.strip()[-500:]}")

  def _chown_tree(self, path: pathlib.Path) -> None:
    if os.geteuid() != 0:
      return
    for p in [path, *path.rglob("*")]:
      os.lchown(p, self.host_uid, self.host_uid)

  # ---------------------------------------------------------------------------- backend hooks
  def _start_anchor(self) -> None:
    raise NotImplementedError

  def _stop_anchor(self) -> None:
    raise NotImplementedError

  def _enter(self, argv: list[str], *, root: bool = False) -> list[str]:
    raise NotImplementedError

  def _limit_stats(self) -> dict[str, int]:
    return self.cgroup.stats() if self.cgroup else dict(status.NO_STATS)

  def _anchor_exit(self) -> str:
    """Why the anchor process is gone ("exit 137"), "" while it runs (or none was started)."""
    return ""

  def _anchor_runs(self) -> bool:
    return not self._anchor_exit()

  # ------------------------------------------------------------------------------ lifetime
  def lifetime_left(self) -> float:
    """Seconds until the hard lifetime (Limits.lifetime_s) ends the sandbox."""
    return self.spec.limits.lifetime_s - (time.monotonic() - self._born)

  def lost(self) -> str:
    if not self._lost and not self._closed:
      gone = self._anchor_exit()
      if gone:
        self._mark_lost(f"its {self.backend} anchor process ended ({gone})")
    return self._lost

  def _mark_lost(self, why: str) -> None:
    """Records the first loss; a spent lifetime is named as the cause when it is the cause."""
    if self._lost:
      return
    if self.lifetime_left() <= 1.0:
      why = f"its hard lifetime of {self.spec.limits.lifetime_s} s ran out ({why})"
    self._lost = why

  # ------------------------------------------------------------------------------ the shell
  def _start_shell(self) -> None:
    argv = self._enter(self._inner(["bash", "--noprofile", "--norc"]))
    self._proc = subprocess.Popen(
      argv,
      stdin=subprocess.PIPE,
      stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT,
      start_new_session=True,
      env=self._host_env(),
    )
    self._reader = shell.SentinelReader(self._proc.stdout.fileno(), self._token)
    # The token travels over the pipe only (never in a file the sandbox user can read).
    self._send(
      f"__tmax_ctl=/tmp/.tmax; __tmax_token={self._token.decode()}; . /tmp/.tmax/shell.sh\n"
    )
    if self._state:
      self._send(f"__tmax_restore {shlex.quote(self._state)}\n")
    if not self._reader.read_line_with(self._token + b" ready", time.monotonic() + START_TIMEOUT_S):
      code = self._proc.poll()
      raise SandboxError(
        f"{self.backend} sandbox {self.name}: the shell did not start "
        f"(exit {code}); image {self.spec.image!r}"
      )

  def _send(self, text: str) -> None:
    try:
      self._proc.stdin.write(text.encode())
      self._proc.stdin.flush()
    except (BrokenPipeError, OSError, AttributeError) as err:
      raise _ShellGone(f"{self.backend} sandbox {self.name}: the shell is gone ({err})") from err

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

  def _hard_restart(self, lost: str = "") -> None:
    """Kills every process of the sandbox and starts the anchor and shell again (files are kept).
    lost: why the sandbox stopped working ("" for a restart it asked for itself: reset, limits)."""
    if self._closed:
      raise SandboxError(f"{self.backend} sandbox {self.name} is closed")
    if lost:
      gone = self._anchor_exit()
      self._mark_lost(f"its {self.backend} anchor process ended ({gone})" if gone else lost)
    if self.lifetime_left() <= 0:
      self._mark_lost("restart refused")
      raise SandboxError(
        f"{self.backend} sandbox {self.name}: its hard lifetime of "
        f"{self.spec.limits.lifetime_s} s is over; not restarted"
      )
    self._stop_shell()
    self._stop_anchor()
    if self.cgroup:
      self.cgroup.kill_all()
    self._start_anchor()
    self._start_shell()

  def run(
    self, command: str, *, timeout_s: float = 120.0, max_output_chars: int = 10_000
  ) -> CommandResult:
    with self._lock:
      if self._closed:
        raise SandboxError(f"{self.backend} sandbox {self.name} is closed")
      if self._proc is None or self._proc.poll() is not None:
        self._hard_restart(lost="its shell had died")
      try:
        return self._run_locked(command, timeout_s, max_output_chars)
      except _ShellGone:  # it died after the check above, before the command was sent
        self._hard_restart(lost="its shell had died")
        return self._run_locked(command, timeout_s, max_output_chars)

  def _run_locked(self, command: str, timeout_s: float, max_chars: int) -> CommandResult:
    cmd_id = next(self._ids)
    start = time.monotonic()
    (self.ctl / f"cmd.{cmd_id}").write_text(command + "\n")
    before = self._limit_stats()
    capture = shell.OutputCapture(4 * max_chars)
    timeout = max(1, int(round(timeout_s)))
    try:
      self._send(f"__tmax_run {cmd_id} {timeout}\n")
    except _ShellGone:
      with contextlib.suppress(OSError):
        (self.ctl / f"cmd.{cmd_id}").unlink()
      raise
    kind, rc, why = self._reader.read_until(
      cmd_id,
      capture,
      start + timeout + HOST_GRACE_S,
      on_limit=lambda: self._cancel(cmd_id),
      limit_bytes=self.spec.limits.max_output_mb << 20,
      alive=self._anchor_runs,
    )
    for f in ("cmd", "why"):
      with contextlib.suppress(OSError):
        (self.ctl / f"{f}.{cmd_id}").unlink()
    if kind == "done" and why == "done" and (self.ctl / f"state.{cmd_id}").exists():
      self._drop_state(self._state)
      self._state = f"/tmp/.tmax/state.{cmd_id}"
    else:  # a killed command's state is partial: the previous one stays
      self._drop_state(f"/tmp/.tmax/state.{cmd_id}")
    if self._closed:
      return CommandResult(
        capture.text(max_chars) + "\n[the sandbox was closed while the command ran]",
        None,
        "crashed",
        time.monotonic() - start,
      )
    ev = status.Evidence(
      kind, rc, why, before, self._limit_stats(), bytes(capture.head), bytes(capture.tail)
    )
    state, note = status.classify(ev, self.spec.limits)
    if state == "limit_reset" or kind in ("eof", "deadline"):
      # restores the last good state (cwd, env) into the new shell
      self._hard_restart(lost=_LOST_BY_KIND.get(kind, ""))
      state = "limit" if state == "limit_reset" else state
    output = capture.text(max_chars)
    if note:
      output = output + ("\n" if output and not output.endswith("\n") else "") + note
    killed = status.was_killed(kind, why, state, rc)
    return CommandResult(output, None if killed else rc, state, time.monotonic() - start)

  def _drop_state(self, state: str) -> None:
    if state:
      with contextlib.suppress(OSError):
        (self.ctl / posixpath.basename(state)).unlink()

  # ------------------------------------------------------------------------------ lifecycle
  def _seed(self) -> None:
    for host, target in self.spec.files:
      self.upload(host, target)
    for i, cmd in enumerate(self.spec.setup_commands):
      res = self.run(cmd, timeout_s=900)
      if res.status != "ok" or res.exit_code != 0:
        raise SandboxError(
          f"EnvironmentSpec.setup_commands[{i}] failed ({res.status}, exit "
          f"{res.exit_code}): {cmd!r}\n{res.output[-2000:]}"
        )
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
    self._teardown()

  def _teardown(self) -> None:
    """Stops and removes everything the sandbox made so far (repeatable)."""
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
