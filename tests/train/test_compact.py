"""Loss-token compaction gives the same loss, metrics and gradients as the full-sequence head, and
refuses a batch with more loss tokens per row than it was sized for."""

import dataclasses

import jax
import numpy as np
import pytest

from tests.train.conftest import random_trajectories
from tmax_jax.train import batch as batch_lib
from tmax_jax.train import step as step_lib
from tmax_jax.train.compact import check_capacity, loss_token_index
from tmax_jax.train.config import LossConfig, TrainConfig


def test_index_puts_loss_tokens_first_in_order():
  mask = np.asarray([[0, 1, 0, 1, 1, 0], [1, 0, 0, 0, 0, 1]], np.float32)
  idx = np.asarray(loss_token_index(mask, 3))
  np.testing.assert_array_equal(idx, [[1, 3, 4], [0, 5, 1]])


@pytest.mark.parametrize(
  "loss",
  [
    "dppo",
    pytest.param("grpo", marks=pytest.mark.slow),
    pytest.param("sft", marks=pytest.mark.slow),
  ],
)
def test_compact_equals_full(tiny, loss):
  model, mcfg, params = tiny
  trajs = random_trajectories(seed=7, n=6, max_len=24)
  batch = batch_lib.pack(trajs, 32, num_rows=4)
  # shrink the loss region so that compaction really drops positions
  mask = batch.loss_mask * (np.arange(32)[None, :] % 3 == 0)
  batch = dataclasses.replace(batch, loss_mask=mask.astype(np.float32))
  k = int((mask > 0).sum(-1).max())
  full_cfg = TrainConfig(loss=LossConfig(policy_loss=loss), logprob_chunk_size=8)
  compact_cfg = dataclasses.replace(full_cfg, loss_tokens_per_row=k)
  jb = jax.tree.map(np.asarray, batch)
  out = []
  for cfg in (full_cfg, compact_cfg):
    loss_v, stats, grads = jax.jit(step_lib.make_grad_fn(model, mcfg, cfg))(params, jb)
    out.append((loss_v, stats, grads))
  np.testing.assert_allclose(out[0][0], out[1][0], rtol=1e-5, atol=1e-7)
  for name in out[0][1]:
    np.testing.assert_allclose(out[0][1][name], out[1][1][name], rtol=1e-5, atol=1e-6)
  for a, b in zip(jax.tree.leaves(out[0][2]), jax.tree.leaves(out[1][2]), strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7)


def test_capacity_is_checked():
  mask = np.zeros((2, 10), np.float32)
  mask[1, :7] = 1
  check_capacity(mask, 7)
  with pytest.raises(ValueError, match=r"row 1 has 7 loss tokens > loss_tokens_per_row=6"):
    check_capacity(mask, 6)
