"""The weight sync's staging copy per host over any trainer device order a TPU slice gives: host by
host, round robin, and the mixed-radix interleaving of an 8-host v5p slice's topology-ordered mesh
(which the sync refused before: the 27B on v5p-64). host_layout reshapes the flat order into host
axes and local axes; staging_axes cuts the local ones for a leaf's parts; the flat order, which
one jit's arguments and outputs must share, is kept."""

import itertools

import numpy as np
import pytest

from tmax_jax.loop.weight_sync import host_layout, staging_axes

# hosts in a flat device order of the kind an 8-host v5p slice's topology-ordered mesh gives
# ([0,2,4,6,0,2,4,6,1,3,5,7,...]: docs/design/accelerator-compiles.md; tests/test_weight_sync_tpu.py
# compiles the real one)
V5P_64 = [0, 2, 4, 6] * 2 + [1, 3, 5, 7] * 2
V5P_64 = V5P_64 + V5P_64


def _groups(hosts, layout) -> dict[int, set[int]]:
  """Each host -> the flat positions the layout's host axes give it."""
  shape, is_host = layout
  grid = np.arange(len(hosts)).reshape(shape)
  out = {}
  for idx in itertools.product(
    *(range(n) if h else [slice(None)] for n, h in zip(*layout, strict=True))
  ):
    pos = set(np.asarray(grid[idx]).ravel().tolist())
    (host,) = {hosts[p] for p in pos}  # one host per combination of the host axes
    assert host not in out
    out[host] = pos
  return out


@pytest.mark.parametrize(
  "hosts",
  [
    [0, 0, 0, 0, 1, 1, 1, 1],  # host by host
    [0, 1, 2, 3] * 4,  # round robin (v5p-32's fsdp 16)
    V5P_64,  # mixed radix
    [0, 0, 1, 1, 0, 0, 1, 1, 2, 2, 3, 3, 2, 2, 3, 3],  # 2x2 blocks of a torus
  ],
)
def test_every_host_gets_its_own_devices(hosts):
  layout = host_layout(hosts)
  assert layout is not None
  groups = _groups(hosts, layout)
  assert sorted(groups) == sorted(set(hosts))
  for host, pos in groups.items():
    assert pos == {p for p, h in enumerate(hosts) if h == host}


def test_an_order_no_reshape_separates_is_refused():
  assert host_layout([0, 1, 1, 0, 0, 1, 1, 0]) is None  # host 0's devices are not a sub-grid
  assert host_layout([0, 0, 1, 2, 2, 1]) is None  # 6 devices: neither simple pattern


@pytest.mark.parametrize("split", [1, 2, 4])
def test_staging_axes_split_each_hosts_devices(split):
  layout = host_layout(V5P_64)
  shape, names = staging_axes(layout, split)
  assert int(np.prod(shape)) == len(V5P_64)
  sizes = dict(zip(names, shape, strict=True))
  assert np.prod([s for n, s in sizes.items() if n.startswith("host")]) == 8
  assert np.prod([s for n, s in sizes.items() if n.startswith("split")] or [1]) == split
  assert np.prod([s for n, s in sizes.items() if n.startswith("rep")] or [1]) == 4 // split
  with pytest.raises(ValueError, match="8 parts do not fit"):
    staging_axes(layout, 8)
