"""Long-context train step on CPU: compiled temp memory and tokens/s against sequence length.

For a small dense Qwen3 and a small Qwen3.5 (3 Gated DeltaNet + 1 gated attention layers), each
T in --seqs (default 2k, 8k, 32k) and each attention kernel (reference, blockwise), the full DPPO
train step is compiled for one packed row; its `memory_analysis()` temp bytes are recorded
(machine-independent: what XLA plans, per device) and, unless --memory_only, the step is run and
timed (tokens/s; the reference is only run where its [T, T] scores fit --max_run_gb). Then the
blockwise step with the row split over a `sequence` mesh axis of 1, 2 and 4 fake CPU devices
(memory per device; the fake devices share the host's cores, so their tokens/s only shows that it
runs). One JSON line per measurement in --out (default $OUT/long_context.jsonl, else
./long_context.jsonl) and a markdown table on stdout.

  python3 bench/long_context.py                      # the full table (takes a while on 2 cores)
  python3 bench/long_context.py --memory_only        # compile-only: the memory columns
  python3 bench/long_context.py --tiny               # small T, checks the script (tests run it)
"""

from __future__ import annotations

import json
import os
import pathlib
import sys

# 8 fake devices, as the tests use (the largest sequence axis here is 4).
if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
  ).strip()

import jax  # noqa: E402  (after XLA_FLAGS)
import numpy as np  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import report  # noqa: E402  (bench/report.py)

from tmax_jax import cli, sharding  # noqa: E402
from tmax_jax.models import ModelConfig, registry  # noqa: E402
from tmax_jax.models.qwen3_5 import Qwen3_5Config  # noqa: E402
from tmax_jax.train import TrainConfig  # noqa: E402
from tmax_jax.train import batch as batch_lib  # noqa: E402
from tmax_jax.train import state as state_lib  # noqa: E402
from tmax_jax.train import step as step_lib  # noqa: E402

SEQS = (2048, 8192, 32768)
TINY_SEQS = (256, 1024)
SEQUENCE_AXES = (1, 2, 4)


def small_models(tiny: bool = False) -> dict[str, ModelConfig]:
  """name -> config: a small dense Qwen3 and a small Qwen3.5 of the same widths (fp32)."""
  d, layers, heads, kv, h, v = (32, 2, 4, 2, 8, 64) if tiny else (256, 4, 8, 2, 32, 4096)
  dense = ModelConfig(
    vocab_size=v,
    hidden_size=d,
    intermediate_size=2 * d,
    num_hidden_layers=layers,
    num_attention_heads=heads,
    num_key_value_heads=kv,
    head_dim=h,
    tie_word_embeddings=False,
    remat_policy="full",
  )
  types = ("linear_attention",) * (layers - 1) + ("full_attention",)
  fam = Qwen3_5Config(
    layer_types=types,
    linear_key_head_dim=h,
    linear_value_head_dim=h,
    linear_num_key_heads=kv,
    linear_num_value_heads=heads,
  )
  qwen3_5 = dense.replace(
    model_type="qwen3_5_text",
    norm_zero_centered=True,
    attn_output_gate=True,
    partial_rotary_factor=0.25,
    family_config=fam,
  )
  return {"dense": dense, "qwen3_5": qwen3_5}


