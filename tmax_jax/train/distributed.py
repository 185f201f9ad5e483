"""Multi-host: jax.distributed initialisation from flags/env and per-process batch feeding.

Each process passes its own rows of the global batch; `global_batch` assembles a global jax.Array
sharded over the mesh's batch axes with jax.make_array_from_process_local_data (process p's rows
become global rows [p * B_local, (p + 1) * B_local)).
"""

import json
import os

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from tmax_jax import sharding
from tmax_jax.train.batch import PackedBatch, TrainBatch

BATCH_AXES = ("data", "fsdp")


def initialize(
  coordinator: str | None = None,
  num_processes: int | None = None,
  process_id: int | None = None,
) -> bool:
  """sharding.initialize_distributed (flags, else JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES /
  JAX_PROCESS_ID), with gloo cross-process collectives selected first on CPU (the default CPU
  client has none). Returns False for a single-process run."""
  if jax.config.jax_platforms == "cpu" or os.environ.get("JAX_PLATFORMS", "") == "cpu":
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
  return sharding.initialize_distributed(coordinator, num_processes, process_id)


def batch_sharding(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P(BATCH_AXES))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def process_rows(global_rows: int) -> slice:
  """The slice of global batch rows this process feeds."""
  n = jax.process_count()
  if global_rows % n:
    raise ValueError(f"global batch of {global_rows} rows does not split over {n} processes")
  per = global_rows // n
  return slice(jax.process_index() * per, (jax.process_index() + 1) * per)


def local_rows(batch):
  """This process's share of a global NumPy batch every process built identically (a TrainBatch,
  or a PackedBatch: each micro-batch split the same way)."""
  if isinstance(batch, PackedBatch):
    return PackedBatch(tuple(local_rows(mb) for mb in batch.micro_batches))
  rows = process_rows(batch.tokens.shape[0])
  return jax.tree.map(lambda x: x[rows], batch)


def global_batch(local: TrainBatch, mesh: Mesh) -> TrainBatch:
  """This process's NumPy rows -> the global TrainBatch sharded over BATCH_AXES."""
  sharding = batch_sharding(mesh)
  return jax.tree.map(
    lambda x: jax.make_array_from_process_local_data(sharding, np.asarray(x)), local
  )


def allgather_json(value) -> list:
  """`value` (JSON-serialisable) of every process, in process order; a collective (every process
  calls it at the same point). Single process: [value]."""
  if jax.process_count() == 1:
    return [value]
  blob = np.frombuffer(json.dumps(value).encode(), np.uint8)
  sizes = multihost_utils.process_allgather(np.int32(blob.size))
  padded = np.zeros(int(np.max(sizes)), np.uint8)
  padded[: blob.size] = blob
  every = np.asarray(multihost_utils.process_allgather(padded))
  return [json.loads(every[p, : int(n)].tobytes()) for p, n in enumerate(np.asarray(sizes))]
