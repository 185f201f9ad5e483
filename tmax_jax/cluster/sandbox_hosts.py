"""Sandboxes on the Ray cluster's `sandbox` nodes, apart from the trainer and inference nodes
(RunnerConfig.sandbox_hosts = "ray").

place_hosts() (the job's launcher, launch/cluster.py) starts one SandboxHost actor
(tmax_jax/cluster/sandbox_host.py) per `sandbox` the nodes offer (one per node that says
{"sandbox": 1}), named in the NAMESPACE so that every process of the job finds them; Ray restarts a
lost one where a `sandbox` is free again: its node, or the node rejoining in its place (its
constructor sweeps what the lost one left there). SandboxHosts, in each process that runs
episodes, leases a host per sandbox (tmax_jax/cluster/leases.py: least loaded, a cap on starts per
host, a cooldown for a failed host) and returns a HostedSandbox: the Sandbox API on the caller's
side, each call served by the host. A host lost under a sandbox makes every later call to it a
SandboxError and its `lost()` say so: the runner ends the trial as the infrastructure failure
"sandbox_lost" (never scored). `open_hosted(spec, backend)` is the runner's opener
(tasks/runner.py names this module).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import pathlib
import threading

import ray

from tmax_jax.cluster import roles
from tmax_jax.cluster.leases import DEFAULT_POLICY, LeasePolicy, Leases
from tmax_jax.cluster.sandbox_host import (
  HostInfo,
  HostRestartedError,
  Opened,
  SandboxHost,
  pack,
  unpack,
)
from tmax_jax.errors import UserError
from tmax_jax.sandbox import place, runtime
from tmax_jax.sandbox.api import CommandResult, PodSpec, Sandbox, SandboxError
from tmax_jax.tasks.runner import RunnerConfig

log = logging.getLogger(__name__)

NAMESPACE = "tmax_jax"
PREFIX = "sandbox-host-"
SLACK_S = 60.0  # beyond a command's own timeout before its host counts as unresponsive
CALL_S = 300.0  # uploads, downloads, resets, closes: a host that takes longer has failed


@dataclasses.dataclass(frozen=True)
class HostsConfig:
  """The sandbox hosts' actors (each takes one of its node's `sandbox`): how many calls each
  serves at once (each running command holds one), Ray's restarts of a lost one."""

  max_concurrency: int = 256
  max_restarts: int = -1  # -1 = without limit
  start_timeout_s: float = 600.0  # each host up, its start-up sweep done


def place_hosts(cfg: HostsConfig = HostsConfig()) -> list:
  """One SandboxHost per `sandbox` the live nodes offer (a node saying {"sandbox": 1} takes one),
  named PREFIX + its index, each ready (its start-up sweep done) -> the actors. A lost host takes
  its node's `sandbox` back when Ray restarts it: its own node, or the node that rejoins in its
  place. UserError when no node offers `sandbox`."""
  if not ray.is_initialized():
    raise UserError("tmax_jax.cluster: not connected to a Ray cluster (roles.connect first)")
  roles.require(roles.SANDBOX, 1, "a sandbox host")
  options = dict(
    namespace=NAMESPACE,
    resources={roles.SANDBOX: 1},
    num_cpus=0,
    max_concurrency=cfg.max_concurrency,
    max_restarts=cfg.max_restarts,
    scheduling_strategy="SPREAD",
  )
  count = int(roles.capacity(roles.SANDBOX))
  actor_class = ray.remote(SandboxHost)
  actors = [actor_class.options(name=f"{PREFIX}{i}", **options).remote(i) for i in range(count)]
  try:
    infos = ray.get([a.info.remote() for a in actors], timeout=cfg.start_timeout_s)
  except BaseException:
    stop_hosts(actors)
    raise
  for i in infos:
    log.info("sandbox host %d on %s (pid %d, swept %d)", i.index, i.node_ip, i.pid, i.swept)
  return actors


def stop_hosts(actors: list, timeout_s: float = 60.0) -> None:
  """Ends the hosts for good, each after closing the sandboxes it holds."""
  if not actors:
    return
  ray.wait([a.shutdown.remote() for a in actors], num_returns=len(actors), timeout=timeout_s)
  for a in actors:
    ray.kill(a, no_restart=True)


