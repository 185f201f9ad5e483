"""XLA:CPU's fp32 matmul vs torch's at the shapes the CPU benches' models multiply.

Issue 18's profiles put most of our decode step and of our forward+backward in dots. This bench
asks how fast the compiler's GEMM is at exactly those shapes, apart from everything else: ours =
one jitted program computing sum_i x @ w_i over `--weights` distinct weight matrices (one program
per call, so the jit dispatch is amortised over the dots; the adds are M x N each, <1% of the
FLOPs), theirs = the same sum in eager torch (its default intra-op threads). Timed side by side with
report.compare (a warm-up each, >= 5 alternated pairs); one row per shape. A ratio < 1 at a shape
where a bench spends its time bounds what that bench's ratio can reach without a different GEMM.

  python3 bench/cpu_gemm.py --append BENCHMARKS.md [--shapes 64x256x8192,2048x512x1536]
"""

from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import report  # bench/report.py (the script's directory is on sys.path)
import torch

from tmax_jax import cli

# M x K x N: serve_bench's decode step at B=64 (Qwen3 d=256, F=768, V=8192: q/o, MLP up, MLP down,
# head), model_fwd_bwd's forward at B x T = 4 x 512 (d=512, F=1536, V=16384) and its MLP weight
# gradients (x^T dy).
DEFAULT_SHAPES = ",".join(
  [
    *("64x256x256", "64x256x768", "64x768x256", "64x256x8192"),
    *("2048x512x512", "2048x512x1536", "2048x1536x512", "2048x512x16384"),
    *("512x2048x1536", "1536x2048x512"),
  ]
)

HEADING = (
  "\n## CPU GEMM: XLA vs torch at the benches' shapes (bench/cpu_gemm.py)\n\n"
  "| when (UTC) | M x K x N (weights) | XLA GFLOP/s | torch GFLOP/s | ratio | setup |\n"
  "|---|---|---|---|---|---|\n"
)


def parse_shape(text: str) -> tuple[int, int, int]:
  try:
    m, k, n = (int(v) for v in text.lower().split("x"))
  except ValueError as err:
    raise SystemExit(f"--shapes: {text!r}; expected MxKxN, e.g. 64x256x8192") from err
  return m, k, n


def sides(m: int, k: int, n: int, weights: int, work_flops: float, seed: int = 0):
  """(ours, theirs, flops per call): both compute sum_i x @ w_i `reps` times per call, `reps`
  chosen so that a call does about `work_flops`."""
  rng = np.random.default_rng(seed)
  x = rng.standard_normal((m, k), np.float32)
  ws = [rng.standard_normal((k, n), np.float32) for _ in range(weights)]
  reps = max(1, round(work_flops / (2 * m * k * n * weights)))

  program = jax.jit(lambda a, *w: sum(a @ wi for wi in w))
  xj, wj = jnp.asarray(x), [jnp.asarray(w) for w in ws]
  xt, wt = torch.from_numpy(x), [torch.from_numpy(w) for w in ws]
  expected = program(xj, *wj)
  got = sum(xt @ w for w in wt).numpy()
  np.testing.assert_allclose(np.asarray(expected), got, rtol=1e-4, atol=1e-3 * np.sqrt(k))

  def ours():
    for _ in range(reps):
      out = program(xj, *wj)
    return out.block_until_ready()

  def theirs():
    for _ in range(reps):
      out = sum(xt @ w for w in wt)
    return out

  return ours, theirs, 2.0 * m * k * n * weights * reps


def main(argv=None) -> list[dict]:
  parser = cli.ArgumentParser(description=cli.description(__doc__))
  parser.add_argument(
    "--shapes", default=DEFAULT_SHAPES, help="comma-separated MxKxN matmul shapes"
  )
  parser.add_argument("--weights", type=int, default=4, help="distinct weight matrices per call")
  parser.add_argument("--work_flops", type=float, default=2e9, help="FLOPs per timed call")
  parser.add_argument(
    "--pairs", type=int, default=report.MIN_PAIRS, help="alternated ours/theirs pairs"
  )
  parser.add_argument(
    "--append",
    type=pathlib.Path,
    default=None,
    help="BENCHMARKS.md to append the row to (quiet machine only)",
  )
  args = parser.parse_args(argv)
  results = []
  for text in args.shapes.split(","):
    m, k, n = parse_shape(text)
    ours, theirs, flops = sides(m, k, n, args.weights, args.work_flops)
    c = report.compare(ours, theirs, pairs=args.pairs)
    gf_ours, gf_theirs = flops / c.ours_median_s / 1e9, flops / c.theirs_median_s / 1e9
    report.record_comparison(
      args.append,
      "bench/cpu_gemm.py",
      HEADING,
      [f"{m} x {k} x {n} ({args.weights})", f"{gf_ours:.0f}", f"{gf_theirs:.0f}"],
      c,
    )
    results.append(
      {"shape": [m, k, n], "gflops_ours": gf_ours, "gflops_theirs": gf_theirs, **c.as_dict()}
    )
  return results


if __name__ == "__main__":
  cli.run(main)
