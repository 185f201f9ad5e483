"""The head_dtype knob is real. With bf16 compute, served logprobs are compared (same prompts, same
seeds) against (a) the recipe's trainer: bf16 compute + fp32 head, and (b) an all-fp32 reference.

(a) An fp32 head on the server removes nearly all of the gap to the trainer: the DPPO invariant
(server and trainer compute the same logits) holds in bf16 only with the fp32 head (for most
prompts exactly; a rare bf16 rounding flip in the body, from a different reduction order of the
paged attention, gives one prompt a ~1e-3 gap with either head).
(b) Against an all-fp32 reference the gap (~0.025 mean |dlogp|) is dominated by the bf16 body,
identical in both servers. Measured over 3 random models x 32 prompts (paired per prompt), the
head's effect on it was -0.00012 +- 0.00034 (stderr): no detectable change. So (b) asserts only
what that supports: the effect's 95% interval stays within 5% of the gap (an earlier version
asserted the fp32 head also *lowers* (b); measured, it does not, beyond noise)."""

import dataclasses

import inference_helpers as helpers
import numpy as np
import pytest
from test_server import Served, _generate_all, _trainer_logprobs

from tmax_jax.inference import engine as engine_lib
from tmax_jax.inference import sampling
from tmax_jax.models import DtypePolicy, hf_io

ENGINE = engine_lib.EngineConfig(max_concurrent_decodes=8, max_len=128, max_prefill_length=64)
BF16_BODY = dict(compute_dtype="bfloat16")


def _per_prompt_gaps(ckpt, head_dtype, prompts, refs):
  """-> one array per reference: mean |served - reference| logprob gap per prompt."""
  s = Served(ckpt, ENGINE, dtypes=DtypePolicy(head_dtype=head_dtype, **BF16_BODY))
  try:
    outs = _generate_all(s.address, prompts, 32, sampling.SamplingParams(seed=1))
  finally:
    s.server.stop()
  return [
    np.array(
      [
        np.mean(
          np.abs(np.asarray(o.logprobs) - _trainer_logprobs(cfg, params, p, o.token_ids, 1.0))
        )
        for p, o in zip(prompts, outs, strict=True)
      ]
    )
    for cfg, params in refs
  ]


def _trainer(ckpt, attention_impl: str, **dtypes):
  cfg, params = hf_io.load_pretrained(ckpt, dtypes=DtypePolicy(**dtypes))
  return dataclasses.replace(cfg, attention_impl=attention_impl), params


@pytest.mark.slow  # the default suite's budget (docs/design/ci.md)
def test_fp32_head_closes_gap_to_trainer(tmp_path):
  """With a trainer whose attention has the served numerics (the reference kernel: softmax
  normalised before the bf16 PV matmul, as the paged decode does); the blockwise kernel rounds in
  another order, see test_blockwise_bf16_is_as_accurate_as_reference."""
  helpers.save_tiny("qwen3", tmp_path)
  trainer = _trainer(tmp_path, "reference", head_dtype="float32", **BF16_BODY)
  prompts = helpers.prompts(8, seed=3)
  (f_trainer,) = _per_prompt_gaps(tmp_path, "float32", prompts, [trainer])
  (b_trainer,) = _per_prompt_gaps(tmp_path, "bfloat16", prompts, [trainer])
  print(
    f"per-prompt |logp gap| vs bf16+fp32-head trainer: fp32 head {f_trainer}, bf16 head {b_trainer}"
  )
  # Per prompt, not the mean: the served bf16 body reduces attention keys page block by page
  # block, the trainer over its whole row, so now and then one bf16 rounding flips and that
  # prompt's gap is ~1e-3 whatever the head (docs/design/inference.md "fp32 head finding").
  assert np.median(f_trainer) < 1e-5 < np.median(b_trainer) / 10
  assert np.all(b_trainer > 1e-4)  # with a bf16 head no prompt matches


def test_blockwise_bf16_is_as_accurate_as_reference(tmp_path):
  """The training default on CPU (blockwise, flash-style: unnormalised bf16 probabilities, divided
  at the end) differs from served logprobs by bf16 rounding (~2e-2 mean |dlogp| here,
  docs/design/inference.md "fp32 head finding"), but is no less accurate: its error against an
  all-fp32 model stays within 1.5x of the reference kernel's, per sequence."""
  helpers.save_tiny("qwen3", tmp_path)
  fp32 = _trainer(tmp_path, "reference", head_dtype="float32")
  rng = np.random.default_rng(0)
  for _ in range(3):
    ids = rng.integers(0, fp32[0].vocab_size, 60).tolist()
    exact = _trainer_logprobs(*fp32, ids[:20], ids[20:], 1.0)
    err = {
      impl: np.abs(
        _trainer_logprobs(
          *_trainer(tmp_path, impl, head_dtype="float32", **BF16_BODY), ids[:20], ids[20:], 1.0
        )
        - exact
      ).mean()
      for impl in ("reference", "blockwise")
    }
    assert err["reference"] > 1e-3 and err["blockwise"] < 1.5 * err["reference"], err


@pytest.mark.slow
def test_head_dtype_effect_on_gap_to_fp32_reference(tmp_path):
  diffs, gaps = [], []
  for seed in range(3):
    ckpt = tmp_path / f"m{seed}"
    helpers.save_tiny("qwen3", ckpt, seed=seed)
    fp32 = hf_io.load_pretrained(ckpt)
    prompts = helpers.prompts(32, seed=3 + seed)
    (f_gap,) = _per_prompt_gaps(ckpt, "float32", prompts, [fp32])
    (b_gap,) = _per_prompt_gaps(ckpt, "bfloat16", prompts, [fp32])
    diffs.append(b_gap - f_gap)
    gaps.append(f_gap)
  d, gap = np.concatenate(diffs), np.concatenate(gaps).mean()
  half_width = 1.96 * d.std(ddof=1) / np.sqrt(len(d))
  print(
    f"gap to all-fp32: {gap:.5f}; bf16 head - fp32 head: {d.mean():+.5f} +- {half_width:.5f} "
    f"(95%, n={len(d)})"
  )
  assert abs(d.mean()) + half_width < 0.05 * gap
