"""Multi-host: jax.distributed initialisation from flags/env and per-process batch feeding.

Each process passes its own rows of the global batch; `global_batch` assembles a global jax.Array
sharded over the mesh's batch axes with jax.make_array_from_process_local_data (process p's rows
become global rows [p * B_local, (p + 1) * B_local)).
"""

import os
from typing import Optional

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from tmax_jax import sharding
from tmax_jax.train.batch import TrainBatch

BATCH_AXES = ("data", "fsdp")


def initialize(coordinator: Optional[str] = None, num_processes: Optional[int] = None,
               process_id: Optional[int] = None) -> bool:
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


def global_batch(local: TrainBatch, mesh: Mesh) -> TrainBatch:
  """This process's NumPy rows -> the global TrainBatch sharded over BATCH_AXES."""
  sharding = batch_sharding(mesh)
  return jax.tree.map(lambda x: jax.make_array_from_process_local_data(sharding, np.asarray(x)),
                      local)
