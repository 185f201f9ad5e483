"""Compile-only devices of a real accelerator topology, on a machine that has none.

`tpu_devices(slice)`: the chips of a TPU slice from libtpu's topology description (every host of a
multi-host slice: one program over all of them, as a pod run compiles it); `one_host_chips` gives a
host's chips as a one-host slice's when XLA:TPU refuses them (below). `gpu_devices(node)`:
the GPUs of one or more 8-GPU nodes from the CUDA plugin's deviceless compiler, which takes the
GPU's description as a target config (gpu_targets/<chip>.pb.txt) in place of a device to query.
Only in the compiler venv (aot/toolchain.py, whose environment also turns off the GPU compiler's
autotuning: there is no GPU to time kernels on); elsewhere `missing_compiler` says how to get it.
"""

from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
from jax.experimental import topologies

from tmax_jax.aot import toolchain
from tmax_jax.aot.chips import CHIPS, Node, Slice

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


def one_host_chips(chips: list) -> list:
  """`chips` (compile-only TPU devices of one host of a slice) as the same chips of a one-host
  slice of that chip, when their ids are not 0..n-1; else `chips` itself.

  Why: XLA:TPU compiles a program over n chips of a topology only when their ids are below n
  ("Unexpected device_id 4 [0:2] in replica group (0,1,2,3) :: target has 4 device_id"). On a
  v6e slice wider than 2 chips libtpu numbers a host's 4 chips non-consecutively (v6e:4x4 host 0 =
  0,1,4,5; v6e:8x8 = 0,1,8,9), so a server replica's programs over them do not compile. The host's
  chips are a physical block (v6e: 2x2): the one-host slice of that block holds the same chips
  at the same coordinates (relative to the block) with ids 0..n-1, which is what a server replica
  on one host is."""
  if sorted(d.id for d in chips) == list(range(len(chips))):
    return chips
  name = _CHIP_OF_KIND.get(chips[0].device_kind)
  if name is None:
    raise ValueError(
      f"TPU device kind {chips[0].device_kind!r}; expected one of {list(_CHIP_OF_KIND)}"
    )
  low = np.min([d.coords for d in chips], axis=0)
  bounds = np.max([d.coords for d in chips], axis=0) - low + 1
  host = Slice(CHIPS[name], tuple(int(b) for b in bounds[: CHIPS[name].dims]))
  block = tpu_devices(host)
  at = {_place(d, 0): d for d in block}
  twins = [at.get(_place(d, low)) for d in chips]
  if None in twins or len(block) != len(chips):
    raise ValueError(f"the chips {[d.id for d in chips]} are not one {host.topology} block")
  return twins


_CHIP_OF_KIND = {
  "TPU v4": "v4",
  "TPU v5": "v5p",
  "TPU v5p": "v5p",
  "TPU v5 lite": "v5e",
  "TPU v6 lite": "v6e",
}


def _place(device, low) -> tuple:
  """A TPU device's place in its block: coordinates from the block's corner, and its core."""
  return (*(np.asarray(device.coords) - low).tolist(), getattr(device, "core_on_chip", 0))


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
