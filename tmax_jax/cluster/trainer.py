"""The RL job's trainer processes (launch/train_rl.py, jax.distributed among them) on the nodes
offering `trainer`, kept by Ray as one gang.

run_trainers(spec, router) asks Ray for `spec.processes` actors, each needing `trainer_per_process`
of a node's `trainer` resource, spread over the nodes; process 0's actor names the coordinator (its
node's address, a free port there) and every actor starts launch/train_rl.py with the job's config,
its overrides, `serving.address` = the router, and JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES /
JAX_PROCESS_ID. A jax.distributed job lives or dies whole: when a process exits non-zero or Ray
reports its actor or node lost, the others are stopped and the gang starts again (`restarts`
times), resuming from the job's last checkpoint (its output_dir must be storage every trainer node
sees, as for any multi-host run).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import pathlib
import subprocess
import sys
import time

import ray

from tmax_jax.cluster import roles
from tmax_jax.cluster.replica import ROOT, die_with_parent, log_tail, server_env, stop_process
from tmax_jax.errors import UserError
from tmax_jax.inference.server import free_port

log = logging.getLogger(__name__)
TRAIN_RL = ROOT / "launch" / "train_rl.py"


@dataclasses.dataclass(frozen=True)
class TrainerSpec:
  """How the trainer processes start (the same checkout path on every node)."""

  rl_config: str  # the RL job's config file
  overrides: tuple[str, ...] = ()  # `--config.a.b=VALUE` flags for launch/train_rl.py
  processes: int = 1  # jax.distributed processes (the config's topology.processes)
  trainer_per_process: float = 1.0  # of a node's `trainer` resource
  gpus: float = 0.0  # per process (Ray chooses them and sets CUDA_VISIBLE_DEVICES)
  cpus: float = 1.0  # per process
  restarts: int = 3  # whole-gang restarts after a lost or failed process
  log_dir: str = "/tmp/tmax_cluster"  # on each node: the processes' logs
  env: tuple[tuple[str, str], ...] = ()  # extra environment (e.g. XLA_FLAGS for CPU devices)


@dataclasses.dataclass(frozen=True)
class TrainerExit:
  """How one process of the gang ended."""

  rank: int
  code: int  # its exit code (negative: the signal that killed it)
  tail: str  # its `error: ...` line, else its last line
  log: str  # its log file, on its node


class TrainerProcess:
  """The actor class: one trainer process on the node Ray placed it on."""

  def __init__(self, rank: int, spec: TrainerSpec):
    self._rank, self._spec, self._proc = rank, spec, None
    self._ip = ray.util.get_node_ip_address()
    out = pathlib.Path(spec.log_dir)
    out.mkdir(parents=True, exist_ok=True)
    self._log = out / f"trainer-{rank}-{os.getpid()}.log"

  def coordinator(self) -> str:
    """HOST:PORT for jax.distributed's coordinator on this node (process 0 serves it)."""
    return f"{self._ip}:{free_port()}"

  def run(self, router: str, coordinator: str) -> TrainerExit:
    """Runs launch/train_rl.py to its end -> how it ended. The process dies with this actor."""
    spec = self._spec
    cmd = [
      sys.executable,
      str(TRAIN_RL),
      f"--config={spec.rl_config}",
      *spec.overrides,
      f"--config.serving.address={router}",
    ]
    env = server_env(ray.get_gpu_ids())
    # the cluster, for a job whose sandboxes run on its sandbox hosts (cluster/sandbox_hosts.py)
    env["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address
    env.update(dict(spec.env))
    if spec.processes > 1:
      env.update(
        JAX_COORDINATOR_ADDRESS=coordinator,
        JAX_NUM_PROCESSES=str(spec.processes),
        JAX_PROCESS_ID=str(self._rank),
      )
    with self._log.open("a") as out:
      self._proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, preexec_fn=die_with_parent
      )
    code = self._proc.wait()
    return TrainerExit(self._rank, code, log_tail(self._log), str(self._log))

  def stop(self, timeout_s: float = 30.0) -> None:
    """SIGTERM to the process, SIGKILL after `timeout_s`."""
    stop_process(self._proc, timeout_s)


def _start(spec: TrainerSpec, router: str) -> tuple[list, list]:
  # the actor's thread that starts the process must live as long as it (PDEATHSIG follows the
  # thread): max_concurrency keeps run() on its own thread while stop() is called
  actor_class = ray.remote(TrainerProcess).options(
    resources={roles.TRAINER: spec.trainer_per_process},
    num_gpus=spec.gpus,
    num_cpus=spec.cpus,
    max_restarts=0,
    max_concurrency=2,
    scheduling_strategy="SPREAD",
  )
  actors = [actor_class.remote(r, spec) for r in range(spec.processes)]
  coordinator = ray.get(actors[0].coordinator.remote())
  runs = [a.run.remote(router, coordinator) for a in actors]
  return actors, runs


def _stop(actors: list, timeout_s: float = 30.0) -> None:
  ray.wait([a.stop.remote(timeout_s) for a in actors], num_returns=len(actors), timeout=timeout_s)
  for a in actors:
    ray.kill(a, no_restart=True)


def _wait_gang(runs: list) -> list[TrainerExit | str]:
  """Waits until every process ended, or one failed (the rest are then not waited for) -> each
  finished one's TrainerExit, or a line saying why its actor was lost."""
  pending, ended = list(runs), {}
  while pending:
    done, pending = ray.wait(pending, num_returns=1)
    ref = done[0]
    try:
      ended[ref] = ray.get(ref)
    except ray.exceptions.RayError as e:  # its actor or node was lost
      ended[ref] = f"lost ({type(e).__name__}: {str(e).strip().splitlines()[0][:200]})"
    if isinstance(ended[ref], str) or ended[ref].code != 0:
      break
  return [ended[r] for r in runs if r in ended]


def run_trainers(spec: TrainerSpec, router: str) -> list[TrainerExit]:
  """Runs the gang to its end against the servers behind `router`; a failed or lost process
  restarts the whole gang (`spec.restarts` times) -> every process's exit. UserError when the
  last try failed (its first failing process's line)."""
  if not ray.is_initialized():
    raise UserError("tmax_jax.cluster: not connected to a Ray cluster (roles.connect first)")
  roles.require(
    roles.TRAINER,
    spec.processes * spec.trainer_per_process,
    f"{spec.processes} trainer process(es)",
  )
  for attempt in range(spec.restarts + 1):
    actors, runs = _start(spec, router)
    try:
      ends = _wait_gang(runs)
    finally:
      _stop(actors)
    failed = [e for e in ends if isinstance(e, str) or e.code != 0]
    if not failed and len(ends) == spec.processes:
      return ends
    first = failed[0]
    why = first if isinstance(first, str) else f"exited {first.code}: {first.tail} [{first.log}]"
    if attempt == spec.restarts:
      raise UserError(f"trainer process failed after {spec.restarts} restart(s): {why}")
    log.warning("trainer gang: %s; starting it again (%d of %d)", why, attempt + 1, spec.restarts)
    time.sleep(1.0)
  raise AssertionError("unreachable")
