"""Decode throughput of the tmax_jax decode core at the Qwen3-1.7B shape (batch 64, prompt 512,
256 new tokens, bf16 weights/compute, fp32 head) vs the HF/PyTorch anchor (960 tok/s on an H200)
and the HBM bandwidth bound. Needs only JAX + Flax (no JetStream/ml_collections on the GPU host).

  python3 bench/gpu_decode.py                  # GPU, full shape
  python3 bench/gpu_decode.py --tiny           # CPU smoke run (tiny shapes, same code path)
Prints one JSON line and writes it to --out (default bench/gpu_decode.json) atomically.
"""

import argparse
import json
import os
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
# pylint: disable=wrong-import-position
from tmax_jax.inference import decode, sampling
from tmax_jax.models import registry
from tmax_jax.models.config import DtypePolicy

HF_ANCHOR_TOK_S = 960.0  # HF transformers bf16 sdpa generate, same shape, H200 (machine.md)
H200_HBM_BYTES_S = 4.8e12  # spec; machine.md measured ~2.7e12 for an elementwise copy
TINY = dict(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32)


def _args(argv):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--tiny", action="store_true", help="tiny shapes for a CPU smoke run")
  p.add_argument("--batch", type=int, default=64)
  p.add_argument("--prompt", type=int, default=512)
  p.add_argument("--new", type=int, default=256)
  p.add_argument("--temperature", type=float, default=1.0)
  p.add_argument("--out", default=str(pathlib.Path(__file__).with_name("gpu_decode.json")))
  a = p.parse_args(argv)
  if a.tiny:
    a.batch, a.prompt, a.new = min(a.batch, 4), min(a.prompt, 32), min(a.new, 16)
  return a


def bandwidth_bound(cfg, served, batch, max_len, mean_len):
  """tokens/s if every decode step only had to stream its weights and the KV cache once: all
  params except the embedding table / bf16 lm_head (only B rows are gathered) + the fp32 head."""
  flat = jax.tree_util.tree_flatten_with_path(served["params"])[0]
  body = sum(x.size * x.dtype.itemsize for path, x in flat
             if "embed_tokens" not in jax.tree_util.keystr(path)
             and "lm_head" not in jax.tree_util.keystr(path))
  weight_bytes = body + served["head"].size * served["head"].dtype.itemsize
  kv_per_token = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * 2  # bf16
  full = weight_bytes + batch * max_len * kv_per_token  # what our cache layout reads per step
  live = weight_bytes + batch * mean_len * kv_per_token  # the unavoidable part
  return dict(weight_bytes_per_step=int(weight_bytes), kv_bytes_per_token=kv_per_token,
              bound_tok_s_full_cache=batch * H200_HBM_BYTES_S / full,
              bound_tok_s_live_kv=batch * H200_HBM_BYTES_S / live)


def main(argv=None):
  a = _args(argv)
  dtypes = DtypePolicy(param_dtype="bfloat16", compute_dtype="bfloat16", head_dtype="float32")
  cfg = registry.preset("qwen3-1.7b", dtypes=dtypes, **(TINY if a.tiny else {}))
  max_len = a.prompt + a.new
  params = registry.init_params(cfg, jax.random.key(0))
  core = decode.DecodeCore(cfg, a.batch, max_len)
  served = core.prepare(params)
  state = core.init_state()
  rng = np.random.default_rng(0)
  prompts = rng.integers(0, cfg.vocab_size, size=(a.batch, a.prompt)).astype(np.int32)
  sp = sampling.SamplingParams(temperature=a.temperature)

  def prefill_all(state):
    for b in range(a.batch):
      state = core.insert(core.prefill(params, prompts[b], a.prompt, sp), state, jnp.int32(b))
    return state

  def decode_steps(state, n):
    for _ in range(n):
      state, data = core.generate(served, state, jnp.int32(0))
      np.asarray(data)  # host copy every step, as the orchestrator does
    return state

  t0 = time.perf_counter()
  state = decode_steps(prefill_all(state), 2)  # compile + warm up
  compile_s = time.perf_counter() - t0
  state = core.init_state()
  t0 = time.perf_counter()
  state = jax.block_until_ready(prefill_all(state))
  prefill_s = time.perf_counter() - t0
  t0 = time.perf_counter()
  state = jax.block_until_ready(decode_steps(state, a.new))
  decode_s = time.perf_counter() - t0
  new_tokens = a.batch * a.new
  result = dict(
      device=str(jax.devices()[0].device_kind), tiny=a.tiny, batch=a.batch, prompt=a.prompt,
      new=a.new, compile_s=compile_s, prefill_s=prefill_s, decode_s=decode_s,
      decode_tok_s=new_tokens / decode_s, end_to_end_tok_s=new_tokens / (prefill_s + decode_s),
      hf_anchor_tok_s=HF_ANCHOR_TOK_S,
      **bandwidth_bound(cfg, served, a.batch, max_len, a.prompt + a.new / 2))
  result["vs_hf_anchor"] = result["end_to_end_tok_s"] / HF_ANCHOR_TOK_S
  result["fraction_of_bound"] = result["decode_tok_s"] / result["bound_tok_s_live_kv"]
  line = json.dumps(result)
  print(line)
  out = pathlib.Path(a.out)
  tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
  tmp.write_text(line + "\n")
  os.replace(tmp, out)
  return result


if __name__ == "__main__":
  main()
