"""Census of a compiled program's optimised HLO: where the bytes go, machine-independently.

Counts every top-level instruction once per execution (loop bodies x their trip counts, as
tmax_jax/hlo_cost.py does) and sorts it into a kind (dot, layout = copy/transpose only, scan
slices, convert-only, elementwise/reduce, materialised masks), with the bytes it reads and writes
and the model module it came from (from the op_name metadata: attention core, q/k/v/o projections,
MLP, norms, rotary, head). Use it to decide a change with counts and bytes instead of timings on a
busy machine; the top instructions name the op that produced them.

  python3 bench/hlo_census.py                       # model_fwd_bwd.py's fwd+bwd (default shapes)
  python3 bench/hlo_census.py --program train_step  # train_step.py's DPPO step
  python3 bench/hlo_census.py --unroll --remat full --top 40 --json census.json
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import pathlib
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from tmax_jax import cli
from tmax_jax import hlo_cost as H  # noqa: E402
from tmax_jax.models import ModelConfig, registry  # noqa: E402

# Module attribution: the first of these names found (right to left) in an op's op_name path.
MODULES = (
  ("q_norm", "qk_norm"),
  ("k_norm", "qk_norm"),
  ("input_layernorm", "norm"),
  ("post_attention_layernorm", "norm"),
  ("model/norm", "norm"),
  ("rotary", "rotary"),
  ("q_proj", "qkv_proj"),
  ("k_proj", "qkv_proj"),
  ("v_proj", "qkv_proj"),
  ("o_proj", "o_proj"),
  ("self_attn", "attention"),
  ("linear_attn", "linear_attn"),
  ("mlp", "mlp"),
  ("lm_head", "head"),
  ("embed_tokens", "embed"),
)
INTERESTING = (
  "dot",
  "transpose",
  "copy",
  "convert",
  "reduce",
  "exponential",
  "select",
  "compare",
  "dynamic-slice",
  "dynamic-update-slice",
  "broadcast",
  "scatter",
  "gather",
  "iota",
)
_OP_NAME = re.compile(r'op_name="([^"]*)"')


@dataclasses.dataclass
class Row:
  bytes: float
  count: float
  kind: str
  module: str
  name: str
  shape: str
  op_name: str
  seconds: float = 0.0


def _module(op_name: str) -> str:
  best, where = "other", -1
  for key, label in MODULES:
    i = op_name.rfind(key)
    if i > where:
      best, where = label, i
  return best


def _kind(ins, comps, types) -> str:
  """dot | layout | slice | convert | mask | elementwise | other (see the module docstring)."""
  ops = {ins.op}
  if ins.op == "fusion":
    fused = re.search(r"calls=%([\w.\-]+)", ins.rest).group(1)
    ops = {i.op for i in comps[fused] if i.op not in H._FREE}
  if ops & {"dot", "convolution"}:
    return "dot"
  if ins.type_text.startswith("pred[") and H.type_bytes(ins.type_text) > 1 << 16:
    return "mask"
  if ops <= {"copy", "transpose", "broadcast", "reshape"}:
    return "layout"
  if ops <= {"dynamic-slice", "dynamic-update-slice", "copy", "transpose", "broadcast", "reshape"}:
    return "slice"
  if ops <= {"convert", "broadcast", "reshape", "copy"}:
    return "convert"
  if ops & {
    "add",
    "multiply",
    "subtract",
    "divide",
    "exponential",
    "select",
    "reduce",
    "maximum",
    "rsqrt",
    "negate",
    "logistic",
    "log",
    "compare",
    "tanh",
  }:
    return "elementwise"
  return "other:" + ",".join(sorted(ops))[:40]


def census(hlo_text: str) -> tuple[list[Row], H.Cost]:
  """-> (one row per top-level instruction, loops multiplied out; total cost)."""
  comps, types, entry = H._parse(hlo_text)
  rows: list[Row] = []

  def walk(comp: str, mult: float) -> None:
    for ins in comps[comp]:
      if ins.op in ("while", "conditional", "call"):
        called, m, _ = H._called(ins)
        for c in called:
          if c in comps:
            walk(c, mult * m)
        continue
      if ins.op in H._FREE:
        continue
      op_name = _OP_NAME.search(ins.rest)
      op_name = op_name.group(1) if op_name else ""
      rows.append(
        Row(
          H._moved_bytes(ins, types[comp], comps, types) * mult,
          mult,
          _kind(ins, comps, types),
          _module(op_name),
          ins.name,
          ins.type_text[:48],
          op_name,
        )
      )

  walk(entry, 1.0)
  return rows, H.hlo_text_cost(hlo_text)


def summary(rows: list[Row], cost: H.Cost, top: int) -> dict:
  total = sum(r.bytes for r in rows) or 1.0

  def by(key):
    return {
      k: {
        "count": sum(r.count for r in v),
        "bytes": sum(r.bytes for r in v),
        "seconds": sum(r.seconds for r in v),
      }
      for k, v in _group(rows, key).items()
    }

  order = (lambda r: -r.seconds) if any(r.seconds for r in rows) else (lambda r: -r.bytes)
  return {
    "matmul_flops": cost.matmul_flops,
    "bytes": total,
    "seconds": sum(r.seconds for r in rows),
    "by_kind": by(lambda r: r.kind),
    "by_module": by(lambda r: r.module),
    "top": [dataclasses.asdict(r) for r in sorted(rows, key=order)[:top]],
  }


def _group(rows, key):
  out = collections.defaultdict(list)
  for r in rows:
    out[key(r)].append(r)
  return dict(out)


def print_summary(s: dict) -> None:
  total, secs = s["bytes"], s["seconds"] or 1.0
  timed = bool(s["seconds"])
  print(
    f"matmul FLOPs {s['matmul_flops']:.4g}   bytes (estimate) {total:.4g}"
    + (f"   profiled {s['seconds']:.3f} s per run" if timed else "")
  )
  for title in ("by_kind", "by_module"):
    print(
      f"\n{title[3:]:>14} {'count':>7} {'bytes':>10} {'share':>6}"
      + (" seconds share" if timed else "")
    )
    key = "seconds" if timed else "bytes"
    for k, v in sorted(s[title].items(), key=lambda kv: -kv[1][key]):
      line = f"{k[:14]:>14} {v['count']:7.0f} {v['bytes']:10.3e} {100 * v['bytes'] / total:5.1f}%"
      print(line + (f" {v['seconds']:7.3f} {100 * v['seconds'] / secs:5.1f}%" if timed else ""))
  print("\ntop instructions by " + ("time" if timed else "bytes") + " (x executions)")
  for r in s["top"]:
    where = "/".join(r["op_name"].replace("jit(", "").split("/")[-3:])
    t = f"{1e3 * r['seconds']:7.1f}ms " if timed else ""
    print(
      f"{t}{r['bytes']:9.2e} {100 * r['bytes'] / total:4.1f}% x{r['count']:<3.0f} "
      f"{r['kind'][:11]:11} {r['module'][:10]:10} {r['shape'][:36]:36} {r['name'][:22]:22} "
      f"{where[:50]}"
    )


def fwd_bwd_program(cfg: ModelConfig, batch: int, seq: int, chunk: int):
  """model_fwd_bwd.py's jitted value_and_grad -> (compiled, concrete random inputs)."""
  import model_fwd_bwd  # noqa: E402

  loss = model_fwd_bwd.loss_fn(cfg, batch, seq, chunk)
  tokens = jax.ShapeDtypeStruct((batch, seq), jnp.int32)
  compiled = (
    jax.jit(jax.value_and_grad(loss)).lower(registry.abstract_params(cfg), tokens).compile()
  )

  def inputs():
    rng = np.random.default_rng(0)
    return (
      registry.init_params(cfg, jax.random.key(0)),
      jnp.asarray(rng.integers(0, cfg.vocab_size, (batch, seq)), jnp.int32),
    )

  return compiled, inputs


