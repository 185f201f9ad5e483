"""Harbor environments as sandboxes of ours: `RunnerConfig.backend = "harbor:<type>"`.

`HarborSandbox` implements the Sandbox API (sandbox/api.py) on one Harbor environment (podman here;
docker, daytona, modal, e2b, gke, singularity, ... or an import path for users who have them),
driven through Harbor's environment API by a bridge process in the Harbor venv (bridge.py; Harbor
needs Python >= 3.12, the project runs on 3.11). Our harnesses, limits and status rules are kept:

- run(): Harbor's exec is one process per call, so the persistent shell is emulated with the same
  child script the local backends use (sandbox/shell.py CHILD_SCRIPT): each command restores the
  previous command's state (variables, functions, aliases, cwd), runs under `timeout -s KILL`, and
  saves the new state; its output goes to a file in the sandbox (so background processes never
  hold Harbor's exec open) and comes back head+tail bounded.
- status: status.classify on the evidence an exec gives (exit code, whether the deadline passed,
  the output's head and tail): timeouts, OOM and limit messages are classified as locally; cgroup
  counters do not exist here.
- limits: memory and cpus go to the provider (override_memory_mb / override_cpus); file size and
  CPU time are per-process rlimits set in every command; what the provider cannot enforce is
  listed in `limit_warning` (the runner records it per trial). A provider that cannot limit
  memory is refused unless RunnerConfig.enforce_limits is False.
- network: offline is asked for; a provider that cannot run offline (Harbor's podman here) starts
  with its network and says so in limit_warning.
- images: for podman, the task's own image from our builder is pulled into podman's storage
  (oci.py) and named in a Harbor view of the task (tasks.py); other providers build the task's
  Dockerfile their own way.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import os
import pathlib
import secrets
import select
import shlex
import shutil
import subprocess
import tempfile
import threading
import time

from tmax_jax.harbor import protocol, venv
from tmax_jax.harbor import tasks as harbor_tasks
from tmax_jax.sandbox import CommandResult, Limits, Sandbox, SandboxError, shell, status
from tmax_jax.tasks import environment as envlib
from tmax_jax.tasks.format import Task

PREFIX = "harbor:"
PLUGIN = "tmax_jax.harbor.environment:TmaxEnvironment"  # our sandboxes behind Harbor's API
CTL = "/tmp/.tmax-harbor"  # the emulated shell's files (not /tmp/.tmax: our sandboxes own it)
START_TIMEOUT_S = 1800.0  # provider start + image import; Harbor's own build timeout applies too
INLINE_COMMAND_BYTES = 48 << 10  # larger commands are uploaded (Linux caps one argv string)
REQUEST_GRACE_S = 60.0  # on top of a command's own timeout, for the bridge's round trip
_ids = itertools.count()
_PIDS = "ls /proc | grep -E '^[0-9]+$'"
# reset(): SIGKILL every process but the baseline and this command's own chain of parents.
KILL_STARTED = (
  f'keep=" $(tr "\\n" " " < {CTL}/baseline) "; p=$$; while [ "$p" -gt 1 ]; do keep="$keep$p "; '
  "p=$(awk '/^PPid:/{print $2}' /proc/$p/status); done; "
  f'for q in $({_PIDS}); do case "$keep" in *" $q "*) ;; *) kill -KILL $q 2>/dev/null;; esac; '
  "done; true"
)


def is_harbor(backend: str | None) -> bool:
  return bool(backend) and backend.startswith(PREFIX)


def environment_kind(backend: str) -> str:
  """ "harbor:podman" -> "podman"; "harbor:pkg.mod:Class" -> "pkg.mod:Class"."""
  kind = backend[len(PREFIX) :]
  if not kind:
    raise SandboxError(f"backend {backend!r}: name a Harbor environment, e.g. 'harbor:podman'")
  return kind


class Bridge:
  """The bridge process and its request/reply pipe (one request at a time)."""

  def __init__(self, workdir: pathlib.Path):
    reason = venv.unavailable()
    if reason:
      raise SandboxError(f"Harbor environments need the Harbor venv: {reason}")
    self.log_path = workdir / "bridge.log"
    self._log = open(self.log_path, "wb")  # noqa: SIM115  (the bridge's stderr; close() closes it)
    self.proc = subprocess.Popen(
      [str(venv.bin_path("python")), "-m", "tmax_jax.harbor.bridge"],
      stdin=subprocess.PIPE,
      stdout=subprocess.PIPE,
      stderr=self._log,
      env=venv.environ(),
      start_new_session=True,
    )
    self._lock = threading.Lock()

  def call(self, op: str, timeout_s: float, **args) -> dict:
    """Sends one request and waits for its reply; raises BridgeError (the bridge's exception) or
    SandboxError (the bridge died or did not answer in time)."""
    with self._lock:
      req_id = next(_ids)
      try:
        self.proc.stdin.write(protocol.encode({"id": req_id, "op": op, **args}))
        self.proc.stdin.flush()
      except (BrokenPipeError, OSError) as err:
        raise SandboxError(f"the Harbor bridge is gone ({err}){self.log_tail()}") from err
      line = self._readline(time.monotonic() + timeout_s)
    reply = protocol.decode(line, f"Harbor bridge reply to {op}")
    if reply.get("id") != req_id:
      raise SandboxError(f"Harbor bridge answered request {reply.get('id')}, expected {req_id}")
    if not reply.get("ok"):
      err = reply.get("error") or {}
      raise protocol.BridgeError(err.get("type", "Error"), err.get("message", ""))
    return reply

  def _readline(self, deadline: float) -> bytes:
    buf = b""
    fd = self.proc.stdout.fileno()
    while not buf.endswith(b"\n"):
      left = deadline - time.monotonic()
      if left <= 0 or not select.select([fd], [], [], left)[0]:
        self.kill()
        raise SandboxError(f"the Harbor bridge did not answer in time{self.log_tail()}")
      chunk = os.read(fd, 1 << 16)
      if not chunk:
        raise SandboxError(f"the Harbor bridge exited ({self.proc.poll()}){self.log_tail()}")
      buf += chunk
    return buf

  def log_tail(self, n: int = 2000) -> str:
    with contextlib.suppress(OSError):
      text = self.log_path.read_text(errors="replace")[-n:].strip()
      return f"; bridge log: ...{text}" if text else ""
    return ""

  def kill(self) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
      os.killpg(self.proc.pid, 9)
    with contextlib.suppress(subprocess.TimeoutExpired):
      self.proc.wait(timeout=10)
    self._log.close()


def _network_refused(err: protocol.BridgeError) -> bool:
  return "network_mode='no-network' is not supported" in err.message


class HarborSandbox(Sandbox):
  """See the module docstring. Start with `open_trial_sandbox`."""

  def __init__(self, task: Task, backend: str, limits: Limits, allow_network: bool = False):
    self.backend, self.limits = backend, limits
    self.kind = environment_kind(backend)
    self.name = f"harbor-{secrets.token_hex(4)}"
    self._tmp = pathlib.Path(tempfile.mkdtemp(prefix="tmax_harbor_"))
    self._ids, self._state, self._closed = itertools.count(), "", False
    self._lock = threading.Lock()
    self.limit_warning = ""
    self.bridge = None
    try:
      # Our image first where the environment starts it, so a build failure is reported as our
      # runner reports it (the task's own Dockerfile path, DockerfileError / SandboxError).
      image = harbor_tasks.podman_image(task) if self.kind == "podman" else None
      if self.kind == PLUGIN:
        envlib.built_spec(task)
      view = harbor_tasks.harbor_view(task, self._tmp / "task", image)
      self.bridge = Bridge(self._tmp)
      self.info = self._start(view.path, allow_network)
      self._setup()
    except BaseException:
      self.close()
      raise

  def _start(self, task_dir: pathlib.Path, allow_network: bool) -> dict:
    args = dict(
      kind=self.kind,
      task_dir=str(task_dir),
      trial_dir=str(self._tmp / "trial"),
      session_id=self.name,
      memory_mb=self.limits.memory_mb,
      cpus=self.limits.cpus,
    )
    notes = []
    try:
      info = self.bridge.call(
        "start", START_TIMEOUT_S, network="public" if allow_network else "no-network", **args
      )
    except protocol.BridgeError as err:
      if allow_network or not _network_refused(err):
        raise SandboxError(f"Harbor {self.kind} environment did not start: {err}") from err
      info = self.bridge.call("start", START_TIMEOUT_S, network="public", **args)
      notes.append(f"network: Harbor's {self.kind} cannot run offline here; it has its network")
    res = info.get("resource_capabilities") or {}
    if not res.get("memory_limit"):
      if self.limits.enforce_limits:
        raise SandboxError(
          f"Harbor's {self.kind} environment cannot limit memory; "
          "RunnerConfig.enforce_limits=False runs without the limit"
        )
      notes.append(f"memory: {self.limits.memory_mb} MB is not enforced")
    if self.limits.cpus and not res.get("cpu_limit"):
      notes.append(f"cpus: {self.limits.cpus:g} is not enforced")
    notes.append(
      f"processes ({self.limits.max_processes}), disk ({self.limits.disk_mb} MB) and "
      f"output ({self.limits.max_output_mb} MB) are not enforced by Harbor's {self.kind}"
    )
    self.limit_warning = "; ".join(n for n in [info.get("limit_warning", ""), *notes] if n)
    return info

  def _setup(self) -> None:
    script = self._tmp / "child.sh"
    script.write_text(shell.CHILD_SCRIPT)
    # The environment's own processes (init, a sandbox anchor) survive reset(): their pids now.
    self._call_exec(
      f"mkdir -p {CTL} && chmod 1777 {CTL} && {_PIDS} | grep -vx $$ > {CTL}/baseline", 60
    )
    self.bridge.call("upload_file", 120, source=str(script), target=f"{CTL}/child.sh")

  # ---------------------------------------------------------------------------------- commands
  def _call_exec(self, command: str, timeout_s: float) -> dict:
    if self._closed:
      raise SandboxError(f"Harbor sandbox {self.name} is closed")
    try:
      return self.bridge.call(
        "exec", timeout_s + REQUEST_GRACE_S, command=command, timeout_sec=int(timeout_s) + 30
      )
    except protocol.BridgeError as err:
      raise SandboxError(f"Harbor {self.kind} exec failed: {err}") from err

  def _rlimits(self) -> str:
    lim = self.limits
    cpu = f"ulimit -t {lim.cpu_seconds}; " if lim.cpu_seconds else ""
    return f"ulimit -f {lim.max_file_mb * 1024} 2>/dev/null; {cpu}"

  def _bounded(self, out_file: str, max_chars: int) -> str:
    """Shell that prints `out_file`, cut to its head and tail (max_chars bytes) when longer."""
    half, q = max(1, max_chars // 2), shlex.quote(out_file)
    return (
      f"n=$(stat -c %s {q} 2>/dev/null || echo 0); if [ $n -gt {max_chars} ]; then "
      f"head -c {half} {q}; printf '\\n[... output truncated: %s bytes in total, showing the "
      f"first and last {half} ...]\\n' $n; tail -c {half} {q}; else cat {q}; fi; rm -f {q}"
    )

  def _result(self, reply: dict, timeout: int, elapsed: float, max_chars: int) -> CommandResult:
    # Some providers exec through a terminal (podman-compose): its \r\n line ends are not output.
    text = ((reply.get("stdout") or "") + (reply.get("stderr") or "")).replace("\r\n", "\n")
    body, _, tail = text.rpartition("\n__tmax_rc ")
    rc_text, _, took = tail.strip().partition(" ")
    rc = int(rc_text) if rc_text.lstrip("-").isdigit() else reply.get("return_code")
    timed_out = rc == protocol.KILLED_RC and took.isdigit() and int(took) >= timeout
    data = body.encode(errors="replace")
    # No cgroup counters here: a SIGKILL that was not our timeout is the kernel's OOM killer (what
    # Docker reports as exit 137 / OOMKilled).
    oom = {"oom_kill": int(rc == protocol.KILLED_RC and not timed_out), "pids_max_hits": 0}
    ev = status.Evidence(
      "done", rc, "timeout" if timed_out else "done", status.NO_STATS, oom,
      data[:4096], data[-4096:],
    )  # fmt: skip
    state, note = status.classify(ev, self.limits)
    state = "limit" if state == "limit_reset" else state
    output = shell.truncate(body, max_chars + 200)  # + the note of a cut made in the sandbox
    if note:
      output += ("\n" if output and not output.endswith("\n") else "") + note
    killed = state in ("timeout", "output_limit", "crashed") or (rc == protocol.KILLED_RC)
    return CommandResult(output, None if killed else rc, state, elapsed)

  def _write_command(self, command: str, path: str) -> str:
    """Shell that writes `command` to `path` in the environment: inline (one exec) when short,
    else uploaded first (an exec's argv is bounded)."""
    data = (command + "\n").encode()
    if len(data) <= INLINE_COMMAND_BYTES:
      return f"printf %s {base64.b64encode(data).decode()} | base64 -d > {path}; "
    local = self._tmp / pathlib.PurePath(path).name
    local.write_bytes(data)
    self._files("upload_file", str(local), path)
    local.unlink()
    return ""

  def run(
    self, command: str, *, timeout_s: float = 120.0, max_output_chars: int = 10_000
  ) -> CommandResult:
    with self._lock:
      n, start = next(self._ids), time.monotonic()
      timeout = max(1, int(round(timeout_s)))
      cmd_file, state, out = f"{CTL}/cmd.{n}", f"{CTL}/state.{n}", f"{CTL}/out.{n}"
      script = (
        f"{self._write_command(command, cmd_file)}exec 2>/dev/null; {self._rlimits()}SECONDS=0; "
        f"timeout -s KILL {timeout} setsid bash --noprofile --norc "
        f"{CTL}/child.sh {shlex.quote(self._state)} {cmd_file} {state} </dev/null >{out} 2>&1; "
        f"rc=$?; took=$SECONDS; {self._bounded(out, max_output_chars)}; rm -f {cmd_file}; "
        f"printf '\\n__tmax_rc %s %s\\n' $rc $took"
      )
      reply = self._call_exec(script, timeout + 10)
      result = self._result(reply, timeout, time.monotonic() - start, max_output_chars)
      if result.exit_code is not None:  # a killed command's state is partial: keep the last
        self._state = state
      return result

  def exec(
    self, argv: list[str], *, timeout_s: float = 600.0, max_output_chars: int = 10_000
  ) -> CommandResult:
    if not argv or not all(isinstance(a, str) for a in argv):
      raise SandboxError(f"exec needs a non-empty list of str, got {argv!r}")
    with self._lock:
      n, start = next(self._ids), time.monotonic()
      timeout, out = max(1, int(round(timeout_s))), f"{CTL}/exec.{n}"
      script = (
        f"exec 2>/dev/null; {self._rlimits()}SECONDS=0; timeout -s KILL {timeout} "
        f"{shlex.join(argv)} "
        f"</dev/null >{out} 2>&1; rc=$?; took=$SECONDS; {self._bounded(out, max_output_chars)}; "
        f"printf '\\n__tmax_rc %s %s\\n' $rc $took"
      )
      reply = self._call_exec(script, timeout + 10)
      return self._result(reply, timeout, time.monotonic() - start, max_output_chars)

  # ------------------------------------------------------------------------------------- files
  def upload(self, host_path, sandbox_path: str) -> None:
    src = pathlib.Path(host_path)
    if not src.exists():
      raise SandboxError(f"upload: host path {src} does not exist")
    op = "upload_dir" if src.is_dir() else "upload_file"
    self._files(op, str(src.resolve()), sandbox_path)

  def download(self, sandbox_path: str, host_path) -> None:
    check = self._call_exec(f"test -d {shlex.quote(sandbox_path)} && echo dir", 60)
    op = "download_dir" if "dir" in (check.get("stdout") or "") else "download_file"
    self._files(op, sandbox_path, str(pathlib.Path(host_path).resolve()))

  def _files(self, op: str, source: str, target: str) -> None:
    if self._closed:
      raise SandboxError(f"Harbor sandbox {self.name} is closed")
    try:
      self.bridge.call(op, 600, source=source, target=target)
    except protocol.BridgeError as err:
      raise SandboxError(f"Harbor {self.kind} {op} {source} -> {target} failed: {err}") from err

  # --------------------------------------------------------------------------------- lifecycle
  def reset(self) -> None:
    """Kills every process the sandbox user started (files kept) and forgets the shell state."""
    with self._lock:
      self._call_exec(KILL_STARTED, 60)
      self._state = ""

  def close(self) -> None:
    if self._closed:
      return
    self._closed = True
    if self.bridge is not None:
      with contextlib.suppress(SandboxError, protocol.BridgeError):
        self.bridge.call("stop", 300, delete=False)
      self.bridge.kill()
    shutil.rmtree(self._tmp, ignore_errors=True)


def open_trial_sandbox(task: Task, config, logs: dict | None = None) -> HarborSandbox:
  """A started HarborSandbox for a trial of `task` under RunnerConfig `config`."""
  cfg = task.config.environment
  limits = Limits(
    memory_mb=config.memory_mb or cfg.memory_mb,
    disk_mb=cfg.storage_mb,
    enforce_limits=config.enforce_limits,
  )
  sb = HarborSandbox(task, config.backend, limits, config.allow_network and cfg.allow_internet)
  if logs is not None:
    logs["environment.txt"] = logs.get("environment.txt", "") + (
      f"Harbor {sb.kind} environment ({sb.info.get('type')}), network {sb.info.get('network')}\n"
    )
  return sb
