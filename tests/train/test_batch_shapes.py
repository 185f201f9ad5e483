"""The train step's jaxtyping annotations, checked at runtime (tests/shape_checks.py): a packed
TrainBatch, its device micro-batch and the loss function's scalar loss and stats keep their
annotated shapes; a batch with a misshapen field fails jaxtyping's check."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from tests.shape_checks import TypeCheckError, check_fields, checked
from tests.train.conftest import random_trajectories
from tmax_jax.train import batch as batch_lib
from tmax_jax.train import step as step_lib
from tmax_jax.train.config import OptimizerConfig, TrainConfig


def _batch() -> batch_lib.TrainBatch:
  trajectories = random_trajectories(seed=3, n=4, max_len=12)
  return batch_lib.pack(trajectories, 16, num_rows=4, fields=("behaviour_logp", "advantages"))


def test_packed_batch_and_its_micro_batch_keep_their_shapes(tiny):
  model, mcfg, params = tiny
  batch = _batch()
  check_fields(batch_lib.TrainBatch, batch)  # host NumPy
  cfg = TrainConfig(optimizer=OptimizerConfig(total_steps=2), logprob_chunk_size=8)
  dev = step_lib.Trainer(model, mcfg, cfg).to_device(batch)
  check_fields(batch_lib.TrainBatch, dev)  # device arrays
  mb = step_lib._fields(dev)
  check_fields(batch_lib.MicroBatch, mb)
  loss, stats = checked(step_lib.make_loss_fn(model, mcfg, cfg))(params, mb)
  assert loss.shape == () and np.isfinite(float(loss))
  assert all(v.shape == () for v in stats.values()) and stats["n_tokens"] > 0


def test_mismatch_stats_are_scalars_of_b_t_inputs():
  logp = jnp.log(jnp.full((2, 5), 0.5))
  stats = checked(step_lib.mismatch_stats)(logp, logp - 0.1, jnp.ones((2, 5)))
  assert set(stats) == {"abs_dlogp", "mismatch_k3"}
  with pytest.raises(TypeCheckError, match="mask"):
    checked(step_lib.mismatch_stats)(logp, logp, jnp.ones((2, 4)))


@pytest.mark.parametrize(
  ("field", "bad"),
  [
    ("loss_mask", np.zeros((4, 15), np.float32)),  # T differs from tokens'
    ("targets", np.zeros((4, 16), np.float32)),  # float ids
    ("topk_ids", np.zeros((4, 16), np.int32)),  # [B, T] where [B, T, K] is due
  ],
)
def test_a_misshapen_batch_field_fails_the_check(field, bad):
  batch = dataclasses.replace(_batch(), **{field: bad})
  with pytest.raises(TypeCheckError, match=field):
    check_fields(batch_lib.TrainBatch, batch)