def train_step_program(cfg: ModelConfig, batch: int, seq: int, chunk: int):
  """The real DPPO train step (compiled_flops.py's AOT lowering) -> (compiled, inputs)."""
  import compiled_flops  # noqa: E402
  import gpu_train_step  # noqa: E402

  from tmax_jax.train import TrainConfig
  from tmax_jax.train import step as step_lib

  compiled = compiled_flops.compile_train_step(cfg, batch, seq, chunk)

  def inputs():
    trainer = step_lib.Trainer(
      registry.build_model(cfg), cfg, TrainConfig(logprob_chunk_size=min(chunk, seq))
    )
    state = trainer.init_state(registry.init_params(cfg, jax.random.key(0)))
    return state, trainer.to_device(gpu_train_step.random_batch(cfg, batch, seq, 0))

  return compiled, inputs


def profile(compiled, inputs, rows: list[Row], runs: int) -> dict[str, float]:
  """Runs `compiled` `runs` times under jax.profiler and returns seconds per run by instruction
  name (XLA CPU traces each thunk under its HLO name; needs --xla_cpu_enable_xprof_traceme)."""
  args = inputs()
  return trace_seconds(lambda: jax.block_until_ready(compiled(*args)), rows, runs)


def trace_seconds(run, rows: list[Row], runs: int) -> dict[str, float]:
  """Seconds per call of `run()` (which blocks) by instruction name, over `runs` traced calls
  after one untraced call (for programs with donated inputs, whose `run` threads the state)."""
  import tempfile

  from jax._src.lib import _profile_data

  run()
  names = {r.name for r in rows}
  seconds: dict[str, float] = collections.Counter()
  with tempfile.TemporaryDirectory() as d:
    with jax.profiler.trace(d):
      for _ in range(runs):
        run()
    for path in pathlib.Path(d).rglob("*.xplane.pb"):
      for plane in _profile_data.ProfileData.from_file(str(path)).planes:
        for line in plane.lines:
          for ev in line.events:
            if ev.name in names:
              seconds[ev.name] += ev.duration_ns * 1e-9 / runs
  return dict(seconds)


