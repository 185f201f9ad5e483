"""The decode state's jaxtyping annotations (decode.DecodeState), checked at runtime
(tests/shape_checks.py) on a tiny replica's real state: as created, after a slot is activated and
after a decode step; a state whose field disagrees on B fails jaxtyping's check."""

import jax
import numpy as np
import pytest

from tests.shape_checks import TypeCheckError, check_fields
from tests.train import toy
from tmax_jax.inference import decode, sampling
from tmax_jax.models import registry

SHAPE = decode.CoreShape(slots=2, max_len=16, page_size=4, num_pages=8, max_topk=2, max_stop=3)


@pytest.fixture(scope="module")
def replica():
  mcfg = toy.model_config(toy.ToyConfig())
  core = decode.PagedCore(mcfg, SHAPE)
  return core, core.prepare(registry.init_params(mcfg, jax.random.key(0)))


def test_state_keeps_its_shapes_through_activate_and_decode(replica):
  core, served = replica
  state = core.init_state()
  check_fields(decode.DecodeState, state)
  slot = decode.slot_arrays(sampling.SamplingParams(), 4, stop_ids=(1,), max_stop=SHAPE.max_stop)
  slot.update(token=np.int32(3), position=np.int32(0))
  values = [slot[name] for name in decode.SLOT_FIELDS]
  state = core.activate(state, np.int32(0), *values)
  check_fields(decode.DecodeState, state)
  table = np.arange(SHAPE.slots * SHAPE.max_pages, dtype=np.int32).reshape(SHAPE.slots, -1)
  state, data = core.decode(served, state, table, np.int32(0))
  check_fields(decode.DecodeState, state)
  assert data.shape == (SHAPE.slots, 5 + 2 * SHAPE.max_topk)
  assert bool(state["active"][0]) and int(state["counter"][0]) == 1


def test_a_field_with_another_slot_count_fails_the_check(replica):
  core, _ = replica
  state = core.init_state()
  bad = {**state, "top_p": jax.numpy.ones(SHAPE.slots + 1, np.float32)}  # a device array, B + 1
  with pytest.raises(TypeCheckError, match="top_p"):
    check_fields(decode.DecodeState, bad)
