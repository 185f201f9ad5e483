"""Trainer -> server weight sync, both paths side by side, on 8 fake CPU devices: the in-process
device reshard (loop/weight_sync.py: trainer fsdp=2 x tensor=2 on devices 0-3 -> the served tree on
devices 4-7) vs the gRPC UpdateWeights push a separately launched server takes (msgpack of the
params, streamed over loopback, conformed and placed by the server).

  python3 bench/weight_sync.py [--tiny] [--pairs 5] [--out r.json] [--record BENCHMARKS.md]
Default model: Qwen3-0.6B-shaped (596M params, fp32 trainer, bf16 server). --tiny: a small model
(what tests/train/test_bench.py runs). The ratio is grpc / device (> 1: the device path faster).
"""

import asyncio
import json
import os
import pathlib
import sys

os.environ["XLA_FLAGS"] = (
  os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import jax
import numpy as np
from jax.sharding import Mesh

from bench import report
from tmax_jax import cli, json_io, sharding
from tmax_jax.inference.client import RolloutClient
from tmax_jax.inference.engine import EngineConfig
from tmax_jax.loop import WeightSync, policy, served_target
from tmax_jax.models import registry

TINY = dict(
  vocab_size=1024,
  hidden_size=64,
  intermediate_size=128,
  num_hidden_layers=2,
  num_attention_heads=4,
  num_key_value_heads=4,
  head_dim=16,
)
MARKER = "Weight sync (trainer -> server)"
HEADING = (
  f"\n## {MARKER}\n\n`python3 bench/weight_sync.py` (8 fake CPU devices; trainer "
  "fsdp=2 x tensor=2 on 4, server on the other 4; fp32 -> bf16)\n\n"
  "| model | params | device reshard s | gRPC UpdateWeights s | ratio | load |\n"
  "|---|---|---|---|---|---|\n"
)


def _args(argv):
  p = cli.ArgumentParser(description=cli.description(__doc__))
  p.add_argument("--tiny", action="store_true", help="tiny model (tests)")
  p.add_argument("--pairs", type=int, default=report.MIN_PAIRS, help="alternated pairs")
  p.add_argument("--out", default="", help="JSON output path")
  p.add_argument(
    "--record", default="", help="BENCHMARKS.md to append the row to (quiet machine only)"
  )
  return p.parse_args(argv)


def main(argv=None) -> dict:
  args = _args(argv)
  if jax.device_count() != 8:
    raise SystemExit(f"needs 8 (fake) devices, jax sees {jax.device_count()}")
  cfg = registry.preset("qwen3-0.6b", **(TINY if args.tiny else {}))
  devices = jax.devices()
  trainer_mesh = sharding.make_mesh(fsdp=2, tensor=2, devices=devices[:4])
  params = registry.init_params(cfg, jax.random.key(0), registry.param_shardings(cfg, trainer_mesh))
  served_cfg = cfg.with_dtypes(param_dtype="bfloat16", compute_dtype="bfloat16")
  server_mesh = Mesh(np.asarray(devices[4:]).reshape(1, 4), ("replica", "tensor"))
  sync = WeightSync(trainer_mesh, served_target(served_cfg, server_mesh))
  engine = EngineConfig(max_concurrent_decodes=1, max_len=64, max_prefill_length=32)
  server = policy.start_serving(served_cfg, sync(params), engine, mesh=server_mesh)
  loop = asyncio.new_event_loop()

  async def connect():  # the gRPC channel binds to the loop it is created on
    return await RolloutClient(server.address).__aenter__()

  client = loop.run_until_complete(connect())
  version = [0]

  def grpc_push():
    version[0] += 1
    loop.run_until_complete(client.update_weights(params, version=version[0], timeout_s=3600))

  try:
    result = report.compare(lambda: sync(params), grpc_push, pairs=args.pairs)
  finally:
    loop.run_until_complete(client.__aexit__(None, None, None))
    server.stop()
  n = registry.count_params(params)
  out = {
    "model": "tiny" if args.tiny else "qwen3-0.6b",
    "params": n,
    "device_s": result.ours_median_s,
    "grpc_s": result.theirs_median_s,
    **result.as_dict(),
  }
  row = (
    f"| {out['model']} | {n / 1e6:.0f}M | {result.ours_median_s:.3f} | "
    f"{result.theirs_median_s:.3f} | {result.ratio_text()} | {result.load_text()} |"
  )
  report.record_row(
    pathlib.Path(args.record) if args.record else None,
    MARKER,
    HEADING,
    row,
    loads=result.busy_readings,
  )
  print(json.dumps(out))
  if args.out:
    json_io.write_text_atomic(args.out, [json.dumps(out)])
  return out


if __name__ == "__main__":
  cli.run(main)
