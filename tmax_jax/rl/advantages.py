"""Group advantage estimators, registered under kind "advantage".

Input: rewards [N] and group_ids [N] (int, any labels; the G responses of one prompt share a label).
Output: advantages [N] float32. The trainer broadcasts each response's advantage over its tokens.
Works on NumPy or JAX arrays (pure jnp, jit-able when num_groups is static).
"""

import jax
import jax.numpy as jnp
import numpy as np

from tmax_jax.rl.registry import register

STD_EPS = 1e-8  # recipe: (R - mean) / (std + 1e-8), population std


def _group_index(group_ids) -> tuple[jax.Array, int]:
  """Dense 0..G-1 index per response; host-side because the number of groups sets shapes."""
  labels, index = np.unique(np.asarray(group_ids), return_inverse=True)
  return jnp.asarray(index.reshape(-1), jnp.int32), int(labels.shape[0])


def _group_mean(x: jax.Array, index: jax.Array, num_groups: int) -> jax.Array:
  total = jax.ops.segment_sum(x, index, num_segments=num_groups)  # [G]
  count = jax.ops.segment_sum(jnp.ones_like(x), index, num_segments=num_groups)
  return (total / count)[index]  # [N]


def _centred(r: jax.Array, index: jax.Array, num_groups: int) -> jax.Array:
  """R - mean_group(R), exactly 0 in a group whose rewards are all equal (zero std, as
  `nonzero_std_groups` and the rollout's filter define it): the float mean of equal rewards can miss
  them by an ulp (0.1 x 7), which std normalisation would turn into advantages of about +-1."""
  hi = jax.ops.segment_max(r, index, num_segments=num_groups)[index]
  lo = jax.ops.segment_min(r, index, num_segments=num_groups)[index]
  return jnp.where(hi > lo, r - _group_mean(r, index, num_groups), 0.0)


def _check(rewards, group_ids) -> jax.Array:
  r = jnp.asarray(rewards, jnp.float32)
  if r.ndim != 1 or r.shape[0] == 0:
    raise ValueError(f"rewards must be a non-empty [N] array, got shape {r.shape}")
  if np.shape(group_ids) != r.shape:
    raise ValueError(f"group_ids shape {np.shape(group_ids)} != rewards shape {r.shape}")
  if not bool(jnp.all(jnp.isfinite(r))):
    raise ValueError("rewards contain NaN or inf")
  return r


@register("advantage", "centered")
def centered(rewards, group_ids) -> jax.Array:
  """A = R - mean_group(R) (the recipe's, DPPO's). [N] -> [N]."""
  r = _check(rewards, group_ids)
  index, g = _group_index(group_ids)
  return _centred(r, index, g)


@register("advantage", "standard")
def standard(rewards, group_ids) -> jax.Array:
  """A = (R - mean_group) / (population std_group + 1e-8) (GRPO's). [N] -> [N].

  A zero-std group gets A = 0 (no division by the bare 1e-8); with the zero-std filter on (the
  recipe) no such group reaches the estimator."""
  r = _check(rewards, group_ids)
  index, g = _group_index(group_ids)
  centred = _centred(r, index, g)
  std = jnp.sqrt(_group_mean(centred * centred, index, g))
  return centred / (std + STD_EPS)


def nonzero_std_groups(rewards, group_ids) -> np.ndarray:
  """Per response: True when its group's rewards are not all equal (zero-std filter). [N] -> [N]."""
  r = np.asarray(rewards, np.float64)
  _, index = np.unique(np.asarray(group_ids), return_inverse=True)
  lo = np.full(index.max() + 1, np.inf)
  hi = np.full(index.max() + 1, -np.inf)
  np.minimum.at(lo, index, r)
  np.maximum.at(hi, index, r)
  return (hi > lo)[index]
