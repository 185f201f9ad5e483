"""Compiled-FLOP accounting, independent of the machine: the train step of the Qwen3-1.7B shape at
B x S = 4 x 4096 (AOT-compiled for CPU from abstract inputs, nothing allocated) per remat policy,
and one decode step of the serving engine. Reports compiled matmul FLOPs / model FLOPs and bytes
accessed per token (tmax_jax/hlo_cost.py: loops counted by their trip counts).

Model FLOPs: train = 6 x matmul params (incl. the head) x tokens + causal attention 6 L T N H per
token (train/step.flops_per_token); decode = 2 x matmul params per sequence + attention over the
live context (4 x L x N x H x context).

  python bench/compiled_flops.py [--policies none,full] [--out r.json] [--write
  bench/compiled_flops.json] python bench/compiled_flops.py --tiny     # a tiny config (tests)
"""

from __future__ import annotations

import json
import pathlib
import sys

import jax
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from tmax_jax import cli, hlo_cost  # noqa: E402
from tmax_jax.models import ModelConfig, registry  # noqa: E402
from tmax_jax.models.qwen import qwen3  # noqa: E402
from tmax_jax.train import TrainConfig  # noqa: E402
from tmax_jax.train import state as state_lib  # noqa: E402
from tmax_jax.train import step as step_lib  # noqa: E402

RECORDED = pathlib.Path(__file__).resolve().parent / "compiled_flops.json"
TINY = dict(
  vocab_size=512,
  hidden_size=64,
  intermediate_size=128,
  num_hidden_layers=2,
  num_attention_heads=4,
  num_key_value_heads=2,
  head_dim=16,
)


def model_config(tiny: bool, remat: str) -> ModelConfig:
  if tiny:
    return ModelConfig(**TINY, remat_policy=remat)
  cfg = qwen3("1.7b", remat_policy=remat)
  return cfg.with_dtypes(param_dtype="float32", compute_dtype="bfloat16", head_dtype="float32")


def _abstract(tree):
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)


def compile_train_step(cfg: ModelConfig, batch: int, seq: int, chunk: int):
  """AOT-compiles the real DPPO train step (Trainer's step function) from abstract inputs."""
  from tmax_jax.train import batch as batch_lib

  tcfg = TrainConfig(logprob_chunk_size=min(chunk, seq))
  model = registry.build_model(cfg)
  trainer = step_lib.Trainer(model, cfg, tcfg)
  params = registry.abstract_params(cfg)
  state = state_lib.TrainState(
    params,
    jax.eval_shape(trainer.optimizer.init, params),
    jax.ShapeDtypeStruct((), np.int32),
    jax.ShapeDtypeStruct((2,), np.uint32),
  )
  fields = {
    k: (np.int32 if k in ("tokens", "positions", "segment_ids", "targets") else np.float32)
    for k in (
      "tokens",
      "positions",
      "segment_ids",
      "targets",
      "loss_mask",
      "behaviour_logp",
      "advantages",
    )
  }
  abstract_batch = batch_lib.TrainBatch(
    **{k: jax.ShapeDtypeStruct((batch, seq), dt) for k, dt in fields.items()}
  )
  step_fn = step_lib.make_step_fn(model, cfg, tcfg, trainer.optimizer)
  return jax.jit(step_fn).lower(state, abstract_batch).compile()


def train_step_cost(cfg: ModelConfig, batch: int, seq: int, chunk: int) -> dict:
  """Compiled matmul FLOPs / model FLOPs and bytes per token of the train step."""
  cost = hlo_cost.compiled_cost(compile_train_step(cfg, batch, seq, chunk))
  tokens = batch * seq
  model_flops = step_lib.flops_per_token(cfg, seq) * tokens
  return {
    "what": "train_step",
    "remat": cfg.remat_policy,
    "batch": batch,
    "seq": seq,
    "compiled_matmul_flops": cost.matmul_flops,
    "model_flops": model_flops,
    "ratio": cost.matmul_flops / model_flops,
    "bytes_per_token": cost.bytes_accessed / tokens,
  }


def decode_model_flops(cfg: ModelConfig, slots: int, context: int) -> float:
  """2 x matmul params per sequence + QK^T and AV over `context` cached tokens."""
  d, f, layers = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
  qo = 2 * d * cfg.num_attention_heads * cfg.head_dim
  kv = 2 * d * cfg.num_key_value_heads * cfg.head_dim
  dense = layers * (qo + kv + 3 * d * f) + d * cfg.vocab_size
  attn = 4 * layers * cfg.num_attention_heads * cfg.head_dim * context
  return float(slots * (2 * dense + attn))


