"""Qwen3.5 decode state and packing: right-padded prefill + 32 single-token decode steps reproduce
the full forward; a packed row of two segments equals the two sequences run separately."""

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import qwen3_5_ref as ref_lib

from tmax_jax.models import build_model, from_hf_config, full_logits, head_weight, init_params

TOL = 1e-4
DECODE_STEPS = 32


@functools.cache
def _model(scan_layers=True, seed=0):
  """Tiny config from the HF one; random params with every weight perturbed away from its init."""
  cfg = from_hf_config(ref_lib.text_config().to_dict(), scan_layers=scan_layers)
  cfg = ref_lib.with_chunk_size(cfg, 4)
  params = init_params(cfg, jax.random.key(seed))
  leaves, tree = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.key(seed + 1), len(leaves))
  leaves = [
    p + 0.2 * jax.random.normal(k, p.shape, p.dtype) for p, k in zip(leaves, keys, strict=True)
  ]
  return cfg, jax.tree.unflatten(tree, leaves)


def _step_fn(cfg):
  model = build_model(cfg)

  @jax.jit
  def step(params, tokens, positions, segments, cache):
    hidden, cache = model.apply({"params": params}, tokens, positions, segments, cache=cache)
    return full_logits(hidden, head_weight(params, cfg)), cache

  return model, step


@pytest.mark.parametrize(
  "scan_layers,prefill_splits", [(True, 1), pytest.param(False, 2, marks=pytest.mark.slow)]
)
@pytest.mark.slow  # the default suite's budget (docs/design/ci.md)
def test_prefill_then_decode_matches_full_forward(scan_layers, prefill_splits):
  cfg, params = _model(scan_layers)
  model, step = _step_fn(cfg)
  lengths = np.array([10, 6, 3])
  b, width = len(lengths), int(lengths.max())
  total = width + DECODE_STEPS
  rng = np.random.default_rng(0)
  tokens = rng.integers(0, cfg.vocab_size, (b, total)).astype(np.int32)
  # Reference: each row's prompt + continuation in one right-padded forward (no cache).
  t_idx = np.arange(total)
  full_seg = (t_idx[None] < (lengths + DECODE_STEPS)[:, None]).astype(np.int32)
  full_pos = np.broadcast_to(t_idx, (b, total)).astype(np.int32)
  ref = ref_lib.our_logits(cfg, params, tokens, full_pos, full_seg)

  cache = model.init_cache(b, total + 4)
  prompt_seg = (t_idx[None, :width] < lengths[:, None]).astype(np.int32)
  bounds = np.linspace(0, width, prefill_splits + 1).astype(int)
  for lo, hi in itertools.pairwise(bounds):  # a chunked prefill continues from the cache
    logits, cache = step(params, tokens[:, lo:hi], full_pos[:, lo:hi], prompt_seg[:, lo:hi], cache)
    assert ref_lib.rel_err(logits, ref[:, lo:hi], prompt_seg[:, lo:hi]) <= TOL
  rows = np.arange(b)
  for s in range(DECODE_STEPS):
    pos = (lengths + s).astype(np.int32)[:, None]
    tok = tokens[rows, lengths + s][:, None]
    logits, cache = step(params, tok, pos, np.ones_like(pos), cache)
    assert ref_lib.rel_err(logits[:, 0], ref[rows, lengths + s]) <= TOL, f"decode step {s}"


def test_cache_layout_has_leading_layer_axis():
  cfg = ref_lib.with_chunk_size(from_hf_config(ref_lib.text_config().to_dict()), 4)
  cache = build_model(cfg).init_cache(2, 16)
  fam = cfg.family_config
  lin, full = cache["layer_0"], cache["layer_1"]  # period (linear, full) scanned twice
  assert lin["conv"].shape == (2, 2, fam.linear_conv_kernel_dim - 1, fam.conv_dim)
  assert lin["recurrent"].shape == (
    2,
    2,
    fam.linear_num_value_heads,
    fam.linear_key_head_dim,
    fam.linear_value_head_dim,
  )
  assert lin["recurrent"].dtype == jnp.float32
  assert full["k"].shape == (2, 2, 16, cfg.num_key_value_heads, cfg.head_dim)


@pytest.mark.slow  # the default suite's budget (docs/design/ci.md)
@pytest.mark.parametrize("scan_layers", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_packed_row_equals_separate_sequences(scan_layers):
  cfg, params = _model(scan_layers)
  len_a, len_b, width = 11, 14, 28
  rng = np.random.default_rng(1)
  seq_a = rng.integers(0, cfg.vocab_size, len_a).astype(np.int32)
  seq_b = rng.integers(0, cfg.vocab_size, len_b).astype(np.int32)
  packed = np.zeros((1, width), np.int32)
  packed[0, : len_a + len_b] = np.concatenate([seq_a, seq_b])
  seg = np.zeros((1, width), np.int32)
  seg[0, :len_a], seg[0, len_a : len_a + len_b] = 1, 2
  pos = np.zeros((1, width), np.int32)
  pos[0, :len_a], pos[0, len_a : len_a + len_b] = np.arange(len_a), np.arange(len_b)
  packed_logits = ref_lib.our_logits(cfg, params, packed, pos, seg)[0]

  sep = np.zeros((2, len_b), np.int32)
  sep[0, :len_a], sep[1] = seq_a, seq_b
  sep_seg = np.zeros((2, len_b), np.int32)
  sep_seg[0, :len_a], sep_seg[1] = 1, 1
  sep_pos = np.broadcast_to(np.arange(len_b), (2, len_b)).astype(np.int32)
  sep_logits = ref_lib.our_logits(cfg, params, sep, sep_pos, sep_seg)
  assert ref_lib.rel_err(packed_logits[:len_a], sep_logits[0, :len_a]) <= TOL
  assert ref_lib.rel_err(packed_logits[len_a : len_a + len_b], sep_logits[1]) <= TOL
