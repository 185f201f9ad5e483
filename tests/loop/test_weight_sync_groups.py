"""The weight sync in groups of leaves (loop/weight_sync.py: one program per group of at most
`group_bytes` served bytes, run one after another): packing, and served params bit-identical to
the one-program sync's on 8 fake CPU devices, on the staging path and the direct one."""

import jax
import numpy as np
import pytest
from jax.sharding import Mesh

from tmax_jax import sharding
from tmax_jax.loop.weight_sync import WeightSync, byte_groups, served_target
from tmax_jax.models import registry
from tmax_jax.models.config import ModelConfig

CFG = ModelConfig(
  vocab_size=256,
  hidden_size=32,
  intermediate_size=64,
  num_hidden_layers=2,
  num_attention_heads=4,
  num_key_value_heads=2,
  head_dim=8,
  tie_word_embeddings=False,
)


def test_byte_groups_pack_consecutive_leaves_under_the_bound():
  sizes = [5, 1, 2, 2, 9, 3, 3, 3, 1]
  groups = byte_groups(sizes, 5)
  assert groups == [(0,), (1, 2, 3), (4,), (5,), (6,), (7, 8)]
  assert [i for g in groups for i in g] == list(range(len(sizes)))  # every leaf once, in order
  for g in groups:  # within the bound, or one leaf larger than it alone
    assert sum(sizes[i] for i in g) <= 5 or len(g) == 1
  assert byte_groups(sizes, 100) == [tuple(range(len(sizes)))]
  assert byte_groups(sizes, 1) == [(i,) for i in range(len(sizes))]
  assert byte_groups([], 5) == []


@pytest.mark.parametrize("layout", ["disaggregated", "colocated"])
def test_grouped_sync_serves_the_same_bits(layout):
  if jax.device_count() != 8:
    pytest.skip("needs the 8 fake CPU devices of tests/conftest.py")
  devices = jax.devices()
  trainer_mesh = sharding.make_mesh(fsdp=2, tensor=2, devices=devices[:4])
  server_devices = devices[4:] if layout == "disaggregated" else devices[:4]
  server_mesh = Mesh(np.asarray(server_devices).reshape(2, 2), ("replica", "tensor"))
  target = served_target(CFG.with_dtypes(param_dtype="bfloat16"), server_mesh)
  params = registry.init_params(CFG, jax.random.key(1), registry.param_shardings(CFG, trainer_mesh))
  grouped = WeightSync(trainer_mesh, target, group_bytes=4096)
  whole = WeightSync(trainer_mesh, target, group_bytes=1 << 40)
  n = len(jax.tree.leaves(target))
  if layout == "disaggregated":
    assert 1 < len(grouped._cast.groups) < n and len(whole._cast.groups) == 1
    assert len(grouped.lower(params)) == len(grouped._cast.groups)
  else:  # same devices in the same order: one program into the server's shardings, as before
    assert grouped._cast.groups == [tuple(range(n))]
  got, want = grouped(params), whole(params)
  for (path, a), b, t in zip(
    jax.tree_util.tree_leaves_with_path(got), jax.tree.leaves(want), jax.tree.leaves(target),
    strict=True,
  ):  # fmt: skip
    name = jax.tree_util.keystr(path)
    assert a.dtype == t.dtype and a.sharding == t.sharding, name
    np.testing.assert_array_equal(
      np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8), err_msg=name
    )
