"""The training attention kernels (models/attention): blockwise vs reference parity (values and
grads, fp32, 1e-5) over packed, padded and odd-length rows with GQA, the platform switch, the cuDNN
packed-layout offsets, the parity script's CPU mode, splash in the interpreter (alone and per shard
under a mesh), and whole models on each kernel."""

import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from tmax_jax import sharding
from tmax_jax.models import ModelConfig, attention, build_model, head_weight, init_params
from tmax_jax.models.attention import blockwise, cudnn, splash
from tmax_jax.models.logprobs import token_logprobs
from tmax_jax.models.qwen3_5 import Qwen3_5Config

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import attention_parity  # noqa: E402  (bench/attention_parity.py: shared packed-row inputs)

TOL = 1e-5


@pytest.mark.parametrize(
  "t,heads,blocks,index_causal",
  [(37, (6, 2), (8, 16), True), (37, (4, 4), (16, 8), False), (5, (2, 1), (None, None), True)],
)
def test_blockwise_matches_reference(t, heads, blocks, index_causal):
  """Packed segments, a padded tail and a whole-row segment; T not a multiple of the blocks;
  the lower block triangle only (self-attention) or every block pair (as on ring steps)."""
  case = attention_parity.packed_inputs(2, t, heads[0], heads[1], 8, jnp.float32)
  pos, seg = case[3], case[4]
  errs = attention_parity.compare(
    lambda q, k, v: blockwise.attention(
      q, k, v, pos, seg, pos, seg, block_q=blocks[0], block_k=blocks[1], index_causal=index_causal
    ),
    case,
    TOL,
    rel=False,
  )
  assert errs["ok"], errs


def test_blockwise_padding_rows_are_zero_and_grads_finite():
  q, k, v, pos, seg, live = attention_parity.packed_inputs(1, 20, 2, 1, 4, jnp.float32)
  seg = seg.at[:, 10:].set(0)
  out = blockwise.attention(q, k, v, pos, seg, pos, seg, block_q=8, block_k=8)
  np.testing.assert_array_equal(np.asarray(out)[0, 10:], 0.0)
  grads = jax.grad(lambda q: jnp.sum(blockwise.attention(q, k, v, pos, seg, pos, seg)))(q)
  assert np.all(np.isfinite(np.asarray(grads)))


def test_impl_switch_per_platform():
  assert attention.resolve("auto", jnp.float32, "cpu") == "blockwise"
  assert attention.resolve("auto", jnp.bfloat16, "gpu") == "cudnn"
  assert attention.resolve("auto", jnp.float32, "gpu") == "blockwise"  # cuDNN has no fp32
  assert attention.resolve("auto", jnp.float32, "tpu") == "splash"
  assert attention.resolve("reference", jnp.bfloat16, "gpu") == "reference"
  with pytest.raises(ValueError, match="attention_impl='flash'"):
    attention.resolve("flash")
  with pytest.raises(ValueError, match="attention_impl='flash'"):
    ModelConfig(attention_impl="flash")


def test_cudnn_packed_offsets_and_fp32_refusal():
  seg = jnp.asarray([[1, 1, 2, 2, 2, 0], [3, 3, 3, 3, 3, 3], [0] * 6, [1, 2, 3, 4, 0, 0]])
  lengths, offsets, count = cudnn.packed_segments(seg, 3)
  np.testing.assert_array_equal(count, [2, 1, 0, 4])
  np.testing.assert_array_equal(lengths[:3], [[2, 3, -1], [6, -1, -1], [-1, -1, -1]])
  np.testing.assert_array_equal(offsets[:3], [[0, 2, -1, -1], [0, -1, -1, -1], [-1] * 4])
  # row 3 overflows M = 3: the kernel is not used for such a batch (blockwise fallback)
  q = jnp.zeros((1, 8, 2, 8), jnp.float32)
  with pytest.raises(ValueError, match="needs bfloat16/float16 compute"):
    cudnn.attention(q, q, q, jnp.zeros((1, 8), jnp.int32), jnp.ones((1, 8), jnp.int32))


