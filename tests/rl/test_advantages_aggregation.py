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
