"""Bad input and non-finite steps (clear errors or logged skips, state untouched), and the
learning test: DPPO raises the toy reward over 50 seeded steps."""

import dataclasses
import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.train import toy
from tests.train.conftest import random_trajectories
from tmax_jax.train import batch as batch_lib
from tmax_jax.train import step as step_lib
from tmax_jax.train.config import OptimizerConfig, TrainConfig


@pytest.fixture(scope="module")
def trainers(tiny):
  model, mcfg, _ = tiny
  base = TrainConfig(optimizer=OptimizerConfig(learning_rate=1e-2), logprob_chunk_size=8)
  return {
    mode: step_lib.Trainer(model, mcfg, base.replace(on_nonfinite=mode))
    for mode in ("skip", "raise")
  }


def _fresh(trainer, tiny):
  return trainer.init_state(jax.tree.map(jnp.array, tiny[2]))


def _batch():
  return batch_lib.pack(random_trajectories(0, 4, 10), 20, num_rows=2)


def _unchanged(a, b):
  for x, y in zip(
    jax.tree.leaves((a.params, a.opt_state)), jax.tree.leaves((b.params, b.opt_state)), strict=True
  ):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_empty_batch_is_a_clear_error(trainers, tiny):
  with pytest.raises(ValueError, match="no trajectories"):
    batch_lib.pack([], 8)
  b = _batch()
  empty = jax.tree.map(lambda x: x[:0], b)
  with pytest.raises(ValueError, match="empty batch"):
    trainers["skip"].step(_fresh(trainers["skip"], tiny), empty)


def test_bad_fields_name_the_field(trainers, tiny):
  b = _batch()
  adv = b.advantages.copy()
  adv[b.loss_mask > 0] = np.nan
  with pytest.raises(ValueError, match="batch.advantages"):
    batch_lib.validate(dataclasses.replace(b, advantages=adv))
  with pytest.raises(ValueError, match="batch.behaviour_logp: expected shape"):
    batch_lib.validate(dataclasses.replace(b, behaviour_logp=b.behaviour_logp[:, :-1]))
  with pytest.raises(ValueError, match="trajectory 0: 30 tokens do not fit"):
    batch_lib.pack([batch_lib.Trajectory(np.zeros(30, int), np.ones(30))], 20)
  with pytest.raises(ValueError, match="micro_batches"):
    model, mcfg, _ = tiny
    t = step_lib.Trainer(model, mcfg, TrainConfig(micro_batches=3, logprob_chunk_size=8))
    t.step(t.init_state(jax.tree.map(jnp.array, tiny[2])), b)


def _cases():
  b = _batch()
  on = b.loss_mask > 0
  return {
    "no loss tokens": dataclasses.replace(b, loss_mask=np.zeros_like(b.loss_mask)),
    # r = exp(logp + 200) overflows: the loss itself is inf
    "non-finite loss": dataclasses.replace(
      b,
      behaviour_logp=np.where(on, -200.0, 0.0).astype(np.float32),
      advantages=np.where(on, -1.0, 0.0).astype(np.float32),
    ),
    # a finite loss (~1e30) whose gradient norm overflows float32
    "non-finite gradient": dataclasses.replace(
      b, advantages=np.where(on, 1e30, 0.0).astype(np.float32)
    ),
  }


@pytest.mark.parametrize("reason", ["no loss tokens", "non-finite loss", "non-finite gradient"])
def test_rejected_step_skips_with_logged_reason(trainers, tiny, reason, caplog):
  trainer = trainers["skip"]
  state = _fresh(trainer, tiny)
  before = jax.tree.map(np.array, state)
  with caplog.at_level(logging.WARNING):
    state, metrics = trainer.step(state, _cases()[reason])
  assert metrics["skipped"] == 1.0 and reason in metrics["skip_reason"]
  assert reason in caplog.text
  _unchanged(before, state)
  state, metrics = trainer.step(state, _batch())  # training continues normally afterwards
  assert metrics["skipped"] == 0.0 and np.isfinite(metrics["loss"])
  moved = [
    not np.array_equal(a, np.asarray(b))
    for a, b in zip(jax.tree.leaves(before.params), jax.tree.leaves(state.params), strict=True)
  ]
  assert any(moved)


@pytest.mark.parametrize("reason", ["no loss tokens", "non-finite gradient"])
def test_rejected_step_raises_when_configured(trainers, tiny, reason):
  trainer = trainers["raise"]
  state = _fresh(trainer, tiny)
  before = jax.tree.map(np.array, state)
  with pytest.raises(step_lib.NonFiniteStepError, match=reason) as info:
    trainer.step(state, _cases()[reason])
  _unchanged(before, info.value.state)


@pytest.mark.slow
def test_dppo_learns_toy_reward(tmp_path):
  """50 seeded on-policy DPPO steps: mean reward goes from ~0.3 (chance) to ~1."""
  _, rows = toy.run(str(tmp_path), 50, progress=lambda s: None)
  reward = np.array([r["reward_mean"] for r in rows])
  assert reward[:5].mean() < 0.6
  assert reward[-10:].mean() > 0.9
  assert reward[-10:].mean() - reward[:5].mean() > 0.35
  assert all(r["skipped"] == 0.0 for r in rows)
  assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 50
