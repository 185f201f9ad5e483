"""Decode throughput of the paged serving engine (one replica: decode.PagedCore + scheduler, tensor
parallel over --tensor devices) at the Qwen3-1.7B shape (batch 64, prompt 512, 256 new tokens,
bf16 weights/compute, fp32 head) vs the HF/PyTorch anchor (960 tok/s on an H200) and the HBM
bandwidth bound. Needs only JAX + Flax (no JetStream/ml_collections on the GPU host).

  python3 bench/gpu_decode.py                  # accelerator, full shape
  python3 bench/gpu_decode.py --tiny           # CPU smoke run (tiny shapes, same code path)
Without an accelerator and without --tiny it prints why and exits 0. Prints one JSON line and
writes it to --out (default bench/gpu_decode.json) atomically.
"""

import json
import pathlib
import sys
import time

import jax
import numpy as np
from jax.sharding import Mesh

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from tmax_jax import cli, json_io
from tmax_jax.inference import decode, paged, sampling, scheduler
from tmax_jax.models import DtypePolicy, registry

HF_ANCHOR_TOK_S = 960.0  # HF transformers bf16 sdpa generate, same shape, H200 (machine.md)
H200_HBM_BYTES_S = 4.8e12  # spec; machine.md measured ~2.7e12 for an elementwise copy
TINY = dict(
  vocab_size=512,
  hidden_size=128,
  intermediate_size=256,
  num_hidden_layers=2,
  num_attention_heads=4,
  num_key_value_heads=2,
  head_dim=32,
)


def _args(argv):
  p = cli.ArgumentParser(description=cli.description(__doc__))
  p.add_argument("--tiny", action="store_true", help="tiny shapes for a CPU smoke run")
  p.add_argument("--batch", type=int, default=64, help="decode batch (concurrent sequences)")
  p.add_argument("--prompt", type=int, default=512, help="prompt tokens per sequence")
  p.add_argument("--new", type=int, default=256, help="new tokens per sequence")
  p.add_argument("--page_size", type=int, default=64, help="KV cache page size (tokens)")
  p.add_argument("--tensor", type=int, default=1, help="devices of the replica (tensor parallel)")
  p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
  p.add_argument("--unrolled", action="store_true", help="serve unrolled (decode.CoreShape)")
  p.add_argument("--decode_steps", type=int, default=4, help="decode steps per dispatched call")
  p.add_argument(
    "--out",
    default=str(pathlib.Path(__file__).with_name("gpu_decode.json")),
    help="JSON output path",
  )
  a = p.parse_args(argv)
  if a.tiny:
    a.batch, a.prompt, a.new, a.page_size = min(a.batch, 4), min(a.prompt, 32), min(a.new, 16), 8
  return a


def bandwidth_bound(cfg, served, batch, max_len, mean_len, table_len):
  """tokens/s if every decode step only had to stream its weights and KV once: all params except
  the embedding table / bf16 lm_head (only B rows are gathered) + the fp32 head, plus the KV of
  (a) every slot at max_len (a dense cache), (b) the live tokens, (c) the bucketed block tables
  the paged decode actually reads."""
  flat = jax.tree_util.tree_flatten_with_path(served["params"])[0]
  body = sum(
    x.size * x.dtype.itemsize
    for path, x in flat
    if "embed_tokens" not in jax.tree_util.keystr(path)
    and "lm_head" not in jax.tree_util.keystr(path)
  )
  weight_bytes = body + served["head"].size * served["head"].dtype.itemsize
  kv_per_token = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * 2  # bf16

  def bound(tokens):
    return batch * H200_HBM_BYTES_S / (weight_bytes + batch * tokens * kv_per_token)

  return dict(
    weight_bytes_per_step=int(weight_bytes),
    kv_bytes_per_token=kv_per_token,
    bound_tok_s_full_cache=bound(max_len),
    bound_tok_s_live_kv=bound(mean_len),
    bound_tok_s_paged_tables=bound(table_len),
  )


