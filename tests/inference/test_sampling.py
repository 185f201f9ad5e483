"""Statistical and exclusion tests for tmax_jax.inference.sampling (seeded, CPU)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from tmax_jax.inference import sampling

V = 8  # tiny vocabulary
N = 20_000  # draws per test


def _expected(logits, n):
  """float64 softmax counts summing exactly to n (chisquare checks the totals)."""
  z = np.exp(np.asarray(logits, np.float64) - np.max(logits))
  return z / z.sum() * n


def _draw(logits_row, n, temperature=1.0, top_p=1.0, top_k=0, seed=0):
  logits = jnp.broadcast_to(jnp.asarray(logits_row, jnp.float32), (n, len(logits_row)))
  keys = jax.random.split(jax.random.key(seed), n)
  fn = jax.jit(sampling.sample)
  return fn(
    logits,
    keys,
    jnp.zeros((n,), jnp.int32),
    jnp.full((n,), temperature, jnp.float32),
    jnp.full((n,), top_p, jnp.float32),
    jnp.full((n,), top_k, jnp.int32),
  )


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampling_matches_softmax_chi_square(temperature):
  rng = np.random.default_rng(0)
  logits = rng.normal(size=V).astype(np.float32) * 1.5
  tokens, logp = _draw(logits, N, temperature=temperature, seed=1)
  counts = np.bincount(np.asarray(tokens), minlength=V)
  expected = _expected(logits / temperature, N)
  chi2, p = stats.chisquare(counts, expected)
  assert p > 1e-3, (chi2, p, counts, expected)
  # The reported logprob is the tempered full-vocabulary log-softmax of the drawn token.
  ref = np.asarray(jax.nn.log_softmax(logits / temperature))[np.asarray(tokens)]
  np.testing.assert_allclose(np.asarray(logp), ref, rtol=0, atol=1e-6)


def test_chi_square_detects_wrong_distribution():
  """Guards the test above: the same statistic rejects samples at the wrong temperature."""
  logits = np.random.default_rng(0).normal(size=V).astype(np.float32) * 1.5
  tokens, _ = _draw(logits, N, temperature=1.6, seed=1)
  counts = np.bincount(np.asarray(tokens), minlength=V)
  _, p = stats.chisquare(counts, _expected(logits, N))
  assert p < 1e-6


@pytest.mark.parametrize("top_k,top_p", [(3, 1.0), (0, 0.6), (4, 0.5), (1, 1.0)])
def test_truncation_never_emits_excluded_token(top_k, top_p):
  logits = np.array([2.0, -1.0, 0.5, 1.5, -3.0, 0.0, 1.0, -0.5], np.float32)
  tokens, logp = _draw(logits, 4000, top_k=top_k, top_p=top_p, seed=2)
  order = np.argsort(-logits)
  probs = np.asarray(jax.nn.softmax(logits))[order]
  allowed = order[:top_k] if top_k else order
  if top_p < 1.0:
    p_k = probs[: len(allowed)] / probs[: len(allowed)].sum()
    n_keep = int(np.searchsorted(np.cumsum(p_k), top_p) + 1)  # smallest prefix reaching top_p
    allowed = allowed[:n_keep]
  emitted = set(np.unique(np.asarray(tokens)).tolist())
  assert emitted <= set(allowed.tolist()), (emitted, allowed)
  assert emitted == set(allowed.tolist())  # and every allowed token does occur
  # Reported logprobs stay untruncated (the trainer's distribution).
  ref = np.asarray(jax.nn.log_softmax(logits))[np.asarray(tokens)]
  np.testing.assert_allclose(np.asarray(logp), ref, atol=1e-6)


def test_truncated_distribution_is_renormalised_softmax():
  logits = np.array([2.0, -1.0, 0.5, 1.5, -3.0, 0.0, 1.0, -0.5], np.float32)
  tokens, _ = _draw(logits, N, top_k=3, seed=3)
  top = np.argsort(-logits)[:3]
  counts = np.bincount(np.asarray(tokens), minlength=V)[top]
  expected = _expected(logits[top], N)
  _, p = stats.chisquare(counts, expected)
  assert p > 1e-3


def test_greedy_is_argmax_and_reports_t1_logprob():
  logits = jax.random.normal(jax.random.key(4), (16, 50))
  tokens, logp = jax.jit(sampling.sample)(
    logits,
    jax.random.split(jax.random.key(0), 16),
    jnp.arange(16, dtype=jnp.int32),
    jnp.zeros((16,)),
    jnp.ones((16,)),
    jnp.zeros((16,), jnp.int32),
  )
  np.testing.assert_array_equal(np.asarray(tokens), np.argmax(np.asarray(logits), -1))
  ref = np.take_along_axis(np.asarray(jax.nn.log_softmax(logits)), np.asarray(tokens)[:, None], 1)
  np.testing.assert_allclose(np.asarray(logp), ref[:, 0], atol=1e-6)


def test_first_argmax_takes_the_first_of_tied_maxima():
  x = jnp.asarray([[0.0, 3.0, 3.0, 1.0], [5.0, 5.0, 5.0, 5.0], [-2.0, -1.0, -3.0, -1.0]])
  got = sampling.first_argmax(x, jnp.max(x, axis=-1, keepdims=True))
  np.testing.assert_array_equal(np.asarray(got), np.argmax(np.asarray(x), -1))


def test_greedy_rows_next_to_sampled_rows():
  """A step with greedy and sampled rows: greedy rows stay argmax, sampled rows are drawn from
  their tempered distribution and every logprob is log_softmax(logits / T) at the token."""
  logits = jax.random.normal(jax.random.key(8), (6, 40)) * 3.0
  temperature = jnp.asarray([0.0, 1.0, 0.0, 0.7, 1.3, 0.0])
  tokens, logp = jax.jit(sampling.sample)(
    logits,
    jax.random.split(jax.random.key(1), 6),
    jnp.arange(6, dtype=jnp.int32),
    temperature,
    jnp.ones((6,)),
    jnp.zeros((6,), jnp.int32),
  )
  greedy = np.asarray(temperature) == 0
  np.testing.assert_array_equal(
    np.asarray(tokens)[greedy], np.argmax(np.asarray(logits), -1)[greedy]
  )
  ref = np.asarray(sampling.tempered_log_probs(logits, temperature))
  np.testing.assert_allclose(
    np.asarray(logp), ref[np.arange(6), np.asarray(tokens)], atol=1e-6, rtol=0
  )


def test_rows_are_independent_of_batch_mates():
  """A row's draw depends on its own key and counter only (reproducible per request)."""
  logits = jax.random.normal(jax.random.key(5), (4, 30))
  keys = jax.random.split(jax.random.key(7), 4)
  args = (jnp.full((4,), 1.0), jnp.ones((4,)), jnp.zeros((4,), jnp.int32))
  a, _ = sampling.sample(logits, keys, jnp.arange(4, dtype=jnp.int32), *args)
  b, _ = sampling.sample(logits[::-1], keys[::-1], jnp.arange(4, dtype=jnp.int32)[::-1], *args)
  np.testing.assert_array_equal(np.asarray(a), np.asarray(b)[::-1])