def decode_step_cost(cfg: ModelConfig, slots: int, max_len: int, unrolled: bool = False) -> dict:
  """One decode step of the engine's paged decode core, every slot's table at max_len, served
  scanned (the default) or unrolled (decode.CoreShape.unrolled)."""
  from tmax_jax.inference import decode

  shape = decode.CoreShape(
    slots=slots,
    max_len=max_len,
    page_size=16,
    num_pages=slots * -(-max_len // 16),
    unrolled=unrolled,
  )
  core = decode.PagedCore(cfg, shape)
  params = registry.abstract_params(cfg)
  served = core.prepare.eval_shape(params)
  state = jax.eval_shape(core.init_state)
  table = jax.ShapeDtypeStruct((slots, shape.max_pages), np.int32)
  compiled = core.decode.lower(served, state, table, jax.ShapeDtypeStruct((), np.int32)).compile()
  cost = hlo_cost.compiled_cost(compiled)
  model_flops = decode_model_flops(cfg, slots, max_len)
  return {
    "what": "decode_step",
    "layers": "unrolled" if unrolled else "scanned",
    "slots": slots,
    "max_len": max_len,
    "compiled_matmul_flops": cost.matmul_flops,
    "model_flops": model_flops,
    "ratio": cost.matmul_flops / model_flops,
    "bytes_per_token": cost.bytes_accessed / slots,
  }


def _key(row: dict) -> str:
  """compiled_flops.json's key of a row: train_step:<remat>, decode_step:none (the default,
  scanned layers) or decode_step:unrolled."""
  if row["what"] == "train_step":
    return f"train_step:{row['remat']}"
  return "decode_step:none" if row["layers"] == "scanned" else "decode_step:unrolled"


def main(argv=None) -> list[dict]:
  ap = cli.ArgumentParser(description=cli.description(__doc__))
  ap.add_argument(
    "--policies", default="none,full", help="comma-separated remat policies to compile"
  )
  ap.add_argument("--batch", type=int, default=4, help="train-step batch")
  ap.add_argument("--seq", type=int, default=4096, help="train-step sequence length")
  ap.add_argument("--chunk", type=int, default=1024, help="logprob chunk size")
  ap.add_argument("--slots", type=int, default=64, help="decode slots")
  ap.add_argument("--max_len", type=int, default=4096, help="decode max_len (KV cache length)")
  ap.add_argument("--decode_layers", default="scanned", help="scanned,unrolled: decode rows")
  ap.add_argument("--tiny", action="store_true", help="tiny shapes (tests)")
  ap.add_argument("--out", default=None, help="JSON output path")
  ap.add_argument("--write", default=None, help="record the ratios here (the guard test reads it)")
  args = ap.parse_args(argv)
  b, s = (2, 64) if args.tiny else (args.batch, args.seq)
  rows = [
    train_step_cost(model_config(args.tiny, p), b, s, args.chunk) for p in args.policies.split(",")
  ]
  slots, max_len = (2, 64) if args.tiny else (args.slots, args.max_len)
  for layers in args.decode_layers.split(","):
    rows.append(
      decode_step_cost(model_config(args.tiny, "none"), slots, max_len, layers == "unrolled")
    )
  shape = "tiny" if args.tiny else "Qwen3-1.7B"
  for r in rows:
    where = (
      f"train B x S = {r['batch']} x {r['seq']}, remat={r['remat']}"
      if r["what"] == "train_step"
      else f"decode, {r['slots']} slots x {r['max_len']}, {r['layers']} layers"
    )
    print(
      f"| {shape} {where} | {r['compiled_matmul_flops']:.4g} | {r['model_flops']:.4g} | "
      f"{r['ratio']:.3f} | {r['bytes_per_token']:.3g} |"
    )
  if args.out:
    pathlib.Path(args.out).write_text(json.dumps(rows, indent=1))
  if args.write:
    pathlib.Path(args.write).write_text(
      json.dumps({_key(r): r["ratio"] for r in rows}, indent=1) + "\n"
    )
  return rows


if __name__ == "__main__":
  cli.run(main)
