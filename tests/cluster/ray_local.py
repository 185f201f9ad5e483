"""A local Ray cluster of real raylets on this machine for the cluster tests: a head offering
`trainer`, nodes offering `inference` and nodes offering `sandbox`, this process joined as its
driver, and on exit no process it started (raylets, GCS, workers, servers, trainers, sandbox
hosts) left running."""

import contextlib
import os

import psutil
import ray
from ray.cluster_utils import Cluster

from tmax_jax.cluster import roles

NODE = dict(num_cpus=1, object_store_memory=80 * 2**20)  # a small object store per raylet


def alive(pid: int) -> bool:
  try:
    return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
  except psutil.NoSuchProcess:
    return False


def marked(marker: str) -> list[psutil.Process]:
  """Live processes whose command line names `marker` (the servers name their log dir)."""
  out = []
  for p in psutil.process_iter(["cmdline", "status"]):
    cmd = " ".join(p.info["cmdline"] or ())
    if marker in cmd and p.info["status"] != psutil.STATUS_ZOMBIE and p.pid != os.getpid():
      out.append(p)
  return out


@contextlib.contextmanager
def local_cluster(inference_nodes: int, marker: str, trainers: int = 1, sandbox_nodes: int = 0):
  """-> the Cluster (its head takes `trainers` trainer processes; `sandbox_nodes` more nodes
  offer `sandbox`); on exit, asserts nothing it started, nor any process naming `marker`, is
  left."""
  before = {p.pid for p in psutil.Process().children(recursive=True)}
  c = Cluster(
    initialize_head=True,
    head_node_args=dict(
      NODE, num_cpus=trainers, resources={roles.TRAINER: trainers}, include_dashboard=False
    ),
  )
  for _ in range(inference_nodes):
    c.add_node(**NODE, resources={roles.INFERENCE: 1})
  for _ in range(sandbox_nodes):
    c.add_node(**NODE, resources={roles.SANDBOX: 1})
  c.wait_for_nodes()
  roles.connect(c.address)
  try:
    yield c
  finally:
    started = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    ray.shutdown()
    c.shutdown()
    _, left = psutil.wait_procs(started + marked(marker), timeout=60)
    assert not left, [" ".join(p.cmdline()) for p in left]
