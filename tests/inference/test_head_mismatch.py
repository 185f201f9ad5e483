"""fp32 head on both sides whatever the served param dtype (recipe.md): an fp32-master trainer
synced into a bf16-param server (the Qwen3.5 RL configs' dtypes) through the RL loop's weight sync
and a real server. The body weights are bf16 values and compute is fp32, so the server's bf16
params are lossless and only the head can differ: with the head weight round-tripped through
bf16 (what the served tree held before DtypePolicy.head_weight) the served logprobs are off by
~1e-3, with the trainer's fp32 head they equal the trainer's to kernel-order noise. bench/
head_mismatch.py measures the same at the recipe's bf16 compute (BENCHMARKS)."""

import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
import head_mismatch  # noqa: E402  (bench/: the toy configs, the sync-and-serve measurement)

from tmax_jax.models import registry  # noqa: E402


@pytest.mark.slow  # the default suite's budget (docs/design/ci.md)
@pytest.mark.parametrize("family", ["qwen3", pytest.param("qwen3_5", marks=pytest.mark.slow)])
def test_bf16_server_serves_the_trainers_fp32_head(family):
  cfg = head_mismatch.toy_configs()[family].with_dtypes(compute_dtype="float32")
  served_cfg = cfg.with_dtypes(param_dtype="bfloat16")
  dtypes = {
    jax.tree_util.keystr(p): x.dtype
    for p, x in jax.tree_util.tree_leaves_with_path(registry.abstract_params(served_cfg))
    if head_mismatch.head_leaf(cfg) in jax.tree_util.keystr(p)
  }
  assert set(dtypes.values()) == {jnp.dtype(jnp.float32)}, dtypes  # the served head weight
  params = head_mismatch.trainer_params(cfg, seed=0, bf16_body=True)
  prompts = [list(range(3 + i, 12 + 2 * i)) for i in range(4)]
  gap = head_mismatch.gaps(cfg, params, served_cfg, prompts, tokens=16, seed=1)
  old, fixed = gap[False]["per_prompt_abs_logp"], gap[True]["per_prompt_abs_logp"]
  print(f"{family}: per-prompt mean |dlogp| bf16-rounded head {old}, fp32 head {fixed}")
  assert np.max(fixed) < 2e-5 and np.min(old) > 1e-4
  assert gap[True]["mean_k3"] < 1e-9 < gap[False]["mean_k3"]
