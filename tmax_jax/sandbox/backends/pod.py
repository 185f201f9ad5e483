"""A podman pod: the agent's container and a task's side services on one network (compose).

`PodmanPod(PodSpec)` is a PodmanSandbox (the main container: the agent's shell, exec, files, the
verifier, its limits and minimal environment exactly as for one container) that first creates a
pod and starts the side services in it, in dependency order (`start_order`):
- network: the pod's namespace (loopback only; slirp4netns with allow_network) is shared, so the
  containers reach each other on localhost; a generated /etc/hosts (the pod is made --no-hosts)
  maps "sandbox", every service name and alias to 127.0.0.1. Only net and uts are shared: pid and
  ipc namespaces stay per container, so the agent sees no service process.
- a service runs its built image (images/builder.py, mounted as for the main container but over a
  writable upper dir in the sandbox tmpfs: compose services have writable roots) with exactly its
  own env, as its image's (or compose's) user, with the trial's Limits, no-new-privileges and a
  small capability set (SERVICE_CAPS: root services still switch to their own users, chown their
  data dirs and bind low ports). The pod's cgroup holds the trial's memory limit (and cpus) for
  all containers together.
- lifetime: a service is an attached `podman run -i` whose command runs under SERVICE_WRAPPER:
  when this process dies its stdin closes and the service is killed (podman.py's anchor rule);
  close() removes the pod; podman.sweep_stale_containers removes pods of dead owners.
- depends_on conditions: service_started (its wrapper ran), service_healthy (its healthcheck
  passed; polled every <= HEALTH_POLL_S within compose's own tolerance, start_period + retries x
  (interval + timeout)), service_completed_successfully (it exited 0).
- reset() and hard restarts restart the main container only; services keep running.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import subprocess
import time

from tmax_jax.sandbox import base, cgroups, runtime
from tmax_jax.sandbox.api import Mount, PodSpec, SandboxError, ServiceSpec
from tmax_jax.sandbox.backends import podman
from tmax_jax.sandbox.images import layers
from tmax_jax.sandbox.images.image import Image, is_image_file

CONDITIONS = ("service_started", "service_healthy", "service_completed_successfully")
SERVICE_CAPS = (
  "CHOWN",
  "DAC_OVERRIDE",
  "FOWNER",
  "FSETID",
  "KILL",
  "SETGID",
  "SETUID",
  "NET_BIND_SERVICE",
)
# fd 3 keeps the container's stdin for the watcher: sh gives background jobs /dev/null as stdin.
SERVICE_WRAPPER = (
  'exec 3<&0; echo tmax-service-started; "$@" </dev/null 3<&- & s=$!; '
  "(read x <&3; kill -KILL $s 2>/dev/null) & wait $s"
)
SERVICE_TIMEOUT_S = 600.0  # service_completed_successfully: how long a one-shot service may run
HEALTH_POLL_S = 0.5
LOG_TAIL = 2000


def start_order(spec: PodSpec) -> list[str]:
  """Container names (the main one included) so that each comes after what it depends on; file
  order otherwise. Raises SandboxError naming an unknown dependency or a cycle."""
  deps = {spec.main_name: [d for d, _ in spec.main_depends_on]}
  deps.update({s.name: [d for d, _ in s.depends_on] for s in spec.services})
  order: list[str] = []
  visiting: list[str] = []

  def visit(name: str) -> None:
    if name in order:
      return
    if name in visiting:
      raise SandboxError(f"pod: depends_on cycle {' -> '.join([*visiting, name])}")
    visiting.append(name)
    for dep in deps[name]:
      if dep not in deps:
        raise SandboxError(
          f"pod: {name} depends on {dep!r}, which is not a service of the pod ({', '.join(deps)})"
        )
      visit(dep)
    visiting.pop()
    order.append(name)

  for name in [*(s.name for s in spec.services), spec.main_name]:
    visit(name)
  return order


def validate_pod(spec: PodSpec) -> None:
  """Raises SandboxError naming the malformed field of a PodSpec."""
  if not isinstance(spec, PodSpec):
    raise SandboxError(f"a pod needs a PodSpec, got {type(spec).__name__}")
  names = [spec.main_name, *(s.name for s in spec.services)]
  if len(set(names)) != len(names):
    raise SandboxError(f"PodSpec: container names must be unique, got {names}")
  by_name = {s.name: s for s in spec.services}
  for i, svc in enumerate(spec.services):
    where = f"PodSpec.services[{i}] ({svc.name})"
    if not is_image_file(svc.image):
      raise SandboxError(f"{where}.image: expected a built image record (.json), got {svc.image!r}")
    if not svc.command or not all(isinstance(a, str) for a in svc.command):
      raise SandboxError(f"{where}.command: expected a non-empty argv, got {svc.command!r}")
  for owner, deps in [
    (spec.main_name, spec.main_depends_on),
    *((s.name, s.depends_on) for s in spec.services),
  ]:
    for dep, condition in deps:
      if condition not in CONDITIONS:
        raise SandboxError(
          f"pod: {owner} depends on {dep} with condition {condition!r}; expected "
          f"one of {', '.join(CONDITIONS)}"
        )
      target = by_name.get(dep)
      if condition != "service_started" and target is None:
        raise SandboxError(
          f"pod: {owner} waits for {dep} to be {condition}; only side services "
          "can be waited for that way"
        )
      if condition == "service_healthy" and target is not None and target.healthcheck is None:
        raise SandboxError(
          f"pod: {owner} waits for {dep} to be healthy, but {dep} has no healthcheck"
        )
  start_order(spec)


class PodmanPod(podman.PodmanSandbox):
  """See the module docstring. `service_logs()` returns each service's output (tail)."""

  def __init__(self, spec: PodSpec):
    validate_pod(spec)
    self.pod_spec = spec
    self._services: dict[str, subprocess.Popen] = {}
    self._pod_up = False
    self._pod_cgroups: list[pathlib.Path] = []
    super().__init__(spec.main)

  @property
  def pod(self) -> str:
    return f"tmax-pod-{self.name}"

  def _service_dir(self, name: str) -> pathlib.Path:
    return self.root / "services" / name

  def _service_container(self, name: str) -> str:
    return f"tmax-{self.name}-{name}"

  # ---------------------------------------------------------------------------- host side
  def _extra_binds(self) -> dict[str, pathlib.Path]:
    return {
      m.target: self._mount_source(m, f"main-{i}") for i, m in enumerate(self.pod_spec.main_mounts)
    }

  def _mount_source(self, mount: Mount, key: str) -> pathlib.Path:
    """The host path behind a Mount (see api.Mount), created or copied under self.root."""
    if mount.source in ("logs", "logs/agent"):
      return self.binds["/logs"] / mount.source.partition("/")[2]
    if mount.source.startswith("volume:"):
      path = self.root / "volumes" / mount.source.partition(":")[2]
      path.mkdir(parents=True, exist_ok=True)
      self._chown_tree(path)
      return path
    src = pathlib.Path(mount.source)
    if not src.is_absolute() or not src.exists():
      raise SandboxError(
        f"pod mount {mount.source!r} -> {mount.target}: expected logs, "
        "logs/agent, volume:<name> or an existing absolute host path"
      )
    dest = self.root / "mounts" / key / src.name
    dest.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
      shutil.copytree(src, dest, symlinks=True)
    else:
      shutil.copy2(src, dest)
    return dest

  def _prepare_host(self) -> None:
    super()._prepare_host()
    names = ["sandbox", self.pod_spec.main_name]
    for svc in self.pod_spec.services:
      names += [svc.name, *svc.aliases]
      image = Image.load(svc.image)
      layers.mount_image(
        pathlib.Path(image.base),
        list(image.layers),
        self._service_dir(svc.name) / "rootfs",
        self._service_dir(svc.name) / "rootfs.upper",
      )
    self.hosts_file = self.root / "hosts"
    self.hosts_file.write_text(
      f"127.0.0.1\tlocalhost {' '.join(dict.fromkeys(names))}\n"
      "::1\tlocalhost ip6-localhost ip6-loopback\n"
    )
    self.hosts_file.chmod(0o644)

  def _network_args(self) -> list[str]:
    return ["--pod", self.pod, "-v", f"{self.hosts_file}:/etc/hosts:ro"]

  # ------------------------------------------------------------------------------ lifecycle
  def _start_anchor(self) -> None:
    if self._pod_up:  # a reset or hard restart: the main container only
      super()._start_anchor()
      return
    self._create_pod()
    by_name = {s.name: s for s in self.pod_spec.services}
    for name in start_order(self.pod_spec):
      svc = by_name.get(name)
      for dep, condition in svc.depends_on if svc else self.pod_spec.main_depends_on:
        self._wait_for(by_name.get(dep), condition, waiting=name)
      if svc is None:
        super()._start_anchor()
      else:
        self._start_service(svc)

  def _create_pod(self) -> None:
    lim = self.spec.limits
    podman.run_podman(["pod", "rm", "-f", "-t", "0", self.pod], check=False)
    res = podman.run_podman(
      [
        "pod",
        "create",
        "--name",
        self.pod,
        "--label",
        f"tmax_owner={runtime.owner_tag()}",
        "--network",
        "slirp4netns" if self.spec.allow_network else "none",
        "--no-hosts",
        "--hostname",
        "sandbox",
        "--share",
        "net,uts",
        # the infra container stops with the last container (e.g. at their --timeout lifetime)
        "--exit-policy",
        "stop",
        "--memory",
        f"{lim.memory_mb}m",
        "--memory-swap",
        f"{lim.memory_mb}m",
        *(["--cpus", f"{lim.cpus:g}"] if lim.cpus else []),
      ]
    )
    self._pod_up = True
    self._pod_cgroups = cgroups.find_container_cgroups(res.stdout.decode().strip())

  def _service_args(self, svc: ServiceSpec) -> list[str]:
    """The `podman run` arguments of a side service (after the global options)."""
    args = [
      *podman.hardened_run_args(
        self._service_container(svc.name),
        self.spec.limits,
        self.lifetime_left(),
        svc.user,
        svc.workdir,
        extra=("--pod", self.pod),
        caps=SERVICE_CAPS,
      ),
      "-v",
      f"{self.hosts_file}:/etc/hosts:ro",
    ]
    for i, mount in enumerate(svc.mounts):
      host = self._mount_source(mount, f"{svc.name}-{i}")
      args += ["-v", f"{host}:{mount.target}:{'ro' if mount.read_only else 'rw'}"]
    for key, value in svc.env:
      args += ["--env", f"{key}={value}"]
    return [
      *args,
      "--rootfs",
      str(self._service_dir(svc.name) / "rootfs"),
      "/bin/sh",
      "-c",
      SERVICE_WRAPPER,
      "tmax-service",
      *svc.command,
    ]

  def _start_service(self, svc: ServiceSpec) -> None:
    log_path = self._service_dir(svc.name) / "output.log"
    with open(log_path, "wb") as log:
      self._services[svc.name] = subprocess.Popen(
        [*podman.podman_cmd(), *self._service_args(svc)],
        env=podman.podman_env(),
        stdin=subprocess.PIPE,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
      )
    deadline = time.monotonic() + base.START_TIMEOUT_S
    while b"tmax-service-started" not in log_path.read_bytes():
      code = self._services[svc.name].poll()
      if code is not None or time.monotonic() > deadline:
        raise SandboxError(
          f"pod service {svc.name} did not start ("
          f"{'exit ' + str(code) if code is not None else 'timeout'}): "
          f"{self._log_tail(svc.name)}"
        )
      time.sleep(0.05)

  def _wait_for(self, svc: ServiceSpec | None, condition: str, *, waiting: str) -> None:
    """Blocks until `svc` meets `condition` (validate_pod checked the combination)."""
    if svc is None or condition == "service_started":
      return
    proc = self._services[svc.name]
    if condition == "service_completed_successfully":
      try:
        code = proc.wait(timeout=SERVICE_TIMEOUT_S)
      except subprocess.TimeoutExpired:
        code = None
      if code != 0:
        raise SandboxError(
          f"pod service {svc.name} (awaited by {waiting}) did not complete "
          f"successfully (exit {code}): {self._log_tail(svc.name)}"
        )
      return
    hc = svc.healthcheck
    deadline = time.monotonic() + hc.start_period_s + hc.retries * (hc.interval_s + hc.timeout_s)
    while True:
      if proc.poll() is not None:
        raise SandboxError(
          f"pod service {svc.name} (awaited by {waiting}) exited with "
          f"{proc.returncode} before it was healthy: {self._log_tail(svc.name)}"
        )
      try:
        res = podman.run_podman(
          ["exec", "--user", svc.user, self._service_container(svc.name), *hc.test],
          timeout=hc.timeout_s,
          check=False,
        )
        code, out = res.returncode, res.stdout + res.stderr
      except subprocess.TimeoutExpired:
        code, out = None, b"(timed out)"
      if code == 0:
        return
      if time.monotonic() > deadline:
        raise SandboxError(
          f"pod service {svc.name} (awaited by {waiting}) was not healthy within "
          f"{hc.start_period_s + hc.retries * (hc.interval_s + hc.timeout_s):g} s (last check "
          f"exit {code}: {out.decode(errors='replace').strip()[-500:]}); service output: "
          f"{self._log_tail(svc.name)}"
        )
      time.sleep(min(hc.interval_s, HEALTH_POLL_S))

  def _stop_anchor(self) -> None:
    try:
      super()._stop_anchor()
    finally:
      if self._closed:
        self._stop_pod()

  def _stop_pod(self) -> None:
    """Stops every service and removes the pod (its infra container included)."""
    procs, self._services = self._services, {}
    for proc in procs.values():
      with contextlib.suppress(OSError):
        proc.stdin.close()
    if self._pod_up:
      podman.run_podman(["pod", "rm", "-f", "-t", "0", self.pod], check=False)
      self._pod_up = False
    for proc in procs.values():
      with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, 9)
      with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)

  def _limit_stats(self) -> dict[str, int]:
    """The main container's counters plus the pod's (its memory limit holds every container)."""
    own = super()._limit_stats()
    pod = cgroups.container_stats(self._pod_cgroups)
    return {k: v + pod.get(k, 0) for k, v in own.items()}

  # -------------------------------------------------------------------------------- queries
  def _log_tail(self, name: str) -> str:
    path = self._service_dir(name) / "output.log"
    with contextlib.suppress(OSError):
      text = path.read_bytes().decode(errors="replace").replace("tmax-service-started\n", "", 1)
      return text.strip()[-LOG_TAIL:] or "(no output)"
    return "(no output)"

  def service_logs(self) -> dict[str, str]:
    """{service: the tail of its stdout+stderr} (host side: the agent cannot read them)."""
    return {s.name: self._log_tail(s.name) for s in self.pod_spec.services}
