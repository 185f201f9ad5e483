"""The head_dtype knob is real. With bf16 compute, served logprobs are compared (same prompts, same
seeds) against (a) the recipe's trainer: bf16 compute + fp32 head, and (b) an all-fp32 reference.
An fp32 head on the server removes nearly all of (a)'s gap and also lowers (b)'s, which is
dominated by the bf16 body (identical in both servers)."""

import numpy as np
import pytest

import inference_helpers as helpers
from test_server import Served, _generate_all, _trainer_logprobs
from tmax_jax.inference import engine as engine_lib
from tmax_jax.inference import sampling
from tmax_jax.models import DtypePolicy, hf_io

ENGINE = engine_lib.EngineConfig(max_concurrent_decodes=8, max_len=128, max_prefill_length=64)
BF16_BODY = dict(compute_dtype="bfloat16")


def _mean_gaps(ckpt, head_dtype, prompts, refs):
  s = Served(ckpt, ENGINE, dtypes=DtypePolicy(head_dtype=head_dtype, **BF16_BODY))
  try:
    outs = _generate_all(s.address, prompts, 32, sampling.SamplingParams(seed=1))
  finally:
    s.server.stop()
  return [np.mean(np.concatenate([
      np.abs(np.asarray(o.logprobs) - _trainer_logprobs(cfg, params, p, o.token_ids, 1.0))
      for p, o in zip(prompts, outs)])) for cfg, params in refs]


@pytest.mark.slow
def test_fp32_head_shrinks_gap_to_reference(tmp_path):
  helpers.save_tiny("qwen3", tmp_path)
  trainer = hf_io.load_pretrained(tmp_path, dtypes=DtypePolicy(head_dtype="float32", **BF16_BODY))
  fp32 = hf_io.load_pretrained(tmp_path)
  prompts = helpers.prompts(8, seed=3)
  f_trainer, f_fp32 = _mean_gaps(tmp_path, "float32", prompts, [trainer, fp32])
  b_trainer, b_fp32 = _mean_gaps(tmp_path, "bfloat16", prompts, [trainer, fp32])
  print(f"mean |logp gap| vs bf16+fp32-head trainer: fp32 head {f_trainer:.2e}, bf16 head "
        f"{b_trainer:.2e}; vs all-fp32: fp32 head {f_fp32:.5f}, bf16 head {b_fp32:.5f}")
  assert f_trainer < 1e-5 < b_trainer / 10  # the DPPO invariant holds in bf16 only with fp32 head
  assert f_fp32 < b_fp32
