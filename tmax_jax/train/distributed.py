"""Multi-host: jax.distributed initialisation from flags/env, per-process batch feeding, and
collectives that bring small values (JSON) or whole arrays (to process 0) to the host.

Each process passes its own rows of the global batch; `global_batch` assembles a global jax.Array
sharded over the mesh's batch axes with jax.make_array_from_process_local_data (process p's rows
become global rows [p * B_local, (p + 1) * B_local)).
"""

import functools
import json
import os
from typing import cast

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from tmax_jax import sharding
from tmax_jax.train.batch import PackedBatch, TrainBatch

BATCH_AXES = ("data", "fsdp")
GATHER_CHUNK_BYTES = 64 << 20  # what one gather step adds to each device (a replicated chunk)


def initialize(
  coordinator: str | None = None,
  num_processes: int | None = None,
  process_id: int | None = None,
) -> bool:
  """sharding.initialize_distributed (flags, else JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES /
  JAX_PROCESS_ID), with gloo cross-process collectives selected first on CPU (the default CPU
  client has none). Returns False for a single-process run."""
  # jax.config's flags are attributes set at runtime, which its type stub does not list
  platforms = jax.config.jax_platforms  # type: ignore[attr-defined]
  if platforms == "cpu" or os.environ.get("JAX_PLATFORMS", "") == "cpu":
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


def gather_to_host(
  x: jax.Array, out: np.ndarray | None, chunk_bytes: int = GATHER_CHUNK_BYTES
) -> None:
  """Copies the whole value of the global array `x` into `out` on process 0; the other processes
  pass None. A collective: every process calls it for the same arrays in the same order.

  A non-fully-addressable array cannot be device_get'ed. It is read in chunks along its longest
  axis that its sharding leaves whole (the 9B's stacked [8, F, D] MLP kernels with D split: along
  F), each chunk replicated on every device for one step (`chunk_bytes`, or one slice along
  that axis when it is larger) and copied into `out`: no process holds more than `out` on its
  host, and other processes wait for each chunk so that their devices hold one at a time. Along
  a split axis XLA would gather the whole array on every device first (XLA:CPU's memory analysis
  of a [2048, 1024] array on 8 devices: 8.4 MB temp along the split axis, 0.26 MB along the
  whole one); an array split on every axis still pays that."""
  if x.is_fully_replicated:  # every process holds it whole: no collective needed
    if out is not None:
      out[...] = np.asarray(x.addressable_data(0))
    return
  if not isinstance(x.sharding, NamedSharding):  # not the params' kind: whole, on every host
    full = multihost_utils.process_allgather(x, tiled=True)
    if out is not None:
      out[...] = full
    return
  axis = _chunk_axis(x)
  n = x.shape[axis]
  size = int(np.clip(chunk_bytes * n // max(x.nbytes, 1), 1, n))
  read = _chunk_reader(x.sharding.update(spec=P()), axis, size)
  for start in range(0, n, size):
    start = min(start, n - size)  # the last chunk ends at n (it overlaps the one before)
    piece = read(x, np.int32(start))
    if out is None:
      piece.block_until_ready()
    else:
      out[(slice(None),) * axis + (slice(start, start + size),)] = np.asarray(
        piece.addressable_data(0)
      )


def _chunk_axis(x: jax.Array) -> int:
  """The longest axis of `x` its sharding does not split (mesh axes of size 1 split nothing; 0
  when it splits every one): slicing along it is local to each device, in the smallest slices."""
  named = cast(NamedSharding, x.sharding)  # the caller passes only NamedSharding arrays
  sizes = named.mesh.shape

  def parts(entry) -> int:
    names = () if entry is None else (entry,) if isinstance(entry, str) else entry
    return int(np.prod([sizes[n] for n in names], dtype=np.int64))

  spec = tuple(named.spec) + (None,) * (x.ndim - len(named.spec))
  whole = [a for a, entry in enumerate(spec) if parts(entry) == 1]
  return max(whole, key=lambda a: x.shape[a], default=0)


@functools.lru_cache(maxsize=64)
def _chunk_reader(replicated: NamedSharding, axis: int, size: int):
  """jit: (x, start) -> x[start : start + size] along `axis`, replicated (one compile per input
  shape and sharding; `start` is traced)."""
  return jax.jit(
    lambda x, start: jax.lax.dynamic_slice_in_dim(x, start, size, axis),
    out_shardings=replicated,
  )
