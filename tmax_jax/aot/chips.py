"""Published accelerator specs (one table) and the slice names users type.

Peak dense bf16 FLOP/s, HBM capacity and HBM bandwidth per chip, each from its vendor's page:
  v5p   459 TFLOP/s, 95 GB, 2765 GB/s     cloud.google.com/tpu/docs/v5p
  v6e   918 TFLOP/s, 32 GB, 1640 GB/s     cloud.google.com/tpu/docs/v6e
  v5e   197 TFLOP/s, 16 GB,  819 GB/s     cloud.google.com/tpu/docs/v5e
  v4    275 TFLOP/s, 32 GB, 1200 GB/s     cloud.google.com/tpu/docs/v4
  h100  989 TFLOP/s, 80 GB, 3350 GB/s     nvidia.com/en-us/data-center/h100 (SXM, dense)
  h200  989 TFLOP/s, 141 GB, 4800 GB/s    nvidia.com/en-us/data-center/h200 (SXM, dense)

A TPU slice is named as Cloud TPU names it (`v5p-16`: v5p and v4 count TensorCores, two per chip;
v6e and v5e count chips) or by its topology (`v5p:2x2x2`, `v6e:4x4`), which is what the compiler
takes. GPUs come as nodes of 8 over NVLink (HGX / DGX boards): `h100` is one node, `h200x2` two.
Both kinds of target answer `chip`, `chips`, `name` and `topology` (the compiler's string).
"""

from __future__ import annotations

import dataclasses
import math
import re

GB = 1e9


@dataclasses.dataclass(frozen=True)
class Chip:
  """One accelerator chip's published figures (per chip)."""

  name: str
  platform: str  # "tpu" | "gpu"
  peak_flops: float  # dense bf16 FLOP/s
  hbm_bytes: float
  hbm_bandwidth: float  # bytes/s
  cores_per_chip: int = 1  # TensorCores a Cloud TPU accelerator type counts per chip
  dims: int = 2  # topology dimensions of a TPU slice

  def roofline_s(self, flops: float, bytes_accessed: float) -> float:
    """The step's lower bound: the slower of compute at peak and HBM traffic at full bandwidth."""
    return max(flops / self.peak_flops, bytes_accessed / self.hbm_bandwidth)

  def mfu_bound(self, flops: float, bytes_accessed: float) -> float:
    """The model-FLOPs utilisation the roofline allows: compute time over the bound (1.0 when
    compute-bound)."""
    bound = self.roofline_s(flops, bytes_accessed)
    return flops / self.peak_flops / bound if bound > 0 else 0.0


CHIPS = {
  c.name: c
  for c in (
    Chip("v5p", "tpu", 459e12, 95 * GB, 2765 * GB, cores_per_chip=2, dims=3),
    Chip("v6e", "tpu", 918e12, 32 * GB, 1640 * GB),
    Chip("v5e", "tpu", 197e12, 16 * GB, 819 * GB),
    Chip("v4", "tpu", 275e12, 32 * GB, 1200 * GB, cores_per_chip=2, dims=3),
    Chip("h100", "gpu", 989e12, 80 * GB, 3350 * GB),
    Chip("h200", "gpu", 989e12, 141 * GB, 4800 * GB),
  )
}


@dataclasses.dataclass(frozen=True)
class Slice:
  """A TPU slice: its chip and topology (`v5p:2x2x2`); chips = the product of the dims."""

  chip: Chip
  shape: tuple[int, ...]

  @property
  def chips(self) -> int:
    return math.prod(self.shape)

  @property
  def topology(self) -> str:
    return f"{self.chip.name}:{'x'.join(map(str, self.shape))}"

  @property
  def name(self) -> str:
    """Cloud TPU's name of the slice, its accelerator type (`v5p-16`)."""
    return f"{self.chip.name}-{self.chips * self.chip.cores_per_chip}"


@dataclasses.dataclass(frozen=True)
class Node:
  """`nodes` GPU nodes of `gpus_per_node` GPUs each (one process per node, as a multi-node run
  launches it)."""

  chip: Chip
  nodes: int = 1
  gpus_per_node: int = 8

  @property
  def chips(self) -> int:
    return self.nodes * self.gpus_per_node

  @property
  def topology(self) -> str:
    """XLA:GPU's topology string: slices x hosts x devices per host."""
    return f"1x{self.nodes}x{self.gpus_per_node}"

  @property
  def name(self) -> str:
    return self.chip.name if self.nodes == 1 else f"{self.chip.name}x{self.nodes}"


def _shape_of(chips: int, dims: int) -> tuple[int, ...]:
  """The most cubic power-of-two topology of `chips` (2x2x2 for 8 v5p chips, 4x4 for 16 v6e)."""
  if chips < 1 or chips & (chips - 1):
    raise ValueError(f"{chips} chips: a slice has a power-of-two number of chips")
  shape = [1] * dims
  while math.prod(shape) < chips:
    shape[shape.index(min(shape))] *= 2
  # ascending, a unit dimension last: Cloud TPU's names (2x2x1, 2x2x2, 2x2x4, 2x4x4; 2x4, 4x4)
  return tuple(sorted(shape, key=lambda n: (n == 1, n)))


def parse_slice(name: str) -> Slice:
  """`v5p-16` / `v5p:2x2x2` / `v6e-8` / `v6e:2x4` -> Slice; ValueError naming what is expected."""
  m = re.fullmatch(r"(v\w+?)(?:-(\d+)|:(\d+(?:x\d+)*))", name.strip().lower())
  chip = CHIPS.get(m.group(1)) if m else None
  if chip is None or chip.platform != "tpu":
    tpus = sorted(n for n, c in CHIPS.items() if c.platform == "tpu")
    raise ValueError(
      f"TPU slice {name!r}: expected an accelerator type such as v5p-16 or a topology such as "
      f"v6e:4x4, of one of {tpus}"
    )
  if m.group(3):
    shape = tuple(int(x) for x in m.group(3).split("x"))
    if len(shape) != chip.dims:
      raise ValueError(f"TPU slice {name!r}: a {chip.name} topology has {chip.dims} dimensions")
    return Slice(chip, shape)
  cores = int(m.group(2))
  if cores % chip.cores_per_chip:
    raise ValueError(f"TPU slice {name!r}: {chip.name} counts {chip.cores_per_chip} cores a chip")
  return Slice(chip, _shape_of(cores // chip.cores_per_chip, chip.dims))


def parse_node(name: str) -> Node:
  """`h100` (one node of 8) / `h200x2` (two nodes) -> Node; ValueError naming what is expected."""
  m = re.fullmatch(r"([a-z]\w*?)(?:x(\d+))?", name.strip().lower())
  chip = CHIPS.get(m.group(1)) if m else None
  nodes = int(m.group(2) or 1) if m else 0
  if chip is None or chip.platform != "gpu" or nodes < 1:
    gpus = sorted(n for n, c in CHIPS.items() if c.platform == "gpu")
    raise ValueError(
      f"GPU node {name!r}: expected one of {gpus} (a node of 8 GPUs), or nodes of them such as "
      f"{gpus[0]}x2"
    )
  return Node(chip, nodes)
