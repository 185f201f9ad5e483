"""Advantage estimators and aggregation weights against NumPy."""

import jax.numpy as jnp
import numpy as np
import pytest

from tmax_jax import rl


def test_centered_and_standard():
  rng = np.random.default_rng(0)
  rewards = rng.integers(0, 2, 24).astype(np.float32)
  groups = np.repeat(np.array([7, 3, 9]), 8)
  rng.shuffle(groups)
  cen = np.asarray(rl.get("advantage", "centered")(rewards, groups))
  std = np.asarray(rl.get("advantage", "standard")(rewards, groups))
  for g in np.unique(groups):
    r = rewards[groups == g].astype(np.float64)
    np.testing.assert_allclose(cen[groups == g], r - r.mean(), atol=1e-6)
    np.testing.assert_allclose(
      std[groups == g], (r - r.mean()) / (r.std() + 1e-8), rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("name", ["centered", "standard"])
def test_zero_std_groups_get_zero_advantages(name):
  """An all-equal group has no learning signal: A is exactly 0, never (ulp error) / 1e-8. The
  float mean of 7 x 0.1 misses 0.1 by an ulp, which the bare 1e-8 turned into A of about -0.43."""
  rewards = np.concatenate([np.zeros(4), np.ones(4), np.full(7, 0.1), np.full(32, 0.3), [0, 1]])
  groups = np.repeat([0, 1, 2, 3, 4], [4, 4, 7, 32, 2])
  adv = np.asarray(rl.get("advantage", name)(rewards.astype(np.float32), groups))
  assert np.all(adv[:-2] == 0.0)
  np.testing.assert_allclose(adv[-2:], [-0.5, 0.5] if name == "centered" else [-1.0, 1.0], 1e-6)


def test_standard_has_unit_std_in_every_group_the_zero_std_filter_keeps():
  """GRPO's estimator: every group the zero-std filter keeps gets mean 0 and population std 1
  (up to the 1e-8), however small its spread; the groups it drops get exactly 0."""
  rng = np.random.default_rng(1)
  rewards = np.concatenate(
    [
      rng.integers(0, 2, 64),  # binary rewards, groups of 8
      np.ones(8),
      np.full(4, 0.2),
      [0.5, 0.5 + 1e-4, 0.5, 0.5],  # a small spread is scaled up like any other
      rng.uniform(size=8),
    ]
  ).astype(np.float32)
  groups = np.repeat(np.arange(12), [8] * 9 + [4, 4, 8])
  adv = np.asarray(rl.get("advantage", "standard")(rewards, groups))
  keep = rl.advantages.nonzero_std_groups(rewards, groups)
  assert np.all(np.isfinite(adv)) and not keep.all() and keep.any()
  np.testing.assert_array_equal(adv[~keep], 0.0)
  for g in np.unique(groups[keep]):
    a = adv[groups == g].astype(np.float64)
    np.testing.assert_allclose([a.mean(), a.std()], [0.0, 1.0], atol=2e-3)
    assert np.abs(a).max() <= np.sqrt(len(a) - 1) + 1e-5  # the bound for a unit-std group


def test_advantage_bad_input():
  with pytest.raises(ValueError, match="non-empty"):
    rl.get("advantage", "centered")(np.zeros(0), np.zeros(0))
  with pytest.raises(ValueError, match="group_ids shape"):
    rl.get("advantage", "centered")(np.zeros(4), np.zeros(3))
  with pytest.raises(ValueError, match="NaN"):
    rl.get("advantage", "standard")(np.array([1.0, np.nan]), np.array([0, 0]))


def test_zero_std_filter():
  keep = rl.advantages.nonzero_std_groups([1, 1, 0, 1, 0, 0, 1, 0], [0, 0, 1, 1, 2, 2, 3, 3])
  np.testing.assert_array_equal(keep, [False, False, True, True, False, False, True, True])


def test_token_weights():
  m = np.array([[0, 1, 1, 0], [1, 1, 1, 0]], np.float32)
  w = np.asarray(rl.aggregation.weights("token", jnp.asarray(m), jnp.ones((2, 4), jnp.int32)))
  np.testing.assert_allclose(w, m / 5.0)


def test_sequence_weights_packed_equals_unpacked():
  # row 0 packs two sequences (segments 1, 2); row 1 holds one; segment 3 in row 1 has no loss
  m = np.array([[1, 1, 0, 1, 0, 0], [0, 1, 1, 1, 0, 0]], np.float32)
  seg = np.array([[1, 1, 2, 2, 2, 0], [1, 1, 1, 1, 3, 0]], np.int32)
  w = np.asarray(rl.aggregation.weights("sequence", jnp.asarray(m), jnp.asarray(seg)))
  want = np.array([[1 / 6, 1 / 6, 0, 1 / 3, 0, 0], [0, 1 / 9, 1 / 9, 1 / 9, 0, 0]])
  np.testing.assert_allclose(w, want, rtol=1e-6)
  # the same three sequences unpacked, one per row
  mu = np.array([[1, 1, 0], [0, 1, 0], [1, 1, 1]], np.float32)
  wu = np.asarray(rl.aggregation.weights("sequence", jnp.asarray(mu), jnp.ones((3, 3), jnp.int32)))
  np.testing.assert_allclose(np.sort(wu[wu > 0]), np.sort(w[w > 0]), rtol=1e-6)


@pytest.mark.parametrize("name", ["token", "sequence"])
def test_unnormalised_weights_are_row_local(name):
  """A row's raw weights do not depend on the other rows, so micro-batches of any shapes can sum
  sum(w * loss) and sum(w) separately and divide once (exact accumulation)."""
  rng = np.random.default_rng(0)
  m = (rng.uniform(size=(4, 9)) > 0.3).astype(np.float32)
  seg = np.sort(rng.integers(0, 3, (4, 9)), axis=1).astype(np.int32)
  m = np.where(seg > 0, m, 0.0)
  fn = rl.get("aggregation", name)
  whole = np.asarray(fn(jnp.asarray(m), jnp.asarray(seg)))
  parts = np.concatenate(
    [np.asarray(fn(jnp.asarray(m[i : i + 1]), jnp.asarray(seg[i : i + 1]))) for i in range(4)]
  )
  np.testing.assert_allclose(parts, whole, rtol=1e-7)
  np.testing.assert_allclose(
    np.asarray(rl.aggregation.weights(name, jnp.asarray(m), jnp.asarray(seg))),
    whole / whole.sum(),
    rtol=1e-6,
  )
