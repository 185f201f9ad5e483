"""The head_dtype knob is real: with bf16 compute, an fp32 head brings the served logprobs closer to
an all-fp32 reference than a bf16 head does (paired over the same sampled tokens)."""

import numpy as np
from scipy import stats

import inference_helpers as helpers
from test_server import Served, _generate_all, _trainer_logprobs
from tmax_jax.inference import sampling
from tmax_jax.models import DtypePolicy, hf_io

# Wider than the parity models so that the head's rounding is visible next to the bf16 body's.
WIDE = dict(vocab_size=4096, hidden_size=256, intermediate_size=256, num_hidden_layers=1)


def _gaps(ckpt, head_dtype, prompts, ref_cfg, ref_params):
  s = Served(ckpt, dtypes=DtypePolicy(compute_dtype="bfloat16", head_dtype=head_dtype))
  try:
    outs = _generate_all(s.address, prompts, 24, sampling.SamplingParams(seed=1))
  finally:
    s.server.stop()
  return [(o.token_ids, np.abs(np.asarray(o.logprobs) -
                               _trainer_logprobs(ref_cfg, ref_params, p, o.token_ids, 1.0)))
          for p, o in zip(prompts, outs)]


def test_fp32_head_shrinks_gap_to_fp32_reference(tmp_path):
  helpers.save_tiny("qwen3", tmp_path, **WIDE)
  ref_cfg, ref_params = hf_io.load_pretrained(tmp_path)  # all fp32
  prompts = helpers.prompts(8, seed=3)
  fp32_head = _gaps(tmp_path, "float32", prompts, ref_cfg, ref_params)
  bf16_head = _gaps(tmp_path, "bfloat16", prompts, ref_cfg, ref_params)
  diffs = []
  for (ta, ga), (tb, gb) in zip(fp32_head, bf16_head):
    k = 0  # same body and seed: identical hidden states until the sampled tokens diverge
    while k < len(ta) and ta[k] == tb[k]:
      k += 1
    diffs.append(gb[:k + (k < len(ta))] - ga[:k + (k < len(ta))])
  d = np.concatenate(diffs)
  assert len(d) >= 100
  print(f"mean gap fp32 head {np.mean(np.concatenate([g for _, g in fp32_head])):.5f}, "
        f"bf16 head {np.mean(np.concatenate([g for _, g in bf16_head])):.5f}")
  assert d.mean() > 0
  assert stats.ttest_1samp(d, 0.0, alternative="greater").pvalue < 1e-3