def main(argv=None) -> dict:
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
  ap = cli.ArgumentParser(description=cli.description(__doc__))
  ap.add_argument(
    "--program", choices=("fwd_bwd", "train_step"), default="fwd_bwd", help="the program to compile"
  )
  ap.add_argument("--layers", type=int, default=4, help="decoder layers")
  ap.add_argument("--hidden", type=int, default=512, help="model width")
  ap.add_argument("--vocab", type=int, default=16384, help="vocabulary size")
  ap.add_argument("--batch", type=int, default=4, help="batch size")
  ap.add_argument("--seq", type=int, default=512, help="sequence length")
  ap.add_argument("--chunk", type=int, default=256, help="logprob chunk size")
  ap.add_argument("--remat", default="none", help="rematerialisation policy")
  ap.add_argument("--unroll", action="store_true", help="unrolled layers (default: scanned)")
  ap.add_argument("--attention_impl", default=None, help="ModelConfig.attention_impl, if any")
  ap.add_argument("--dtype", default="float32", help="compute dtype")
  ap.add_argument(
    "--profile",
    type=int,
    default=0,
    help="also run it N times under jax.profiler and attribute the time",
  )
  ap.add_argument("--top", type=int, default=25, help="ops to list")
  ap.add_argument("--hlo", default=None, help="also write the optimised HLO text here")
  ap.add_argument("--json", default=None, help="JSON output path")
  args = ap.parse_args(argv)
  if args.profile:  # read when the CPU backend starts, i.e. before the first compile
    os.environ["XLA_FLAGS"] = (
      os.environ.get("XLA_FLAGS", "") + " --xla_cpu_enable_xprof_traceme=true"
    )
  extra = {} if args.attention_impl is None else {"attention_impl": args.attention_impl}
  cfg = ModelConfig(
    vocab_size=args.vocab,
    hidden_size=args.hidden,
    intermediate_size=3 * args.hidden,
    num_hidden_layers=args.layers,
    num_attention_heads=8,
    num_key_value_heads=4,
    head_dim=args.hidden // 8,
    tie_word_embeddings=False,
    scan_layers=not args.unroll,
    remat_policy=args.remat,
    **extra,
  ).with_dtypes(compute_dtype=args.dtype)
  program = fwd_bwd_program if args.program == "fwd_bwd" else train_step_program
  compiled, inputs = program(cfg, args.batch, args.seq, args.chunk)
  text = compiled.as_text()
  if args.hlo:
    pathlib.Path(args.hlo).write_text(text)
  rows, cost = census(text)
  if args.profile:
    seconds = profile(compiled, inputs, rows, args.profile)
    for r in rows:  # an instruction inside a loop appears once, its time covers every trip
      r.seconds = seconds.get(r.name, 0.0)
  s = summary(rows, cost, args.top)
  print_summary(s)
  if args.json:
    pathlib.Path(args.json).write_text(json.dumps(s, indent=1))
  return s


if __name__ == "__main__":
  cli.run(main)
