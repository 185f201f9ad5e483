"""Parity of every attention kernel this machine can run against the reference (values and grads).

Inputs are packed rows with padding and an odd length (GQA heads): several segments per row, a
padded tail, one row that is a single segment. Checked on live query rows:
  blockwise  always; fp32 against the fp32 reference, tolerance 1e-5
  ring       when >= 2 devices: blockwise tiles over a `sequence` mesh axis, fp32, 1e-5
  cudnn      on a GPU: the bf16 kernel vs the fp32 reference on the same inputs (bf16 tol.)
  splash     on a TPU (bf16 as cudnn), or with --interpret (Pallas interpreter, fp32 1e-5)
Each kernel prints `ok`, `skipped: <reason>` or `FAILED` with its worst errors; one JSON line per
kernel goes to --out (default $OUT/attention_parity.jsonl, else ./attention_parity.jsonl); exit
code 1 on a failure.

  python3 bench/attention_parity.py              # accelerator shapes (T=4096, 16 heads, H=128/256)
  python3 bench/attention_parity.py --tiny       # small CPU shapes (what the test runs)
  python3 bench/attention_parity.py --tiny --interpret  # + splash in the interpreter (slow)
"""

from __future__ import annotations

import json
import os
import pathlib

import jax
import jax.numpy as jnp
import numpy as np

from tmax_jax import cli, sharding
from tmax_jax.models import attention
from tmax_jax.models.attention import blockwise, reference, ring

SHAPES = {  # name: (B, T, N, K, H, block)
  "tiny": [(2, 37, 4, 2, 8, 16)],
  "tiny_splash": [(2, 200, 4, 2, 128, 128)],  # the kernel's lanes need H, T blocks of 128
  "accelerator": [(2, 4096, 16, 4, 128, 512), (1, 4096, 16, 4, 256, 512)],
}
FP32_TOL = 1e-5
BF16_TOL = 2e-2  # relative to the largest reference magnitude


