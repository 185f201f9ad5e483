"""distributed.gather_to_host on 8 fake CPU devices (one process: the same chunked reads a
multi-process push runs; tests/loop/test_rl_external_processes.py runs it across 2 processes):
every element arrives, whatever the sharding, with chunks smaller than the array."""

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tmax_jax import sharding
from tmax_jax.train import distributed


@pytest.fixture(scope="module")
def mesh():
  if jax.device_count() < 8:
    pytest.skip("needs the 8 fake CPU devices of tests/conftest.py")
  return sharding.make_mesh(fsdp=4, tensor=2)


@pytest.mark.parametrize(
  "shape, spec",
  [
    ((5, 8, 6), P(None, "fsdp", "tensor")),  # stacked layers: chunks along the whole axis 0
    ((4, 8, 12), P(None, "fsdp", None)),  # along the longer whole axis, 2
    ((12, 8), P("tensor", "fsdp")),  # every axis split: chunks along axis 0, clamped last one
    ((8, 7), P("fsdp", None)),  # the whole axis is axis 1
    ((8, 6), P("fsdp", "data")),  # an axis on a mesh axis of size 1 is whole
    ((8,), P()),  # replicated: read where it is
  ],
)
def test_every_element_arrives_in_chunks(mesh, shape, spec):
  value = np.random.default_rng(0).normal(size=shape).astype(np.float32)
  x = jax.device_put(value, NamedSharding(mesh, spec))
  out = np.full(shape, np.nan, np.float32)
  distributed.gather_to_host(x, out, chunk_bytes=3 * value.nbytes // shape[0] + 1)
  np.testing.assert_array_equal(out, value)


def test_other_processes_pass_no_buffer(mesh):
  x = jax.device_put(np.ones((8, 4), np.float32), NamedSharding(mesh, P("fsdp")))
  distributed.gather_to_host(x, None, chunk_bytes=16)  # reads every chunk, keeps none


def test_chunks_go_along_the_longest_whole_axis(mesh):
  x = jax.device_put(np.ones((8, 6, 4), np.float32), NamedSharding(mesh, P("fsdp", "data", None)))
  assert distributed._chunk_axis(x) == 1  # data has size 1 on this mesh; 6 > 4
  y = jax.device_put(np.ones((4, 8, 12)), NamedSharding(mesh, P(None, "fsdp", None)))
  assert distributed._chunk_axis(y) == 2
  z = jax.device_put(np.ones((8, 6)), NamedSharding(mesh, P("fsdp", "tensor")))
  assert distributed._chunk_axis(z) == 0  # every axis split: the first one