@contextlib.contextmanager
def hosts_for(runner: RunnerConfig, cfg: HostsConfig = HostsConfig()):
  """Around a job whose episodes run with `runner`: the sandbox hosts placed (and stopped after)
  when runner.sandbox_hosts is "ray" -> their actors; nothing placed otherwise -> []."""
  actors = place_hosts(cfg) if runner.sandbox_hosts == "ray" else []
  try:
    yield actors
  finally:
    stop_hosts(actors)


def find_hosts() -> list:
  """The placed hosts' actors, by index; UserError when none is placed."""
  names = sorted(
    (int(a["name"][len(PREFIX) :]), a["name"])
    for a in ray.util.list_named_actors(all_namespaces=True)
    if a["namespace"] == NAMESPACE and a["name"].startswith(PREFIX)
  )
  if not names:
    raise UserError(
      "RunnerConfig.sandbox_hosts='ray': no sandbox host is placed on the Ray cluster "
      "(launch/cluster.py places them on the nodes offering 'sandbox')"
    )
  return [ray.get_actor(name, namespace=NAMESPACE) for _, name in names]


def _first_line(err: Exception) -> str:
  first = str(err).strip().splitlines()[0][:200] if str(err).strip() else ""
  return f"{type(err).__name__}: {first}"


class HostedSandbox(Sandbox):
  """A sandbox on a sandbox host, used from here. Its host failing (Ray reports the actor lost or
  unreachable, a call gets no answer in time) cools the host down and makes this sandbox lost:
  every later call raises SandboxError."""

  def __init__(self, hosts: SandboxHosts, host: int, actor, opened: Opened):
    self._hosts, self._host, self._actor = hosts, host, actor
    self._sid, self.name = opened.sid, f"host{host}/{opened.name}"
    self.limit_warning = opened.limit_warning
    self._lost, self._closed = "", False
    self._lock = threading.Lock()

  @property
  def host(self) -> int:
    return self._host

  def _call(self, method: str, *args, timeout_s: float = CALL_S):
    if self._lost:
      raise SandboxError(f"sandbox {self.name}: {self._lost}")
    try:
      return ray.get(getattr(self._actor, method).remote(self._sid, *args), timeout=timeout_s)
    except ray.exceptions.RayTaskError as err:  # the host raised: a SandboxError of the sandbox's
      cause = err.cause
      if isinstance(cause, HostRestartedError):  # it died between two calls: a failure all the same
        self._host_failed(str(cause))
      if isinstance(cause, SandboxError):
        raise SandboxError(str(cause)) from None
      raise SandboxError(f"sandbox {self.name}: {method} failed on its host: {cause!r}") from None
    except (ray.exceptions.RayError, TimeoutError) as err:
      self._host_failed(f"its sandbox host {self._host} failed ({_first_line(err)})")
      raise SandboxError(f"sandbox {self.name}: {self._lost}") from None

  def _host_failed(self, why: str) -> None:
    with self._lock:
      first = not self._lost
      self._lost = self._lost or why
    if first:
      log.warning("sandbox %s: %s", self.name, why)
      self._hosts.leases.fail(self._host)

  def run(self, command, *, timeout_s=120.0, max_output_chars=10_000) -> CommandResult:
    return self._call("run", command, timeout_s, max_output_chars, timeout_s=timeout_s + SLACK_S)

  def exec(self, argv, *, timeout_s=600.0, max_output_chars=10_000) -> CommandResult:
    return self._call(
      "exec", list(argv), timeout_s, max_output_chars, timeout_s=timeout_s + SLACK_S
    )

  def upload(self, host_path, sandbox_path: str) -> None:
    src = pathlib.Path(host_path)
    if not src.exists():
      raise SandboxError(f"upload: host path {src} does not exist")
    self._call("upload", pack((src, "x")), sandbox_path)

  def download(self, sandbox_path: str, host_path) -> None:
    data = self._call("download", sandbox_path)
    with runtime.scratch_dir("hosted-download-") as tmp:
      unpack(data, pathlib.Path(tmp))
      place(pathlib.Path(tmp) / "x", pathlib.Path(host_path))

  def reset(self) -> None:
    self._call("reset")

  def service_logs(self) -> dict[str, str]:
    """A pod's services' output (empty for one container, or when the host is gone)."""
    try:
      return self._call("service_logs")
    except SandboxError:
      return {}

  def lost(self) -> str:
    """The sandbox's own `lost()` on its host, or why its host failed (died under a call, or
    restarted since it opened the sandbox: it went with it)."""
    if not self._lost:
      with contextlib.suppress(SandboxError):  # a failed host: _call set self._lost
        return self._call("lost")
    return self._lost

  def close(self) -> None:
    """Closes it on its host (nothing to do when the host is gone) and ends its lease."""
    with self._lock:
      if self._closed:
        return
      self._closed = True
    if not self._lost:
      try:
        self._call("close")
      except SandboxError as err:
        log.warning("sandbox %s: close: %s", self.name, err)
    self._hosts.leases.release(self._host, was_open=True)


