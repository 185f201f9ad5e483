"""Forward+backward time of our Gated DeltaNet layer (chunked rule) vs transformers' torch layer.

Both run `Qwen3_5GatedDeltaNet` semantics in fp32 on CPU from identical weights: the torch module
uses its reference `torch_chunk_gated_delta_rule` fallback (no flash-linear-attention here), ours
the jitted chunked rule. The step is loss = sum(out * cotangent) and its gradient w.r.t. the input
and every layer weight. Outputs are checked equal (1e-4 relative) before timing, then both sides are
timed with report.compare (a warm-up each, >= 5 alternated pairs). Prints a markdown row; --append
adds it to BENCHMARKS.md unless the machine was busy.

  python3 bench/gated_delta_bench.py --append BENCHMARKS.md [--seq 512 --batch 2 --hidden 256]
"""

from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import report  # bench/report.py (the script's directory is on sys.path)
import torch
import transformers
from transformers.models.qwen3_5 import modeling_qwen3_5 as hf_mod

from tmax_jax import cli
from tmax_jax.models import from_hf_config
from tmax_jax.models.qwen3_5 import GatedDeltaNet


def hf_config(args) -> transformers.Qwen3_5TextConfig:
  return transformers.Qwen3_5TextConfig(
    hidden_size=args.hidden,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=args.hidden // 4,
    linear_num_key_heads=args.k_heads,
    linear_num_value_heads=args.v_heads,
    linear_key_head_dim=args.head_dim,
    linear_value_head_dim=args.head_dim,
    vocab_size=256,
  )


def torch_params_to_ours(module) -> dict:
  sd = {k: v.detach().numpy() for k, v in module.state_dict().items()}

  def dense(name):
    return {"kernel": sd[f"{name}.weight"].T}

  return {
    name: dense(name) for name in ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj")
  } | {
    "conv1d": {"kernel": sd["conv1d.weight"]},
    "dt_bias": sd["dt_bias"],
    "A_log": sd["A_log"],
    "norm": {"scale": sd["norm.weight"]},
  }


def main(argv=None) -> dict:
  parser = cli.ArgumentParser(description=cli.description(__doc__))
  parser.add_argument("--hidden", type=int, default=512, help="model width")
  parser.add_argument("--k_heads", type=int, default=4, help="key heads")
  parser.add_argument("--v_heads", type=int, default=8, help="value heads")
  parser.add_argument("--head_dim", type=int, default=64, help="head dimension")
  parser.add_argument("--seq", type=int, default=1024, help="sequence length")
  parser.add_argument("--batch", type=int, default=2, help="batch size")
  parser.add_argument(
    "--chunk", type=int, default=64, help="chunk length of the chunked delta rule"
  )
  parser.add_argument(
    "--pairs", type=int, default=report.MIN_PAIRS, help="alternated ours/theirs pairs"
  )
  parser.add_argument("--tiny", action="store_true", help="tiny shapes (tests)")
  parser.add_argument(
    "--append",
    type=pathlib.Path,
    default=None,
    help="BENCHMARKS.md to append the row to (quiet machine only)",
  )
  args = parser.parse_args(argv)
  if args.tiny:
    vars(args).update(hidden=64, k_heads=2, v_heads=4, head_dim=16, seq=64, batch=1, chunk=16)

  torch.manual_seed(0)
  hf_cfg = hf_config(args)
  ref = hf_mod.Qwen3_5GatedDeltaNet(hf_cfg, layer_idx=0).float().train()
  cfg = from_hf_config(hf_cfg.to_dict())
  spec = cfg.family_config.__class__(**{**cfg.family_config.__dict__, "chunk_size": args.chunk})
  ours = GatedDeltaNet(spec, cfg.rms_norm_eps)
  params = torch_params_to_ours(ref)
  rng = np.random.default_rng(0)
  x = rng.normal(size=(args.batch, args.seq, args.hidden)).astype(np.float32)
  cot = rng.normal(size=x.shape).astype(np.float32)
  pos = jnp.broadcast_to(jnp.arange(args.seq, dtype=jnp.int32), x.shape[:2])
  seg = jnp.ones(x.shape[:2], jnp.int32)

  def loss(p, xx):
    out, _ = ours.apply({"params": p}, xx, pos, seg)
    return jnp.sum(out * cot), out

  grad = jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))
  x_t, cot_t = torch.from_numpy(x).requires_grad_(True), torch.from_numpy(cot)

  def torch_step():
    ref.zero_grad(set_to_none=True)
    x_t.grad = None
    out = ref(x_t)
    (out * cot_t).sum().backward()
    return out.detach().numpy()

  (_, ours_out), _ = grad(params, x)
  theirs_out = torch_step()
  err = np.abs(np.asarray(ours_out) - theirs_out).max() / np.abs(theirs_out).max()
  if err > 1e-4:
    raise SystemExit(f"outputs differ: max rel err {err:.2e}")
  c = report.compare(lambda: jax.block_until_ready(grad(params, x)), torch_step, pairs=args.pairs)
  config = (
    f"GatedDeltaNet D={args.hidden} K={args.k_heads} N={args.v_heads} H={args.head_dim} "
    f"B={args.batch} T={args.seq} chunk={args.chunk} fp32"
  )
  report.record_comparison(
    args.append,
    "bench/gated_delta_bench.py",
    HEADING,
    [config, f"{c.ours_median_s:.3f}", f"{c.theirs_median_s:.3f}"],
    c,
  )
  return c.as_dict()


HEADING = (
  "\n## Gated DeltaNet layer forward+backward on CPU (bench/gated_delta_bench.py)\n\n"
  "Seconds per step (grads w.r.t. input and all layer weights), medians over alternated pairs; "
  "transformers runs its torch fallback `torch_chunk_gated_delta_rule`; ratio = median per-pair "
  "torch / ours (> 1: ours faster) with its min-max.\n\n"
  "| when (UTC) | config | ours s | transformers s | ratio | setup |\n"
  "|---|---|---|---|---|---|\n"
)


if __name__ == "__main__":
  cli.run(main)
