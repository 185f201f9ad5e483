"""Model-level behaviour: remat policies, bf16 compute, config validation, registry."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tmax_jax.models import (
  ModelConfig,
  UnsupportedConfigError,
  build_model,
  head_weight,
  init_params,
  registry,
)
from tmax_jax.models.logprobs import token_logprobs

CFG = ModelConfig(
  vocab_size=128,
  hidden_size=32,
  intermediate_size=64,
  num_hidden_layers=2,
  num_attention_heads=4,
  num_key_value_heads=2,
  head_dim=8,
  tie_word_embeddings=False,
)


def loss_and_grad(cfg, params, tokens):
  positions = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)

  def loss(p):
    hidden, _ = build_model(cfg).apply({"params": p}, tokens, positions, jnp.ones_like(tokens))
    logp, _ = token_logprobs(hidden, head_weight(p, cfg), tokens, chunk_size=4)
    return -jnp.mean(logp)

  return jax.jit(jax.value_and_grad(loss))(params)


@pytest.fixture(scope="module")
def reference():
  params = init_params(CFG, jax.random.key(0))
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, 128, (2, 8)), jnp.int32)
  return params, tokens, loss_and_grad(CFG, params, tokens)


@pytest.mark.parametrize("policy", ["full", "dots_no_batch"])
def test_remat_policies_give_same_gradients(reference, policy):
  params, tokens, (base_loss, base_grad) = reference
  loss, grad = loss_and_grad(CFG.replace(remat_policy=policy), params, tokens)
  np.testing.assert_allclose(loss, base_loss, rtol=1e-6)
  for g, b in zip(jax.tree.leaves(grad), jax.tree.leaves(base_grad), strict=True):
    np.testing.assert_allclose(g, b, atol=1e-6, rtol=1e-5)


def test_bf16_compute_tracks_fp32(reference):
  params, tokens, _ = reference
  positions = jnp.broadcast_to(jnp.arange(8), tokens.shape)
  outs = {}
  for dtype in ("float32", "bfloat16"):
    cfg = CFG.with_dtypes(compute_dtype=dtype)
    apply = jax.jit(build_model(cfg).apply)
    hidden, _ = apply({"params": params}, tokens, positions, jnp.ones_like(tokens))
    assert hidden.dtype == jnp.dtype(dtype)
    outs[dtype] = np.asarray(hidden, np.float32)
  err = np.max(np.abs(outs["bfloat16"] - outs["float32"])) / np.max(np.abs(outs["float32"]))
  assert 0 < err < 0.05


def test_bf16_params():
  cfg = CFG.with_dtypes(param_dtype="bfloat16", compute_dtype="bfloat16", head_dtype="bfloat16")
  params = registry.abstract_params(cfg)
  assert {x.dtype for x in jax.tree.leaves(params)} == {jnp.dtype(jnp.bfloat16)}


@pytest.mark.parametrize("tied", [True, False])
def test_bf16_params_keep_an_fp32_head_weight(tied):
  """With an fp32 head the head's weight is stored in fp32 (DtypePolicy.head_weight), so a bf16
  server computes its head from the trainer's fp32 weight: lm_head, or the embedding when tied."""
  cfg = CFG.replace(tie_word_embeddings=tied).with_dtypes(param_dtype="bfloat16")
  flat = {
    jax.tree_util.keystr(p): x.dtype
    for p, x in jax.tree_util.tree_leaves_with_path(registry.abstract_params(cfg))
  }
  head = "embed_tokens" if tied else "lm_head"
  assert {k for k, d in flat.items() if d == jnp.float32} == {k for k in flat if head in k}
  params = registry.init_params(cfg, jax.random.key(0))
  assert registry.head_weight(params, cfg).dtype == jnp.float32


def test_config_validation():
  with pytest.raises(UnsupportedConfigError, match=r"remat_policy='sometimes'"):
    CFG.replace(remat_policy="sometimes")
  with pytest.raises(UnsupportedConfigError, match="multiple of num_key_value_heads=3"):
    CFG.replace(num_key_value_heads=3)
  with pytest.raises(UnsupportedConfigError, match=r"model_type='gpt2'"):
    registry.family_for("gpt2")


def test_query_chunked_model_equals_unchunked(reference):
  params, tokens, (base_loss, _) = reference
  loss, _ = loss_and_grad(CFG.replace(attention_q_chunk=3), params, tokens)
  np.testing.assert_allclose(loss, base_loss, rtol=1e-6)