def test_sampling_params_validation():
  with pytest.raises(ValueError, match="top_p"):
    sampling.SamplingParams(top_p=0.0)
  with pytest.raises(ValueError, match="temperature"):
    sampling.SamplingParams(temperature=-1.0)
  with pytest.raises(ValueError, match="top_k"):
    sampling.SamplingParams(top_k=-2)


def test_two_level_inverse_cdf_matches_softmax_across_blocks():
  """A vocabulary of several sampler blocks (ragged tail) with a peaked distribution: the draw
  frequencies match the softmax (chi-square over the likely tokens + one bucket for the rest), and
  -inf entries are never drawn."""
  v, n = 3 * sampling.BLOCK + 77, 60_000
  rng = np.random.default_rng(0)
  logp = rng.normal(0.0, 2.0, v).astype(np.float32)
  logp[rng.choice(v, 300, replace=False)] = -np.inf
  probs = np.exp(logp.astype(np.float64) - logp[np.isfinite(logp)].max())
  probs /= probs.sum()
  u = jax.random.uniform(jax.random.key(1), (n, 2))
  draws = np.asarray(
    jax.jit(sampling.inverse_cdf_sample)(jnp.broadcast_to(jnp.asarray(logp), (n, v)), u)
  )
  assert np.all(np.isfinite(logp[draws]))
  counts = np.bincount(draws, minlength=v)
  likely = probs * n >= 20
  observed = np.append(counts[likely], counts[~likely].sum())
  expected = np.append(probs[likely], probs[~likely].sum()) * observed.sum()
  assert stats.chisquare(observed, expected).pvalue > 1e-3


@pytest.mark.parametrize("seed", [0, 1, 7, 2**31 - 1, 2**31 + 5, 2**40 + 3])
def test_slot_key_is_prng_key_of_the_seed(seed):
  """decode.slot_arrays builds the request's key on the host; it must be PRNGKey's (the default
  threefry implementation) of the seed taken modulo 2^31."""
  from tmax_jax.inference import decode

  key = decode.slot_arrays(sampling.SamplingParams(seed=seed), max_tokens=1)["key"]
  want = np.asarray(jax.random.PRNGKey(seed % (1 << 31)), np.uint32)
  assert key.dtype == np.uint32 and key.tolist() == want.tolist()