def _run(sched, prompts, new, sp):
  """Submits every prompt; -> (prefill seconds until all decode, decode seconds until done)."""
  for i, p in enumerate(prompts):
    sched.submit(scheduler.Sequence(i, p.tolist(), new, sp))
  t0 = time.perf_counter()
  while len(sched.decoding) < len(prompts):
    sched.step()
  jax.block_until_ready(sched.state)
  t1 = time.perf_counter()
  sched.run_until_idle()
  jax.block_until_ready(sched.state)
  return t1 - t0, time.perf_counter() - t1


def main(argv=None):
  a = _args(argv)
  if jax.default_backend() == "cpu" and not a.tiny:
    print(
      "gpu_decode: no accelerator (JAX backend is cpu); run with --tiny for the CPU smoke run",
      flush=True,
    )
    return {}
  dtypes = DtypePolicy(param_dtype="bfloat16", compute_dtype="bfloat16", head_dtype="float32")
  cfg = registry.preset("qwen3-1.7b", dtypes=dtypes, **(TINY if a.tiny else {}))
  max_len = a.prompt + a.new + 1
  shape = decode.CoreShape(
    slots=a.batch,
    max_len=max_len,
    page_size=a.page_size,
    num_pages=a.batch * paged.pages_for(max_len, a.page_size),
    unrolled=a.unrolled,
  )
  mesh = Mesh(np.asarray(jax.devices()[: a.tensor]), (decode.TENSOR,))
  core = decode.PagedCore(cfg, shape, mesh)
  params = registry.init_params(cfg, jax.random.key(0), decode.param_shardings(cfg, mesh))
  box = decode.ParamsBox(params, 0, core.prepare)
  sched_cfg = scheduler.SchedulerConfig(
    prefill_chunk=min(512, a.prompt),
    prefill_batch=8,
    prefix_cache=False,
    decode_steps=a.decode_steps,
  )
  sched = scheduler.Scheduler(core, box, sched_cfg, emit=lambda events: None)
  rng = np.random.default_rng(0)
  prompts = rng.integers(0, cfg.vocab_size, size=(a.batch, a.prompt)).astype(np.int32)
  sp = sampling.SamplingParams(temperature=a.temperature)
  t0 = time.perf_counter()
  _run(sched, prompts, 2, sp)  # compile + warm up every program the timed run uses
  compile_s = time.perf_counter() - t0
  prefill_s, decode_s = _run(sched, prompts, a.new, sp)
  new_tokens = a.batch * a.new
  table_len = (
    scheduler.bucket(
      paged.pages_for(a.prompt + a.new, a.page_size), shape.max_pages, max(1, 512 // a.page_size)
    )
    * a.page_size
  )
  result = dict(
    device=str(jax.devices()[0].device_kind),
    tiny=a.tiny,
    batch=a.batch,
    prompt=a.prompt,
    new=a.new,
    page_size=a.page_size,
    tensor=a.tensor,
    unrolled=a.unrolled,
    decode_steps=a.decode_steps,
    compile_s=compile_s,
    prefill_s=prefill_s,
    decode_s=decode_s,
    decode_tok_s=new_tokens / decode_s,
    end_to_end_tok_s=new_tokens / (prefill_s + decode_s),
    hf_anchor_tok_s=HF_ANCHOR_TOK_S,
    peak_pages_in_use=sched.stats["peak_pages_in_use"],
    **core.memory_bytes(),
    **bandwidth_bound(cfg, box.get()[0], a.batch, max_len, a.prompt + a.new / 2, table_len),
  )
  result["vs_hf_anchor"] = result["end_to_end_tok_s"] / HF_ANCHOR_TOK_S
  result["fraction_of_bound"] = result["decode_tok_s"] / result["bound_tok_s_live_kv"]
  line = json.dumps(result)
  print(line)
  json_io.write_text_atomic(a.out, [line + "\n"])
  return result


if __name__ == "__main__":
  cli.run(main)
