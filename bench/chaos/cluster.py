"""The chaos soak on a local Ray cluster (issue 44 point 6): the soak's tiny RL job launched by the
real launch/cluster.py on a cluster of real raylets on this machine (a trainer node, two inference
nodes each serving one replica behind the router, two sandbox nodes each running one sandbox
host), while node-level faults arrive at seeded random times (each kind at least once):

  replica_kill         SIGKILL a replica's server (a busy one), as a lost node's server dies
  host_kill            SIGKILL a sandbox host's actor process (its sandboxes die or stay behind)
  inference_node_kill  SIGKILL an inference node's raylet and every process under it, then a
                       fresh node offering `inference` joins (a lost node replaced)
  sandbox_node_kill    the same for the sandbox host's node (`sandbox`)
  trainer_kill         SIGKILL the trainer process (the launcher's gang starts it again and it
                       resumes from its checkpoint)

Ray restarts what was lost (a replica on the rejoined node, the host where a `sandbox` is free).
The run is judged by report.py as the single-host soak is, plus every live replica serving the
final version. The sandbox-side faults hit host 0 only: a failed host cools down for the lease
policy's 300 s, and with both hosts cooling no episode could start for minutes. Each waits up to
BUSY_WAIT_S for host 0 to hold a sandbox (a host cooling down holds none; a restarted trainer's
leases forget the cooldown), then hits it idle.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time

import psutil
import ray

from bench.chaos import faults, procs, soak
from tests.cluster import ray_local
from tmax_jax.cluster import roles
from tmax_jax.cluster import sandbox_hosts as hosts_lib
from tmax_jax.sandbox import census, runtime

NODE_KINDS = (
  "replica_kill",
  "host_kill",
  "inference_node_kill",
  "sandbox_node_kill",
  "trainer_kill",
)
INFERENCE_NODES = 2
SANDBOX_NODES = 2
SLOTS = 2  # decode slots per replica: 4 in all, fewer than the soak's 8 concurrent episodes
VICTIM_HOST = 0  # the host the sandbox-side faults hit (host 1 keeps taking sandboxes)
BUSY_WAIT_S = 30.0  # a sandbox-side fault waits so long for its host to hold a sandbox
TRAINER_RESTARTS = 100  # the launcher's gang restarts: every trainer_kill is one
SETTLE_S = 300.0  # after the window: for a step past every fault and the replicas' last version


class ClusterSoak(soak.Soak):
  """The soak on a local Ray cluster (see the module docstring); `run()` returns what
  report.analyze needs."""

  kinds = NODE_KINDS

  def run(self) -> dict:
    self.log_dir = self.out / "nodes"  # the nodes' servers' and trainers' logs
    self.host_owners: dict[int, str] = {}  # host index -> its owner tag now
    self.all_owners: set[str] = set()
    self.final = {"step": 0, "replicas": []}
    self._first_try: dict[str, float] = {}  # fault kind -> when it first waited for a busy host
    record = None
    # the raylets' environment is every actor's: their servers and trainers import the checkout
    os.environ["PYTHONPATH"] = os.pathsep.join(
      [str(procs.ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    )
    try:
      with ray_local.local_cluster(
        INFERENCE_NODES, str(self.log_dir), sandbox_nodes=SANDBOX_NODES
      ) as cluster:
        self.cluster = cluster
        record = super().run()
    except AssertionError as err:  # local_cluster: processes left after the cluster's shutdown
      if record is None:
        raise
      left = err.args[0] if err.args and isinstance(err.args[0], list) else [str(err)]
      record["leftovers_at_end"]["processes"] = len(left)
      record["processes_left"] = left
    record["replicas"] = self.final
    record["server_logs"] = [str(p) for p in sorted(self.log_dir.glob("replica-*.log"))]
    record["host_owners"] = sorted(self.all_owners)
    return record

  # ------------------------------------------------------------------------------ set-up
  def _prepare(self) -> None:
    self._write_tasks()
    self.config = self.out / "soak_config.py"
    procs.trainer_flags(self.out, self.out / "tasks", "", self.opts)  # writes self.config
    self.argv = [
      "launch/cluster.py",
      f"--address={self.cluster.address}",
      f"--rl_config={self.config}",
      "--rl_config.serving.placement=nodes",
      f"--rl_config.serving.nodes={INFERENCE_NODES}",
      "--rl_config.runner.sandbox_hosts=ray",
      f"--rl_config.serving.engine.max_concurrent_decodes={SLOTS}",
      "--router_port=0",
      "--noopenai",
      f"--server_log_dir={self.log_dir}",
      f"--trainer_restarts={TRAINER_RESTARTS}",
      "--trainer_env=XLA_FLAGS=--xla_force_host_platform_device_count=1",
    ]

  def _start_trainer(self) -> None:
    """The launcher (self.trainer: the soak's job), once its router serves and its trainer
    process runs (the first run)."""
    self.trainer = procs.start(self.argv, self.out / "launcher.log")
    deadline = time.monotonic() + soak.RESTART_WAIT_S
    while "ROUTING " not in (text := self.trainer.log.read_text(errors="replace")):
      if not self.trainer.alive() or time.monotonic() > deadline:
        raise RuntimeError(f"the launcher did not route; see {self.trainer.log}")
      time.sleep(0.5)
    self.router = text.split("ROUTING ", 1)[1].split()[0]
    while (pid := self._trainer_pid()) is None:
      if not self.trainer.alive() or time.monotonic() > deadline:
        raise RuntimeError(f"the launcher started no trainer; see {self.trainer.log}")
      time.sleep(0.5)
    self._new_run(pid)

  def _trainer_pid(self) -> int | None:
    """The pid of the job's trainer process (launch/train_rl.py on the soak's config), if one
    runs."""
    for p in psutil.process_iter(["cmdline", "status"]):
      cmd = p.info["cmdline"] or []
      if p.info["status"] == psutil.STATUS_ZOMBIE or f"--config={self.config}" not in cmd:
        continue
      if any(a.endswith("train_rl.py") for a in cmd):
        return p.pid
    return None

  def _new_run(self, pid: int) -> None:
    """A run for the trainer process `pid` (its log: trainer-0-<its actor's pid>.log)."""
    with contextlib.suppress(psutil.NoSuchProcess):
      log = self.log_dir / f"trainer-0-{psutil.Process(pid).ppid()}.log"
      self.runs.append(soak.Run(runtime.owner_tag(pid), str(log), soak.count_lines(self.rollouts)))

  # ------------------------------------------------------------------------------ what runs
  def _replicas(self) -> list | None:
    """The router's view of its replicas (address, live, version, ...), None when it does not
    answer."""
    status = faults.server_status(self.router)
    return None if status is None else list(status.replica_status)

  def _live_replicas(self) -> set[str]:
    return {r.address for r in self._replicas() or () if r.live}

  def _replica_pids(self) -> dict[str, int]:
    """Every replica server's pid by its address, from the ready files the servers wrote."""
    out = {}
    for ready in sorted(self.log_dir.glob("replica-*.json"), key=lambda p: p.stat().st_mtime):
      with contextlib.suppress(OSError, ValueError):  # the newest file wins a reused address
        payload = json.loads(ready.read_text())
        out[payload["address"]] = payload["pid"]
    return out

  def _host(self, index: int, timeout_s: float = 0.5):
    """Host `index`'s HostInfo, None while it is down or restarting."""
    try:
      actor = ray.get_actor(f"{hosts_lib.PREFIX}{index}", namespace=hosts_lib.NAMESPACE)
      info = ray.get(actor.info.remote(), timeout=timeout_s)
    except (ValueError, ray.exceptions.RayError):
      return None
    self.host_owners[index] = info.owner
    self.all_owners.add(info.owner)
    return info

  def _node(self, node_id: str):
    return next((n for n in self.cluster.list_all_nodes() if n.node_id == node_id), None)

  def _lose_node(self, node) -> dict:
    """A node lost and replaced: SIGKILL its raylet and every process under it (its Ray workers;
    their servers die with them), then a fresh node offering the same role joins."""
    resources = dict(node._ray_params.resources)
    raylet = psutil.Process(node.all_processes["raylet"][0].process.pid)
    victims = [*raylet.children(recursive=True), raylet]
    for p in victims:
      with contextlib.suppress(psutil.NoSuchProcess):
        p.kill()
    psutil.wait_procs(victims, timeout=30)
    self.cluster.remove_node(node, allow_graceful=False)
    self.cluster.add_node(**ray_local.NODE, resources=resources)
    return {"node_id": node.node_id, "processes": len(victims), "role": sorted(resources)}

  # ------------------------------------------------------------------------------ faults
  def _replica_kill(self) -> dict | None:
    replicas = [r for r in self._replicas() or () if r.live]
    pids = self._replica_pids()
    if len(replicas) < INFERENCE_NODES:  # one is down already: hit a fleet that is whole
      return None
    busy = [r.address for r in replicas if r.active_requests] or [r.address for r in replicas]
    victim = self.rng.choice(sorted(busy))
    if victim not in pids:
      return None
    ev = self._event("replica_kill", address=victim, pid=pids[victim], awaits_restart=True)
    with contextlib.suppress(ProcessLookupError):
      os.kill(pids[victim], signal.SIGKILL)
    self._await_replicas(ev, {r.address for r in replicas}, victim)
    return ev

  def _inference_node_kill(self) -> dict | None:
    live = self._live_replicas()
    if len(live) < INFERENCE_NODES:
      return None
    nodes = [n for n in self.cluster.list_all_nodes() if roles.INFERENCE in n._ray_params.resources]
    node = self.rng.choice(sorted(nodes, key=lambda n: n.node_id))
    ev = self._event("inference_node_kill", awaits_restart=True)
    ev.update(self._lose_node(node))
    self._await_replicas(ev, live)
    return ev

  def _await_replicas(self, ev: dict, before: set[str], gone: str = "") -> None:
    """Once every replica serves again, one at an address not `before` (the restarted one) and
    none at `gone` (the killed one, while the router has not yet seen it die)."""

    def back() -> bool:
      live = self._live_replicas()
      return len(live) == INFERENCE_NODES and bool(live - before) and gone not in live

    def note() -> None:
      ev["restarted_at"] = time.time()
      ev["down_s"] = round(ev["restarted_at"] - ev["at"], 1)

    self._checks.append((back, note))

  def _busy_host(self, kind: str):
    """Host VICTIM_HOST's HostInfo once it holds a sandbox, or once BUSY_WAIT_S passed since
    `kind` first tried (a host cooling down in the trainer's leases takes none); else None."""
    info = self._host(VICTIM_HOST, timeout_s=5.0)
    if info is None:
      return None
    first = self._first_try.setdefault(kind, time.monotonic())
    if faults.live_sandboxes(info.owner, self.opts.backend):
      return info
    return info if time.monotonic() - first > BUSY_WAIT_S else None

  def _host_kill(self) -> dict | None:
    info = self._busy_host("host_kill")
    if info is None:
      return None
    ev = self._host_event("host_kill", info)
    with contextlib.suppress(ProcessLookupError):
      os.kill(info.pid, signal.SIGKILL)
    self._await_host(ev, info)
    return ev

  def _sandbox_node_kill(self) -> dict | None:
    info = self._busy_host("sandbox_node_kill")
    node = info and self._node(info.node_id)
    if node is None:
      return None
    ev = self._host_event("sandbox_node_kill", info)
    ev.update(self._lose_node(node))
    self._await_host(ev, info)
    return ev

  def _host_event(self, kind: str, info) -> dict:
    """A fault on `info`'s host: every sandbox it holds is killed (by their names' prefix) and
    its successor must sweep what it left (`sweeps`)."""
    self._first_try.pop(kind, None)
    return self._event(
      kind,
      host=info.index,
      tag=info.owner,
      pid=info.pid,
      held=census.take({info.owner}).counts(),
      sandboxes=[f"host{info.index}/{info.owner}-"],
      sweeps=True,
      awaits_restart=True,
    )

  def _await_host(self, ev: dict, killed) -> None:
    """Once Ray restarted the host (a new process): what its start-up sweep removed and what the
    killed one still has by its markers."""
    found = {}

    def back() -> bool:
      found["info"] = self._host(killed.index)
      return found["info"] is not None and found["info"].pid != killed.pid

    def note() -> None:
      ev["restarted_at"] = time.time()
      ev["down_s"] = round(ev["restarted_at"] - ev["at"], 1)
      ev["swept"] = found["info"].swept
      ev["leftovers_after_next_start"] = census.take({killed.owner}).counts()

    self._checks.append((back, note))

  def _trainer_kill(self) -> dict | None:
    pid = self._trainer_pid()
    if pid is None:  # between two runs
      return None
    run = self.runs[-1]
    ev = self._event("trainer_kill", tag=run.tag, pid=pid)
    with contextlib.suppress(ProcessLookupError):
      os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(psutil.NoSuchProcess):
      psutil.Process(pid).wait(timeout=60)
    run.end_line, run.killed = soak.count_lines(self.rollouts), True
    run.ckpt = ev["ckpt"] = soak.latest_checkpoint(self.run_dir)
    ev["leftovers_before_restart"] = census.take({run.tag}).counts()
    steps_written = soak.count_lines(self.metrics)

    def restarted() -> bool:
      return self._trainer_pid() not in (None, pid)

    def started() -> None:  # the gang started a new trainer process: the next run
      self._new_run(self._trainer_pid())
      self._checks.append((lambda: soak.count_lines(self.metrics) > steps_written, stepped))

    def stepped() -> None:  # it stepped: its start-up sweep has run
      ev["leftovers_after_next_start"] = census.take({run.tag}).counts()
      ev["restarted_at"] = time.time()

    self._checks.append((restarted, started))
    return ev

  # ------------------------------------------------------------------------------ sampling
  def _server_address(self) -> str:
    return self.router

  def _sandbox_owners(self) -> list[str]:
    """The hosts' owner tags, as each host says now (a restarted host has a new one)."""
    for i in range(SANDBOX_NODES):
      self._host(i)
    return sorted(self.host_owners.values())

  def _watch_processes(self) -> None:
    if not self.trainer.alive() and not self.ended():
      self.unexpected.append(f"trainer launcher exited ({self.trainer.popen.returncode})")

  def ended(self) -> bool:
    return any(u.startswith("trainer launcher") for u in self.unexpected)

  # ------------------------------------------------------------------------------ the end
  def _wait_checks(self) -> None:
    """The pending restarts, then a step past every fault's (each recovered, sampled), then
    every live replica at the last step's version."""
    super()._wait_checks()
    deadline = time.monotonic() + SETTLE_S
    target = max((ev["step"] for ev in self.events), default=0)
    while time.monotonic() < deadline and self.trainer.alive():
      step = soak.max_step(self.metrics)
      self.samples["progress"].append((time.time(), step))
      if step > target and self._settled(step):
        return
      time.sleep(1.0)

  def _settled(self, step: int) -> bool:
    """Every live replica serves version `step` (the trainer made no step meanwhile): kept as
    the final state."""
    replicas = self._replicas()
    if replicas is None or soak.max_step(self.metrics) != step:
      return False
    self.final = {
      "step": step,
      "replicas": [{"address": r.address, "live": r.live, "version": r.version} for r in replicas],
    }
    return all(r.version == step for r in replicas if r.live)

  def _stop(self) -> int:
    """SIGTERM to the launcher: it stops the trainer, the replicas and the hosts (closing their
    sandboxes)."""
    code = self.trainer.stop(180)
    if self.runs:
      self.runs[-1].end_line = soak.count_lines(self.rollouts)
      self.runs[-1].ckpt = soak.latest_checkpoint(self.run_dir)
    return code

  def _owners(self) -> set[str]:
    return {r.tag for r in self.runs} | self.all_owners
