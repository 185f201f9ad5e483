"""Time the Qwen3.5 Gated DeltaNet layer at Qwen3.5-9B shapes on a GPU (seq 4096 and 16k).

One prepared run: (1) a correctness check of the fp32 layer against transformers' torch module on a
small input (same weights, on the same device when torch sees it); (2) for each sequence length and
chunk size, forward and forward+backward wall time of the jitted layer in bf16 (params and compute),
with tokens/s; optionally (3) the torch fallback layer's time for the same shape (--torch). Each
result is one JSON line in --out (default $OUT/gated_delta_gpu.jsonl, else ./gated_delta_gpu.jsonl)
and a printed summary. --tiny runs a small config on CPU to check the script itself.

  python3 bench/gpu_gated_delta.py                       # 9B shapes, seq 4096 and 16384
  python3 bench/gpu_gated_delta.py --tiny                # CPU smoke run
"""

from __future__ import annotations

import json
import os
import pathlib
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
import report  # bench/report.py (the script's directory is on sys.path)

from tmax_jax import cli
from tmax_jax.models.qwen3_5 import GatedDeltaNet, Qwen3_5Config

SHAPES_9B = dict(hidden=4096, k_heads=16, v_heads=32, head_dim=128, conv=4)
SHAPES_TINY = dict(hidden=64, k_heads=2, v_heads=4, head_dim=16, conv=4)


def spec_for(shape: dict, chunk: int) -> Qwen3_5Config:
  return Qwen3_5Config(
    layer_types=("linear_attention",),
    linear_conv_kernel_dim=shape["conv"],
    linear_key_head_dim=shape["head_dim"],
    linear_value_head_dim=shape["head_dim"],
    linear_num_key_heads=shape["k_heads"],
    linear_num_value_heads=shape["v_heads"],
    chunk_size=chunk,
  )


def timed(fn, repeats: int) -> dict:
  start = time.perf_counter()
  jax.block_until_ready(fn())
  compile_s = time.perf_counter() - start
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - start)
  return {"first_call_s": compile_s, "median_s": statistics.median(times), "min_s": min(times)}


def layer_fns(shape: dict, chunk: int, batch: int, seq: int, dtype):
  """-> (fwd(), fwd_bwd()) closures over random params/inputs of the given dtype."""
  layer = GatedDeltaNet(spec_for(shape, chunk), dtype=dtype, param_dtype=dtype)
  x = jax.random.normal(jax.random.key(0), (batch, seq, shape["hidden"]), dtype)
  pos = jnp.broadcast_to(jnp.arange(seq, dtype=jnp.int32), (batch, seq))
  seg = jnp.ones((batch, seq), jnp.int32)
  params = jax.jit(lambda r: layer.init(r, x[:, :8], pos[:, :8], seg[:, :8]))(jax.random.key(1))

  def loss(p, xx):
    out, _ = layer.apply(p, xx, pos, seg)
    return jnp.mean(out.astype(jnp.float32) ** 2)

  fwd = jax.jit(lambda p, xx: layer.apply(p, xx, pos, seg)[0])
  grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
  return (lambda: fwd(params, x)), (lambda: grad(params, x))


def check_against_torch(shape: dict, chunk: int) -> dict:
  """fp32 layer vs transformers' module on one small input (same weights)."""
  try:
    import torch
    import transformers
    from transformers.models.qwen3_5 import modeling_qwen3_5 as hf_mod
  except ImportError as e:
    return {"check": "skipped", "reason": f"torch/transformers unavailable: {e}"}
  hf_cfg = transformers.Qwen3_5TextConfig(
    hidden_size=shape["hidden"],
    linear_num_key_heads=shape["k_heads"],
    linear_num_value_heads=shape["v_heads"],
    linear_key_head_dim=shape["head_dim"],
    linear_value_head_dim=shape["head_dim"],
    linear_conv_kernel_dim=shape["conv"],
  )
  torch.manual_seed(0)
  module = hf_mod.Qwen3_5GatedDeltaNet(hf_cfg, layer_idx=0).float().eval()
  sd = {k: v.detach().cpu().numpy() for k, v in module.state_dict().items()}

  def dense(n):
    return {"kernel": sd[f"{n}.weight"].T}

  params = {
    n: dense(n) for n in ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj")
  } | {
    "conv1d": {"kernel": sd["conv1d.weight"]},
    "dt_bias": sd["dt_bias"],
    "A_log": sd["A_log"],
    "norm": {"scale": sd["norm.weight"]},
  }
  seq = 3 * chunk + 5
  x = np.random.default_rng(0).normal(size=(1, seq, shape["hidden"])).astype(np.float32)
  with torch.no_grad():
    ref = module(torch.from_numpy(x)).numpy()
  pos = np.arange(seq, dtype=np.int32)[None]
  layer = GatedDeltaNet(spec_for(shape, chunk))
  with jax.default_matmul_precision("highest"):
    out, _ = jax.jit(lambda p: layer.apply({"params": p}, x, pos, np.ones_like(pos)))(params)
  err = float(np.abs(np.asarray(out) - ref).max() / np.abs(ref).max())
  return {"check": "fp32 vs transformers", "seq": seq, "max_rel_err": err, "ok": err <= 1e-4}


