"""Device meshes, logical-axis shardings and multi-host initialisation.

Mesh axes are ("data", "fsdp", "sequence", "tensor"); "sequence" is the context-parallel axis (size
1 unless asked for). Params and activations carry logical axis names; the config's
`logical_axis_rules` map them to mesh axes (see config.DEFAULT_LOGICAL_AXIS_RULES).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import flax.linen as nn
import jax
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

MESH_AXES = ("data", "fsdp", "sequence", "tensor")


def make_mesh(
  data: int = 1, fsdp: int = -1, tensor: int = 1, devices: list | None = None, *, sequence: int = 1
) -> Mesh:
  """A (data, fsdp, sequence, tensor) mesh; one size may be -1 (= the remaining devices).

  `sequence` is the context-parallel axis (activations' "length" split over devices); it defaults
  to 1, so a mesh without it behaves as the 3-axis one."""
  devices = list(jax.devices() if devices is None else devices)
  named = dict(data=data, fsdp=fsdp, sequence=sequence, tensor=tensor)
  sizes = [named[a] for a in MESH_AXES]
  desc = " x ".join(f"{a}={named[a]}" for a in MESH_AXES)
  if sizes.count(-1) > 1:
    raise ValueError(f"at most one mesh axis may be -1, got {desc}")
  known = int(np.prod([s for s in sizes if s != -1]))
  if -1 in sizes:
    if len(devices) % known:
      raise ValueError(f"{len(devices)} devices do not divide into {desc}")
    sizes[sizes.index(-1)] = len(devices) // known
  if int(np.prod(sizes)) != len(devices):
    desc = " x ".join(f"{a}={n}" for a, n in zip(MESH_AXES, sizes, strict=True))
    raise ValueError(f"mesh {desc} needs {int(np.prod(sizes))} devices, have {len(devices)}")
  try:
    grid = mesh_utils.create_device_mesh(sizes, devices)
  except Exception:  # e.g. CPU or unusual topologies: plain row-major order
    grid = np.asarray(devices).reshape(sizes)
  return Mesh(grid, MESH_AXES)


def logical_to_sharding(logical_specs: Any, mesh: Mesh, rules) -> Any:
  """Tree of logical PartitionSpecs (axis names) -> tree of NamedShardings on `mesh`."""
  return nn.logical_to_mesh_sharding(logical_specs, mesh, list(rules))


def activation_sharding(mesh: Mesh, rules, axes: tuple[str | None, ...]) -> NamedSharding:
  """E.g. activation_sharding(mesh, cfg.logical_axis_rules, ("batch", "length")) for inputs."""
  return logical_to_sharding(PartitionSpec(*axes), mesh, rules)


def platform() -> str:
  """The platform the program being traced is for: that of the mesh set by `use_mesh` /
  `jax.set_mesh` (a TPU topology's compile-only devices under an AOT compile, while
  `jax.default_backend()` stays "cpu"), else `jax.default_backend()`. Kernels are picked by this."""
  device = jax.sharding.get_abstract_mesh().abstract_device
  return device.platform if device is not None else jax.default_backend()


@contextlib.contextmanager
def use_mesh(mesh: Mesh, rules) -> Iterator[None]:
  """Context in which the models' logical activation constraints apply to `mesh`."""
  with jax.set_mesh(mesh), nn.logical_axis_rules(list(rules)):
    yield


def cluster_detected(env=os.environ) -> bool:
  """A multi-process launch whose coordinator JAX finds by itself: a SLURM step with several
  tasks (srun), or TMAX_AUTO_DISTRIBUTED=1 (set by launch/tpu/train_rl.sh on every worker of a
  TPU pod slice, where JAX asks the TPU metadata)."""
  if env.get("TMAX_AUTO_DISTRIBUTED") == "1":
    return True
  return bool(env.get("SLURM_JOB_ID")) and int(env.get("SLURM_NTASKS", "1") or 1) > 1


def initialize_distributed(
  coordinator_address: str | None = None,
  num_processes: int | None = None,
  process_id: int | None = None,
) -> bool:
  """jax.distributed.initialize from arguments, else JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES,
  JAX_PROCESS_ID, else the cluster's environment (cluster_detected: SLURM, TPU pod). Returns False
  (and does nothing) for a single-process run."""
  env = os.environ
  coordinator_address = coordinator_address or env.get("JAX_COORDINATOR_ADDRESS") or None
  if num_processes is None and env.get("JAX_NUM_PROCESSES"):
    num_processes = int(env["JAX_NUM_PROCESSES"])
  if process_id is None and env.get("JAX_PROCESS_ID"):
    process_id = int(env["JAX_PROCESS_ID"])
  if coordinator_address is None and (num_processes or 1) <= 1:
    if cluster_detected(env):  # SLURM / TPU pod slice: JAX reads the cluster's own environment
      jax.distributed.initialize()
      return True
    return False
  missing = [
    name
    for name, value in (
      ("coordinator_address", coordinator_address),
      ("num_processes", num_processes),
      ("process_id", process_id),
    )
    if value is None
  ]
  if missing:
    raise ValueError(
      f"multi-host init needs {missing} (flags or JAX_COORDINATOR_ADDRESS, "
      "JAX_NUM_PROCESSES, JAX_PROCESS_ID)"
    )
  if not 0 <= process_id < num_processes:
    raise ValueError(f"process_id={process_id} must be in [0, num_processes={num_processes})")
  jax.distributed.initialize(
    coordinator_address=coordinator_address, num_processes=num_processes, process_id=process_id
  )
  return True