def packed_inputs(b: int, t: int, n: int, k: int, h: int, dtype, seed: int = 0):
  """q, k, v, positions, segment_ids, live [B,T] of packed rows: row 0 holds three segments and a
  padded tail, row 1 is one segment over the whole row."""
  rng = np.random.default_rng(seed)
  seg = np.ones((b, t), np.int32)
  seg[0, t // 4 :] = 2
  seg[0, t // 2 :] = 3
  seg[0, t - t // 5 :] = 0
  seg = jnp.asarray(seg)
  pos = reference.segment_positions(seg)
  q, kk, v = (jnp.asarray(rng.normal(size=(b, t, heads, h)), dtype) for heads in (n, k, k))
  return q, kk, v, pos, seg, seg != 0


def _loss(fn, w, live):
  return lambda q, k, v: jnp.sum(jnp.where(live[..., None, None], fn(q, k, v) * w, 0.0))


def compare(fn, case, tol: float, rel: bool) -> dict:
  """Values and grads of `fn(q, k, v)` against the fp32 reference on live rows -> errors dict."""
  q, k, v, pos, seg, live = case
  f32 = [x.astype(jnp.float32) for x in (q, k, v)]
  mask = reference.attention_mask(pos, seg, pos, seg)

  def ref(q, k, v):
    return reference.dot_product_attention(q, k, v, mask)

  w = jnp.asarray(np.random.default_rng(1).normal(size=q.shape), jnp.float32)
  got = [jax.jit(fn)(q, k, v)] + list(jax.jit(jax.grad(_loss(fn, w, live), (0, 1, 2)))(q, k, v))
  want = [ref(*f32)] + list(jax.grad(_loss(ref, w, live), (0, 1, 2))(*f32))
  keep = np.asarray(live)[..., None, None]
  errs = {}
  for name, a, b in zip(("out", "dq", "dk", "dv"), got, want, strict=True):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    if name == "out":
      a, b = np.where(keep, a, 0), np.where(keep, b, 0)
    err = float(np.max(np.abs(a - b)))
    errs[name] = err / float(np.max(np.abs(b))) if rel else err
  errs["ok"] = all(errs[x] <= tol for x in ("out", "dq", "dk", "dv"))
  return errs


def check_kernel(name: str, shapes, dtype, tol: float, rel: bool, fn_for) -> dict:
  results = []
  for b, t, n, k, h, block in shapes:
    case = packed_inputs(b, t, n, k, h, dtype)
    errs = compare(fn_for(case, block), case, tol, rel)
    results.append({"shape": [b, t, n, k, h], "block": block, **errs})
  ok = all(r["ok"] for r in results)
  return {
    "kernel": name,
    "status": "ok" if ok else "FAILED",
    "dtype": jnp.dtype(dtype).name,
    "tolerance": tol,
    "relative": rel,
    "cases": results,
  }


def run(tiny: bool, interpret: bool) -> list[dict]:
  platform = jax.default_backend()
  shapes = SHAPES["tiny" if tiny else "accelerator"]
  out = [
    check_kernel(
      "blockwise",
      shapes,
      jnp.float32,
      FP32_TOL,
      False,
      lambda c, blk: (
        lambda q, k, v: blockwise.attention(
          q, k, v, c[3], c[4], c[3], c[4], block_q=blk, block_k=blk
        )
      ),
    )
  ]
  devices = jax.devices()
  if len(devices) >= 2:
    mesh = sharding.make_mesh(fsdp=1, sequence=2, devices=devices[:2])
    ring_shapes = [(b, t + t % 2, n, k, h, blk) for b, t, n, k, h, blk in shapes]  # T even
    with sharding.use_mesh(mesh, ()):
      out.append(
        check_kernel(
          "ring",
          ring_shapes,
          jnp.float32,
          FP32_TOL,
          False,
          lambda c, blk: (
            lambda q, k, v: ring.attention(q, k, v, c[3], c[4], block_q=blk, block_k=blk)
          ),
        )
      )
  else:
    out.append({"kernel": "ring", "status": "skipped: one device (needs >= 2)"})
  if platform == "gpu":
    out.append(
      check_kernel(
        "cudnn",
        shapes,
        jnp.bfloat16,
        BF16_TOL,
        True,
        lambda c, blk: lambda q, k, v: attention.self_attention(q, k, v, c[3], c[4], impl="cudnn"),
      )
    )
  else:
    out.append({"kernel": "cudnn", "status": f"skipped: needs a GPU (platform is {platform})"})
  if platform == "tpu" or interpret:
    splash_shapes = SHAPES["tiny_splash"] if tiny else shapes
    dtype, tol, rel = (
      (jnp.float32, FP32_TOL, False) if platform != "tpu" else (jnp.bfloat16, BF16_TOL, True)
    )
    out.append(
      check_kernel(
        "splash",
        splash_shapes,
        dtype,
        tol,
        rel,
        lambda c, blk: (
          lambda q, k, v: attention.self_attention(q, k, v, c[3], c[4], impl="splash", q_chunk=blk)
        ),
      )
    )
  else:
    out.append(
      {
        "kernel": "splash",
        "status": f"skipped: needs a TPU or --interpret (platform is {platform})",
      }
    )
  return out


def main(argv=None) -> int:
  parser = cli.ArgumentParser(description=cli.description(__doc__))
  parser.add_argument("--tiny", action="store_true", help="small CPU shapes")
  parser.add_argument(
    "--interpret",
    action="store_true",
    help="also check splash through the Pallas interpreter (off TPU)",
  )
  parser.add_argument("--out", default=None, help="JSONL output path")
  args = parser.parse_args(argv)
  out_path = pathlib.Path(
    args.out or os.path.join(os.environ.get("OUT", "."), "attention_parity.jsonl")
  )
  results = run(args.tiny, args.interpret)
  with out_path.open("a") as f:
    for r in results:
      f.write(json.dumps(r) + "\n")
  for r in results:
    worst = (
      {k: max(c[k] for c in r["cases"]) for k in ("out", "dq", "dk", "dv")}
      if ("cases" in r)
      else {}
    )
    print(f"{r['kernel']:10s} {r['status']}" + (f"  max err {worst}" if worst else ""))
  return 1 if any(r["status"] == "FAILED" for r in results) else 0


if __name__ == "__main__":
  cli.run(main)
