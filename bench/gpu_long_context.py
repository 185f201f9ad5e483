"""64k-token train step on one GPU at the Qwen3-1.7B shape: attention kernels side by side.

One prepared run (machine.md: plan GPU work as one script): (1) the kernel parity checks of
bench/attention_parity.py at accelerator shapes (cudnn in bf16 vs the fp32 reference, blockwise,
ring when several devices); (2) for each kernel in --impls (default cudnn, blockwise; the reference
would need 16 x 65536^2 fp32 scores = 275 GB per layer and is skipped with that reason), the full
DPPO train step on one row of --seq tokens packed with three uneven trajectories: bf16 compute,
fp32 master params and head, remat full; compiled temp memory, first-call time, median step time,
tokens/s and MFU. One JSON line per result in --out (default $OUT/gpu_long_context.jsonl, else
./gpu_long_context.jsonl) and a summary on stdout.

  python3 bench/gpu_long_context.py                 # 1.7B shape, T = 65536
  python3 bench/gpu_long_context.py --model qwen3.5-2b --seq 65536
  python3 bench/gpu_long_context.py --tiny          # CPU check of the script (tests run it)
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import time

import jax
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import attention_parity  # noqa: E402
import long_context  # noqa: E402

from tmax_jax import cli
from tmax_jax.models import ModelConfig, qwen, qwen3_5, registry  # noqa: E402
from tmax_jax.train import TrainConfig  # noqa: E402
from tmax_jax.train import step as step_lib  # noqa: E402


def model_config(name: str, tiny: bool) -> ModelConfig:
  if tiny:
    return long_context.small_models(tiny=True)["dense" if name.startswith("qwen3-") else "qwen3_5"]
  cfg = qwen3_5.preset(name) if name.startswith("qwen3.5") else qwen.preset(name)
  cfg = cfg.replace(remat_policy="full")
  return cfg.with_dtypes(param_dtype="float32", compute_dtype="bfloat16", head_dtype="float32")


def time_step(cfg: ModelConfig, seq: int, steps: int) -> dict:
  tcfg = TrainConfig(logprob_chunk_size=min(2048, seq))
  compiled, trainer = long_context.compiled_step(cfg, seq, tcfg=tcfg)
  mem = compiled.memory_analysis()
  start = time.perf_counter()
  state = trainer.init_state(registry.init_params(cfg, jax.random.key(0)))
  batch = long_context.random_rows(cfg, 1, seq)
  state, first = trainer.step(state, batch)
  first_s = time.perf_counter() - start
  times = []
  for _ in range(steps):
    state, metrics = trainer.step(state, batch)
    times.append(metrics["step_time_s"])
  step_s = float(np.median(times))
  tps = seq / step_s
  return {
    "temp_gib": mem.temp_size_in_bytes / 2**30,
    "argument_gib": mem.argument_size_in_bytes / 2**30,
    "first_call_s": first_s,
    "median_step_s": step_s,
    "tokens_per_s": tps,
    "mfu": step_lib.flops_per_token(cfg, seq) * tps / tcfg.peak_flops_per_device,
    "loss": metrics["loss"],
    "first_loss": first["loss"],
  }


def main(argv=None) -> int:
  ap = cli.ArgumentParser(description=cli.description(__doc__))
  ap.add_argument("--tiny", action="store_true", help="small model and T on CPU")
  ap.add_argument("--model", default="qwen3-1.7b", help="model preset")
  ap.add_argument("--seq", type=int, default=65536, help="sequence length")
  ap.add_argument(
    "--impls",
    nargs="+",
    default=["cudnn", "blockwise"],
    help="attention implementations to time (the reference is always added)",
  )
  ap.add_argument("--steps", type=int, default=3, help="timed train steps per implementation")
  ap.add_argument(
    "--skip_parity", action="store_true", help="skip the parity check against the reference"
  )
  ap.add_argument("--out", default=None, help="JSONL output path")
  args = ap.parse_args(argv)
  out = pathlib.Path(args.out or os.path.join(os.environ.get("OUT", "."), "gpu_long_context.jsonl"))
  platform = jax.default_backend()
  results = []
  if not args.skip_parity:
    results += [{"check": "parity", **r} for r in attention_parity.run(args.tiny, False)]
  seq = 256 if args.tiny else args.seq
  base = model_config(args.model, args.tiny)
  for impl in args.impls + ["reference"]:
    row = {
      "check": "train_step",
      "model": args.model,
      "impl": impl,
      "seq": seq,
      "device": jax.devices()[0].device_kind,
    }
    scores_gb = 4 * base.num_attention_heads * seq * seq / 1e9
    if impl == "reference" and scores_gb > 8 and not args.tiny:
      row["status"] = f"skipped: fp32 scores of one layer need {scores_gb:.0f} GB"
    elif impl == "cudnn" and platform != "gpu":
      row["status"] = f"skipped: needs a GPU (platform is {platform})"
    else:
      cfg = base.replace(attention_impl=impl)
      if args.tiny:
        cfg = cfg.with_dtypes(compute_dtype="float32")
      row.update(status="ok", **time_step(cfg, seq, 1 if args.tiny else args.steps))
    results.append(row)
    print(json.dumps(row), flush=True)
  with out.open("a") as f:
    for r in results:
      f.write(json.dumps(r) + "\n")
  failed = [r for r in results if str(r.get("status", "")).startswith("FAILED")]
  for r in results:
    print(f"{r['check']:10s} {r.get('kernel', r.get('impl'))}: {r['status']}")
  return 1 if failed else 0


if __name__ == "__main__":
  cli.run(main)
