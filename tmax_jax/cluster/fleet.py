"""N inference replicas placed by Ray on the nodes offering `inference`, one router in front.

place_replicas(cfg) asks Ray for `cfg.replicas` actors (tmax_jax.cluster.replica), each needing
`inference_per_replica` of a node's `inference` resource (and `gpus` GPUs), spread over the nodes;
each actor starts a real server (launch/serve.py) on its node. Once every server is ready, the
router (tmax_jax.inference.router) starts in this process in front of them. What Ray reports lost
(the server or its actor died, the node died) Ray restarts (`max_restarts`; on another inference
node when its own is gone), and a watcher here points the router at the new server's address; the
router takes the lost one out and resyncs the last pushed weights to the new one before it takes
requests.
"""

from __future__ import annotations

import dataclasses
import logging
import pathlib
import threading

import ray

from tmax_jax import cli
from tmax_jax.cluster import roles
from tmax_jax.cluster.replica import ReplicaInfo, ReplicaStartError, ServerReplica, ServerSpec
from tmax_jax.errors import UserError
from tmax_jax.inference.router import RouterConfig, RouterThread

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class FleetConfig:
  """The replicas, what each asks of its node, and the router in front of them."""

  server: ServerSpec
  replicas: int = 1
  inference_per_replica: float = 1.0  # of a node's `inference` resource
  gpus: float = 0.0  # per replica (Ray chooses them and sets CUDA_VISIBLE_DEVICES)
  cpus: float = 1.0  # per replica
  max_restarts: int = -1  # Ray's restarts of a lost replica; -1 = without limit
  router_host: str = ""  # where the router binds; "" = this node's address
  router_port: int = 9100  # 0 = a free port
  poll_s: float = 0.5  # the router's Status polls
  watch_s: float = 1.0  # how often the replicas' addresses are asked (restarts followed)
  stop_timeout_s: float = 30.0  # a server's clean stop before it is killed


class InferenceFleet:
  """The placed replicas and their router; `stop()` (or leaving a `with` block) ends all."""

  def __init__(self, cfg: FleetConfig, actors: list, infos: list[ReplicaInfo], router):
    self.cfg, self._actors, self._infos, self.router = cfg, actors, list(infos), router
    self._lock = threading.Lock()
    self._stop = threading.Event()
    self._watcher = threading.Thread(target=self._watch, daemon=True, name="fleet-watcher")
    self._watcher.start()

  @property
  def router_address(self) -> str:
    return self.router.address

  def replicas(self) -> list[ReplicaInfo]:
    """Each replica as last seen (a restarted one: its new address once it is ready)."""
    with self._lock:
      return list(self._infos)

  def _watch(self) -> None:
    """Asks every actor where it serves, one question out per actor at a time: an answer that
    differs (a restart) repoints the router; an actor being restarted answers once its server is
    ready; one whose server did not start again is killed for Ray to restart."""
    asked: dict[int, ray.ObjectRef] = {}
    while not self._stop.wait(self.cfg.watch_s):
      changed = False
      for i, actor in enumerate(self._actors):
        ref = asked.pop(i, None) or actor.info.remote()
        done, _ = ray.wait([ref], timeout=0)
        if not done:
          asked[i] = ref
          continue
        try:
          info = ray.get(ref)
        except ReplicaStartError as e:
          log.warning("replica %d did not restart (%s); Ray starts it again", i, e)
          ray.kill(actor, no_restart=False)
          continue
        except ray.exceptions.RayActorError:
          continue  # lost: Ray restarts it (or its restarts are spent: the router keeps it out)
        with self._lock:
          if info != self._infos[i]:
            log.warning("replica %d restarted: %s -> %s", i, self._infos[i].address, info.address)
            self._infos[i], changed = info, True
      if changed and not self._stop.is_set():
        self.router.set_replicas([r.address for r in self.replicas()])

  def stop(self) -> None:
    """Stops the watcher, the router, then every server (SIGTERM, then SIGKILL) and its actor."""
    self._stop.set()
    self._watcher.join()
    self.router.stop()
    _stop_actors(self._actors, self.cfg.stop_timeout_s)

  def __enter__(self) -> InferenceFleet:
    return self

  def __exit__(self, *exc) -> None:
    self.stop()


def _stop_actors(actors: list, timeout_s: float) -> None:
  stops = [a.stop.remote(timeout_s) for a in actors]
  ray.wait(stops, num_returns=len(stops), timeout=timeout_s + 10)
  for a in actors:
    ray.kill(a, no_restart=True)


def place_replicas(cfg: FleetConfig) -> InferenceFleet:
  """Starts the replicas on the cluster this process joined (roles.connect or ray.init), waits
  until each serves, starts the router over them -> the fleet. UserError when the cluster cannot
  hold them, or when a server does not start (its error line)."""
  if not ray.is_initialized():
    raise UserError("tmax_jax.cluster: not connected to a Ray cluster (roles.connect first)")
  if cfg.replicas < 1:
    raise UserError(f"FleetConfig.replicas={cfg.replicas}: expected at least 1")
  path, colon, arg = cfg.server.serve_config.partition(":")  # FILE[:its get_config argument]
  if not pathlib.Path(path).is_file():
    raise UserError(f"serve config {path}: no such file")
  spec = dataclasses.replace(
    cfg.server, serve_config=str(pathlib.Path(path).resolve()) + colon + arg
  )
  need = cfg.replicas * cfg.inference_per_replica
  roles.require(roles.INFERENCE, need, f"{cfg.replicas} replica(s)")
  router_host = cfg.router_host or ray.util.get_node_ip_address()
  cli.check_port_free("router_port", router_host, cfg.router_port)
  actor_class = ray.remote(ServerReplica).options(
    resources={roles.INFERENCE: cfg.inference_per_replica},
    num_gpus=cfg.gpus,
    num_cpus=cfg.cpus,
    max_restarts=cfg.max_restarts,
    scheduling_strategy="SPREAD",
  )
  actors = [actor_class.remote(i, spec) for i in range(cfg.replicas)]
  try:
    infos = ray.get([a.info.remote() for a in actors], timeout=spec.start_timeout_s + 60)
    router = RouterThread(
      RouterConfig(
        replicas=tuple(r.address for r in infos),
        port=cfg.router_port,
        host=router_host,
        poll_s=cfg.poll_s,
      )
    )
  except BaseException as e:
    _stop_actors(actors, cfg.stop_timeout_s)
    if isinstance(e, ReplicaStartError):  # Ray's error is also one: its cause holds our message
      raise UserError(str(getattr(e, "cause", e))) from e
    raise
  log.info("router %s over %s", router.address, ", ".join(r.address for r in infos))
  return InferenceFleet(cfg, actors, infos, router)