class SandboxHosts:
  """Leases sandboxes on the placed hosts (find_hosts); `open(spec, backend)` -> HostedSandbox."""

  def __init__(self, actors: list, policy: LeasePolicy = DEFAULT_POLICY):
    self.actors = list(actors)
    self.leases = Leases(len(self.actors), policy)

  def infos(self, timeout_s: float = 60.0) -> list[HostInfo]:
    """Every host's HostInfo (a host being restarted: once it is up)."""
    return ray.get([a.info.remote() for a in self.actors], timeout=timeout_s)

  def open(self, spec, backend: str = "auto") -> HostedSandbox:
    """Starts a sandbox (a pod for a PodSpec) on a leased host. A host that fails while it
    starts is cooled down and the next one tried; the sandbox's own start failure is a
    SandboxError (the runner's "sandbox_start")."""
    main = spec.main if isinstance(spec, PodSpec) else spec
    missing = [src for src, _ in main.files if not pathlib.Path(src).exists()]
    if missing:
      raise SandboxError(f"EnvironmentSpec.files: host path {missing[0]} does not exist")
    files = pack(*((src, str(i)) for i, (src, _) in enumerate(main.files)))
    failures = []
    for _ in self.actors:
      host = self.leases.acquire()
      try:
        opened = ray.get(self.actors[host].open.remote(spec, backend, files))
      except ray.exceptions.RayTaskError as err:
        self.leases.release(host, was_open=False)
        cause = err.cause
        raise SandboxError(str(cause) if isinstance(cause, SandboxError) else repr(cause)) from None
      except ray.exceptions.RayError as err:
        self.leases.release(host, was_open=False)
        self.leases.fail(host)
        failures.append(f"host {host}: {_first_line(err)}")
        continue
      self.leases.started(host)
      return HostedSandbox(self, host, self.actors[host], opened)
    raise SandboxError(f"no sandbox host could start the sandbox ({'; '.join(failures)})")


_shared: dict[str, SandboxHosts] = {}  # by the Ray cluster's address
_shared_lock = threading.Lock()


def shared_hosts(policy: LeasePolicy = DEFAULT_POLICY) -> SandboxHosts:
  """This process's SandboxHosts over the hosts placed on its Ray cluster, joining the cluster
  first when it has not (RAY_ADDRESS, set for the trainer processes by
  tmax_jax/cluster/trainer.py, else "auto"); `policy` leases them (the first call's counts)."""
  with _shared_lock:
    if not ray.is_initialized():
      roles.connect(os.environ.get("RAY_ADDRESS", "auto"))
    address = ray.get_runtime_context().gcs_address
    if address not in _shared:
      _shared[address] = SandboxHosts(find_hosts(), policy)
    return _shared[address]


def open_hosted(spec, backend: str = "auto", lease: tuple = ()) -> Sandbox:
  """The runner's opener for RunnerConfig.sandbox_hosts = "ray"; `lease`: LeasePolicy's
  (max_starting, cooldown_s, wait_s) from the RunnerConfig (empty: the defaults)."""
  return shared_hosts(LeasePolicy(*lease)).open(spec, backend)
