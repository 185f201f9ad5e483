"""Trainer -> server weight sync inside one program: a device-to-device reshard, no serialisation.

`WeightSync(...)(params)` turns the trainer's (global, e.g. FSDP-sharded fp32) params into the param
tree an engine serves (the server's param dtype, `TmaxEngine.param_shardings()` on its
("replica", "tensor") mesh) without a host copy; `TmaxEngine.swap` then takes each replica's shards
as they are and prepares the head [D, V] in the head dtype on device (decode.PagedCore.prepare):
  * the cast runs on the trainer's devices under jit (so a bf16 server moves half the bytes);
  * same devices in the same order (colocated, one process): the jit writes straight into the
    server's shardings;
  * otherwise the jit writes a staging copy, replicated per process and split over that process's
    trainer devices so that each staged shard holds whole server blocks (one collective over the
    trainer mesh); then every server block is sliced on the trainer device that holds it and
    copied device to device onto its serving device. Multi-controller JAX cannot `device_put`
    across processes between different device sets, and within a process `device_put` between
    different layouts falls back to a host copy; this path avoids both.
Every process calls it at the same point (the jit is a collective in multi-process runs).
"""

from __future__ import annotations

import math
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


class WeightSync:
  """Callable: trainer params (on `trainer_mesh`) -> served params placed as `target`."""

  def __init__(self, trainer_mesh: Mesh, target: Any):
    self.target = target
    self._targets = jax.tree.map(lambda t: t.sharding, target)
    # One jit's arguments and outputs must share a device order, and a TPU mesh orders its
    # devices by the chips' topology: the staging copy keeps the trainer mesh's own flat order.
    self._order = list(np.asarray(trainer_mesh.devices).flat)
    self._direct = _device_order(target) == self._order and jax.process_count() == 1
    out = self._targets
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
    self._cast = jax.jit(self._cast_impl, out_shardings=out)

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

  def _cast_impl(self, params):
    return jax.tree.map(lambda x, t: x.astype(t.dtype), params, self.target)

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

  def __call__(self, params: Any) -> Any:
    """-> the served params placed for the server (blocks until the copies are done)."""
    staged = self._cast(params)
    if not self._direct:
      staged = jax.tree.map(self._to_server, staged, self._targets)
    return jax.block_until_ready(staged)