def torch_time(shape: dict, batch: int, seq: int, repeats: int) -> dict:
  import torch
  import transformers
  from transformers.models.qwen3_5 import modeling_qwen3_5 as hf_mod

  device = "cuda" if torch.cuda.is_available() else "cpu"
  hf_cfg = transformers.Qwen3_5TextConfig(
    hidden_size=shape["hidden"],
    linear_num_key_heads=shape["k_heads"],
    linear_num_value_heads=shape["v_heads"],
    linear_key_head_dim=shape["head_dim"],
    linear_value_head_dim=shape["head_dim"],
    linear_conv_kernel_dim=shape["conv"],
  )
  module = hf_mod.Qwen3_5GatedDeltaNet(hf_cfg, layer_idx=0).to(device, torch.bfloat16)
  x = torch.randn(
    batch, seq, shape["hidden"], device=device, dtype=torch.bfloat16, requires_grad=True
  )

  def step():
    module.zero_grad(set_to_none=True)
    module(x).float().pow(2).mean().backward()
    if device == "cuda":
      torch.cuda.synchronize()

  return {"torch_device": device, "torch_fwd_bwd_median_s": report.time_it(step, repeats)[0]}


def main(argv=None):
  parser = cli.ArgumentParser(description=cli.description(__doc__))
  parser.add_argument("--tiny", action="store_true", help="small shapes on CPU (script check)")
  parser.add_argument(
    "--seqs",
    type=int,
    nargs="+",
    default=None,
    help="sequence lengths (default: the script's list)",
  )
  parser.add_argument(
    "--chunks", type=int, nargs="+", default=[64], help="chunk lengths of the chunked delta rule"
  )
  parser.add_argument("--batch", type=int, default=1, help="batch size")
  parser.add_argument("--repeats", type=int, default=5, help="timed runs per shape")
  parser.add_argument("--torch", action="store_true", help="also time transformers' torch layer")
  parser.add_argument(
    "--out",
    type=pathlib.Path,
    default=None,
    help="JSONL output path (default: $OUT/gated_delta_gpu.jsonl)",
  )
  args = parser.parse_args(argv)
  if args.tiny:
    jax.config.update("jax_platforms", "cpu")
  shape = SHAPES_TINY if args.tiny else SHAPES_9B
  seqs = args.seqs or ([256, 1024] if args.tiny else [4096, 16384])
  out = args.out or pathlib.Path(os.environ.get("OUT", ".")) / "gated_delta_gpu.jsonl"
  out.parent.mkdir(parents=True, exist_ok=True)
  header = {
    "devices": [str(d) for d in jax.devices()],
    "jax": jax.__version__,
    "shape": shape,
    "tiny": args.tiny,
  }
  records = [header, check_against_torch(shape, min(args.chunks))]
  print(json.dumps(records[-1]), flush=True)
  for seq in seqs:
    for chunk in args.chunks:
      fwd, fwd_bwd = layer_fns(shape, chunk, args.batch, seq, jnp.bfloat16)
      rec = {
        "seq": seq,
        "batch": args.batch,
        "chunk": chunk,
        "dtype": "bfloat16",
        "fwd": timed(fwd, args.repeats),
        "fwd_bwd": timed(fwd_bwd, args.repeats),
      }
      rec["fwd_bwd_tokens_per_s"] = args.batch * seq / rec["fwd_bwd"]["median_s"]
      if args.torch and chunk == args.chunks[0]:
        rec.update(torch_time(shape, args.batch, seq, max(1, args.repeats // 2)))
      records.append(rec)
      print(json.dumps(rec), flush=True)
  tmp = out.with_name(out.name + ".tmp")
  tmp.write_text("".join(json.dumps(r) + "\n" for r in records))
  tmp.rename(out)
  print(f"wrote {out}")


if __name__ == "__main__":
  cli.run(main)
