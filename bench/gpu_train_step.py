"""GPU train-step benchmark: a Qwen3-1.7B-shaped random model, B x S = 4 x 4096, bf16 compute,
fp32 master weights and fp32 LM head, remat; the full DPPO step (chunked fp32-head logprobs, AdamW,
global-norm clipping). Reports tokens/s and MFU against the H200 anchor of machine.md (HF/PyTorch:
23.5k tokens/s, 35% MFU of 790 TFLOP/s).

  python bench/gpu_train_step.py [--batch 4 --seq 4096 --remat full --steps 10] [--out r.json]
  python bench/gpu_train_step.py --tiny    # a tiny config on CPU, checks the script end to end
"""

import json
import pathlib
import sys
import time

import jax
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from tmax_jax import cli
from tmax_jax.models import ModelConfig, registry  # noqa: E402
from tmax_jax.models.qwen import qwen3  # noqa: E402
from tmax_jax.train import OptimizerConfig, TrainConfig  # noqa: E402
from tmax_jax.train import batch as batch_lib  # noqa: E402
from tmax_jax.train import state as state_lib  # noqa: E402
from tmax_jax.train import step as step_lib  # noqa: E402

ANCHOR_TOKENS_PER_S = 23_500.0  # machine.md: HF/PyTorch on one H200, same shape


def model_config(args) -> ModelConfig:
  if args.tiny:
    return ModelConfig(
      vocab_size=256,
      hidden_size=64,
      intermediate_size=128,
      num_hidden_layers=2,
      num_attention_heads=4,
      num_key_value_heads=2,
      head_dim=16,
      remat_policy=args.remat,
    )
  cfg = qwen3("1.7b", remat_policy=args.remat)
  return cfg.with_dtypes(param_dtype="float32", compute_dtype="bfloat16", head_dtype="float32")


def random_batch(cfg: ModelConfig, b: int, s: int, seed: int) -> batch_lib.TrainBatch:
  """Full rows of one trajectory each: a 10% prompt, the rest response tokens with DPPO inputs."""
  rng = np.random.default_rng(seed)
  prompt = max(1, s // 10)
  trajs = [
    batch_lib.Trajectory(
      tokens=rng.integers(0, cfg.vocab_size, s),
      loss_mask=(np.arange(s) >= prompt).astype(np.float32),
      # near a random init's logprob (-ln V) so the ratios are ~1, as on-policy
      behaviour_logp=-np.log(cfg.vocab_size) + rng.uniform(-0.5, 0.5, s),
      advantage=float(rng.choice([-1.0, 1.0])),
    )
    for _ in range(b)
  ]
  return batch_lib.pack(trajs, s, pack_rows=False)


def trace_only(args) -> dict:
  """jax.eval_shape of the whole step at full size: shapes, dtypes and the param count without
  allocating anything (what can be checked without an accelerator)."""
  cfg = model_config(args)
  tcfg = TrainConfig(micro_batches=args.micro_batches, logprob_chunk_size=min(args.chunk, args.seq))
  model = registry.build_model(cfg)
  trainer = step_lib.Trainer(model, cfg, tcfg)
  params = registry.abstract_params(cfg)
  state = state_lib.TrainState(
    params,
    jax.eval_shape(trainer.optimizer.init, params),
    jax.ShapeDtypeStruct((), np.int32),
    jax.ShapeDtypeStruct((2,), np.uint32),
  )
  batch = jax.tree.map(
    lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), random_batch(cfg, args.batch, 8, 0)
  )
  batch = jax.tree.map(lambda x: jax.ShapeDtypeStruct((args.batch, args.seq), x.dtype), batch)
  step_fn = step_lib.make_step_fn(model, cfg, tcfg, trainer.optimizer)
  new_state, metrics = jax.eval_shape(step_fn, state, batch)
  return {
    "params": registry.count_params(params),
    "batch": args.batch,
    "seq": args.seq,
    "flops_per_token": step_lib.flops_per_token(cfg, args.seq),
    "param_dtypes": sorted({str(x.dtype) for x in jax.tree.leaves(new_state.params)}),
    "metrics": sorted(metrics),
  }


def run(args) -> dict:
  cfg = model_config(args)
  b, s = (2, 64) if args.tiny else (args.batch, args.seq)
  tcfg = TrainConfig(
    optimizer=OptimizerConfig(learning_rate=1e-6),
    micro_batches=args.micro_batches,
    logprob_chunk_size=min(args.chunk, s),
    peak_flops_per_device=args.peak_tflops * 1e12,
  )
  model = registry.build_model(cfg)
  trainer = step_lib.Trainer(model, cfg, tcfg)
  t0 = time.perf_counter()
  state = trainer.init_state(registry.init_params(cfg, jax.random.key(0)))
  batch = trainer.to_device(random_batch(cfg, b, s, 0))
  state, first = trainer.step(state, batch)  # compile + first step
  compile_s = time.perf_counter() - t0
  times, rows = [], []
  for _ in range(args.steps):
    state, metrics = trainer.step(state, batch)
    times.append(metrics["step_time_s"])
    rows.append(metrics)
  step_s = float(np.median(times))
  tokens_per_s = b * s / step_s
  mfu = step_lib.flops_per_token(cfg, s) * tokens_per_s / (args.peak_tflops * 1e12)
  return {
    "device": str(jax.devices()[0].device_kind),
    "params": registry.count_params(state.params),
    "batch": b,
    "seq": s,
    "remat": cfg.remat_policy,
    "micro_batches": args.micro_batches,
    "compile_plus_first_step_s": compile_s,
    "median_step_s": step_s,
    "tokens_per_s": tokens_per_s,
    "mfu": mfu,
    "peak_tflops": args.peak_tflops,
    "vs_anchor": tokens_per_s / ANCHOR_TOKENS_PER_S,
    "loss": rows[-1]["loss"],
    "grad_norm": rows[-1]["grad_norm"],
    "first_loss": first["loss"],
    "skipped": sum(r["skipped"] for r in rows),
  }


def main(argv=None) -> None:
  ap = cli.ArgumentParser(description=cli.description(__doc__))
  ap.add_argument("--tiny", action="store_true", help="tiny model and shapes (CPU script check)")
  ap.add_argument("--batch", type=int, default=4, help="batch size")
  ap.add_argument("--seq", type=int, default=4096, help="sequence length")
  ap.add_argument(
    "--micro_batches", type=int, default=1, help="micro-batches per step (gradient accumulation)"
  )
  ap.add_argument("--chunk", type=int, default=1024, help="logprob chunk along time")
  ap.add_argument("--remat", default="full", help="rematerialisation policy")
  ap.add_argument("--steps", type=int, default=10, help="timed steps")
  ap.add_argument(
    "--peak_tflops", type=float, default=790.0, help="the device's peak TFLOP/s, for MFU"
  )
  ap.add_argument("--out", default=None, help="JSON output path")
  ap.add_argument("--trace_only", action="store_true", help="eval_shape the full-size step")
  args = ap.parse_args(argv)
  result = trace_only(args) if args.trace_only else run(args)
  print(json.dumps(result, indent=1))
  if args.out:
    pathlib.Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
  cli.run(main)
