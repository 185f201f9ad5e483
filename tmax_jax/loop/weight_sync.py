"""Trainer -> server weight sync inside one program: a device-to-device reshard, no serialisation.

`WeightSync(...)(params)` turns the trainer's (global, e.g. FSDP-sharded fp32) params into the param
tree an engine serves (the server's param dtype, `TmaxEngine.param_shardings()` on its
("replica", "tensor") mesh) without a host copy; `TmaxEngine.swap` then takes each replica's shards
as they are and prepares the head [D, V] in the head dtype on device (decode.PagedCore.prepare):
  * the cast runs on the trainer's devices under jit (so a bf16 server moves half the bytes);
  * same devices in the same order (colocated, one process): one jit writes straight into the
    server's shardings;
  * otherwise jits write a staging copy, replicated per process and split over that process's
    trainer devices so that each staged shard holds whole server blocks (collectives over the
    trainer mesh); then every server block is sliced on the trainer device that holds it and
    copied device to device onto its serving device. Multi-controller JAX cannot `device_put`
    across processes between different device sets, and within a process `device_put` between
    different layouts falls back to a host copy; this path avoids both.
    The staging reshard can be one the SPMD partitioner has no collective for (the 27B on 32 x
    H200: fsdp over all 32 devices -> each host's own split), and then it gathers every leaf
    whole on every device: in one program, ~15 fp32 leaves at once (82.65 GB of temp). So the
    leaves go in groups of at most `group_bytes` (by default the largest served leaf), one
    program per group run one after another (one group's gathers live at a time), and each
    group takes the cast pinned to the trainer's sharding where that needs less temp (the
    gathers then move served-dtype bytes: GroupedCast).
Every process calls it at the same point (the jits are collectives in multi-process runs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from tmax_jax.inference import decode
from tmax_jax.models import ModelConfig, registry


def served_target(served_cfg: ModelConfig, mesh: Mesh) -> Any:
  """Abstract params (shape, served dtype, sharding) an engine serves on `mesh` (axes
  ("replica", "tensor")): the shardings are the engine's own (decode.param_shardings)."""
  return jax.tree.map(
    lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
    registry.abstract_params(served_cfg),
    decode.param_shardings(served_cfg, mesh),
  )


def _device_order(tree: Any) -> list | None:
  """The device order every leaf's mesh shares (None when they differ)."""
  orders = {tuple(np.asarray(leaf.sharding.mesh.devices).flat) for leaf in jax.tree.leaves(tree)}
  return list(orders.pop()) if len(orders) == 1 else None


