"""Per-module parity with transformers' blocks (fp32, ~1e-5) and the query-chunked attention."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.qwen3 import modeling_qwen3
from transformers.models.qwen3_5 import modeling_qwen3_5

from tmax_jax.models import layers
from tmax_jax.models.config import RopeScaling, rope_from_hf

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("zero_centered", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_rmsnorm_matches_hf(zero_centered, dtype):
  x = RNG.normal(size=(2, 5, 48)).astype(np.float32) * 3
  w = RNG.normal(size=(48,)).astype(np.float32) * 0.2 + (0 if zero_centered else 1)
  ref_mod = (
    modeling_qwen3_5.Qwen3_5RMSNorm(48, eps=1e-6)
    if zero_centered
    else modeling_qwen3.Qwen3RMSNorm(48, eps=1e-6)
  )
  tdt = getattr(torch, dtype)
  with torch.no_grad():
    ref_mod.weight.copy_(torch.tensor(w))
    ref = ref_mod.to(tdt)(torch.tensor(x).to(tdt)).float().numpy()
  norm = layers.RMSNorm(1e-6, zero_centered, dtype=jnp.dtype(dtype), param_dtype=jnp.dtype(dtype))
  params = {"params": {"scale": jnp.asarray(w, dtype)}}
  ours = np.asarray(norm.apply(params, jnp.asarray(x, dtype)), np.float32)
  if dtype == "float32":
    np.testing.assert_allclose(ours, ref, atol=1e-5, rtol=1e-5)
  else:  # same cast order -> bit-identical bf16 (up to one bf16 ulp from rsqrt rounding)
    np.testing.assert_allclose(ours, ref, rtol=2**-7, atol=1e-2)


ROPES = [
  {"rope_type": "default"},
  {"rope_type": "linear", "factor": 2.0},
  {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128},
  {
    "rope_type": "yarn",
    "factor": 8.0,
    "original_max_position_embeddings": 64,
    "beta_fast": 16,
    "truncate": False,
  },
]


@pytest.mark.parametrize("rope", ROPES, ids=lambda r: "-".join(str(v) for v in r.values()))
@pytest.mark.parametrize("partial", [1.0, 0.25])
def test_rope_frequencies_match_hf(rope, partial):
  params = {"rope_theta": 10000.0, **rope, "partial_rotary_factor": partial}
  hf_cfg = transformers.Qwen3Config(
    head_dim=64,
    hidden_size=128,
    num_attention_heads=2,
    max_position_embeddings=512,
    rope_parameters=params,
  )
  rope_type = params["rope_type"]
  fn = (
    modeling_qwen3.Qwen3RotaryEmbedding.compute_default_rope_parameters
    if rope_type == "default"
    else ROPE_INIT_FUNCTIONS[rope_type]
  )
  ref_inv, ref_scale = fn(hf_cfg)
  theta, scaling, got_partial = rope_from_hf(
    {"rope_parameters": params, "max_position_embeddings": 512}
  )
  assert got_partial == partial
  inv, scale = layers.rope_frequencies(64, theta, got_partial, scaling)
  if rope_type == "default":
    ref_inv = 1.0 / (10000.0 ** (torch.arange(0, int(64 * partial), 2).float() / int(64 * partial)))
  np.testing.assert_allclose(inv, ref_inv.numpy(), rtol=1e-6)
  assert scale == pytest.approx(ref_scale, rel=1e-7)


def test_partial_rotary_matches_hf():
  q = RNG.normal(size=(2, 7, 4, 32)).astype(np.float32)
  positions = np.tile(np.arange(7), (2, 1)) * 3
  inv, scale = layers.rope_frequencies(
    32, 10000.0, 0.25, RopeScaling("yarn", factor=2.0, original_max_position_embeddings=8)
  )
  cos, sin = layers.rotary_cos_sin(jnp.asarray(positions), inv, scale, jnp.float32)
  assert cos.shape == (2, 7, 8)
  ours = layers.apply_rotary(jnp.asarray(q), cos, sin)
  tq = torch.tensor(q).transpose(1, 2)  # HF: [B,N,T,H]
  ref, _ = modeling_qwen3_5.apply_rotary_pos_emb(
    tq, tq, torch.tensor(np.asarray(cos)), torch.tensor(np.asarray(sin))
  )
  np.testing.assert_allclose(ours, ref.transpose(1, 2).numpy(), atol=1e-6)
  np.testing.assert_array_equal(ours[..., 8:], q[..., 8:])  # the pass-through part


def _qkv(t=13, s=13):
  q = jnp.asarray(RNG.normal(size=(2, t, 4, 8)), jnp.float32)
  k = jnp.asarray(RNG.normal(size=(2, s, 2, 8)), jnp.float32)
  v = jnp.asarray(RNG.normal(size=(2, s, 2, 8)), jnp.float32)
  pos = jnp.tile(jnp.arange(t), (2, 1))
  seg = jnp.ones((2, t), jnp.int32).at[1, 9:].set(0).at[0, 6:].set(2)
  return q, k, v, layers.attention_mask(pos, seg, pos, seg)


def test_gqa_attention_matches_hf_eager():
  q, k, v, mask = _qkv()
  ours = layers.dot_product_attention(q, k, v, mask)
  bias = torch.where(torch.tensor(np.asarray(mask))[:, None], 0.0, torch.finfo(torch.float32).min)
  module = torch.nn.Module()
  module.num_key_value_groups, module.training = 2, False
  ref, _ = modeling_qwen3.eager_attention_forward(
    module, *(torch.tensor(np.asarray(x)).transpose(1, 2) for x in (q, k, v)), bias, scaling=8**-0.5
  )
  keep = np.asarray(mask).any(-1)
  np.testing.assert_allclose(np.asarray(ours)[keep], ref.numpy()[keep], atol=1e-5, rtol=1e-5)


def test_query_chunked_attention_equals_full():
  q, k, v, mask = _qkv()

  def loss(q, k, v, chunk):
    return jnp.sum(jnp.sin(layers.dot_product_attention(q, k, v, mask, q_chunk=chunk)))

  full = layers.dot_product_attention(q, k, v, mask)
  for chunk in (4, 5):
    np.testing.assert_allclose(
      layers.dot_product_attention(q, k, v, mask, q_chunk=chunk), full, atol=1e-6
    )
    for g, ref in zip(
      jax.grad(loss, (0, 1, 2))(q, k, v, chunk),
      jax.grad(loss, (0, 1, 2))(q, k, v, None),
      strict=True,
    ):
      np.testing.assert_allclose(g, ref, atol=1e-5)


def test_query_chunked_attention_uses_less_memory():
  def temp(chunk):
    def f(q, k, v):
      t = q.shape[1]
      pos = jnp.tile(jnp.arange(t), (1, 1))
      mask = layers.attention_mask(pos, pos * 0 + 1, pos, pos * 0 + 1)
      return jnp.sum(layers.dot_product_attention(q, k, v, mask, q_chunk=chunk))

    shapes = [jax.ShapeDtypeStruct((1, 1024, 4, 16), jnp.float32)] + [
      jax.ShapeDtypeStruct((1, 1024, 2, 16), jnp.float32)
    ] * 2
    return (
      jax.jit(jax.grad(f, (0, 1, 2))).lower(*shapes).compile().memory_analysis().temp_size_in_bytes
    )

  scores = 4 * 1024 * 1024 * 4  # one full [N,T,S] fp32 score tensor
  full, chunked, smaller = temp(None), temp(128), temp(32)
  assert full > scores
  assert chunked < full / 4 and smaller < chunked, (full, chunked, smaller)


@pytest.mark.parametrize("name", ["dots", "dots_no_batch"])
def test_dot_policies_save_the_custom_vjp_projections(name):
  """matmul.linear is a custom_vjp_call, opaque to the dot-saving policies: the layers' policies
  still save its output (3 matmuls per scanned layer, not a 4th recompute); "full" recomputes."""
  from tmax_jax import hlo_cost
  from tmax_jax.models import matmul

  def flops(policy):
    layer = jax.checkpoint(
      lambda x, w: jnp.cos(matmul.linear(x, w, 1)), policy=policy, prevent_cse=False
    )

    def f(x, ws):  # [64, 32], [3, 32, 32]
      y, _ = jax.lax.scan(lambda c, w: (layer(c, w), None), x, ws)
      return jnp.sum(y)

    shapes = (
      jax.ShapeDtypeStruct((64, 32), jnp.float32),
      jax.ShapeDtypeStruct((3, 32, 32), jnp.float32),
    )
    compiled = jax.jit(jax.grad(f, (0, 1))).lower(*shapes).compile()
    return hlo_cost.compiled_cost(compiled).matmul_flops / (3 * 2 * 64 * 32 * 32)

  assert flops(layers.REMAT_POLICY_FNS[name]) == 3
  assert flops(layers.REMAT_POLICY_FNS["full"]) == 4
