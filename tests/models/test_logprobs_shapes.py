"""logprobs.py's jaxtyping annotations, checked at runtime (tests/shape_checks.py): the head's
logits and the per-token logprobs / entropies keep their [B, T] shapes, the recompute and the
saved-logits paths alike, and targets of another length are refused with jaxtyping's error."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.shape_checks import TypeCheckError, checked
from tmax_jax.models import logprobs

B, T, D, V = 2, 7, 8, 11


def _operands():
  k = jax.random.split(jax.random.key(0), 3)
  hidden = jax.random.normal(k[0], (B, T, D), jnp.float32)
  head_w = jax.random.normal(k[1], (D, V), jnp.float32)
  targets = jax.random.randint(k[2], (B, T), 0, V)
  return hidden, head_w, targets


@pytest.mark.parametrize("save_logits", [False, True])
def test_token_logprobs_checked_shapes_and_values(save_logits):
  hidden, head_w, targets = _operands()
  logp, ent = checked(logprobs.token_logprobs)(
    hidden, head_w, targets, chunk_size=3, save_logits=save_logits
  )
  assert logp.shape == ent.shape == (B, T) and logp.dtype == jnp.float32
  full = jax.nn.log_softmax(checked(logprobs.full_logits)(hidden, head_w), axis=-1)  # [B,T,V]
  want = jnp.take_along_axis(full, targets[..., None], axis=-1)[..., 0]
  np.testing.assert_allclose(logp, want, rtol=1e-5, atol=1e-5)


def test_token_logprobs_refuses_targets_of_another_length():
  hidden, head_w, targets = _operands()
  longer = jnp.concatenate([targets, targets[:, :1]], axis=1)  # [B, T + 1]
  with pytest.raises(TypeCheckError, match="targets"):
    checked(logprobs.token_logprobs)(hidden, head_w, longer)


def test_full_logits_refuses_a_head_of_another_width():
  hidden, head_w, _ = _operands()
  with pytest.raises(TypeCheckError, match="head_w"):
    checked(logprobs.full_logits)(hidden, head_w[:-1])  # [D - 1, V]: D disagrees with hidden
