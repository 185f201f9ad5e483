"""Packed segments and the KV cache give exactly what separate / full forwards give."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tmax_jax.models import ModelConfig, build_model, init_params

CFG = ModelConfig(
  vocab_size=128,
  hidden_size=64,
  intermediate_size=96,
  num_hidden_layers=2,
  num_attention_heads=4,
  num_key_value_heads=2,
  head_dim=16,
  attention_bias=True,
)
TOL = dict(atol=2e-5, rtol=2e-5)


@jax.jit(static_argnums=0)
def _apply(cfg, params, tokens, positions, segments, cache):
  return build_model(cfg).apply({"params": params}, tokens, positions, segments, cache=cache)


def run(cfg, params, tokens, positions, segments, cache=None):
  arrays = [jnp.asarray(x, jnp.int32) for x in (tokens, positions, segments)]
  return _apply(cfg, params, *arrays, cache)


@pytest.fixture(scope="module", params=[True, False], ids=["scan", "unrolled"])
def setup(request):
  cfg = CFG.replace(scan_layers=request.param)
  return cfg, init_params(cfg, jax.random.key(0))


def test_packed_segments_equal_separate_sequences(setup):
  cfg, params = setup
  rng = np.random.default_rng(0)
  a, b = rng.integers(0, 128, 5), rng.integers(0, 128, 4)
  packed = np.concatenate([a, b, [0, 0]])[None]
  positions = np.array([[0, 1, 2, 3, 4, 0, 1, 2, 3, 0, 0]])
  segments = np.array([[1, 1, 1, 1, 1, 2, 2, 2, 2, 0, 0]])
  hidden, _ = run(cfg, params, packed, positions, segments)
  alone_a, _ = run(cfg, params, a[None], np.arange(5)[None], np.ones((1, 5)))
  alone_b, _ = run(cfg, params, b[None], np.arange(4)[None], np.ones((1, 4)))
  np.testing.assert_allclose(hidden[0, :5], alone_a[0], **TOL)
  np.testing.assert_allclose(hidden[0, 5:9], alone_b[0], **TOL)
  # Without the segment ids the second sequence would see the first: the check can fail.
  leaky, _ = run(cfg, params, packed, np.arange(11)[None], np.ones((1, 11)))
  assert np.max(np.abs(np.asarray(leaky[0, 5:9]) - np.asarray(alone_b[0]))) > 1e-3


def test_prefill_then_decode_equals_full_forward(setup):
  """The engine's pattern: padded prefill per row, then one token per row per step, with each row
  at its own position."""
  cfg, params = setup
  rng = np.random.default_rng(1)
  lengths, steps, max_len = [3, 6], 4, 16
  seqs = [rng.integers(0, 128, n + steps) for n in lengths]
  model = build_model(cfg)
  cache = model.init_cache(batch=2, max_len=max_len)
  assert cache["k"].shape == (2, 2, max_len, 2, 16)  # [L,B,S,K,H]
  prompt = np.zeros((2, 6), np.int64)
  segments = np.zeros((2, 6), np.int64)
  for r, n in enumerate(lengths):
    prompt[r, :n], segments[r, :n] = seqs[r][:n], 1
  positions = np.broadcast_to(np.arange(6), (2, 6))
  prefill, cache = run(cfg, params, prompt, positions, segments, cache)
  decoded = [[prefill[r, n - 1]] for r, n in enumerate(lengths)]
  for step in range(steps):
    pos = np.array([[n + step] for n in lengths])
    tok = np.array([[seqs[r][n + step]] for r, n in enumerate(lengths)])
    out, cache = run(cfg, params, tok, pos, np.ones((2, 1)), cache)
    for r in range(2):
      decoded[r].append(out[r, 0])
  for r, n in enumerate(lengths):
    full, _ = run(cfg, params, seqs[r][None], np.arange(n + steps)[None], np.ones((1, n + steps)))
    np.testing.assert_allclose(np.stack(decoded[r])[1:], full[0, n:], **TOL)
    np.testing.assert_allclose(decoded[r][0], full[0, n - 1], **TOL)
  filled = np.asarray(cache["segment_ids"][0])
  assert filled.sum(axis=1).tolist() == [n + steps for n in lengths]  # padding was never written


def test_cache_jit_and_dtype():
  cfg = CFG.with_dtypes(compute_dtype="bfloat16")
  params = init_params(cfg, jax.random.key(0))
  model = build_model(cfg)
  cache = model.init_cache(1, 8)
  assert cache["k"].dtype == jnp.bfloat16
  step = jax.jit(lambda p, c, t, pos: model.apply({"params": p}, t, pos, jnp.ones_like(t), cache=c))
  hidden, cache = step(params, cache, jnp.ones((1, 1), jnp.int32), jnp.zeros((1, 1), jnp.int32))
  assert hidden.dtype == jnp.bfloat16 and int(cache["segment_ids"][0, 0, 0]) == 1