def _staging_split(shape: tuple[int, ...], target: NamedSharding, n_local: int) -> tuple[int, int]:
  """(dim, parts): split the trainer-side copy along the dim the server splits most, into as many
  parts as both layouts allow, so every staged shard holds whole server blocks; (-1, 1) = keep a
  whole copy per trainer device (small leaves the server does not split)."""
  parts = [n // b for n, b in zip(shape, target.shard_shape(shape), strict=True)]
  best = max(range(len(shape)), key=lambda k: math.gcd(parts[k], n_local), default=-1)
  g = math.gcd(parts[best], n_local) if best >= 0 else 1
  return (best, g) if g > 1 else (-1, 1)


# static bounds: an eager lax.slice would send its start indices from the host
_slice = jax.jit(jax.lax.slice, static_argnums=(1, 2))


def host_layout(hosts: list[int]) -> tuple[tuple[int, ...], tuple[bool, ...]] | None:
  """How a mesh's flat device order (each device's host, i.e. process_index) groups its hosts, as
  a reshape of that order into axes, each of hosts or of one host's own devices -> (shape, which
  axes are of hosts): host by host [h0 h0 h1 h1 ...] = ((hosts, local), (True, False)); round
  robin [h0 h1 h0 h1 ...] = ((local, hosts), (False, True)); a mixed-radix interleaving (how an
  8-host v5p slice's topology-ordered mesh comes out: [h0 h2 h4 h6 h0 h2 h4 h6 h1 h3 ...]), for
  a power-of-two device count, = one axis of 2 per bit of the flat index. None: no such reshape."""
  n, n_hosts = len(hosts), len(set(hosts))
  n_local = n // n_hosts
  h = np.asarray(hosts)
  if (h.reshape(n_hosts, n_local) == h.reshape(n_hosts, n_local)[:, :1]).all():
    return (n_hosts, n_local), (True, False)
  if (h.reshape(n_local, n_hosts) == h.reshape(n_local, n_hosts)[:1]).all():
    return (n_local, n_hosts), (False, True)
  if n & (n - 1):
    return None
  bits = n.bit_length() - 1
  index = np.arange(n)
  # bit k of the flat index (k = 0 the outermost) is a host axis when flipping it moves a device
  # to another host; the layout holds when the host bits alone name the host, one to one
  is_host = tuple(bool((h[index ^ (1 << (bits - 1 - k))] != h).any()) for k in range(bits))
  # an array start, so the sum is an array to the type checker too (one host returned above, so
  # at least one bit here is a host's)
  pattern = sum(
    (((index >> (bits - 1 - k)) & 1) << k for k in range(bits) if is_host[k]), np.zeros_like(index)
  )
  named = set(zip(pattern.tolist(), hosts, strict=True))
  if len(named) != n_hosts or len({p for p, _ in named}) != n_hosts:
    return None
  return (2,) * bits, is_host


def staging_axes(layout, split: int) -> tuple[tuple[int, ...], tuple[str, ...]]:
  """The staging mesh's axes over a host layout (host_layout): the host axes kept, the local
  axes cut so that `split` of each host's devices (outer first) hold the leaf's parts and the rest
  replicate them -> (shape, names "host<i>" / "split<i>" / "rep<i>"); the flat order is kept."""
  shape, names, left = [], [], split
  for i, (size, is_host) in enumerate(zip(*layout, strict=True)):
    if is_host:
      shape.append(size)
      names.append(f"host{i}")
      continue
    take = math.gcd(size, left)
    left //= take
    for part, kind in ((take, "split"), (size // take, "rep")):
      if part > 1:
        shape.append(part)
        names.append(f"{kind}{i}")
  if left != 1:
    raise ValueError(f"weight sync: {split} parts do not fit the local axes of {layout}")
  return tuple(shape), tuple(names)


def byte_groups(sizes: Sequence[int], bound: int) -> list[tuple[int, ...]]:
  """Consecutive leaf indices packed into groups of at most `bound` bytes (a leaf larger than
  `bound` alone): fewer programs to dispatch, none gathering more than `bound` at once."""
  groups: list[list[int]] = []
  total = bound + 1  # the first leaf opens a group
  for i, size in enumerate(sizes):
    if total + size > bound:
      groups.append([])
      total = 0
    groups[-1].append(i)
    total += size
  return [tuple(g) for g in groups]


class _Lowered(list):
  """A GroupedCast's lowered programs, one per group; `compile()` compiles each (jit-like)."""

  def compile(self) -> list:
    return [lowered.compile() for lowered in self]


class GroupedCast:
  """Jit-like: trainer params -> the served dtypes placed as `out_shardings`, run as one program
  per group of leaves (`groups`: leaf indices in tree order), one group after another.
  `try_pin`: each group is compiled twice, as traced and with every cast pinned to its input's
  sharding (the reshard after it then moves the cast values), and runs the one with less temp:
  where the SPMD partitioner has no collective for the reshard it gathers each leaf whole before
  the cast (the pin halves that for bf16), where it has one (an all-to-all) it casts first
  anyway and the pin would force a whole gather. Every process compiles the same programs and
  picks the same. `lower(params)` (abstract params with their shardings) -> the programs a push
  runs, lowered, as the plan compiles them."""

  def __init__(self, target: Any, out_shardings: Any, groups: list[tuple[int, ...]], try_pin: bool):
    self._treedef = jax.tree.structure(target)
    self._dtypes = [t.dtype for t in jax.tree.leaves(target)]
    self._out = jax.tree.leaves(out_shardings)
    self.groups = groups
    self._try_pin = try_pin
    self._chosen: dict[tuple, tuple] = {}  # (group, inputs' shardings) -> (lowered, compiled)

  def _lowered(self, group: tuple[int, ...], xs: list, pin: bool):
    dtypes = [self._dtypes[i] for i in group]
    shardings = [x.sharding for x in xs]

    def cast(xs):
      ys = [x.astype(d) for x, d in zip(xs, dtypes, strict=True)]
      if pin:
        ys = [jax.lax.with_sharding_constraint(y, s) for y, s in zip(ys, shardings, strict=True)]
      return ys

    return jax.jit(cast, out_shardings=[self._out[i] for i in group]).lower(xs)

  def _program(self, group: tuple[int, ...], xs: list) -> tuple:
    """(lowered, compiled) of the group's program with the least temp (first: unpinned)."""
    key = (group, tuple(x.sharding for x in xs))
    if key not in self._chosen:
      pins = (False, True) if self._try_pin else (False,)
      built = [
        (lowered, lowered.compile()) for lowered in (self._lowered(group, xs, p) for p in pins)
      ]
      self._chosen[key] = min(built, key=lambda lc: _temp_bytes(lc[1]))
    return self._chosen[key]

  def _programs(self, params: Any):
    """(lowered, compiled, leaf indices, input leaves) per group, in the order a push runs them."""
    leaves = jax.tree.leaves(params)
    for group in self.groups:
      xs = [leaves[i] for i in group]
      yield *self._program(group, xs), group, xs

  def lower(self, params: Any) -> _Lowered:
    return _Lowered(lowered for lowered, *_ in self._programs(params))

  def __call__(self, params: Any) -> Any:
    out: list[Any] = [None] * len(self._dtypes)
    for _, compiled, group, xs in self._programs(params):
      for i, y in zip(group, compiled(xs), strict=True):
        out[i] = y
    return jax.tree.unflatten(self._treedef, out)


def _temp_bytes(compiled) -> int:
  """The compiled program's temp allocation (0 where the backend reports none)."""
  analysis = compiled.memory_analysis()
  return analysis.temp_size_in_bytes if analysis is not None else 0


class WeightSync:
  """Callable: trainer params (on `trainer_mesh`) -> served params placed as `target`;
  `group_bytes` bounds the served bytes one staging program moves (module docstring; None: the
  largest served leaf, the bound a leaf-by-leaf sync has anyway)."""

  def __init__(self, trainer_mesh: Mesh, target: Any, group_bytes: int | None = None):
    self.target = target
    self._targets = jax.tree.map(lambda t: t.sharding, target)
    # One jit's arguments and outputs must share a device order, and a TPU mesh orders its
    # devices by the chips' topology: the staging copy keeps the trainer mesh's own flat order.
    self._order = list(np.asarray(trainer_mesh.devices).flat)
    self._direct = _device_order(target) == self._order and jax.process_count() == 1
    out, groups = self._targets, [tuple(range(len(jax.tree.leaves(target))))]
    if not self._direct:
      self._hosts = len({d.process_index for d in self._order})
      self._n_local = len(self._order) // self._hosts
      self._layout = host_layout([d.process_index for d in self._order])
      if self._layout is None:
        raise ValueError(
          "weight sync: the trainer mesh's device order mixes its hosts irregularly "
          f"({[d.process_index for d in self._order]}); a staging copy per host needs a reshape "
          "of that order into host axes and local axes"
        )
      out = jax.tree.map(self._staging, target)
      sizes = [math.prod(t.shape) * t.dtype.itemsize for t in jax.tree.leaves(target)]
      groups = byte_groups(sizes, group_bytes or max(sizes))
    # direct: one program as it always was (no reshard between meshes to bound)
    self._cast = GroupedCast(target, out, groups, try_pin=not self._direct)

  def _staging(self, t: jax.ShapeDtypeStruct) -> NamedSharding:
    """Replicated over hosts, split over each host's own trainer devices, on a mesh whose flat
    device order is the trainer mesh's (its host layout's axes, host_layout / staging_axes)."""
    dim, g = _staging_split(t.shape, t.sharding, self._n_local)
    shape, names = staging_axes(self._layout, g)
    mesh = Mesh(np.asarray(self._order).reshape(shape), names)
    spec: list[tuple[str, ...] | None] = [None] * len(t.shape)
    if dim >= 0:
      spec[dim] = tuple(n for n in names if n.startswith("split")) or None
    return NamedSharding(mesh, P(*spec))

  @staticmethod
  def _to_server(staged: jax.Array, target: NamedSharding) -> jax.Array:
    """Each server block sliced on the trainer device that holds it, then copied device to
    device (jax.device_put of a 1-device array); `jax.device_put` of the whole array would take
    a host path whenever the two layouts differ."""
    held = [(s.index, s.data) for s in staged.addressable_shards]
    blocks = []
    for device, idx in target.addressable_devices_indices_map(staged.shape).items():
      # jax types these indices `Index | None` but builds them from devices_indices_map (an Index)
      want = [sl.indices(n) for sl, n in zip(idx, staged.shape, strict=True)]  # type: ignore[arg-type]
      for have, data in held:
        got = [sl.indices(n) for sl, n in zip(have, staged.shape, strict=True)]
        if all(g[0] <= w[0] and w[1] <= g[1] for g, w in zip(got, want, strict=True)):
          start = tuple(w[0] - g[0] for g, w in zip(got, want, strict=True))
          limit = tuple(w[1] - g[0] for g, w in zip(got, want, strict=True))
          blocks.append(jax.device_put(_slice(data, start, limit), device))
          break
      else:
        raise AssertionError(f"no staged shard holds server block {idx}")
    return jax.make_array_from_single_device_arrays(staged.shape, target, blocks)

  def lower(self, params: Any) -> list:
    """Each of the sync's device programs lowered for abstract `params` (their shardings the
    trainer's), in the order a push runs them: what the plan compiles."""
    return self._cast.lower(params)

  def __call__(self, params: Any) -> Any:
    """-> the served params placed for the server (blocks until the copies are done)."""
    staged = self._cast(params)
    if not self._direct:
      staged = jax.tree.map(self._to_server, staged, self._targets)
    return jax.block_until_ready(staged)
