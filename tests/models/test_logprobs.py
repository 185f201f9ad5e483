"""Chunked log-probs/entropies equal the full-logit values; memory grows with the chunk, not T;
the LM head runs in head_dtype."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tmax_jax.models import ModelConfig, build_model, full_logits, head_weight, init_params
from tmax_jax.models.logprobs import SAVE_LOGITS_MAX_BYTES, saves_logits, token_logprobs


def reference(hidden, w, targets, temperature=1.0):
  logits = np.asarray(full_logits(hidden, w), np.float64) / temperature
  logp_all = (
    logits
    - np.log(np.sum(np.exp(logits - logits.max(-1, keepdims=True)), -1, keepdims=True))
    - logits.max(-1, keepdims=True)
  )
  logp = np.take_along_axis(logp_all, np.asarray(targets)[..., None], -1)[..., 0]
  entropy = -np.sum(np.exp(logp_all) * logp_all, -1)
  return logp, entropy


@pytest.mark.parametrize("chunk", [4, 7, 64])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_equals_full(chunk, temperature):
  rng = np.random.default_rng(0)
  hidden = jnp.asarray(rng.normal(size=(2, 19, 32)), jnp.float32)
  w = jnp.asarray(rng.normal(size=(32, 100)) * 0.3, jnp.float32)
  targets = jnp.asarray(rng.integers(0, 100, (2, 19)), jnp.int32)
  logp, ent = jax.jit(
    lambda h, w, t: token_logprobs(h, w, t, chunk_size=chunk, temperature=temperature)
  )(hidden, w, targets)
  ref_logp, ref_ent = reference(hidden, w, targets, temperature)
  assert logp.dtype == jnp.float32 and ent.dtype == jnp.float32 and logp.shape == (2, 19)
  np.testing.assert_allclose(logp, ref_logp, atol=1e-5, rtol=1e-5)
  np.testing.assert_allclose(ent, ref_ent, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("save_logits", [False, True])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_gradient_equals_full(save_logits, temperature):
  """The hand-written backward (both logit sources) equals autodiff of the full-logit loss."""
  rng = np.random.default_rng(1)
  hidden = jnp.asarray(rng.normal(size=(2, 12, 16)), jnp.float32)
  w = jnp.asarray(rng.normal(size=(16, 50)) * 0.3, jnp.float32)
  targets = jnp.asarray(rng.integers(0, 50, (2, 12)), jnp.int32)
  g = jnp.asarray(rng.normal(size=(2, 12)), jnp.float32)  # per-token cotangents

  def chunked(h, w):
    logp, ent = token_logprobs(
      h, w, targets, chunk_size=5, temperature=temperature, save_logits=save_logits
    )
    return jnp.sum(g * logp) + 0.1 * jnp.sum(ent)

  def full(h, w):
    logits = full_logits(h, w) / temperature
    logp_all = jax.nn.log_softmax(logits)
    logp = jnp.take_along_axis(logp_all, targets[..., None], -1)[..., 0]
    ent = -jnp.sum(jnp.exp(logp_all) * logp_all, -1)
    return jnp.sum(g * logp) + 0.1 * jnp.sum(ent)

  for got, want in zip(
    jax.grad(chunked, (0, 1))(hidden, w), jax.grad(full, (0, 1))(hidden, w), strict=True
  ):
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


def test_saved_logits_skip_the_recompute():
  """save_logits: 3 head matmuls (forward, d hidden, d W) instead of 4; the same gradient."""
  from tmax_jax import hlo_cost

  b, t, d, v = 2, 64, 32, 256
  args = (
    jax.ShapeDtypeStruct((b, t, d), jnp.float32),
    jax.ShapeDtypeStruct((d, v), jnp.float32),
    jax.ShapeDtypeStruct((b, t), jnp.int32),
  )

  def flops(save):
    def f(h, w, tg):
      return jnp.sum(token_logprobs(h, w, tg, chunk_size=16, save_logits=save)[0])

    compiled = jax.jit(jax.grad(f, (0, 1))).lower(*args).compile()
    return hlo_cost.compiled_cost(compiled).matmul_flops

  one = 2 * b * t * d * v
  assert flops(False) == 4 * one
  assert flops(True) == 3 * one


def _temp_bytes(t, chunk, vocab=4096, d=64, b=2, grad=False):
  def f(h, w, tg):
    logp, ent = token_logprobs(h, w, tg, chunk_size=chunk)
    return jnp.sum(logp) + jnp.sum(ent)

  fn = jax.grad(f, (0, 1)) if grad else f
  args = (
    jax.ShapeDtypeStruct((b, t, d), jnp.float32),
    jax.ShapeDtypeStruct((d, vocab), jnp.float32),
    jax.ShapeDtypeStruct((b, t), jnp.int32),
  )
  return jax.jit(fn).lower(*args).compile().memory_analysis().temp_size_in_bytes


@pytest.mark.parametrize("grad", [False, True])
def test_temp_memory_scales_with_chunk_not_length(grad):
  chunk_logits = 2 * 64 * 4096 * 4  # one chunk of fp32 logits: B x chunk x V
  short, long = _temp_bytes(256, 64, grad=grad), _temp_bytes(2048, 64, grad=grad)
  full_logits_bytes = 2 * 2048 * 4096 * 4
  # 8x the sequence adds far less than one more T x V logits tensor: only O(T) vectors grow.
  assert long - short < chunk_logits, (short, long)
  assert long < full_logits_bytes / 4, (long, full_logits_bytes)
  # ... while 8x the chunk grows temp memory by several chunk-sized logits buffers.
  bigger_chunk = _temp_bytes(2048, 512, grad=grad)
  assert bigger_chunk - long > 4 * chunk_logits, (long, bigger_chunk)


def _head_dot_types(head_dtype):
  cfg = ModelConfig(
    vocab_size=512,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=1,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=16,
    tie_word_embeddings=False,
  )
  cfg = cfg.with_dtypes(compute_dtype="bfloat16", head_dtype=head_dtype)
  params = jax.eval_shape(lambda: init_params(cfg, jax.random.key(0)))

  def f(p, tokens):
    hidden, _ = build_model(cfg).apply({"params": p}, tokens, tokens * 0, tokens * 0 + 1)
    return token_logprobs(
      hidden, head_weight(p, cfg), tokens, chunk_size=4, head_dtype=cfg.dtypes.head
    )

  text = jax.jit(f).lower(params, jax.ShapeDtypeStruct((1, 8), jnp.int32)).as_text()
  # The head matmul is the only dot_general with the vocab (512) as its output's last dim.
  dots = [
    line
    for line in text.splitlines()
    if "dot_general" in line and re.search(r"-> tensor<[0-9x]*x512x", line)
  ]
  assert dots, "head dot_general not found in the lowered program"
  return dots


def test_head_matmul_runs_in_head_dtype():
  f32_dots = _head_dot_types("float32")
  assert all(re.search(r"\(tensor<[0-9x]+xf32>, tensor<[0-9x]+xf32>\)", d) for d in f32_dots), (
    f32_dots
  )
  assert all("HIGHEST" in d for d in f32_dots), f32_dots  # no TF32 on GPUs
  bf16_dots = _head_dot_types("bfloat16")
  assert all(re.search(r"\(tensor<[0-9x]+xbf16>, tensor<[0-9x]+xbf16>\)", d) for d in bf16_dots), (
    bf16_dots
  )


def test_saves_logits_only_without_remat_and_within_the_budget():
  fits = SAVE_LOGITS_MAX_BYTES // (4 * 1024)  # tokens whose [T, 1024] fp32 logits just fit
  assert saves_logits("none", fits, 1024) and not saves_logits("none", fits + 1, 1024)
  assert not any(saves_logits(p, 16, 1024) for p in ("full", "dots", "save_attn_out"))
