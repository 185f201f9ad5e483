"""The policy losses' jaxtyping annotations, checked at runtime (tests/shape_checks.py): every
registered loss and divergence on real [B, T] / [B, T, K] inputs, and a misshapen input refused."""

import jax
import jax.numpy as jnp
import pytest

from tests.shape_checks import TypeCheckError, check_fields, checked
from tmax_jax import rl
from tmax_jax.rl import losses

B, T, K = 3, 5, 4


def _inputs(seed: int = 0, t_behaviour: int = T) -> losses.PolicyInputs:
  k = jax.random.split(jax.random.key(seed), 5)
  return losses.PolicyInputs(
    logp=jnp.log(jax.random.uniform(k[0], (B, T), minval=0.05, maxval=0.9)),
    behaviour_logp=jnp.log(jax.random.uniform(k[1], (B, t_behaviour), minval=0.05, maxval=0.9)),
    advantages=jax.random.normal(k[2], (B, T)),
    mask=(jax.random.uniform(k[3], (B, T)) > 0.3).astype(jnp.float32),
    topk_logp=jax.nn.log_softmax(jax.random.normal(k[4], (B, T, K))),
    behaviour_topk_logp=jax.nn.log_softmax(jax.random.normal(k[0], (B, T, K))),
  )


@pytest.mark.parametrize("name", ["dppo", "grpo", "sft"])
def test_registered_losses_keep_their_annotated_shapes(name):
  x = _inputs()
  check_fields(losses.PolicyInputs, x)
  entry = rl.entry("policy_loss", name)
  hyper = entry.hyper() if entry.hyper is not None else None
  terms = checked(entry.fn)(x, hyper)
  check_fields(losses.PolicyTerms, terms)
  assert terms.loss.shape == (B, T) and terms.kept.shape == (B, T)


@pytest.mark.parametrize("fn", [losses.binary_tv, losses.binary_kl])
def test_binary_divergences_take_and_give_b_t(fn):
  x = _inputs()
  assert checked(fn)(x.logp, x.behaviour_logp).shape == (B, T)
  with pytest.raises(TypeCheckError):
    checked(fn)(x.logp, x.behaviour_logp[:, :-1])  # T differs between the two arguments


@pytest.mark.parametrize("fn", [losses.topk_tv, losses.topk_kl])
def test_topk_divergences_reduce_k(fn):
  x = _inputs()
  assert checked(fn)(x.topk_logp, x.behaviour_topk_logp).shape == (B, T)
  with pytest.raises(TypeCheckError):
    checked(fn)(x.topk_logp, x.behaviour_topk_logp[..., :-1])  # K differs


def test_k3_kl_refuses_an_integer_mask():
  x = _inputs()
  assert checked(losses.k3_kl)(x.logp, x.behaviour_logp, x.mask).shape == (B, T)
  with pytest.raises(TypeCheckError):
    checked(losses.k3_kl)(x.logp, x.behaviour_logp, x.mask.astype(jnp.int32))


def test_policy_inputs_with_a_misshapen_field_fail_the_check():
  with pytest.raises(TypeCheckError, match="behaviour_logp"):
    check_fields(losses.PolicyInputs, _inputs(t_behaviour=T + 1))
