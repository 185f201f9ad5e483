"""Compile-only devices of a real accelerator topology, on a machine that has none.

`tpu_devices(slice)`: the chips of a TPU slice from libtpu's topology description (every host of a
multi-host slice: one program over all of them, as a pod run compiles it). `gpu_devices(node)`:
the GPUs of one or more 8-GPU nodes from the CUDA plugin's deviceless compiler, which takes the
GPU's description as a target config (gpu_targets/<chip>.pb.txt) in place of a device to query.
Only in the compiler venv (aot/toolchain.py, whose environment also turns off the GPU compiler's
autotuning: there is no GPU to time kernels on); elsewhere `missing_compiler` says how to get it.
"""

from __future__ import annotations

import importlib.util
import pathlib

from jax.experimental import topologies

from tmax_jax.aot import toolchain
from tmax_jax.aot.chips import Node, Slice

GPU_TARGETS = pathlib.Path(__file__).resolve().parent / "gpu_targets"
_COMPILER_MODULE = {"tpu": "libtpu", "gpu": "jax_plugins.xla_cuda12"}


def missing_compiler(platform: str) -> str | None:
  """None when this interpreter can compile for `platform`, else why (one line)."""
  module = _COMPILER_MODULE[platform]
  try:
    if importlib.util.find_spec(module) is not None:
      return None
  except ModuleNotFoundError:  # the parent package (jax_plugins) is not there either
    pass
  return toolchain.unavailable(platform) or (
    f"{module} is not importable here; run the compile with {toolchain.python()}"
  )


def tpu_devices(tpu: Slice) -> list:
  """The slice's chips (compile-only TPU devices, process_index = their host)."""
  why = missing_compiler("tpu")
  if why:
    raise RuntimeError(why)
  return list(topologies.get_topology_desc(platform="tpu", topology_name=tpu.topology).devices)


def gpu_target_config(node: Node) -> str:
  """The GpuTargetConfig text proto of the node's GPU."""
  return (GPU_TARGETS / f"{node.chip.name}.pb.txt").read_text()


def gpu_devices(node: Node) -> list:
  """The nodes' GPUs (compile-only CUDA devices, process_index = their node)."""
  why = missing_compiler("gpu")
  if why:
    raise RuntimeError(why)
  desc = topologies.get_topology_desc(
    platform="cuda",
    topology_name="",
    target_config=gpu_target_config(node),
    topology=node.topology,
  )
  return list(desc.devices)


def devices(target: Slice | Node) -> list:
  """The compile-only devices of a TPU slice or of GPU nodes."""
  return tpu_devices(target) if isinstance(target, Slice) else gpu_devices(target)


def hosts(devices: list) -> int:
  return len({d.process_index for d in devices})
