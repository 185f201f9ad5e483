"""Weight push throughput: the per-tensor UpdateWeights stream into a served model over gRPC
(loopback), bf16 on the wire vs fp32, side by side (bench/report.compare, sides alternated).

Each push goes client -> server through the real RPC: manifest, chunks, per-tensor CRC-32, staging
on the server's device and the atomic swap; the version increases each push. Reports seconds per
push, wire GB/s and the served model's parameter bytes.
  python3 bench/weight_push.py [--preset qwen3-0.6b] [--tiny] [--pairs 5] [--out r.json]
"""

import asyncio
import json
import pathlib
import sys

import jax
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from bench import report
from tmax_jax import cli, json_io
from tmax_jax.inference import client as client_lib
from tmax_jax.inference import engine as engine_lib
from tmax_jax.inference import server as server_lib
from tmax_jax.models import DtypePolicy, registry

TINY = dict(
  vocab_size=256,
  hidden_size=64,
  intermediate_size=128,
  num_hidden_layers=2,
  num_attention_heads=4,
  num_key_value_heads=2,
  head_dim=16,
)
HEADING = (
  "\n## Weight push (bench/weight_push.py)\n\n| model | params | fp32 s | bf16 s | bf16 GB/s "
  "| fp32/bf16 | load |\n|---|---|---|---|---|---|---|\n"
)


def _args(argv):
  p = cli.ArgumentParser(description=cli.description(__doc__))
  p.add_argument("--preset", default="qwen3-0.6b", help="model preset")
  p.add_argument("--tiny", action="store_true", help="tiny shapes (CI smoke run)")
  p.add_argument("--pairs", type=int, default=report.MIN_PAIRS, help="alternated pairs")
  p.add_argument("--out", default="", help="JSON output path")
  p.add_argument("--record", default="", help="BENCHMARKS.md to append the row to (quiet box)")
  return p.parse_args(argv)


def main(argv=None) -> dict:
  args = _args(argv)
  f32 = DtypePolicy(param_dtype="float32", compute_dtype="float32", head_dtype="float32")
  cfg = registry.preset(args.preset, dtypes=f32, **(TINY if args.tiny else {}))
  params = jax.tree.map(np.asarray, registry.init_params(cfg, jax.random.key(0)))
  n_params = registry.count_params(params)
  engine = engine_lib.TmaxEngine(
    cfg,
    engine_lib.EngineConfig(max_concurrent_decodes=1, max_len=64, max_prefill_length=32),
    lambda: params,
  )
  server = server_lib.start_server(engine, server_lib.ServerConfig(port=0))
  loop = asyncio.new_event_loop()
  client = loop.run_until_complete(_client(server.address))
  version = [0]

  def push(dtype):
    version[0] += 1
    loop.run_until_complete(client.update_weights(params, version=version[0], dtype=dtype))

  try:
    cmp = report.compare(lambda: push("bfloat16"), lambda: push("float32"), pairs=args.pairs)
  finally:
    loop.run_until_complete(client.close())
    loop.close()
    server.stop()
  bf16_gb = n_params * 2 / 1e9
  out = {
    "preset": args.preset,
    "tiny": args.tiny,
    "params": n_params,
    "bf16_s": cmp.ours_median_s,
    "fp32_s": cmp.theirs_median_s,
    "bf16_gb_s": bf16_gb / cmp.ours_median_s,
    "fp32_over_bf16": cmp.ratio,
    "comparison": cmp.as_dict(),
  }
  print(json.dumps(out))
  if args.out:
    json_io.write_text_atomic(args.out, [json.dumps(out)])
  row = (
    f"| {args.preset}{' (tiny)' if args.tiny else ''} | {n_params / 1e6:.1f}M | "
    f"{cmp.theirs_median_s:.3f} | {cmp.ours_median_s:.3f} | {out['bf16_gb_s']:.2f} | "
    f"{cmp.ratio_text()} | {cmp.load_text()} |"
  )
  report.record_row(
    pathlib.Path(args.record) if args.record else None,
    "bench/weight_push.py",
    HEADING,
    row,
    loads=cmp.busy_readings,
  )
  return out


async def _client(address: str) -> client_lib.RolloutClient:
  return client_lib.RolloutClient(address, client_lib.ClientConfig(timeout_s=3600))


if __name__ == "__main__":
  cli.run(main)