@pytest.mark.slow  # the accelerator script's CPU smoke run
def test_parity_script_cpu_mode(tmp_path):
  """bench/attention_parity.py --tiny: blockwise and ring checked here, the accelerator kernels
  skipped with their reason."""
  out = tmp_path / "parity.jsonl"
  proc = subprocess.run(
    [sys.executable, str(ROOT / "bench" / "attention_parity.py"), "--tiny", "--out", str(out)],
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert proc.returncode == 0, proc.stdout + proc.stderr
  lines = proc.stdout.splitlines()
  assert any(line.startswith("blockwise") and " ok" in line for line in lines), proc.stdout
  for kernel, reason in (("cudnn", "skipped: needs a GPU"), ("splash", "skipped: needs a TPU")):
    assert any(line.startswith(kernel) and reason in line for line in lines), proc.stdout
  assert len(out.read_text().splitlines()) == 4


@pytest.mark.slow
def test_splash_kernel_in_interpreter_matches_reference():
  """The TPU kernel itself, through the Pallas interpreter (fp32; GQA, packed, padded)."""
  b, t, n, k, h, block = attention_parity.SHAPES["tiny_splash"][0]
  case = attention_parity.packed_inputs(b, t, n, k, h, jnp.float32)
  errs = attention_parity.compare(
    lambda q, kk, v: attention.self_attention(
      q, kk, v, case[3], case[4], impl="splash", q_chunk=block
    ),
    case,
    TOL,
    rel=False,
  )
  assert errs["ok"], errs


@pytest.mark.slow
@pytest.mark.parametrize(
  "n, k, axes, q_spec, kv_spec, take",
  [  # batch 2: split over data=2, replicated over fsdp=4 / data x fsdp = 4
    (4, 2, dict(data=2, fsdp=1, tensor=4), P(("data", "fsdp"), None, "tensor", None), None, True),
    (4, 2, dict(data=1, fsdp=4, tensor=2), P(None, None, "tensor", None), "same", False),
    (6, 3, dict(data=2, fsdp=2, tensor=2), P(None, None, "tensor", None), None, True),
  ],
  ids=["kv-head-taken", "kv-heads-split", "kv-heads-gathered"],
)
def test_splash_under_a_mesh_runs_per_shard_and_matches_reference(
  n, k, axes, q_spec, kv_spec, take
):
  """On 8 fake CPU devices the kernel sits in shard_map (what XLA:TPU needs for a Mosaic kernel),
  each shard on its batch / head block, K/V heads split with the query heads or each shard taking
  the ones its query heads read; the interpreter's values and grads still match the reference."""
  b, t, _, _, h, block = attention_parity.SHAPES["tiny_splash"][0]
  case = attention_parity.packed_inputs(b, t, n, k, h, jnp.float32)
  mesh = sharding.make_mesh(**axes)
  rules = ModelConfig().logical_axis_rules
  with sharding.use_mesh(mesh, rules):
    got_q, got_kv, got_take, _ = splash.shard_plan(case[0].shape, k)
    errs = attention_parity.compare(
      lambda q, kk, v: attention.self_attention(
        q, kk, v, case[3], case[4], impl="splash", q_chunk=block
      ),
      case,
      TOL,
      rel=False,
    )
  assert got_q == q_spec
  assert got_kv == (q_spec if kv_spec == "same" else P(q_spec[0], None, None, None))
  assert (got_take is not None) == take
  assert errs["ok"], errs


DENSE = ModelConfig(
  vocab_size=64,
  hidden_size=32,
  intermediate_size=64,
  num_hidden_layers=2,
  num_attention_heads=4,
  num_key_value_heads=2,
  head_dim=8,
  tie_word_embeddings=False,
  attention_q_chunk=8,
  attention_kv_chunk=16,
)
QWEN3_5 = DENSE.replace(
  model_type="qwen3_5_text",
  norm_zero_centered=True,
  attn_output_gate=True,
  partial_rotary_factor=0.5,
  family_config=Qwen3_5Config(
    layer_types=("linear_attention", "full_attention"),
    linear_key_head_dim=8,
    linear_value_head_dim=8,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    chunk_size=8,
  ),
)


def model_loss_and_grads(cfg, params, tokens, pos, seg):
  """Sum of live-token logprobs of `tokens` and its param gradients (fp32)."""
  model = build_model(cfg)

  def loss(p):
    hidden, _ = model.apply({"params": p}, tokens, pos, seg)
    logp, _ = token_logprobs(hidden, head_weight(p, cfg), tokens, chunk_size=16)
    return jnp.sum(jnp.where(seg > 0, logp, 0.0))

  return jax.jit(jax.value_and_grad(loss))(params)


def packed_tokens(t: int, batch: int = 2, seed: int = 0):
  *_, pos, seg, _ = attention_parity.packed_inputs(batch, t, 1, 1, 1, jnp.float32)
  tokens = jnp.asarray(np.random.default_rng(seed).integers(0, 64, (batch, t)), jnp.int32)
  return tokens, pos, seg


def assert_trees_close(a, b, tol):
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
    np.testing.assert_allclose(x, y, atol=tol * max(1.0, float(np.max(np.abs(y)))), rtol=tol)


@pytest.mark.slow  # the default suite's budget (docs/design/ci.md)
@pytest.mark.parametrize("cfg", [DENSE, QWEN3_5], ids=["dense", "qwen3_5"])
def test_model_blockwise_equals_reference(cfg):
  """Whole models (dense GQA attention; Qwen3.5 gated attention + Gated DeltaNet) on packed rows:
  the same loss and gradients with either kernel."""
  params = init_params(cfg, jax.random.key(0))
  batch = packed_tokens(29)
  ref_loss, ref_grads = model_loss_and_grads(
    cfg.replace(attention_impl="reference"), params, *batch
  )
  loss, grads = model_loss_and_grads(cfg.replace(attention_impl="blockwise"), params, *batch)
  np.testing.assert_allclose(loss, ref_loss, rtol=TOL)
  assert_trees_close(grads, ref_grads, TOL)


def test_keys_major_mask_is_the_mask_laid_out_keys_first():
  """The backward's transposed tiles use attention_mask(..., keys_major=True): the same
  visibility (segments, padding 0, causal positions) as the [B, T, S] mask, as [B, S, T]."""
  seg = jnp.asarray([[1, 1, 2, 2, 2, 0], [3, 3, 3, 3, 0, 0]], jnp.int32)
  pos = jnp.asarray([[0, 1, 0, 1, 2, 0], [0, 1, 2, 3, 0, 0]], jnp.int32)
  mask = attention.attention_mask(pos, seg, pos, seg)
  keys_major = attention.attention_mask(pos, seg, pos, seg, keys_major=True)
  np.testing.assert_array_equal(keys_major, mask.swapaxes(1, 2))
  assert bool(mask[0, 4, 2]) and not bool(mask[0, 2, 4]) and not bool(mask[0, 2, 1])