def random_rows(cfg: ModelConfig, b: int, t: int, seed: int = 0) -> batch_lib.TrainBatch:
  """b rows of length t, each packed with three trajectories of uneven length (DPPO inputs)."""
  rng = np.random.default_rng(seed)
  trajs = []
  for _ in range(b):
    for n in (t // 2, t // 3, t - t // 2 - t // 3):
      trajs.append(
        batch_lib.Trajectory(
          tokens=rng.integers(0, cfg.vocab_size, n),
          loss_mask=(np.arange(n) >= n // 10) * 1.0,
          behaviour_logp=-np.log(cfg.vocab_size) + rng.uniform(-0.5, 0.5, n),
          advantage=float(rng.choice([-1.0, 1.0])),
        )
      )
  return batch_lib.pack(trajs, t, num_rows=b)


def _abstract(tree):
  return jax.tree.map(
    lambda x: jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype) if x is not None else None,
    tree,
  )


def compiled_step(cfg: ModelConfig, t: int, b: int = 1, mesh=None, tcfg: TrainConfig | None = None):
  """-> (compiled train step, Trainer) for [b, t] batches (under `mesh` when given)."""
  tcfg = tcfg or TrainConfig(logprob_chunk_size=min(512, t))
  model = registry.build_model(cfg)
  trainer = step_lib.Trainer(model, cfg, tcfg, mesh)
  params = registry.abstract_params(cfg)
  state = state_lib.TrainState(
    params,
    jax.eval_shape(trainer.optimizer.init, params),
    jax.ShapeDtypeStruct((), np.int32),
    jax.ShapeDtypeStruct((2,), np.uint32),
  )
  batch = _abstract(random_rows(cfg, b, t))
  fn = step_lib.make_step_fn(model, cfg, tcfg, trainer.optimizer, mesh)
  if mesh is None:
    return jax.jit(fn).lower(state, batch).compile(), trainer
  with sharding.use_mesh(mesh, cfg.logical_axis_rules):
    return jax.jit(fn).lower(state, batch).compile(), trainer


def temp_bytes(cfg: ModelConfig, t: int, b: int = 1, mesh=None) -> int:
  """Compiled temp memory (bytes per device) of the train step on [b, t] rows."""
  compiled, _ = compiled_step(cfg, t, b, mesh)
  return int(compiled.memory_analysis().temp_size_in_bytes)


def sequence_mesh(n: int):
  return sharding.make_mesh(data=1, fsdp=1, sequence=n, devices=jax.devices()[:n])


def tokens_per_s(cfg: ModelConfig, t: int, repeats: int, mesh=None) -> float:
  """Median train-step throughput on one packed row (after a compile / warm-up step)."""
  tcfg = TrainConfig(logprob_chunk_size=min(512, t))
  trainer = step_lib.Trainer(registry.build_model(cfg), cfg, tcfg, mesh)
  shardings = None if mesh is None else registry.param_shardings(cfg, mesh)
  box = {"state": trainer.init_state(registry.init_params(cfg, jax.random.key(0), shardings))}
  batch = random_rows(cfg, 1, t)

  def one():
    box["state"], _ = trainer.step(box["state"], batch)

  median, _ = report.time_it(one, repeats)
  return t / median


def rows(args) -> list[dict]:
  seqs = TINY_SEQS if args.tiny else tuple(args.seqs)
  out = []
  for name, base in small_models(args.tiny).items():
    for impl in ("reference", "blockwise"):
      cfg = base.replace(attention_impl=impl)
      for t in seqs:
        row = {
          "model": name,
          "impl": impl,
          "T": t,
          "sequence": 1,
          "temp_mib": temp_bytes(cfg, t) / 2**20,
        }
        scores_gb = 4 * cfg.num_attention_heads * t * t / 1e9
        if not args.memory_only and (impl != "reference" or scores_gb <= args.max_run_gb):
          row["tokens_per_s"] = tokens_per_s(cfg, t, args.repeats)
        out.append(row)
        print(json.dumps(row), flush=True)
    cfg = base.replace(attention_impl="blockwise")
    for n in SEQUENCE_AXES:
      t = seqs[-1]
      mesh = sequence_mesh(n)
      row = {
        "model": name,
        "impl": "blockwise",
        "T": t,
        "sequence": n,
        "temp_mib": temp_bytes(cfg, t, mesh=mesh) / 2**20,
      }
      if not args.memory_only:
        row["tokens_per_s"] = tokens_per_s(cfg, t, args.repeats, mesh)
      out.append(row)
      print(json.dumps(row), flush=True)
  return out


def table(results: list[dict]) -> str:
  lines = [
    "| model | kernel | T | sequence | temp MiB / device | tokens/s |",
    "|---|---|---|---|---|---|",
  ]
  for r in results:
    tps = f"{r['tokens_per_s']:.0f}" if "tokens_per_s" in r else "-"
    lines.append(
      f"| {r['model']} | {r['impl']} | {r['T']} | {r['sequence']} | {r['temp_mib']:.1f} | {tps} |"
    )
  return "\n".join(lines)


def main(argv=None) -> None:
  ap = cli.ArgumentParser(description=cli.description(__doc__))
  ap.add_argument("--tiny", action="store_true", help="small T (the test's smoke run)")
  ap.add_argument("--seqs", type=int, nargs="+", default=list(SEQS), help="sequence lengths")
  ap.add_argument("--memory_only", action="store_true", help="compile only, no timed steps")
  ap.add_argument("--repeats", type=int, default=3, help="timed steps per length")
  ap.add_argument(
    "--max_run_gb",
    type=float,
    default=4.0,
    help="run the reference only where its fp32 scores of one layer fit this",
  )
  ap.add_argument(
    "--out", default=None, help="JSONL output path (default: $OUT/long_context.jsonl)"
  )
  args = ap.parse_args(argv)
  out = pathlib.Path(args.out or os.path.join(os.environ.get("OUT", "."), "long_context.jsonl"))
  results = rows(args)
  with out.open("a") as f:
    for r in results:
      f.write(json.dumps({**r, "load_1min": report.load_average()}) + "\n")
  print(table(results))


if __name__ == "__main__":
  cli.run(main)
