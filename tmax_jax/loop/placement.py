"""Which devices train and which serve, and the meshes over them (MeshConfig + ServingConfig).

Per process (multi-controller JAX: every process runs this with the same config):
  colocated      the trainer's mesh spans every device of every process; this process's server
                 runs on its own local devices (the first serving.replicas x serving.tensor).
  disaggregated  on every process the last `serving.devices` local devices serve and the others
                 train; the trainer's mesh spans the training devices of all processes.
The server mesh has the engine's axes ("replica", "tensor").
The trainer's devices are ordered process-major, so the leading mesh axes (data, fsdp) split over
processes and each process feeds the rows its own devices hold (train/distributed.py). A size that
does not fit is a ValueError naming the config fields and the devices there are.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
from jax.sharding import Mesh

from tmax_jax import sharding
from tmax_jax.errors import ConfigError
from tmax_jax.loop.config import MeshConfig, ServingConfig

SERVING_AXES = ("replica", "tensor")  # the engine's mesh: data-parallel replicas x tensor


@dataclasses.dataclass(frozen=True)
class Placement:
  """The resolved layout. server_mesh is None for a trainer-only job (SFT)."""

  trainer_mesh: Mesh
  server_mesh: Mesh | None
  placement: str

  @property
  def colocated(self) -> bool:
    return self.placement == "colocated"

  def serving_mesh(self) -> Mesh:
    """The server mesh of a job that serves (RL, evaluation); a trainer-only job has none."""
    if self.server_mesh is None:
      raise ValueError(f"placement {self.placement!r} has no server mesh (a trainer-only job)")
    return self.server_mesh


def _ordered(devices) -> list:
  return sorted(devices, key=lambda d: (d.process_index, d.id))


def build_mesh(cfg: MeshConfig, devices: list, field: str, where: str) -> Mesh:
  """`cfg` over `devices` (its first `num_devices` when set); errors name `field` and `where`."""
  if cfg.num_devices:
    if cfg.num_devices > len(devices):
      raise ConfigError(
        f"{field}.num_devices={cfg.num_devices}, but {where} has only {len(devices)} device(s)"
      )
    devices = devices[: cfg.num_devices]
  try:
    return sharding.make_mesh(devices=devices, **cfg.sizes())
  except ValueError as err:
    sizes = " x ".join(f"{k}={v}" for k, v in cfg.sizes().items())
    raise ConfigError(
      f"{field} ({sizes}) does not fit {where}: {len(devices)} device(s) ({err})"
    ) from err


def _check_process_split(mesh: Mesh, field: str) -> None:
  """Each process must own whole rows of the batch: the batch axes split over the processes."""
  n = jax.process_count()
  rows = mesh.shape["data"] * mesh.shape["fsdp"]
  if n > 1 and rows % n:
    raise ConfigError(
      f"{field}: data x fsdp = {rows} must be a multiple of the {n} processes "
      "(each process feeds its own rows of the global batch)"
    )


def check_batch(
  mesh: Mesh, rows: int, micro_batches: int, rows_field: str, mesh_field: str = "mesh"
) -> None:
  """Every micro-batch must split evenly over the batch axes (data x fsdp) of the trainer mesh."""
  split = mesh.shape["data"] * mesh.shape["fsdp"]
  if rows % micro_batches or (rows // micro_batches) % split:
    raise ConfigError(
      f"{rows_field} = {rows} rows in train.micro_batches={micro_batches} "
      f"micro-batches do not split over {mesh_field}.data x {mesh_field}.fsdp = "
      f"{split} devices (each micro-batch needs a multiple of {split} rows)"
    )


def trainer_only(mesh_cfg: MeshConfig, field: str = "mesh") -> Mesh:
  """The mesh of a job without a server (SFT): every device of every process."""
  mesh = build_mesh(
    mesh_cfg,
    _ordered(jax.devices()),
    field,
    f"the job ({jax.process_count()} process(es) x {jax.local_device_count()} device(s))",
  )
  _check_process_split(mesh, field)
  return mesh


def serving_only(serving: ServingConfig, serving_field: str = "serving") -> Mesh:
  """The server mesh of a job without a trainer (eval, serve): this process's first
  serving.replicas x serving.tensor devices."""
  local = _ordered(jax.local_devices())
  n = serving.replicas * serving.tensor
  if n > len(local):
    raise ConfigError(
      f"{serving_field}.replicas x {serving_field}.tensor = {n} device(s), but "
      f"this process has {len(local)}"
    )
  return Mesh(np.asarray(local[:n]).reshape(serving.replicas, serving.tensor), SERVING_AXES)


def resolve(
  mesh_cfg: MeshConfig,
  serving: ServingConfig,
  mesh_field: str = "mesh",
  serving_field: str = "serving",
) -> Placement:
  """The trainer's (global) mesh and this process's ("replica", "tensor") server mesh."""
  local = _ordered(jax.local_devices())
  n_proc = jax.process_count()
  n_serve = serving.replicas * serving.tensor
  if serving.placement == "nodes" and not serving.address:
    raise ConfigError(
      f"{serving_field}.placement='nodes' serves on inference nodes of a Ray cluster: launch the "
      f"job with launch/cluster.py --rl_config=..., which places them and sets "
      f"{serving_field}.address to their router"
    )
  if serving.placement in ("colocated", "nodes"):  # nodes: the mesh a node's server has (logs)
    train_devices = _ordered(jax.devices())
    where = f"placement {serving.placement!r} ({n_proc} process(es) x {len(local)} device(s))"
    if n_serve > len(local):
      raise ConfigError(
        f"{serving_field}.replicas x {serving_field}.tensor = {n_serve} device(s), "
        f"but each process has {len(local)} ({where})"
      )
    serve_devices = local[:n_serve]
  else:
    n = serving.devices
    if n >= len(local):
      raise ConfigError(
        f"{serving_field}.devices={n} leaves no training device: each process has "
        f"{len(local)} local device(s) (placement 'disaggregated')"
      )
    if n_serve != n:
      raise ConfigError(
        f"{serving_field}.replicas x {serving_field}.tensor = {n_serve} must equal "
        f"{serving_field}.devices={n} (placement 'disaggregated')"
      )
    keep = {d.id for p in range(n_proc) for d in _process_devices(p)[:-n]}
    train_devices = [d for d in _ordered(jax.devices()) if d.id in keep]
    serve_devices = local[len(local) - n :]
    where = (
      f"placement 'disaggregated' ({len(local)} local device(s) - {serving_field}.devices="
      f"{n}, x {n_proc} process(es))"
    )
  trainer_mesh = build_mesh(mesh_cfg, train_devices, mesh_field, f"the trainer under {where}")
  _check_process_split(trainer_mesh, mesh_field)
  return Placement(
    trainer_mesh, server_mesh(serving, serve_devices, trainer_mesh), serving.placement
  )


def server_mesh(serving: ServingConfig, devices: list, trainer: Mesh | None = None) -> Mesh:
  """The ("replica", "tensor") mesh of `devices`; over exactly the trainer's devices it takes the
  trainer mesh's device order (a TPU mesh orders devices by the chips' topology, and the weight
  sync's one jit writes into the server's shardings only when both orders agree)."""
  if trainer is not None:
    order = list(np.asarray(trainer.devices).flat)
    if set(order) == set(devices):
      devices = order
  return Mesh(np.asarray(devices).reshape(serving.replicas, serving.tensor), SERVING_AXES)


def _process_devices(process: int) -> list:
  return _ordered(d for d in jax.devices() if d.process_index == process)


def describe(mesh: Mesh) -> str:
  """E.g. 'data=1 x fsdp=2 x sequence=1 x tensor=2 on devices [0, 1, 2, 3]' (for logs)."""
  sizes = " x ".join(f"{k}={v}" for k, v in mesh.shape.items())
  return f"{sizes} on devices {[d.id for d in np.asarray(mesh.devices).flat]}"
